"""Weights & Biases logging for a cell: offline unless the user configures online, the config logged
with its secrets redacted, metrics (each declared with define_metric, so panels compare cells), the
per-item table, and the cell's files as an artifact."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .records.schema import ERROR_FILE, RESULTS_FILE, SUMMARY_FILE

if TYPE_CHECKING:
    from .config import WandbConfig

log = logging.getLogger(__name__)

REDACTED = "<redacted>"
# Key words that name a secret. A key is split into words at "_", "-", "." and camelCase, so
# "max_new_tokens" (word "tokens"), "context_tokens" and "prompt_tokens" are counts, not secrets.
_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "authorization", "credential",
                           "credentials", "apikey", "bearer", "cookie"})
# A key whose last word is one of these holds the *name* or location of a secret, not the secret itself
# (api_key_env: "OPENAI_API_KEY").
_REFERENCE_WORDS = frozenset({"env", "var", "variable", "name", "file", "path"})
# Values that are keys whatever their key is called (OpenAI and Hugging Face key formats). Not bare hex:
# CNN article ids and commit hashes look like W&B keys.
_SECRET_VALUE = re.compile(r"^(sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,})$")


def _words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)
    return [w for w in re.split(r"[_\-.\s]+", spaced.lower()) if w]


def is_secret_key(key: Any) -> bool:
    """True when a config key holds a secret value (api_key, wandb.token, OPENAI_API_KEY, ...)."""
    words = _words(str(key))
    if not words or words[-1] in _REFERENCE_WORDS:
        return False
    pairs = {f"{a}_{b}" for a, b in zip(words, words[1:], strict=False)}
    return bool(_SECRET_WORDS.intersection(words) or {"api_key", "private_key", "access_key"} & pairs)


def _is_secret_value(value: Any) -> bool:
    return isinstance(value, str) and bool(_SECRET_VALUE.match(value.strip()))


def redact(obj: Any) -> Any:
    """A copy of a config with secret values replaced: string values under keys that hold secrets, and
    strings shaped like API keys anywhere. Counts (max_new_tokens) and variable names (api_key_env) stay."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(v, (dict, list)):
                out[k] = redact(v)
            elif (is_secret_key(k) and isinstance(v, (str, bytes)) and v not in ("", b"")) or _is_secret_value(v):
                out[k] = REDACTED
            else:
                out[k] = v
        return out
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return REDACTED if _is_secret_value(obj) else obj


def _flatten(prefix: str, obj: Any, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(obj, bool):  # a verdict such as judge_competence/passed: 1 or 0, so panels can average it
        out[prefix] = int(obj)
    elif isinstance(obj, (int, float)) or obj is None:
        out[prefix] = obj
    return out


def summary_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The numbers (and yes/no verdicts, as 1/0) of a cell's summary.json as W&B metric names ("recognition/mean",
    "recognition/logodds/mean", "recognition/mde/value", "judge_competence/passed", "standardization/<source>/preamble",
    ...): nested blocks flatten, so new fields need no code."""
    return _flatten("", {k: v for k, v in summary.items() if k not in ("cell", "config")}, {})


def artifact_name(text: str) -> str:
    """A W&B artifact name (letters, digits, '-', '_', '.') from free text."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", text).strip("-.")[:120] or "artifact"


class CellTracker:
    """A cell's W&B run. The config it logs is redacted here, once."""

    def __init__(self, wandb_cfg: WandbConfig, run_dir: Path, name: str, group: str, config: dict[str, Any]):
        self.run = None
        self.failed = False
        self.run_dir = Path(run_dir)
        self.name = name
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

    def log_cell(self, summary: dict[str, Any], rows: list[dict[str, Any]]) -> str | None:
        if self.run is None:
            return None
        # The grid coordinates as flat config keys (cell.evaluator, cell.transfer, ...): what the comparison
        # panels group, colour and filter by.
        self.run.config.update({"cell": dict(summary.get("cell") or {})}, allow_val_change=True)
        metrics = summary_metrics(summary)
        for key in metrics:
            # One value per cell run: its summary is that value, so scatter and bar panels compare cells.
            self.run.define_metric(key, summary="last")
        self.run.summary.update(metrics)
        self.run.log(metrics)
        if rows:
            columns = list(rows[0])
            self.run.log({"items": self.wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])})
        self.log_files({**summary, "wandb_dir": self.run.dir})
        return self.run.dir

    def log_files(self, summary: dict[str, Any]) -> None:
        """results.jsonl and summary.json (as it will be written) as one artifact of this run; offline runs
        keep it in their files and upload it at `wandb sync`."""
        artifact = self.wandb.Artifact(artifact_name(f"cell-{self.name}-{self.run.id}"), type="cell-results",
                                       metadata={"cell": summary.get("cell"), "status": summary.get("status")})
        results = self.run_dir / RESULTS_FILE
        if results.is_file():
            artifact.add_file(str(results), name=RESULTS_FILE)
        with artifact.new_file(SUMMARY_FILE, mode="w", encoding="utf-8") as fh:
            fh.write(json.dumps(summary, indent=2) + "\n")
        self.run.log_artifact(artifact)

    def log_failure(self, error_text: str) -> None:
        """A failed cell: its error in the summary and as an artifact; finish() then marks the run failed."""
        if self.run is None:
            return
        first_line = error_text.strip().splitlines()[0] if error_text.strip() else "unknown error"
        self.run.summary.update({"status": "failed", "error": first_line[:500]})
        artifact = self.wandb.Artifact(artifact_name(f"cell-{self.name}-{self.run.id}"), type="cell-error",
                                       metadata={"status": "failed"})
        with artifact.new_file(ERROR_FILE, mode="w", encoding="utf-8") as fh:
            fh.write(error_text)
        self.run.log_artifact(artifact)
        self.failed = True

    def finish(self) -> None:
        if self.run is not None:
            # exit_code 1 is how W&B marks a run "failed" (online and, after `wandb sync`, offline runs).
            self.run.finish(exit_code=1 if self.failed else 0)
            self.run = None


def track_failed_cell(wandb_cfg: WandbConfig, run_dir: Path, name: str, group: str, config: dict[str, Any],
                      error_text: str) -> None:
    """A W&B run for a cell that failed, marked failed, so the sweep's group shows every cell. Never raises:
    the cell's own error is what matters."""
    tracker = None
    try:
        tracker = CellTracker(wandb_cfg, run_dir, name=name, group=group, config=config)
        tracker.log_failure(error_text)
    except Exception as exc:  # noqa: BLE001 - logging the failure must not hide it
        log.warning("could not log the failed cell to W&B: %s", exc)
    finally:
        if tracker is not None:
            try:
                tracker.finish()
            except Exception as exc:  # noqa: BLE001
                log.warning("could not finish the failed cell's W&B run: %s", exc)


def log_finetune(run, block: dict[str, Any] | None) -> None:
    """A fine-tune's loss curve as its own series (x = finetune/step), and its scalars in the run summary."""
    if run is None or not block:
        return
    run.define_metric("finetune/step")
    run.define_metric("finetune/train_loss", step_metric="finetune/step")
    for i, loss in enumerate(block.get("loss_curve") or [], start=1):
        run.log({"finetune/step": i, "finetune/train_loss": loss})
    run.summary.update({f"finetune/{k}": v for k, v in block.items()
                        if isinstance(v, (int, float, str)) and not isinstance(v, bool) or v is None})
