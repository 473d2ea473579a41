"""Run the whole analysis: load cells, fit, tabulate, plot, write the report, log to W&B."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import traceback
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import pandas as pd

from ..measurements.competence import competence_report
from ..records.schema import ANALYSIS_ERROR_FILE
from . import length_control as LC
from . import report_items as R
from . import sources as S
from . import tables as T
from .calibration import calibration_label, pooled_over_datasets
from .estimates import Estimates, estimate
from .fit import (
    GROUPINGS,
    LEVEL_SOURCE,
    LEVEL_UNIT,
    RECOGNITION_TASKS,
    FitResult,
)
from .items_view import ITEMS_HTML, write_items_html
from .load import STATUS_FAILED, STATUS_INCOMPLETE, STATUS_WARNING, SweepData, load_sweeps
from .paired import LABEL_COLUMNS, label_vs_reference
from .plots import PlotFile, make_plots
from .report import unfitted_line, write_report
from .report_items import Design, incomplete_text as _incomplete_text
from .report_items import problem_counts as _problem_counts
from .resample import REPORTED, SLOPE, find, reported, resampled_frame
from .summary_box import summary_box
from .wandb_log import log_to_wandb, resolve_wandb_cfg
from .wandb_panels import SPEC_FILE, spec_for_sweep, write_spec

log = logging.getLogger(__name__)

ANALYSIS_SUBDIR = "analysis"  # PNGs, CSVs and regressions.json; report.* sit beside it
WANDB_ERROR_FILE = "wandb_error.txt"
TITLE = "Self-recognition and self-preference: sweep analysis"


_ESTIMATES = frozenset(f.name for f in fields(Estimates))


class NoCellsError(ValueError):
    """None of the given directories holds a cell directory."""


@dataclass
class AnalysisResult:
    """One analysis: the loaded records, the estimates made from them (estimates.Estimates, shared with the
    coverage study), what the design supports, and what was written. The report items read their tables from
    these; an estimate is reached directly (``result.unit_fits`` is ``result.est.unit_fits``)."""

    out_dir: Path
    report_md: Path
    report_html: Path
    data: SweepData
    est: Estimates
    design: Design  # what the cells support: decides which report items apply
    plots: list[PlotFile] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # display tables, keyed by short name
    recognition_tasks: tuple[str, ...] = RECOGNITION_TASKS
    # Label conditions against the unlabelled prompt on the same items (paired.label_vs_reference).
    labels: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LABEL_COLUMNS))
    # Per paper unit and scale, the self-preference with the length difference regressed out (length_control.py).
    length_control: pd.DataFrame = field(default_factory=LC.empty_frame)
    wandb_status: str = ""
    files: list[Path] = field(default_factory=list)

    def __getattr__(self, name: str):
        # Only reached for names the dataclass lacks: the estimates' (units, unit_fits, specificity, ...).
        if name in _ESTIMATES:
            return getattr(self.est, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def replicated(self) -> bool:
        """Whether the sweep's fine-tuned arms have several adapters each: the replicated coverage study then
        labels its rows (calibration.py)."""
        return bool(self.design is not None and self.design.replicated)

    def shows(self, name: str) -> bool:
        """Whether the report has the item ``name`` (report_items.report_items()) for this sweep's design."""
        return any(item.name == name for item in R.applicable(self))

    def headline_fits(self, scale: str = "paper") -> list[FitResult]:
        """The paper-unit fits per setting × label (all datasets) on one scale."""
        return [f for f in self.unit_fits if f.group_by == GROUPINGS[0][0] and f.scale == scale]

    def summary_text(self) -> str:
        """What the command prints: where the report is, counts, the headline fits, failed judges."""
        counts = _problem_counts(self.data)
        lines = [
            f"Report: {self.report_html}",
            f"        {self.report_md}",
            f"Plots:  {self.out_dir / ANALYSIS_SUBDIR}/",
            f"Cells:  {_count_line(self.data, counts)}",
        ]
        if self.wandb_status:
            lines.append(self.wandb_status)
        lines += self._headline_lines()
        failed = competence_report.failed_judges(self.data.cells)
        if not failed.empty:
            lines += ["", f"{len(failed)} cell(s) whose judge failed the competence control ({competence_report.JUDGE_FAILED}):"]
            lines += [f"  {c.cell_id}: {c.evaluator_variant} vs {c.source} on {c.dataset}" for c in failed.itertuples()]
        problems = [p for p in self.data.problems if p.status != STATUS_WARNING]
        if problems:
            lines += ["", f"{len(problems)} failed/incomplete cell(s) (listed in the report):"]
            lines += [f"  {p.cell}: {p.reason}" + (f" [{p.overrides}]" if p.overrides else "") for p in problems]
        incomplete = _incomplete_text(self)
        if incomplete:
            lines += ["", incomplete]
        return "\n".join(lines)

    def _headline_lines(self) -> list[str]:
        """The command's headline: the paper-unit fits, or the label comparison where the design has no fit."""
        out = []
        unfitted = unfitted_line(self.unit_fits)
        if self.shows("regression_units") and unfitted:
            out += ["", "Headline: " + unfitted.replace("**", "")]
        elif self.shows("regression_units"):
            out += ["", "Headline: the paper's unit (evaluator variant × dataset), OLS preference ~ recognition, "
                    "95% CIs:"]
            out.append(T.to_text(
                self.tables["regression_units"],
                ["grouping", "group", "scale", "n paper units", "slope", "slope 95% CI", "r", "r 95% CI", "note",
                 T.CALIBRATION_COL]))
            out += [line for f in self.unit_fits if f.group_by == GROUPINGS[0][0] and f.ok
                    for line in _corrected_sentence(self, f)]
        if self.shows("label_comparison"):
            out += ["", "Label conditions on the same items: preference under each label vs no label, 95% CIs:"]
            out.append(T.to_text(
                self.tables["label_comparison"],
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
            out.append(f"Headline fit, {f.group}: slope {T.fmt(f.slope)}, r {T.fmt(f.r)}, n={f.n} paper units "
                       f"({f.no_interval})")
            continue
        label = calibration_label("fit", f.level, f.method,
                                  pooled_over_datasets(f.group_by, {g.group_by for g in result.unit_fits}),
                                  replicated=result.replicated)
        out.append(
            f"Headline fit (the paper's statistic: plain OLS over the variant × dataset points), {f.group}: "
            f"slope {T.fmt(f.slope)} (95% CI {T.fmt_ci(f.slope_ci_low, f.slope_ci_high)}), "
            f"r {T.fmt(f.r)} (95% CI {T.fmt_ci(f.r_ci_low, f.r_ci_high)}), n={f.n} paper units"
            + (f"; the slope CI {label}" if label else "")
        )
        out += _corrected_sentence(result, f)
    return out


def _corrected_sentence(result: AnalysisResult, paper: FitResult) -> list[str]:
    """Beside the paper's statistic, the corrected slope of the same group (resample.py), if fitted."""
    f = find(result.resampled, SLOPE, paper.level, paper.group_by, paper.group, paper.scale, REPORTED[SLOPE])
    if f is None or not f.ok:
        return []
    ci = T.fmt_ci(f.ci_low, f.ci_high, why=f.no_interval)
    label = calibration_label(f"resampled {SLOPE}", f.level, f.method,
                              pooled_over_datasets(f.group_by, {g.group_by for g in result.resampled}),
                              replicated=result.replicated)
    return [f"Corrected headline fit, {f.group}, {T.SCALE_NAMES.get(f.scale, f.scale)} scale (beside the paper's "
            f"statistic): slope {T.fmt(f.estimate)} "
            f"(95% CI {ci}; dataset term: {'yes' if f.dataset_term else 'no'}, recognition's measurement error "
            f"corrected, one joint article resample)" + (f"; the slope CI {label}" if label else "")]


# The level of every row of a data file (or regressions.json section) whose rows do not say it themselves.
_FIXED_KEYS: dict[str, dict[str, str]] = {
    "paper_units.csv": {"level": LEVEL_UNIT}, "finetune_vs_base.csv": {"level": LEVEL_UNIT},
    "dose_trend.csv": {"level": LEVEL_UNIT}, "dose_trend": {"level": LEVEL_UNIT},
    "cells.csv": {"level": LEVEL_SOURCE},
    "label_comparison.csv": {"level": LEVEL_UNIT}, "label_comparison": {"level": LEVEL_UNIT},
}


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
        "regression_units.csv": T.fits_frame(result.unit_fits),
        "regression_robustness.csv": T.fits_frame(result.robustness_fits),
        "interaction.csv": T.interactions_frame(result.interactions),
        "specificity.csv": T.specificity_frame(result.specificity),
        "dose_trend.csv": T.trends_frame(result.trends),
        "regression_resampled.csv": resampled_frame(result.resampled),
        **measured_files,
        "paper_units.csv": result.units,
        "finetune_vs_base.csv": result.diffs,
        "finetune_arms.csv": result.arms,
        "cells.csv": T.cells_frame(result.data.cells),
        "problems.csv": result.data.problems_df,
    }
    if result.design is not None and result.design.label_pairs:  # other designs' files stay as they were
        frames["label_comparison.csv"] = result.labels
    if result.design is not None and result.design.positive_control:
        frames["positive_control.csv"] = result.positive_controls
    if result.design is not None and result.design.paper_trend:
        frames["paper_trend.csv"] = result.est.paper_trends
    if result.design is not None and result.design.per_source:
        frames[f"{S.NAME}.csv"] = S.per_source_frame(result.data.cells, result.data.items)
    # Machine keys beside the display labels (tables.MACHINE_KEYS); a row's level where its file fixes it.
    groups = T.group_keys(result.units, result.points, result.data.items)
    for name, df in frames.items():
        path = analysis_dir / name
        T.with_machine_keys(df, groups, **fixed.get(name, {})).to_csv(path, index=False)
        files.append(path)
    payload = {
        "paper_unit": [f.to_dict() for f in result.unit_fits],
        "robustness": [f.to_dict() for f in result.robustness_fits],
        "interaction": [r.to_dict() for r in result.interactions],
        "specificity": [r.to_dict() for r in result.specificity],
        "dose_trend": [t.to_dict() for t in result.trends],
        "resampled": [f.to_dict() for f in result.resampled],
        **measured_sections,
        "problems": result.data.problems_df.to_dict(orient="records"),
    }
    if "paper_trend.csv" in frames:
        payload["paper_trend"] = result.est.paper_trends.to_dict(orient="records")
    if "label_comparison.csv" in frames:
        payload["label_comparison"] = result.labels.to_dict(orient="records")
    payload = {section: [T.keyed_record(r, groups, **fixed.get(section, {})) for r in records]
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
    counts = _problem_counts(result.data)
    out: dict[str, Any] = {
        "n_cell_dirs": result.data.n_cell_dirs,
        "n_cells_complete": len(result.data.cells),
        "n_cells_failed": counts[STATUS_FAILED],
        "n_cells_incomplete": counts[STATUS_INCOMPLETE],
    }
    out["n_cells_judge_failed"] = len(competence_report.failed_judges(result.data.cells))
    for f in result.unit_fits:
        if not f.ok:
            continue
        key = f"headline/{f.scale}/{f.group}".replace(" / ", "/").replace(" ", "_")
        for attr in ("slope", "slope_ci_low", "slope_ci_high", "slope_p", "intercept", "r", "r2", "n"):
            value = getattr(f, attr)
            if not (isinstance(value, float) and math.isnan(value)):
                out[f"fit/{key}/{attr}"] = value
    for f in reported(result.resampled):  # the corrected fits beside the paper's statistic
        if f.ok and f.group_by == GROUPINGS[0][0]:
            key = f"corrected/{f.level}/{f.scale}/{f.group}/{f.what}".replace(" / ", "/").replace(" ", "_")
            out.update({f"{key}/{a}": getattr(f, a) for a in ("estimate", "ci_low", "ci_high", "p")
                        if math.isfinite(getattr(f, a))})
    return out



def run_analysis(
    sweep_dirs: Iterable[str | Path],
    out_dir: Optional[str | Path] = None,
    wandb_cfg: Optional[Mapping[str, Any]] = None,
    recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
    specificity_margin: Optional[Mapping[str, float]] = None,
) -> AnalysisResult:
    """Analyse the cells of ``sweep_dirs`` (pooled) and write the report.

    The report goes to ``out_dir`` (default: the first sweep dir): report.md and report.html there,
    PNGs, CSVs and regressions.json in its ``analysis/`` subfolder. W&B failures do not lose the
    report: they are recorded in ``analysis/wandb_error.txt`` and in ``wandb_status``.
    ``specificity_margin``: the specificity test's equivalence margin per scale (config
    analysis.specificity_margin; default fit.SPECIFICITY_MARGIN).
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

    est = estimate(data.items, data.cells, recognition_tasks, specificity_margin)
    result = _analyse(data, out, est, recognition_tasks)
    result.files = _write_data_files(result, analysis_dir)
    panels_spec = _write_report(result, dirs, wandb_cfg)
    result.wandb_status = _log_wandb(result, dirs, wandb_cfg, panels_spec)
    return result


def _analyse(data: SweepData, out: Path, est: Estimates, recognition_tasks: Sequence[str]) -> AnalysisResult:
    """The result: the estimates, the design, the figures its report items show and every item's table."""
    design = R.design_of(data, est.units, est.diffs, est.trends, est.arms, est.paper_trends)
    plots = make_plots(data.cells, est.units, est.unit_fits, out / ANALYSIS_SUBDIR, est.diffs,
                       only=R.plot_stems(design), extra=R.measurement_plots())
    result = AnalysisResult(
        out_dir=out, report_md=out / "report.md", report_html=out / "report.html", data=data, est=est,
        design=design, plots=plots, recognition_tasks=tuple(recognition_tasks),
        labels=label_vs_reference(data.items) if design.label_pairs else pd.DataFrame(columns=LABEL_COLUMNS),
        length_control=LC.length_controlled(data.items) if design.length_control else LC.empty_frame(),
    )
    result.tables = R.build_tables(result)
    return result


def _meta_lines(result: AnalysisResult, dirs: Sequence[Path]) -> list[str]:
    data = result.data
    meta = [
        "Sweep directories: " + ", ".join(str(d) for d in dirs),
        f"Generated: {_dt.datetime.now().isoformat(timespec='seconds')}",
        "Cells: " + _count_line(data, _problem_counts(data)),
        *(_fit_sentences(result) if result.shows("regression_units") else []),
    ]
    if not competence_report.failed_judges(data.cells).empty:
        meta.append(competence_report.judge_text(data.cells))
    if _incomplete_text(result):
        meta.append(_incomplete_text(result))
    return meta


def _write_report(result: AnalysisResult, dirs: Sequence[Path],
                  wandb_cfg: Optional[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
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
            regression_markdown={i.section: T.to_markdown(result.tables[i.name]) for i in report_items},
            analysis_tables=[f"tables/{i.name}" for i in report_items],
            plots=[f"plots/{p.path.stem}" for p in result.plots])
        write_spec(result.out_dir, panels_spec)
        meta.append(f"W&B comparison panels (publish with `publish-wandb`): {SPEC_FILE}")
    except Exception as exc:  # noqa: BLE001 - a bad W&B setting must not lose the report; logged below too
        log.error("W&B panel specification not written: %s", exc)
    write_report(result.out_dir, TITLE, meta, R.sections(result), summary=summary_box(result))
    result.files += [result.report_md, result.report_html, items_html] + [p.path for p in result.plots]
    return panels_spec


def _log_wandb(result: AnalysisResult, dirs: Sequence[Path], wandb_cfg: Optional[Mapping[str, Any]],
               panels_spec: Optional[dict[str, Any]]) -> str:
    """The W&B summary run (the items' tables marked for W&B, the fits, the cells, the plots); its status."""
    out = result.out_dir
    wandb_error = out / ANALYSIS_SUBDIR / WANDB_ERROR_FILE
    try:
        status = log_to_wandb(
            dirs[0], wandb_cfg, run_dir=out,
            tables={**R.wandb_tables(result), "fits_units": T.fits_frame(result.unit_fits),
                    "fits_robustness": T.fits_frame(result.robustness_fits), "cells": T.cells_frame(result.data.cells)},
            plots=result.plots,
            summary=_wandb_summary(result),
            config={"sweep_dirs": [str(d) for d in dirs], "out_dir": str(out),
                    "recognition_tasks": list(result.recognition_tasks),
                    "specificity_margin": result.specificity_margin},
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
