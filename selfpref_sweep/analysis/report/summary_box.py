"""The report's first screen: what was run, the headline numbers with their intervals, which judge controls
passed, and in plain words what the sweep can and cannot conclude.

Every sentence here reads an interval or a test that the report prints beside it (a cell's 95% CI against 0.5,
the corrected headline slope's CI against 0: the fit the report names for the slope, not the paper's plain
OLS, which under-covers), never a comparison of two point estimates. What it says of the judges that failed a
control they must pass comes from those controls' report modules (sweep/report_modules.judge_gates: the
judge-competence control's)."""

from __future__ import annotations

import math

import pandas as pd

from ...records.schema import QUESTION_PREFIX
from ...reporting.formatting import fmt, fmt_ci
from ...reporting.grouping import GROUPINGS, LEVEL_UNIT
from ...reporting.regression import MIN_POINTS
from ..estimate import paper_trend
from ..estimate.resample import REPORTED, SLOPE
from ..sweep.report_modules import judge_gates
from . import self_bias_section as SB
from .result import AnalysisResult

MAX_CELLS_LISTED = 6  # up to this many cells, the headline lists each; beyond, it counts them


def summary_box(result: AnalysisResult) -> list[tuple[str, str]]:
    """(heading, text) pairs, in reading order."""
    cells = result.data.cells
    if cells.empty:
        return [("What was run", f"{result.data.n_cell_dirs} cell directories, none complete: nothing to conclude.")]
    return [("What was run", _what_was_run(cells)), ("The numbers", _numbers(result, cells)),
            ("Judge controls", _controls(cells)), ("What it can conclude", _can(result, cells)),
            ("What it cannot conclude", _cannot(result, cells))]


def _values(cells: pd.DataFrame, column: str) -> str:
    vals = sorted({str(v) for v in cells[column].dropna()})
    return ", ".join(vals) if vals else "—"


def _imported(cells: pd.DataFrame) -> list[str]:
    return sorted({str(v) for v in cells["imported"].dropna() if str(v)}) if "imported" in cells else []


def _what_was_run(cells: pd.DataFrame) -> str:
    articles = sorted({int(n) for n in cells["n_articles"].dropna()})
    span = (f"{articles[0]}" if len(articles) == 1 else f"{articles[0]}-{articles[-1]}") if articles else "?"
    formats = _imported(cells)
    head = (f"Imported judgements ({', '.join(formats)}: made elsewhere, no model was called here; each cell's "
            f"warnings name the defects of its data). " if formats else "")
    return head + (f"{len(cells)} complete cell(s), {span} article(s) each. "
            f"Judges: {_values(cells, 'evaluator_variant')}; "
            f"other sources: {_values(cells, 'source')}; datasets: {_values(cells, 'dataset')}; settings: "
            f"{_values(cells, 'setting')}; label conditions: {_values(cells, 'label')}.")


def _side(low: float, high: float) -> str:
    """Where a 95% CI lies against 0.5 (no bias)."""
    if math.isnan(low) or math.isnan(high):
        return "no interval"
    return "above 0.5" if low > 0.5 else "below 0.5" if high < 0.5 else "includes 0.5"


def _numbers(result: AnalysisResult, cells: pd.DataFrame) -> str:
    if len(cells) <= MAX_CELLS_LISTED:
        rows = []
        for _, c in cells.iterrows():
            nums = "; ".join(f"{q} {fmt(c[f'{p}_mean'])} (95% CI {fmt_ci(c[f'{p}_ci_low'], c[f'{p}_ci_high'])})"
                             for q, p in QUESTION_PREFIX.items())
            rows.append(f"{c['evaluator_variant']} against {c['source']} on {c['dataset']} ({c['setting']}): {nums}.")
        text = " ".join(rows)
    else:
        text = " ".join(f"{q.capitalize()}: the CI lies above 0.5 in {_count(cells, p, 'above 0.5')}, below in "
                        f"{_count(cells, p, 'below 0.5')} and includes 0.5 in {_count(cells, p, 'includes 0.5')} of "
                        f"{len(cells)} cells." for q, p in QUESTION_PREFIX.items())
    fit = " ".join(x for x in (_headline_fit(result), _trend_numbers(result), SB.summary_line(result)) if x)
    return text + (f" {fit}" if fit else "")


def _trends(result: AnalysisResult) -> pd.DataFrame:
    trends = result.est.paper_trends if result.est is not None else pd.DataFrame()
    return trends[trends["transfer"] == "all"] if not trends.empty else trends


def _trend_numbers(result: AnalysisResult) -> str:
    """The paper's fine-tune trend per base evaluator (paper_trend.py): its statistic and the corrected slope."""
    return " ".join(
        f"The paper's fine-tune trend for {t.evaluator} ({t.setting} / {t.label}, {t.n_points} recognition fine-tune "
        f"points): slope {fmt(t.slope)}, r {fmt(t.r)} (the paper's statistic); corrected slope "
        f"{fmt(t.corrected_slope)} (95% CI {fmt_ci(t.corrected_ci_low, t.corrected_ci_high)})."
        for t in _trends(result).itertuples())


def _trend_readings(result: AnalysisResult) -> list[str]:
    out = []
    for t in _trends(result).itertuples():
        where = f"{t.evaluator}'s recognition fine-tunes ({t.setting} / {t.label})"
        way = paper_trend.direction(t.corrected_ci_low, t.corrected_ci_high)
        if way == paper_trend.RISES:
            out.append(f"Across {where}, preference rises with recognition (corrected slope CI above 0).")
        elif way == paper_trend.FALLS:
            out.append(f"Across {where}, preference falls as recognition rises (corrected slope CI below 0).")
    return out


def _count(cells: pd.DataFrame, prefix: str, side: str) -> int:
    return int(sum(_side(lo, hi) == side
                   for lo, hi in zip(cells[f"{prefix}_ci_low"], cells[f"{prefix}_ci_high"], strict=True)))


def _corrected_slopes(result: AnalysisResult) -> list:
    """The headline slope the report reads (resample.REPORTED: the corrected fit on one joint article resample),
    per setting × label over every dataset, on the paper's scale, where it has an interval."""
    return [f for f in (result.est.resampled if result.est is not None else [])
            if f.what == SLOPE and f.method == REPORTED[SLOPE] and f.level == LEVEL_UNIT
            and f.group_by == GROUPINGS[0][0] and f.scale == "paper" and f.ok and not f.no_interval]


def _headline_fit(result: AnalysisResult) -> str:
    plain = {f.group: f for f in result.headline_fits() if f.ok}
    out = []
    for f in _corrected_slopes(result):
        paper = f"; the paper's plain OLS slope {fmt(plain[f.group].slope)}" if f.group in plain else ""
        out.append(f"Preference on recognition over {f.n} paper units ({f.group}), corrected fit: slope "
                   f"{fmt(f.estimate)} (95% CI {fmt_ci(f.ci_low, f.ci_high)}){paper}.")
    return " ".join(out)


def _controls(cells: pd.DataFrame) -> str:
    """Each judge gate's line: where it ran, and whose judge failed it."""
    return " ".join(gate.control_summary(cells) for gate in judge_gates())


def _can(result: AnalysisResult, cells: pd.DataFrame) -> str:
    out = []
    for q, p in QUESTION_PREFIX.items():
        above, below = _count(cells, p, "above 0.5"), _count(cells, p, "below 0.5")
        if above or below:
            own, other = (("tells its own summary apart", "takes the other source's for its own")
                          if q == "recognition" else ("prefers its own summary", "prefers the other source's"))
            out.append(f"{q.capitalize()}: in {above} cell(s) the judge {own} (95% CI above 0.5), and in {below} it "
                       f"{other} (CI below 0.5), beyond article-sampling noise.")
    out += _trend_readings(result)
    for f in _corrected_slopes(result):
        ci = f"corrected slope 95% CI {fmt_ci(f.ci_low, f.ci_high)}"
        if f.ci_low > 0:
            out.append(f"Across the {f.n} paper units of {f.group}, preference rises with recognition ({ci}, above "
                       f"0): a correlation across judges, not by itself a causal effect.")
        elif f.ci_high < 0:
            out.append(f"Across the {f.n} paper units of {f.group}, preference falls as recognition rises ({ci}, "
                       f"below 0).")
    if out:
        return " ".join(out)
    for gate in judge_gates():
        if len(gate.failed_judges(cells)) == len(cells):
            return gate.ALL_FAILED_TEXT
    return ("No interval lies clear of 0.5: at this sweep's size no self-recognition or self-preference was "
            "detected, which is not evidence that there is none (see each cell's smallest detectable effect below).")


def _cannot(result: AnalysisResult, cells: pd.DataFrame) -> str:
    out = []
    out += [gate.SOME_FAILED_TEXT for gate in judge_gates() if not gate.failed_judges(cells).empty]
    fits = _corrected_slopes(result)
    if not fits:
        units = result.design.max_condition_units if result.design is not None else 0
        out.append(f"Whether preference follows recognition across judges: that needs a regression over at least "
                   f"{MIN_POINTS} paper units (evaluator variant × dataset) in one setting and label condition, and "
                   f"this sweep has at most {units}.")
    elif all(f.ci_low <= 0 <= f.ci_high for f in fits):
        out.append("That preference follows recognition: the corrected slope's CI includes 0.")
    stated = result.est.training_sd
    one_run_per_arm = result.design is not None and result.design.finetuned and not result.design.replicated
    if one_run_per_arm and stated is not None:
        out.append(f"Whether fine-tuning causes the shift beyond the adapters trained rests on the {stated.text()}, "
                   "not on this sweep's own replicates: the per-arm rows are as right as that SD.")
    elif one_run_per_arm:
        out.append("Whether fine-tuning causes the shift beyond the adapters trained: each fine-tuned arm's "
                   "intervals cover article sampling, not training randomness (replicate with finetune_task.seed, "
                   "or state analysis.training_sd with its source).")
    elif result.design is not None and result.design.finetuned:
        out.append("Training randomness enters the per-arm Δs only through the spread of each arm's few adapters "
                   "(seeds), a rough estimate; arms with one adapter do not cover it.")
    if _imported(cells):
        out.append("Anything the imported data did not keep: where only a stored score survives "
                   "(the paper's GPT rows), "
                   "it cannot be renormalised and has no log-odds; rows the other tool dropped are counted as "
                   "exclusions, but why they were dropped may bias what is left.")
    out.append("Intervals are over this sweep's articles and cells; other articles, judges or prompts may differ.")
    return " ".join(out)
