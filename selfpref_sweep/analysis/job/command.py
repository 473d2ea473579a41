"""``python -m selfpref_sweep.analysis SWEEP_DIR [SWEEP_DIR ...]``: (re)run the analysis on disk.

Reproduces what the Hydra callback writes at the end of a multirun, and can pool several sweeps.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_WANDB_KEYS = ("mode", "project", "entity", "group")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m selfpref_sweep.analysis",
        description=(
            "Regress self-preference on self-recognition over the cells of one or more Hydra sweep "
            "directories and write report.html, report.md and PNG plots (in analysis/). Failed or "
            "incomplete cells are listed in the report. "
            "`publish-wandb SWEEP_DIR` instead saves the W&B workspace and report of an offline sweep "
            "(see publish-wandb --help)."
        ),
    )
    parser.add_argument("sweep_dirs", nargs="+", metavar="SWEEP_DIR", type=Path,
                        help="a multirun directory, e.g. outputs/multirun/2026-11-21/20-30-00; several are pooled")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the report (default: the first SWEEP_DIR)")
    parser.add_argument("--wandb-mode", choices=["offline", "online", "disabled"], default=None,
                        help="W&B mode for the summary run (default: the sweep's wandb.mode, else offline)")
    parser.add_argument("--wandb-project", default=None, help="W&B project (default: the sweep's, else selfpref_sweep)")
    parser.add_argument("--wandb-entity", default=None, help="W&B entity (default: the sweep's, else your default)")
    parser.add_argument("--wandb-group", default=None, help="W&B group (default: the sweep dir's name)")
    parser.add_argument("--recognition-task", action="append", dest="recognition_tasks", default=None,
                        metavar="TASK",
                        help="finetune_task value counted as a recognition fine-tune in the specificity and "
                             "interaction tests and the dose-response trend (repeatable; default: recognition)")
    parser.add_argument("--specificity-margin", action="append", default=None, metavar="SCALE=VALUE",
                        help="the specificity test's equivalence margin on one scale (paper or logodds; "
                             "repeatable; default: the sweep's analysis.specificity_margin, else 0.05 and 0.2)")
    parser.add_argument("--training-sd", type=float, default=None, metavar="SD",
                        help="SD of an adapter's Δ (log-odds) about its recipe's, for one-adapter arms: their rows "
                             "then speak for the recipe (default: the sweep's analysis.training_sd, else none)")
    parser.add_argument("--training-sd-source", default=None, metavar="TEXT",
                        help="where --training-sd comes from (required with it; printed with every row it enters)")
    return parser


def sweep_config(sweep_dir: Path) -> Any | None:
    """The config the sweep ran with (its multirun.yaml, an OmegaConf node); None where it is absent or broken:
    the analysis then uses its defaults."""
    path = sweep_dir / "multirun.yaml"
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    try:
        return OmegaConf.load(path)
    except Exception:  # noqa: BLE001 - a broken multirun.yaml only costs us the defaults
        return None


def sweep_wandb_cfg(sweep_dir: Path) -> dict[str, Any]:
    """The wandb settings the sweep ran with (its multirun.yaml), so a re-run logs alike.

    A value that cannot be resolved outside the sweep's process (e.g. a custom resolver) is skipped.
    """
    cfg = sweep_config(sweep_dir)
    if cfg is None:
        return {}
    out: dict[str, Any] = {}
    node = cfg.get("wandb") if hasattr(cfg, "get") else None
    if node is None or not hasattr(node, "get"):
        return {}
    for key in _WANDB_KEYS:
        try:
            value = node.get(key)
        except Exception:  # noqa: BLE001
            continue
        if value is None or isinstance(value, (str, int, float, bool)):
            out[key] = value
    return out


def specificity_margin_of(cfg: Any) -> dict[str, float]:
    """analysis.specificity_margin of a sweep's config (an OmegaConf node) as {scale: margin}; {} where it is
    absent (older sweeps) or unreadable: the analysis then uses its defaults."""
    from omegaconf import OmegaConf

    try:
        node = OmegaConf.select(cfg, "analysis.specificity_margin", default=None)
        data = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    except Exception:  # noqa: BLE001 - an unreadable setting costs only the defaults
        return {}
    return {str(k): float(v) for k, v in (data or {}).items() if isinstance(v, (int, float))} \
        if isinstance(data, dict) else {}


def training_sd_of(cfg: Any) -> tuple[float | None, str]:
    """analysis.training_sd and analysis.training_sd_source of a sweep's config (an OmegaConf node); (None, "")
    where absent (older sweeps)."""
    from omegaconf import OmegaConf

    sd = OmegaConf.select(cfg, "analysis.training_sd", default=None)
    source = OmegaConf.select(cfg, "analysis.training_sd_source", default="")
    return (None if sd is None else float(sd)), str(source or "")


def _sweep_training_sd(sweep_dir: Path, sd: float | None, source: str | None):
    """The stated training SD (arms.StatedTrainingSD, or None): the sweep's (its multirun.yaml), each part
    overridden by --training-sd / --training-sd-source. A half-stated or invalid one exits with the reason."""
    from ..estimate.arms import StatedTrainingSD

    cfg = sweep_config(sweep_dir)
    try:
        given_sd, given_source = training_sd_of(cfg) if cfg is not None else (None, "")
    except Exception:  # noqa: BLE001 - an unreadable setting states nothing
        given_sd, given_source = None, ""
    try:
        return StatedTrainingSD.of(given_sd if sd is None else sd, given_source if source is None else source)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


def _sweep_margins(sweep_dir: Path, given: Sequence[str] | None) -> dict[str, float]:
    """The sweep's margins (its multirun.yaml), overridden by --specificity-margin SCALE=VALUE."""
    cfg = sweep_config(sweep_dir)
    margins = specificity_margin_of(cfg) if cfg is not None else {}
    for item in given or []:
        scale, sep, value = item.partition("=")
        if not sep or scale not in ("paper", "logodds"):
            raise SystemExit(f"error: --specificity-margin takes paper=VALUE or logodds=VALUE, not {item!r}")
        margins[scale] = float(value)
    return margins


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["publish-wandb"]:  # the one sub-command: save an offline sweep's W&B panels
        from ..tracking.wandb_panels import publish_main

        return publish_main(argv[1:])
    args = build_parser().parse_args(argv)
    # Heavy imports after argument parsing, so --help is instant.
    from ..estimate.finetune_tests import RECOGNITION_TASKS
    from .pipeline import NoCellsError, run_analysis, summary_text

    wandb_cfg = sweep_wandb_cfg(args.sweep_dirs[0])
    for key in _WANDB_KEYS:
        value = getattr(args, f"wandb_{key}")
        if value is not None:
            wandb_cfg[key] = value
    try:
        result = run_analysis(
            args.sweep_dirs, out_dir=args.out, wandb_cfg=wandb_cfg,
            recognition_tasks=tuple(args.recognition_tasks or RECOGNITION_TASKS),
            specificity_margin=_sweep_margins(args.sweep_dirs[0], args.specificity_margin),
            training_sd=_sweep_training_sd(args.sweep_dirs[0], args.training_sd, args.training_sd_source),
        )
    except (FileNotFoundError, NoCellsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summary_text(result))
    return 0
