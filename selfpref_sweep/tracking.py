"""Weights & Biases logging for a cell: offline unless the user configures online, config logged
with anything secret-looking redacted, metrics and the per-item table."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

if TYPE_CHECKING:
    from .config import WandbConfig

log = logging.getLogger(__name__)

_SECRET_KEY = re.compile(r"(api[_-]?key|secret|token|password|authorization|credential)", re.IGNORECASE)
REDACTED = "<redacted>"


def redact(obj: Any) -> Any:
    """A copy of a config with the values of secret-looking keys replaced."""
    if isinstance(obj, dict):
        return {k: (REDACTED if _SECRET_KEY.search(str(k)) and v not in (None, "") else redact(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def _flatten(prefix: str, obj: Any, out: Dict[str, Any]) -> Dict[str, Any]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) or obj is None:
        out[prefix] = obj
    return out


class CellTracker:
    """A cell's W&B run. The config it logs is redacted here, once."""

    def __init__(self, wandb_cfg: "WandbConfig", run_dir: Path, name: str, group: str, config: Dict[str, Any]):
        self.run = None
        if wandb_cfg.mode == "disabled":
            return
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        self.wandb = wandb
        self.run = wandb.init(
            mode=wandb_cfg.mode, project=wandb_cfg.project, entity=wandb_cfg.entity, group=group, name=name,
            job_type="cell", tags=list(wandb_cfg.tags or []), dir=str(run_dir), config=redact(config),
            reinit="finish_previous",
        )

    def log_cell(self, summary: Dict[str, Any], rows: List[Dict[str, Any]]) -> Optional[str]:
        if self.run is None:
            return None
        metrics = _flatten("", {k: v for k, v in summary.items() if k not in ("cell", "config")}, {})
        self.run.summary.update(metrics)
        self.run.log(metrics)
        if rows:
            columns = list(rows[0])
            self.run.log({"items": self.wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])})
        return self.run.dir

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def log_finetune(run, block: Optional[Dict[str, Any]]) -> None:
    """A fine-tune's loss curve as its own series (x = finetune/step), and its scalars in the run summary."""
    if run is None or not block:
        return
    run.define_metric("finetune/step")
    run.define_metric("finetune/train_loss", step_metric="finetune/step")
    for i, loss in enumerate(block.get("loss_curve") or [], start=1):
        run.log({"finetune/step": i, "finetune/train_loss": loss})
    run.summary.update({f"finetune/{k}": v for k, v in block.items()
                        if isinstance(v, (int, float, str)) and not isinstance(v, bool) or v is None})
