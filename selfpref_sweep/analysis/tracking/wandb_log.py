"""The W&B summary run of an analysis: tables as wandb.Table, plots as wandb.Image.

One run per analysis (job_type="analysis", name="analysis") in the sweep's group, so W&B
comparison panels can set it beside the cell runs. Only the settings in WANDB_DEFAULTS are read
from the config; nothing from the environment is logged.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ...records.schema import wandb_group_name
from ...records.sweep_dirs import find_cell_dirs

if TYPE_CHECKING:  # pragma: no cover - kept light
    import pandas as pd

    from ...reporting.figures import PlotFile

log = logging.getLogger(__name__)

WANDB_DEFAULTS: dict[str, Any] = {
    "mode": "offline", "project": "selfpref_sweep", "entity": None, "group": None, "tags": None,
}
WANDB_MODES = ("online", "offline", "disabled")


def hydra_sweep_dir_string(sweep_dir: Path) -> str | None:
    """``hydra.sweep.dir`` as the sweep's process saw it (e.g. "outputs/multirun/2026-11-21/20-30-00").

    Hydra stores the template unresolved (``${now:...}``), so rebuild it from where the sweep is
    and the cwd it ran in (a cell's .hydra/hydra.yaml). None when that cannot be read.
    """
    for cell_dir in find_cell_dirs(sweep_dir)[:3]:
        try:
            data = yaml.safe_load((cell_dir / ".hydra" / "hydra.yaml").read_text(encoding="utf-8"))
            template = str(data["hydra"]["sweep"]["dir"])
            cwd = str(data["hydra"]["runtime"]["cwd"])
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            continue
        here = Path(sweep_dir).resolve()
        return str(here) if Path(template).is_absolute() else os.path.relpath(here, cwd)
    return None


def resolve_wandb_cfg(wandb_cfg: Mapping[str, Any] | None, sweep_dir: Path) -> dict[str, Any]:
    """The settings we use, defaults filled in; the group defaults to the cells' group."""
    cfg = dict(WANDB_DEFAULTS)
    for key in WANDB_DEFAULTS:
        value = (wandb_cfg or {}).get(key)
        if value is not None and value != "":
            cfg[key] = value
    if cfg["mode"] not in WANDB_MODES:
        raise ValueError(f"wandb mode must be one of {', '.join(WANDB_MODES)}, not {cfg['mode']!r}")
    if cfg["group"] is None:
        spelled = hydra_sweep_dir_string(Path(sweep_dir))
        cfg["group"] = wandb_group_name(spelled) if spelled else Path(sweep_dir).resolve().name
    return cfg


def _wandb_ready(df: pd.DataFrame) -> pd.DataFrame:
    # wandb.Table infers one type per column: NaN -> None (optional), objects -> str.
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    out.columns = [str(c) for c in out.columns]
    return out.astype(object).where(out.notna(), None)


def log_to_wandb(
    sweep_dir: Path,
    wandb_cfg: Mapping[str, Any] | None,
    *,
    run_dir: Path | None = None,
    tables: Mapping[str, pd.DataFrame],
    plots: Sequence[PlotFile],
    summary: Mapping[str, Any],
    config: Mapping[str, Any],
    report_files: Sequence[Path] = (),
    panels_spec: Mapping[str, Any] | None = None,
) -> str:
    """Log one analysis run; returns a one-line status for the report / stdout.

    ``sweep_dir`` names the default group; W&B writes its files under ``run_dir`` (default: sweep_dir).
    """
    cfg = resolve_wandb_cfg(wandb_cfg, sweep_dir)
    if cfg["mode"] == "disabled":
        return "W&B: disabled"
    os.environ.setdefault("WANDB_SILENT", "true")  # as the cells do: no banner in the sweep's output
    import wandb  # imported late: slow, and not needed when disabled

    init_kwargs = dict(mode=cfg["mode"], project=cfg["project"], entity=cfg["entity"], group=cfg["group"],
                       tags=list(cfg["tags"] or []), job_type="analysis", dir=str(run_dir or sweep_dir),
                       name="analysis", config={**config, "wandb_group": cfg["group"]})
    try:
        # create_new: leave any run the caller still has open alone (wandb >= 0.19).
        run = wandb.init(**init_kwargs, reinit="create_new")
    except (TypeError, ValueError):
        run = wandb.init(**init_kwargs, reinit=True)
    try:
        payload: dict[str, Any] = {}
        for name, df in tables.items():
            payload[f"tables/{name}"] = wandb.Table(dataframe=_wandb_ready(df), allow_mixed_types=True)
        for plot in plots:
            payload[f"plots/{plot.path.stem}"] = wandb.Image(str(plot.path), caption=plot.title)
        run.log(payload)
        metrics = {k: v for k, v in summary.items() if v is not None}
        for key in metrics:
            run.define_metric(key, summary="last")
        run.summary.update(metrics)
        log_report_artifact(run, cfg["group"], report_files)
        where = getattr(run, "dir", None) or run_dir or sweep_dir
        url = getattr(run, "url", None)
    finally:
        run.finish()
    if cfg["mode"] == "online":
        status = f"W&B: logged run 'analysis' in group {cfg['group']!r}: {url}"
        if panels_spec is not None:
            from .wandb_panels import save_online

            try:
                workspace_url, report_url = save_online(panels_spec, cfg["entity"])
                status += f"\nW&B workspace: {workspace_url}\nW&B report:    {report_url}"
            except Exception as exc:  # noqa: BLE001 - the run is logged; the panels can be published later
                status += (f"\nW&B panels not saved ({type(exc).__name__}: {exc}); publish them later with: "
                           f"python -m selfpref_sweep.analysis publish-wandb {run_dir or sweep_dir}")
        return status
    return f"W&B ({cfg['mode']}): logged run 'analysis' in group {cfg['group']!r} under {where}"


def log_report_artifact(run: Any, group: str, files: Sequence[Path]) -> None:
    """The report, the item viewer, the panel specification and the data files as one artifact of the
    analysis run (kept in the offline run's files until `wandb sync`)."""
    import wandb

    from ...tracking import artifact_name

    artifact = wandb.Artifact(artifact_name(f"report-{group}"), type="sweep-report")
    seen = set()
    for path in files:
        path = Path(path)
        if path.is_file() and path.name not in seen:
            seen.add(path.name)
            artifact.add_file(str(path), name=path.name)
    run.log_artifact(artifact)
