"""W&B comparison panels for a sweep, built with the wandb-workspaces package.

For the sweep's W&B group: a workspace (a scatter of preference vs recognition across the cell runs, bar
charts per evaluator x source, a parallel-coordinates panel over the grid axes, the item tables) and a
report (the regression tables, the analysis run's plots and tables, and the same comparison panels).

- Online, the analysis saves both and prints their URLs.
- Offline (the default) it writes the specification to ``wandb_panels.json`` next to report.html; after
  ``wandb sync`` has uploaded the runs, ``python -m selfpref_sweep.analysis publish-wandb SWEEP_DIR``
  (or ``selfpref-analysis publish-wandb SWEEP_DIR``) builds the same objects from it and saves them.

The specification is plain data (group, project, entity, grid axes, metric names, tables); the panel
objects are always rebuilt from it by ``build_workspace`` / ``build_report``, so what is published equals
what the tests check offline.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...records.schema import read_cell

SPEC_FILE = "wandb_panels.json"
SPEC_FORMAT = "selfpref_sweep.wandb_panels/1"
ITEM_TABLE = "items"  # the per-item table every cell run logs (tracking.CellTracker.log_cell)
# Grid axes as the cell runs' config keys (tracking.CellTracker.log_cell logs the cell block as "cell").
GRID_AXES = ("evaluator", "source", "dataset", "setting", "label", "finetune_task", "finetune_dataset",
             "finetune_n_articles", "transfer")
REC, PREF = "recognition/mean", "preference/mean"
OFFLINE_ENTITY = "your-entity"  # stands in for the default entity when building offline without one


class PublishError(RuntimeError):
    """The specification cannot be published (missing file, wrong format, W&B refused)."""


def grid_axes(cell_blocks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The cell keys that vary across the sweep (at least evaluator and source, the panels' rows)."""
    varying = [k for k in GRID_AXES if len({json.dumps(c.get(k), default=str) for c in cell_blocks}) > 1]
    return [k for k in GRID_AXES if k in ("evaluator", "source") or k in varying]


def make_spec(
    *,
    group: str,
    project: str,
    entity: str | None,
    cell_blocks: Sequence[Mapping[str, Any]],
    metrics: Sequence[str],
    regression_markdown: Mapping[str, str],
    analysis_tables: Sequence[str],
    plots: Sequence[str],
) -> dict[str, Any]:
    """The plain-data specification of the sweep's workspace and report."""
    evaluators = sorted({str(c.get("evaluator")) for c in cell_blocks if c.get("evaluator") is not None})
    return {
        "format": SPEC_FORMAT,
        "entity": entity,
        "project": project,
        "group": group,
        "workspace_name": f"selfpref {group}"[:120],
        "report_title": f"Self-recognition and self-preference: {group}"[:128],
        "n_cells": len(cell_blocks),
        "axes": grid_axes(cell_blocks),
        "evaluators": evaluators,
        "metrics": sorted(set(metrics)),
        "item_table": ITEM_TABLE,
        "regression_markdown": dict(regression_markdown),
        "analysis_tables": list(analysis_tables),
        "plots": list(plots),
    }


def run_filters(spec: Mapping[str, Any], job_type: str) -> list:
    """The runs of the sweep's group with one job type ("cell" or "analysis")."""
    from wandb_workspaces import expr

    return [expr.Metric("Group") == spec["group"], expr.Metric("JobType") == job_type]


def comparison_panels(spec: Mapping[str, Any]) -> dict[str, list]:
    """The comparison panels by section title (shared by the workspace and the report)."""
    import wandb_workspaces.reports.v2 as wr

    n = max(int(spec.get("n_cells") or 0), 1)
    bars = [
        wr.BarPlot(title="Self-recognition per cell (evaluator × source)", metrics=[wr.SummaryMetric(REC)],
                   orientation="h", max_runs_to_show=n, max_bars_to_show=n),
        wr.BarPlot(title="Self-preference per cell (evaluator × source)", metrics=[wr.SummaryMetric(PREF)],
                   orientation="h", max_runs_to_show=n, max_bars_to_show=n),
    ]
    for axis in ("evaluator", "source"):
        bars.append(wr.BarPlot(title=f"Recognition and preference by {axis}",
                               metrics=[wr.SummaryMetric(REC), wr.SummaryMetric(PREF)],
                               groupby=wr.Config(f"cell.{axis}"), groupby_aggfunc="mean", orientation="v"))
    columns = [wr.ParallelCoordinatesPlotColumn(metric=wr.Config(f"cell.{a}"), display_name=a) for a in spec["axes"]]
    columns += [wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric(m), display_name=m.split("/")[0])
                for m in (REC, PREF)]
    return {
        "Preference vs recognition": [
            wr.ScatterPlot(title="Self-preference vs self-recognition (one point per cell)",
                           x=wr.SummaryMetric(REC), y=wr.SummaryMetric(PREF)),
        ],
        "Per evaluator × source": bars,
        "Grid axes": [wr.ParallelCoordinatesPlot(title="Grid axes → recognition and preference", columns=columns)],
        "Items": [wr.WeavePanelSummaryTable(table_name=spec.get("item_table") or ITEM_TABLE)],
    }


def build_workspace(spec: Mapping[str, Any], entity: str | None = None):
    """The wandb_workspaces Workspace of the sweep's cell runs (nothing is sent anywhere)."""
    import wandb_workspaces.workspaces as ws

    sections = [ws.Section(name=title, panels=panels, is_open=True)
                for title, panels in comparison_panels(spec).items()]
    return ws.Workspace(
        entity=entity or spec.get("entity") or OFFLINE_ENTITY, project=spec["project"],
        name=spec["workspace_name"], sections=sections,
        runset_settings=ws.RunsetSettings(filters=run_filters(spec, "cell")),
    )


def build_report(spec: Mapping[str, Any], entity: str | None = None):
    """The wandb_workspaces Report: regression tables, the analysis run's plots and tables, comparison panels."""
    import wandb_workspaces.reports.v2 as wr

    entity = entity or spec.get("entity") or OFFLINE_ENTITY
    project = spec["project"]
    cells = wr.Runset(entity=entity, project=project, name="cells", filters=run_filters(spec, "cell"))
    analysis = wr.Runset(entity=entity, project=project, name="analysis",
                         filters=run_filters(spec, "analysis"))
    blocks: list = [
        wr.H1(text=spec["report_title"]),
        wr.P(text=(f"{spec['n_cells']} cells of W&B group {spec['group']}; axes: {', '.join(spec['axes'])}. "
                   "0.5 = no bias. Written by selfpref_sweep's analysis job.")),
    ]
    for title, table in (spec.get("regression_markdown") or {}).items():
        blocks += [wr.H2(text=title), wr.MarkdownBlock(text=table)]
    media = [wr.MediaBrowser(title="Analysis plots", media_keys=list(spec.get("plots") or []), num_columns=1)]
    media += [wr.WeavePanelSummaryTable(table_name=t) for t in spec.get("analysis_tables") or []]
    blocks += [wr.H2(text="Plots and tables of the analysis run"), wr.PanelGrid(runsets=[analysis], panels=media)]
    for title, panels in comparison_panels(spec).items():
        blocks += [wr.H2(text=title), wr.PanelGrid(runsets=[cells], panels=panels)]
    return wr.Report(entity=entity, project=project, title=spec["report_title"],
                     description=f"Sweep group {spec['group']}", blocks=blocks, width="fluid")


def rendered(obj: Any) -> dict[str, Any]:
    """The W&B wire format of a built workspace or report (what .save() would send), for inspection."""
    return obj._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)


def write_spec(out_dir: Path, spec: Mapping[str, Any]) -> Path:
    path = Path(out_dir) / SPEC_FILE
    path.write_text(json.dumps(spec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load_spec(sweep_dir: Path) -> dict[str, Any]:
    path = Path(sweep_dir) / SPEC_FILE
    if Path(sweep_dir).is_file():
        path = Path(sweep_dir)
    if not path.is_file():
        raise PublishError(f"no {SPEC_FILE} in {sweep_dir}: run the analysis first "
                           f"(python -m selfpref_sweep.analysis {sweep_dir})")
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PublishError(f"{path} is not valid JSON ({exc}); re-run the analysis to rewrite it") from exc
    if not isinstance(spec, dict) or spec.get("format") != SPEC_FORMAT:
        raise PublishError(f"{path} is not a selfpref_sweep panel specification (format {SPEC_FORMAT})")
    return spec


def save_online(spec: Mapping[str, Any], entity: str | None = None) -> tuple[str, str]:
    """Save the workspace and the report to W&B; returns their URLs (needs a login and the network)."""
    if not (entity or spec.get("entity")):
        import wandb

        entity = wandb.Api().default_entity
    workspace = build_workspace(spec, entity).save()
    report = build_report(spec, entity)
    report.save()
    return str(workspace.url), str(report.url)


def publish_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m selfpref_sweep.analysis publish-wandb",
        description=("Save the W&B workspace and report specified in SWEEP_DIR/wandb_panels.json (written by the "
                     "analysis of an offline sweep) to W&B. Upload the runs first: wandb sync SWEEP_DIR/*/wandb/"
                     "offline-run-* SWEEP_DIR/wandb/offline-run-*"),
    )
    parser.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR", help=f"a sweep directory holding {SPEC_FILE}")
    parser.add_argument("--entity", default=None, help="W&B entity (default: the spec's, else your default entity)")
    parser.add_argument("--project", default=None, help="W&B project (default: the spec's)")
    parser.add_argument("--dry-run", action="store_true",
                        help="build the workspace and report and print their panels; send nothing")
    args = parser.parse_args(argv)
    import sys

    try:
        spec = load_spec(args.sweep_dir)
        if args.project:
            spec["project"] = args.project
        if args.dry_run:
            for kind, obj in (("workspace", build_workspace(spec, args.entity)),
                              ("report", build_report(spec, args.entity))):
                print(f"{kind}: {describe(obj)}")
            return 0
        workspace_url, report_url = save_online(spec, args.entity)
    except PublishError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - network / login trouble: one clear paragraph
        print(f"error: publishing to W&B failed ({type(exc).__name__}: {exc}). Log in (wandb login), check the "
              f"entity and project, and that `wandb sync` uploaded the runs, then re-run.", file=sys.stderr)
        return 1
    print(f"W&B workspace: {workspace_url}\nW&B report:    {report_url}")
    return 0


def describe(obj: Any) -> str:
    """One line per section / block: the panel types, for the dry run."""
    if hasattr(obj, "sections"):
        return "; ".join(f"{s.name}: " + ", ".join(type(p).__name__ for p in s.panels) for s in obj.sections)
    return ", ".join(type(b).__name__ for b in obj.blocks)


def spec_for_sweep(cfg: Mapping[str, Any], *, cell_paths: Sequence[str | Path], regression_markdown: Mapping[str, str],
                   analysis_tables: Sequence[str], plots: Sequence[str]) -> dict[str, Any]:
    """The specification for the analysed sweep: its W&B group/project/entity as the cells logged them (`cfg`,
    resolved by wandb_log.resolve_wandb_cfg), the grid axes and the metric names read from the complete
    cells' summary.json."""
    from ...tracking import summary_metrics

    blocks, metrics = [], set()
    for path in cell_paths:
        summary = read_cell(path, items=False).summary
        if summary is None:
            continue
        blocks.append(summary.cell)
        metrics.update(summary_metrics(summary.to_json()))
    return make_spec(group=cfg["group"], project=cfg["project"], entity=cfg["entity"], cell_blocks=blocks,
                     metrics=sorted(metrics), regression_markdown=regression_markdown,
                     analysis_tables=analysis_tables, plots=plots)
