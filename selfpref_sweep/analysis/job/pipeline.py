"""Run the whole analysis: load cells, fit, tabulate, plot, write the report, log to W&B."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import traceback
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...records.schema import ANALYSIS_ERROR_FILE
from ...reporting.formatting import SCALE_NAMES, fmt, fmt_ci, to_markdown, to_text
from ...reporting.grouping import GROUPINGS, LEVEL_SOURCE, LEVEL_UNIT
from ...reporting.items import unfitted_line
from ..estimate.arms import StatedTrainingSD
from ..estimate.collapse import question_collapse
from ..estimate.estimates import Estimates, estimate
from ..estimate.finetune_tests import RECOGNITION_TASKS
from ..estimate.fit import FitResult
from ..estimate.length_control import length_control_frames
from ..estimate.paired import LABEL_COLUMNS, label_vs_reference
from ..estimate.per_source import per_source_frame
from ..estimate.resample import REPORTED, SLOPE, find, reported, resampled_frame
from ..estimate.units import with_degenerate
from ..report import cell_tables as C
from ..report import fit_tables as F
from ..report import per_source_section as S
from ..report import report_items as R
from ..report.items_view import ITEMS_HTML, write_items_html
from ..report.machine_keys import group_keys, keyed_record, with_machine_keys
from ..report.plots import make_plots
from ..report.render import write_report
from ..report.result import AnalysisResult
from ..report.summary_box import summary_box
from ..self_bias.net_bias import self_bias_frame
from ..study.calibration import calibration_label, pooled_over_datasets
from ..sweep.load import STATUS_FAILED, STATUS_INCOMPLETE, STATUS_WARNING, SweepData, load_sweeps
from ..sweep.report_modules import failed_judges, judge_gates
from ..tracking.wandb_log import log_to_wandb, resolve_wandb_cfg
from ..tracking.wandb_panels import SPEC_FILE, spec_for_sweep, write_spec

log = logging.getLogger(__name__)

ANALYSIS_SUBDIR = "analysis"  # PNGs, CSVs and regressions.json; report.* sit beside it
WANDB_ERROR_FILE = "wandb_error.txt"
TITLE = "Self-recognition and self-preference: sweep analysis"


class NoCellsError(ValueError):
    """None of the given directories holds a cell directory."""


def summary_text(result: AnalysisResult) -> str:
    """What the command prints: where the report is, counts, the headline fits, failed judges."""
    counts = R.problem_counts(result.data)
    lines = [
        f"Report: {result.report_html}",
        f"        {result.report_md}",
        f"Plots:  {result.out_dir / ANALYSIS_SUBDIR}/",
        f"Cells:  {_count_line(result.data, counts)}",
    ]
    if result.wandb_status:
        lines.append(result.wandb_status)
    lines += _headline_lines(result)
    for gate in judge_gates():
        lines += gate.failed_judges_lines(result.data.cells)
    problems = [p for p in result.data.problems if p.status != STATUS_WARNING]
    if problems:
        lines += ["", f"{len(problems)} failed/incomplete cell(s) (listed in the report):"]
        lines += [f"  {p.cell}: {p.reason}" + (f" [{p.overrides}]" if p.overrides else "") for p in problems]
    incomplete = R.incomplete_text(result)
    if incomplete:
        lines += ["", incomplete]
    return "\n".join(lines)


def _headline_lines(result: AnalysisResult) -> list[str]:
    """The command's headline: the paper-unit fits, or the label comparison where the design has no fit."""
    out = []
    unfitted = unfitted_line(result.est.unit_fits)
    if R.shows(result, "regression_units") and unfitted:
        out += ["", "Headline: " + unfitted.replace("**", "")]
    elif R.shows(result, "regression_units"):
        out += ["", "Headline: the paper's unit (evaluator variant × dataset), OLS preference ~ recognition, "
                "95% CIs:"]
        out.append(to_text(
            result.tables["regression_units"],
            ["grouping", "group", "scale", "n paper units", "slope", "slope 95% CI", "r", "r 95% CI", "note",
             F.CALIBRATION_COL]))
        out += [line for f in result.est.unit_fits if f.group_by == GROUPINGS[0][0] and f.ok
                for line in _corrected_sentence(result, f)]
    if R.shows(result, "label_comparison"):
        out += ["", "Label conditions on the same items: preference under each label vs no label, 95% CIs:"]
        out.append(to_text(
            result.tables["label_comparison"],
            ["dataset", "evaluator", "label", "vs", "n articles", "preference [95% CI]",
             "preference, vs [95% CI]", "Δ preference [95% CI]", "Δ preference: p (Holm p)", "note"]))
    return out


def _count_line(data: SweepData, counts: Mapping[str, int]) -> str:
    return (
        f"{data.n_cell_dirs} cell directories: {len(data.cells)} complete, {counts[STATUS_FAILED]} failed, "
        f"{counts[STATUS_INCOMPLETE]} incomplete; {counts[STATUS_WARNING]} warning(s)"
    )


def _fit_sentences(result: AnalysisResult) -> list[str]:
    fits = result.headline_fits()
    if not fits:
        return ["Headline (paper unit) fit: no paper units"]
    out = []
    for f in fits:
        if not f.ok:
            out.append(f"Headline fit, {f.group}: {f.note}")
            continue
        if f.no_interval:
            out.append(f"Headline fit, {f.group}: slope {fmt(f.slope)}, r {fmt(f.r)}, n={f.n} paper units "
                       f"({f.no_interval})")
            continue
        label = calibration_label("fit", f.level, f.method,
                                  pooled_over_datasets(f.group_by, {g.group_by for g in result.est.unit_fits}),
                                  adapters=result.adapters)
        out.append(
            f"Headline fit (the paper's statistic: plain OLS over the variant × dataset points), {f.group}: "
            f"slope {fmt(f.slope)} (95% CI {fmt_ci(f.slope_ci_low, f.slope_ci_high)}), "
            f"r {fmt(f.r)} (95% CI {fmt_ci(f.r_ci_low, f.r_ci_high)}), n={f.n} paper units"
            + (f"; the slope CI {label}" if label else "")
        )
        out += _corrected_sentence(result, f)
    return out


def _corrected_sentence(result: AnalysisResult, paper: FitResult) -> list[str]:
    """Beside the paper's statistic, the corrected slope of the same group (resample.py), if fitted."""
    f = find(result.est.resampled, SLOPE, paper.level, paper.group_by, paper.group, paper.scale, REPORTED[SLOPE])
    if f is None or not f.ok:
        return []
    ci = fmt_ci(f.ci_low, f.ci_high, why=f.no_interval)
    label = calibration_label(f"resampled {SLOPE}", f.level, f.method,
                              pooled_over_datasets(f.group_by, {g.group_by for g in result.est.resampled}),
                              adapters=result.adapters)
    return [f"Corrected headline fit, {f.group}, {SCALE_NAMES.get(f.scale, f.scale)} scale (beside the paper's "
            f"statistic): slope {fmt(f.estimate)} "
            f"(95% CI {ci}; dataset term: {'yes' if f.dataset_term else 'no'}, recognition's measurement error "
            f"corrected, one joint article resample)" + (f"; the slope CI {label}" if label else "")]


# The level of every row of a data file (or regressions.json section) whose rows do not say it themselves.
_FIXED_KEYS: dict[str, dict[str, str]] = {
    "paper_units.csv": {"level": LEVEL_UNIT}, "finetune_vs_base.csv": {"level": LEVEL_UNIT},
    "dose_trend.csv": {"level": LEVEL_UNIT}, "dose_trend": {"level": LEVEL_UNIT},
    "cells.csv": {"level": LEVEL_SOURCE},
    "label_comparison.csv": {"level": LEVEL_UNIT}, "label_comparison": {"level": LEVEL_UNIT},
    "degenerate_units.csv": {"level": LEVEL_UNIT}, "degenerate_units": {"level": LEVEL_UNIT},
}


def _design_frames(result: AnalysisResult) -> dict[str, pd.DataFrame]:
    """The data files only some designs have (other designs' files stay as they were)."""
    frames: dict[str, pd.DataFrame] = {}
    design = result.design
    if design is not None and design.label_pairs:
        frames["label_comparison.csv"] = result.labels
    if design is not None and design.positive_control:
        frames["positive_control.csv"] = result.est.positive_controls
    if design is not None and design.paper_trend:
        frames["paper_trend.csv"] = result.est.paper_trends
    if not result.est.degenerate.empty:  # the units every fit left out, and why
        frames["degenerate_units.csv"] = result.est.degenerate
        frames["paper_units.csv"] = with_degenerate(result.est.units, result.est.degenerate)
    if design is not None and design.per_source:
        frames[f"{S.NAME}.csv"] = per_source_frame(result.data.cells, result.data.items)
    if not result.collapse.empty:  # whether each fine-tuned arm's two questions are one readout
        frames["question_collapse.csv"] = result.collapse
    if not result.est.interaction_robustness.empty:
        frames["interaction_robustness.csv"] = result.est.interaction_robustness
    return frames


def _write_data_files(result: AnalysisResult, analysis_dir: Path) -> list[Path]:
    """Machine-readable copies (CSV + JSON) next to the PNGs."""
    files = []
    fixed = dict(_FIXED_KEYS)
    measured_files, measured_sections = {}, {}
    for mod in R.data_modules():  # each measurement's (and the length control's) files and regressions.json sections
        for name, (frame, keys) in (mod.data_files(result) if hasattr(mod, "data_files") else {}).items():
            measured_files[name], fixed[name] = frame, keys
        for name, (records, keys) in (mod.json_sections(result) if hasattr(mod, "json_sections") else {}).items():
            measured_sections[name], fixed[name] = records, keys
    frames = {
        "regression_units.csv": F.fits_frame(result.est.unit_fits),
        "regression_robustness.csv": F.fits_frame(result.est.robustness_fits),
        "interaction.csv": F.interactions_frame(result.est.interactions),
        "specificity.csv": F.specificity_frame(result.est.specificity),
        "dose_trend.csv": F.trends_frame(result.est.trends),
        "regression_resampled.csv": resampled_frame(result.est.resampled),
        **measured_files,
        "paper_units.csv": result.est.units,
        "finetune_vs_base.csv": result.est.diffs,
        "finetune_arms.csv": result.est.arms,
        "cells.csv": C.cells_frame(result.data.cells),
        "problems.csv": result.data.problems_df,
        **_design_frames(result),
    }
    # Machine keys beside the display labels (machine_keys.MACHINE_KEYS); a row's level where its file fixes it.
    groups = group_keys(result.est.units, result.est.points, result.data.items)
    for name, df in frames.items():
        path = analysis_dir / name
        with_machine_keys(df, groups, **fixed.get(name, {})).to_csv(path, index=False)
        files.append(path)
    payload = {
        "paper_unit": [f.to_dict() for f in result.est.unit_fits],
        "robustness": [f.to_dict() for f in result.est.robustness_fits],
        "interaction": [r.to_dict() for r in result.est.interactions],
        "specificity": [r.to_dict() for r in result.est.specificity],
        "dose_trend": [t.to_dict() for t in result.est.trends],
        "resampled": [f.to_dict() for f in result.est.resampled],
        **measured_sections,
        "problems": result.data.problems_df.to_dict(orient="records"),
    }
    if "paper_trend.csv" in frames:
        payload["paper_trend"] = result.est.paper_trends.to_dict(orient="records")
    if "label_comparison.csv" in frames:
        payload["label_comparison"] = result.labels.to_dict(orient="records")
    if "degenerate_units.csv" in frames:
        payload["degenerate_units"] = result.est.degenerate.to_dict(orient="records")
    payload = {section: [keyed_record(r, groups, **fixed.get(section, {})) for r in records]
               for section, records in payload.items()}
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
    counts = R.problem_counts(result.data)
    out: dict[str, Any] = {
        "n_cell_dirs": result.data.n_cell_dirs,
        "n_cells_complete": len(result.data.cells),
        "n_cells_failed": counts[STATUS_FAILED],
        "n_cells_incomplete": counts[STATUS_INCOMPLETE],
    }
    out["n_cells_judge_failed"] = len(failed_judges(result.data.cells))
    for f in result.est.unit_fits:
        if not f.ok:
            continue
        key = f"headline/{f.scale}/{f.group}".replace(" / ", "/").replace(" ", "_")
        for attr in ("slope", "slope_ci_low", "slope_ci_high", "slope_p", "intercept", "r", "r2", "n"):
            value = getattr(f, attr)
            if not (isinstance(value, float) and math.isnan(value)):
                out[f"fit/{key}/{attr}"] = value
    for f in reported(result.est.resampled):  # the corrected fits beside the paper's statistic
        if f.ok and f.group_by == GROUPINGS[0][0]:
            key = f"corrected/{f.level}/{f.scale}/{f.group}/{f.what}".replace(" / ", "/").replace(" ", "_")
            out.update({f"{key}/{a}": getattr(f, a) for a in ("estimate", "ci_low", "ci_high", "p")
                        if math.isfinite(getattr(f, a))})
    return out



def run_analysis(
    sweep_dirs: Iterable[str | Path],
    out_dir: str | Path | None = None,
    wandb_cfg: Mapping[str, Any] | None = None,
    recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
    specificity_margin: Mapping[str, float] | None = None,
    training_sd: StatedTrainingSD | None = None,
) -> AnalysisResult:
    """Analyse the cells of ``sweep_dirs`` (pooled) and write the report.

    The report goes to ``out_dir`` (default: the first sweep dir): report.md and report.html there,
    PNGs, CSVs and regressions.json in its ``analysis/`` subfolder. W&B failures do not lose the
    report: they are recorded in ``analysis/wandb_error.txt`` and in ``wandb_status``.
    ``specificity_margin``: the specificity test's equivalence margin per scale (config
    analysis.specificity_margin; default finetune_tests.SPECIFICITY_MARGIN). ``training_sd``: the training SD
    stated for one-adapter arms (config analysis.training_sd with its source; estimate/arms.py).
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
    (analysis_dir / ANALYSIS_ERROR_FILE).unlink(missing_ok=True)  # stale failure from an earlier run

    est = estimate(data.items, data.cells, recognition_tasks, specificity_margin, training_sd)
    result = _analyse(data, out, est, recognition_tasks)
    result.files = _write_data_files(result, analysis_dir)
    panels_spec = _write_report(result, dirs, wandb_cfg)
    result.wandb_status = _log_wandb(result, dirs, wandb_cfg, panels_spec)
    return result


def _analyse(data: SweepData, out: Path, est: Estimates, recognition_tasks: Sequence[str]) -> AnalysisResult:
    """The result: the estimates, the design, the figures its report items show and every item's table."""
    design = R.design_of(data, est.units, est.diffs, est.trends, est.arms, est.paper_trends,
                         training_sd_stated=est.training_sd is not None)
    plots = make_plots(data.cells, est.units, est.unit_fits, out / ANALYSIS_SUBDIR, est.diffs,
                       only=R.plot_stems(design), extra=R.measurement_plots())
    result = AnalysisResult(
        out_dir=out, report_md=out / "report.md", report_html=out / "report.html", data=data, est=est,
        design=design, plots=plots, recognition_tasks=tuple(recognition_tasks),
        labels=label_vs_reference(data.items) if design.label_pairs else pd.DataFrame(columns=LABEL_COLUMNS),
    )
    if design.length_control:
        result.length_control, result.length_control_by_source = length_control_frames(data.items)
    if design.self_bias:
        result.self_bias, result.self_bias_notes = self_bias_frame(data.items)
    if design.diffs:
        result.collapse = question_collapse(data.items)
    result.tables = R.build_tables(result)
    return result


def _meta_lines(result: AnalysisResult, dirs: Sequence[Path]) -> list[str]:
    data = result.data
    meta = [
        "Sweep directories: " + ", ".join(str(d) for d in dirs),
        f"Generated: {_dt.datetime.now().isoformat(timespec='seconds')}",
        "Cells: " + _count_line(data, R.problem_counts(data)),
        *(_fit_sentences(result) if R.shows(result, "regression_units") else []),
    ]
    meta += [gate.judge_text(data.cells) for gate in judge_gates() if not gate.failed_judges(data.cells).empty]
    if R.incomplete_text(result):
        meta.append(R.incomplete_text(result))
    return meta


def _write_report(result: AnalysisResult, dirs: Sequence[Path],
                  wandb_cfg: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """report.md and report.html from the applicable items, the item viewer and the W&B panel specification
    (published later when offline); returns the specification (None where a bad W&B setting stopped it)."""
    meta = _meta_lines(result, dirs)
    items_html = write_items_html(dirs, result.out_dir)
    meta.append(f"Items behind every number: {ITEMS_HTML}")
    panels_spec = None
    try:
        report_items = R.wandb_report_items(result)
        panels_spec = spec_for_sweep(
            resolve_wandb_cfg(wandb_cfg, Path(dirs[0])),
            cell_paths=list(result.data.cells["path"]) if not result.data.cells.empty else [],
            regression_markdown={i.section: to_markdown(result.tables[i.name]) for i in report_items},
            analysis_tables=[f"tables/{i.name}" for i in report_items],
            plots=[f"plots/{p.path.stem}" for p in result.plots])
        write_spec(result.out_dir, panels_spec)
        meta.append(f"W&B comparison panels (publish with `publish-wandb`): {SPEC_FILE}")
    except Exception as exc:  # noqa: BLE001 - a bad W&B setting must not lose the report; logged below too
        log.error("W&B panel specification not written: %s", exc)
    write_report(result.out_dir, TITLE, meta, R.sections(result), summary=summary_box(result))
    result.files += [result.report_md, result.report_html, items_html] + [p.path for p in result.plots]
    return panels_spec


def _log_wandb(result: AnalysisResult, dirs: Sequence[Path], wandb_cfg: Mapping[str, Any] | None,
               panels_spec: dict[str, Any] | None) -> str:
    """The W&B summary run (the items' tables marked for W&B, the fits, the cells, the plots); its status."""
    out = result.out_dir
    wandb_error = out / ANALYSIS_SUBDIR / WANDB_ERROR_FILE
    try:
        status = log_to_wandb(
            dirs[0], wandb_cfg, run_dir=out,
            tables={**R.wandb_tables(result), "fits_units": F.fits_frame(result.est.unit_fits),
                    "fits_robustness": F.fits_frame(result.est.robustness_fits),
                    "cells": C.cells_frame(result.data.cells)},
            plots=result.plots,
            summary=_wandb_summary(result),
            config={"sweep_dirs": [str(d) for d in dirs], "out_dir": str(out),
                    "recognition_tasks": list(result.recognition_tasks),
                    "specificity_margin": result.est.specificity_margin,
                    "training_sd": result.est.training_sd.text() if result.est.training_sd else None},
            report_files=[out / SPEC_FILE, *result.files],
            panels_spec=panels_spec,
        )
        wandb_error.unlink(missing_ok=True)
        return status
    except Exception as exc:  # noqa: BLE001 - W&B trouble must not lose the report
        wandb_error.write_text(traceback.format_exc(), encoding="utf-8")
        status = f"W&B logging failed ({type(exc).__name__}: {exc}); details in {wandb_error}"
        log.error(status)
        return status
