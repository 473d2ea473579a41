"""Run the whole analysis: load cells, fit, tabulate, plot, write the report, log to W&B."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import pandas as pd

from . import tables as T
from .fit import (
    RECOGNITION_TASKS,
    FitResult,
    InteractionResult,
    fit_cell_level,
    fit_interactions,
    fit_item_level,
)
from .load import STATUS_FAILED, STATUS_INCOMPLETE, STATUS_WARNING, SweepData, load_sweeps
from .plots import PlotFile, make_plots
from .report import Section, write_report
from .items_view import ITEMS_HTML, write_items_html
from .wandb_log import log_to_wandb, resolve_wandb_cfg
from .wandb_panels import SPEC_FILE, spec_for_sweep, write_spec

log = logging.getLogger(__name__)

ANALYSIS_SUBDIR = "analysis"  # PNGs, CSVs and regressions.json; report.* sit beside it
ERROR_FILE = "error.txt"  # written by the callback when the analysis itself fails
WANDB_ERROR_FILE = "wandb_error.txt"
TITLE = "Self-recognition and self-preference: sweep analysis"


class NoCellsError(ValueError):
    """None of the given directories holds a cell directory."""


@dataclass
class AnalysisResult:
    out_dir: Path
    report_md: Path
    report_html: Path
    data: SweepData
    cell_fits: list[FitResult]
    item_fits: list[FitResult]
    interactions: list[InteractionResult]
    tables: dict[str, pd.DataFrame]  # display tables, keyed by short name
    plots: list[PlotFile]
    recognition_tasks: tuple[str, ...] = RECOGNITION_TASKS
    wandb_status: str = ""
    files: list[Path] = field(default_factory=list)

    def pooled_fit(self) -> FitResult:
        return next(f for f in self.cell_fits if f.group_by == "pooled")

    def summary_text(self) -> str:
        """What the command prints: where the report is, counts, the cell-level regression table."""
        counts = _problem_counts(self.data)
        lines = [
            f"Report: {self.report_html}",
            f"        {self.report_md}",
            f"Plots:  {self.out_dir / ANALYSIS_SUBDIR}/",
            f"Cells:  {_count_line(self.data, counts)}",
        ]
        if self.wandb_status:
            lines.append(self.wandb_status)
        lines += ["", "Cell-level OLS, preference ~ recognition (95% CIs):"]
        lines.append(
            T.to_text(
                self.tables["regression_cells"],
                ["grouping", "group", "n cells", "slope", "slope 95% CI", "r", "r 95% CI", "R²", "note"],
            )
        )
        problems = [p for p in self.data.problems if p.status != STATUS_WARNING]
        if problems:
            lines += ["", f"{len(problems)} failed/incomplete cell(s) (listed in the report):"]
            lines += [f"  {p.cell}: {p.reason}" + (f" [{p.overrides}]" if p.overrides else "") for p in problems]
        return "\n".join(lines)


def _problem_counts(data: SweepData) -> dict[str, int]:
    counts = {STATUS_FAILED: 0, STATUS_INCOMPLETE: 0, STATUS_WARNING: 0}
    for p in data.problems:
        counts[p.status] = counts.get(p.status, 0) + 1
    return counts


def _count_line(data: SweepData, counts: Mapping[str, int]) -> str:
    return (
        f"{data.n_cell_dirs} cell directories: {len(data.cells)} complete, {counts[STATUS_FAILED]} failed, "
        f"{counts[STATUS_INCOMPLETE]} incomplete; {counts[STATUS_WARNING]} warning(s)"
    )


def _fit_sentence(f: FitResult) -> str:
    if not f.ok:
        return f"Pooled cell-level fit: {f.note}"
    return (
        f"Pooled cell-level fit: slope {T.fmt(f.slope)} (95% CI {T.fmt_ci(f.slope_ci_low, f.slope_ci_high)}), "
        f"r {T.fmt(f.r)} (95% CI {T.fmt_ci(f.r_ci_low, f.r_ci_high)}), R² {T.fmt(f.r2)}, n={f.n} cells"
    )


def _sections(result: AnalysisResult) -> list[Section]:
    t, data = result.tables, result.data
    counts = _problem_counts(data)
    plots = {p.path.stem: p for p in result.plots}
    n_bad = counts[STATUS_FAILED] + counts[STATUS_INCOMPLETE]
    problems_text = (
        f"{n_bad} cell(s) failed or did not finish and are not in any fit or table below; "
        f"{counts[STATUS_WARNING]} complete cell(s) have warnings (what was left out and why)."
        if data.problems
        else "None: every cell directory has a complete summary.json and a readable results.jsonl."
    )
    return [
        Section("Failed, incomplete and partial cells", problems_text, t["problems"]),
        Section(
            "Regression of self-preference on self-recognition (cell level)",
            "Each point is one complete cell: its mean self-preference regressed on its mean "
            "self-recognition (statsmodels OLS; slope and intercept with 95% t intervals, r with a "
            "Fisher-z 95% interval). Fitted pooled and separately per dataset, setting, transfer "
            "condition (none / in_domain / cross_dataset), label and dataset x transfer. Groups with "
            "fewer than 3 cells or no spread in recognition are not fitted and say so. Cells with a "
            "null mean are left out and listed above.",
            t["regression_cells"],
        ),
        Section(
            "Does the slope differ between recognition and control fine-tunes?",
            "OLS over fine-tuned cells only: preference ~ recognition + is_recognition_finetune + "
            f"recognition × is_recognition_finetune, where is_recognition_finetune means finetune_task in "
            f"{{{', '.join(result.recognition_tasks)}}} and every other fine-tune task is a control. "
            "The interaction coefficient is the difference of the two slopes.",
            t["interaction"],
        ),
        Section(
            "Robustness: item-level regression with article-clustered standard errors",
            "Every judged item with both a recognition and a preference score: item preference on item "
            "recognition, standard errors clustered by article (dataset, article_id), t intervals with "
            "(articles - 1) degrees of freedom. No interval is given for item-level r because items of "
            "one article are not independent.",
            t["regression_items"],
        ),
        Section("Plots", "", None, [plots["preference_vs_recognition"]]),
        Section("Evaluator × source heatmaps", "", None, [plots["heatmap_recognition"], plots["heatmap_preference"]], 3),
        Section(
            "Self-recognition by evaluator × source",
            "Cell mean with its 95% bootstrap CI from summary.json; the evaluator includes its fine-tune.",
            t["recognition_matrix"],
        ),
        Section("Self-preference by evaluator × source", "Cell mean with its 95% bootstrap CI.", t["preference_matrix"]),
        Section(
            "Position consistency",
            "Share of items whose answer agrees between the two presentation orders.",
            t["position_consistency"],
        ),
        Section("Exclusions", "Items excluded per cell, by reason.", t["exclusions"]),
        Section(
            "Per fine-tune task",
            "Means across cells (95% t interval over cells when there are at least 2).",
            t["finetune"],
        ),
    ]


def _write_data_files(result: AnalysisResult, analysis_dir: Path) -> list[Path]:
    """Machine-readable copies (CSV + JSON) next to the PNGs."""
    files = []
    frames = {
        "regression_cells.csv": T.fits_frame(result.cell_fits),
        "regression_items.csv": T.fits_frame(result.item_fits),
        "interaction.csv": T.interactions_frame(result.interactions),
        "cells.csv": T.cells_frame(result.data.cells),
        "problems.csv": result.data.problems_df,
    }
    for name, df in frames.items():
        path = analysis_dir / name
        df.to_csv(path, index=False)
        files.append(path)
    payload = {
        "cell_level": [f.to_dict() for f in result.cell_fits],
        "item_level": [f.to_dict() for f in result.item_fits],
        "interaction": [r.to_dict() for r in result.interactions],
        "problems": result.data.problems_df.to_dict(orient="records"),
    }
    path = analysis_dir / "regressions.json"
    # NaN is not JSON: write null.
    path.write_text(json.dumps(_nan_to_none(payload), indent=2), encoding="utf-8")
    files.append(path)
    return files


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj


def _wandb_summary(result: AnalysisResult) -> dict[str, Any]:
    counts = _problem_counts(result.data)
    out: dict[str, Any] = {
        "n_cell_dirs": result.data.n_cell_dirs,
        "n_cells_complete": len(result.data.cells),
        "n_cells_failed": counts[STATUS_FAILED],
        "n_cells_incomplete": counts[STATUS_INCOMPLETE],
    }
    for f in result.cell_fits:
        if not f.ok:
            continue
        key = "pooled" if f.group_by == "pooled" else f"{f.group_by}={f.group}".replace(" ", "_")
        for attr in ("slope", "slope_ci_low", "slope_ci_high", "slope_p", "intercept", "r", "r2", "n"):
            value = getattr(f, attr)
            if not (isinstance(value, float) and math.isnan(value)):
                out[f"fit/{key}/{attr}"] = value
    return out


def run_analysis(
    sweep_dirs: Iterable[str | Path],
    out_dir: Optional[str | Path] = None,
    wandb_cfg: Optional[Mapping[str, Any]] = None,
    recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
) -> AnalysisResult:
    """Analyse the cells of ``sweep_dirs`` (pooled) and write the report.

    The report goes to ``out_dir`` (default: the first sweep dir): report.md and report.html there,
    PNGs, CSVs and regressions.json in its ``analysis/`` subfolder. W&B failures do not lose the
    report: they are recorded in ``analysis/wandb_error.txt`` and in ``wandb_status``.
    """
    dirs = [Path(d) for d in sweep_dirs]
    if not dirs:
        raise ValueError("no sweep directory given")
    data = load_sweeps(dirs)
    if data.n_cell_dirs == 0:
        raise NoCellsError(
            "no cell directories (sub-directories with .hydra/ or summary.json) under: " + ", ".join(map(str, dirs))
        )
    out = Path(out_dir) if out_dir is not None else dirs[0]
    analysis_dir = out / ANALYSIS_SUBDIR
    analysis_dir.mkdir(parents=True, exist_ok=True)
    (analysis_dir / ERROR_FILE).unlink(missing_ok=True)  # stale failure from an earlier run

    cell_fits = fit_cell_level(data.cells)
    item_fits = fit_item_level(data.items)
    interactions = fit_interactions(data.cells, recognition_tasks)
    tables = {
        "problems": T.problems_table(data.problems_df),
        "regression_cells": T.regression_table(cell_fits),
        "interaction": T.interaction_table(interactions),
        "regression_items": T.regression_table(item_fits),
        "recognition_matrix": T.evaluator_source_table(data.cells, "rec"),
        "preference_matrix": T.evaluator_source_table(data.cells, "pref"),
        "position_consistency": T.position_consistency_table(data.cells),
        "exclusions": T.exclusions_table(data.cells),
        "finetune": T.finetune_table(data.cells),
    }
    plots = make_plots(data.cells, analysis_dir)
    result = AnalysisResult(
        out_dir=out, report_md=out / "report.md", report_html=out / "report.html", data=data,
        cell_fits=cell_fits, item_fits=item_fits, interactions=interactions, tables=tables, plots=plots,
        recognition_tasks=tuple(recognition_tasks),
    )
    result.files = _write_data_files(result, analysis_dir)

    counts = _problem_counts(data)
    meta = [
        "Sweep directories: " + ", ".join(str(d) for d in dirs),
        f"Generated: {_dt.datetime.now().isoformat(timespec='seconds')}",
        "Cells: " + _count_line(data, counts),
        _fit_sentence(result.pooled_fit()),
    ]
    # The item viewer and the W&B panel specification (published later when offline).
    items_html = write_items_html(dirs, out)
    meta.append(f"Items behind every number: {ITEMS_HTML}")
    panels_spec, panels_file = None, out / SPEC_FILE
    try:
        panels_spec = spec_for_sweep(
            resolve_wandb_cfg(wandb_cfg, Path(dirs[0])), cell_paths=list(data.cells["path"]) if not data.cells.empty else [],
            regression_markdown={s.title: T.to_markdown(s.table) for s in _sections(result)[1:4]},
            analysis_tables=["tables/regression_cells", "tables/interaction", "tables/regression_items"],
            plots=[f"plots/{p.path.stem}" for p in plots])
        write_spec(out, panels_spec)
        meta.append(f"W&B comparison panels (publish with `publish-wandb`): {SPEC_FILE}")
    except Exception as exc:  # noqa: BLE001 - a bad W&B setting must not lose the report; logged below too
        log.error("W&B panel specification not written: %s", exc)
    write_report(out, TITLE, meta, _sections(result))
    result.files += [result.report_md, result.report_html, items_html] + [p.path for p in plots]

    wandb_error = analysis_dir / WANDB_ERROR_FILE
    try:
        result.wandb_status = log_to_wandb(
            dirs[0], wandb_cfg, run_dir=out,
            tables={**tables, "fits_cells": T.fits_frame(cell_fits), "fits_items": T.fits_frame(item_fits),
                    "cells": T.cells_frame(data.cells)},
            plots=plots,
            summary=_wandb_summary(result),
            config={"sweep_dirs": [str(d) for d in dirs], "out_dir": str(out),
                    "recognition_tasks": list(recognition_tasks)},
            report_files=[panels_file, *result.files],
            panels_spec=panels_spec,
        )
        wandb_error.unlink(missing_ok=True)
    except Exception as exc:  # noqa: BLE001 - W&B trouble must not lose the report
        wandb_error.write_text(traceback.format_exc(), encoding="utf-8")
        result.wandb_status = f"W&B logging failed ({type(exc).__name__}: {exc}); details in {wandb_error}"
        log.error(result.wandb_status)
    return result
