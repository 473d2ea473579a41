"""The analysis job: the pipeline, its command line and the Hydra callback (nothing imported here)."""

__all__ = ["callback", "command", "pipeline"]
