"""The analysis on W&B: the summary run, and the sweep's workspace and report specifications."""

__all__ = ["wandb_log", "wandb_panels"]
