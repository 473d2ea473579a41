"""The analysis job: from a sweep's directories to its report (pipeline), its command line and the Hydra callback.
Imports nothing, so that Hydra's import of the callback stays cheap."""

__all__ = ["callback", "command", "pipeline"]
