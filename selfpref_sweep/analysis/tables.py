"""The report's tables as pandas DataFrames of display strings, plus a Markdown renderer.

Numbers are formatted here once, so report.md, report.html, W&B and stdout show the same text.
Raw numeric versions of the regression tables are kept as well (for CSV and W&B). Every interval is printed
by ``fmt_ci``, which never prints a zero-width one: "[1.000, 1.000]" looks like certainty and is none.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ..stats.classifier_metrics import wilson
from .calibration import calibration_label, pooled_over_datasets
from .fit import (
    ALPHA, BY_CONDITION, BY_EVALUATOR, GROUPINGS, MIXED_BY_VARIANT, OLS_BY_VARIANT, OLS_ITEM, OLS_PLAIN,
    SPECIFICITY_MARGIN, FitResult, InteractionResult, SpecificityResult, condition_groups, specificity_verdict, tost_p,
)
from . import paper_trend
from .paired import TrendResult
from .resample import INTERACTION, REPORTED, RESAMPLE_CORRECTED, RESAMPLE_OLS, SHIFT, ResampledFit, reported
from .units import VARIANT_KEYS

DASH = "—"  # shown for a number that does not exist (null metric, unfitted group)


# Beside rows whose interval or test missed its stated rate in the simulator's coverage study.
CALIBRATION_COL = "simulated calibration"


def fmt(x: Any, digits: int = 3) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return DASH
    return DASH if not math.isfinite(v) else f"{v:.{digits}f}"


ZERO_WIDTH = "no interval: zero width"
# An interval over articles has zero width only when every article gives the same value.
FLAT_ARTICLES = "no interval: every article gives the same value"
_MAX_DIGITS = 6  # a narrow interval gets more digits until its ends differ, up to this many


def fmt_ci(lo: Any, hi: Any, digits: int = 3, why: str = "") -> str:
    """"[lo, hi]", or, where there is no interval, ``why`` (or "—"). A zero-width interval is refused: it is
    shown as ``why`` (or ZERO_WIDTH), and one that only rounds to equal ends gets more digits."""
    a, b = fmt(lo, digits), fmt(hi, digits)
    if a == DASH or b == DASH:
        return why or DASH
    for d in range(digits, _MAX_DIGITS + 1):
        a, b = fmt(lo, d), fmt(hi, d)
        if a != b:
            return f"[{a}, {b}]"
    return why or ZERO_WIDTH


def fmt_p(p: Any, why: str = "") -> str:
    """The p-value, or ``why`` there is none (e.g. too few clusters for a clustered test)."""
    try:
        v = float(p)
    except (TypeError, ValueError):
        return why or DASH
    if not math.isfinite(v):
        return why or DASH
    return "<0.001" if v < 0.001 else f"{v:.3f}"


def wilson_ci(successes: float, n: float) -> tuple[float, float]:
    """Wilson 95% interval of a proportion of n items (NaN without items). Unlike a bootstrap or Wald
    interval it is not [1, 1] at n of n: 10 of 10 gives [0.722, 1]."""
    try:
        k, m = float(successes), float(n)
    except (TypeError, ValueError):
        return math.nan, math.nan
    if not (math.isfinite(k) and math.isfinite(m) and m > 0):
        return math.nan, math.nan
    return wilson(k, m, 1 - ALPHA)


def fmt_proportion(successes: Any, n: Any) -> str:
    """A proportion's Wilson interval with its count, e.g. "all 10 of 10: [0.722, 1.000]"."""
    lo, hi = wilson_ci(successes, n)
    if math.isnan(lo):
        return DASH
    k, m = float(successes), int(round(float(n)))
    count = f"{k:g}"
    where = f"all {m} of {m}" if k >= m else f"none of {m}" if k <= 0 else f"{count} of {m}"
    return f"{where}: {fmt_ci(lo, hi)}"


def fmt_int(x: Any) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return DASH
    return DASH if not math.isfinite(v) else str(int(round(v)))


def _mean_ci(values: pd.Series) -> str:
    """Mean across cells with a t interval (cells as the unit); '—' interval below 2 cells. Cells without a
    value are never skipped: the mean over the others would describe other cells than the row names."""
    v = values.to_numpy(dtype=float)
    n_missing = int(np.isnan(v).sum())
    if n_missing == v.size:
        return DASH
    if n_missing:
        return f"{DASH} (missing in {n_missing} of {v.size} cells)"
    if v.size < 2:
        return f"{v.mean():.3f}"
    half = stats.t.ppf(1 - ALPHA / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return est_ci(v.mean(), v.mean() - half, v.mean() + half, "no interval: every cell has the same value")


# --- regressions ---------------------------------------------------------------------------------

SCALE_NAMES = {"paper": "paper", "logodds": "log-odds"}
_POINT_WORDS = {"paper unit": "paper units", "source": "cells", "item": "items"}


def regression_table(fits: Sequence[FitResult], replicated: bool = False) -> pd.DataFrame:
    """Display table of fits: slope, intercept, r and their 95% CIs, R², n; unfitted groups say why.

    Level and method columns appear only when the fits mix them (the robustness table). ``replicated``: the
    sweep's arms have several adapters each, so the replicated coverage study labels the rows (calibration.py)."""
    levels = sorted({f.level for f in fits})
    groupings = {f.group_by for f in fits}
    mixed = len(levels) > 1 or len({f.method for f in fits}) > 1
    n_col = "n" if mixed or not levels else f"n {_POINT_WORDS.get(levels[0], 'points')}"
    rows = []
    for f in fits:
        row = {"grouping": f.group_by, "group": f.group, "scale": SCALE_NAMES.get(f.scale, f.scale)}
        if mixed:
            row.update({"level": f.level, "method": f.method + (" (descriptive only)" if f.descriptive else "")})
        row[n_col] = f"{f.n} {_POINT_WORDS.get(f.level, '')}".strip() if mixed else str(f.n)
        if any(g.n_clusters is not None for g in fits):
            row["clusters"] = DASH if f.n_clusters is None else f"{f.n_clusters} {f.cluster_by}s"
        row.update(
            {
                "slope": fmt(f.slope),
                "slope 95% CI": fmt_ci(f.slope_ci_low, f.slope_ci_high, why=f.no_interval),
                "p (slope)": fmt_p(f.slope_p, why=f.no_interval),
                "intercept": fmt(f.intercept),
                "intercept 95% CI": fmt_ci(f.intercept_ci_low, f.intercept_ci_high,
                                           why=f.no_interval if fmt(f.intercept) != DASH else ""),
                "r": fmt(f.r),
                # Clustered fits have no r interval by design (the points are not independent).
                "r 95% CI": fmt_ci(f.r_ci_low, f.r_ci_high, why=f.no_interval if f.n_clusters is None else ""),
                "R²": fmt(f.r2),
                "note": f.note,
                CALIBRATION_COL: calibration_label("fit", f.level, f.method, pooled_over_datasets(f.group_by, groupings),
                                                   replicated=replicated) if f.ok else "",
            }
        )
        rows.append(row)
    return _drop_empty_calibration(pd.DataFrame(rows))


def _drop_empty_calibration(table: pd.DataFrame) -> pd.DataFrame:
    """The calibration column only where some row has a label (analysis/calibration.py)."""
    if CALIBRATION_COL in table and not table[CALIBRATION_COL].astype(bool).any():
        return table.drop(columns=[CALIBRATION_COL])
    return table


PAPER_STATISTIC = "the paper's statistic: plain OLS over the variant × dataset points"
_COEFFICIENTS = {"slope": "slope", "intercept": "intercept", "shift": "shift in preference at matched recognition",
                 "interaction": "interaction: recognition × recognition_finetune"}


def paper_statistic_table(fits: Sequence[FitResult], replicated: bool = False) -> pd.DataFrame:
    """The headline regression table, its rows labelled as the paper's statistic (set a replication against
    the paper's number here; the corrected fit is resampled_table's)."""
    table = regression_table(fits, replicated)
    if not table.empty:
        table["statistic"] = PAPER_STATISTIC  # last: the columns before it are regression_table's
    return table


def resampled_table(fits: Sequence[ResampledFit], replicated: bool = False,
                    margins: Optional[dict[str, float]] = None) -> pd.DataFrame:
    """The fits refitted on one joint article resample (resample.py), each coefficient by the method the
    coverage study chose (resample.REPORTED): estimate, 95% CI, p, and what the fit rests on. The shift rows
    carry the specificity reading (fit.specificity_verdict, TOST against ``margins`` per scale), with the
    interaction row of the same points as the test of a common slope."""
    rows = []
    shown = reported(fits)
    groupings = {f.group_by for f in shown}
    margins = {**SPECIFICITY_MARGIN, **(margins or {})}
    for f in shown:
        why = f.no_interval
        reading = _shift_reading(f, shown, margins) if f.what == SHIFT and f.ok and not why else ""
        rows.append({
            "level": f.level, "method": f.method, "grouping": f.group_by, "group": f.group,
            "scale": SCALE_NAMES.get(f.scale, f.scale), "coefficient": _COEFFICIENTS.get(f.what, f.what),
            "n": f"{f.n} {_POINT_WORDS.get(f.level, 'points')}",
            "articles (datasets)": f"{f.n_articles} ({f.n_datasets}{', dataset term' if f.dataset_term else ''})",
            "estimate": fmt(f.estimate), "95% CI": fmt_ci(f.ci_low, f.ci_high, why=why), "p": fmt_p(f.p),
            "SE (resample)": fmt(f.se), "df": fmt_int(f.df), "draws": str(f.n_resamples) if f.ok else DASH,
            "training SD (adapters)": f"{fmt(f.training_sd)} ({f.n_adapters})" if f.ok else DASH,
            "reliability of recognition": fmt(f.reliability, 2), "reading": reading or DASH, "note": f.note,
            CALIBRATION_COL: _resampled_label(f, reading, groupings, replicated) if f.ok else "",
        })
    return _drop_empty_calibration(pd.DataFrame(rows))


def _same_points(a: ResampledFit, b: ResampledFit) -> bool:
    return (a.level, a.group_by, a.group, a.scale) == (b.level, b.group_by, b.group, b.scale)


def _shift_reading(shift: ResampledFit, shown: Sequence[ResampledFit], margins: dict[str, float]) -> str:
    """The specificity reading of a corrected shift row, with the report's interaction test on its points."""
    margin = float(margins.get(shift.scale, math.nan))
    inter = next((f for f in shown if f.what == INTERACTION and _same_points(f, shift) and f.ok), None)
    interaction = None if inter is None or not math.isfinite(inter.p) else (inter.estimate, inter.se, inter.df,
                                                                            inter.p)
    return specificity_verdict(shift.ci_low, shift.ci_high, tost_p(shift.estimate, shift.se, shift.df, margin),
                               margin, interaction=interaction)


def _resampled_label(f: ResampledFit, reading: str, groupings: set[str], replicated: bool) -> str:
    """A row's calibration label, and the interaction test's where the shift's reading rests on it."""
    pooled = pooled_over_datasets(f.group_by, groupings)
    labels = [calibration_label(f"resampled {f.what}", f.level, f.method, pooled, replicated=replicated)]
    if reading.startswith(COMMON_LINE_WORDS):
        inter = calibration_label(f"resampled {INTERACTION}", f.level, REPORTED[INTERACTION], pooled,
                                  replicated=replicated)
        labels.append(f"the interaction test behind this reading {inter}" if inter else "")
    return "; ".join(label for label in labels if label)


def fits_frame(fits: Sequence[FitResult]) -> pd.DataFrame:
    """Numeric version of the fits (CSV, W&B); drops the band internals."""
    df = pd.DataFrame([f.to_dict() for f in fits])
    return df.drop(columns=["cov", "df_resid"], errors="ignore")


def interaction_table(results: Sequence[InteractionResult], replicated: bool = False) -> pd.DataFrame:
    """The recognition-vs-control interaction, both kinds' slopes, and the calibration label where the coverage
    study of the sweep's design found the test off its size."""
    rows = []
    groupings = {r.group_by for r in results}
    for r in results:
        rows.append(
            {
                **_finetune_row_head(r),
                "interaction: recognition × recognition_finetune": fmt(r.estimate),
                "95% CI": fmt_ci(r.ci_low, r.ci_high, why=r.no_interval),
                "p": fmt_p(r.p, why=r.no_interval),
                "slope, control fine-tunes [95% CI]": est_ci(
                    r.slope_control, r.slope_control_ci_low, r.slope_control_ci_high, r.no_interval),
                "slope, recognition fine-tunes [95% CI]": est_ci(
                    r.slope_recognition, r.slope_recognition_ci_low, r.slope_recognition_ci_high, r.no_interval),
                "note": r.note,
                CALIBRATION_COL: _interaction_label(r, groupings, replicated),
            }
        )
    return _drop_empty_calibration(pd.DataFrame(rows))


def _interaction_label(r: Any, groupings: set[str], replicated: bool) -> str:
    """The interaction test's calibration label ("" for a row without a test)."""
    if not (r.ok and math.isfinite(r.p)):
        return ""
    return calibration_label("interaction", r.level, r.method, pooled_over_datasets(r.group_by, groupings),
                             replicated=replicated)


def _finetune_row_head(r: Any) -> dict[str, str]:
    """The columns an interaction or specificity row opens with: where it was fitted and on how many points."""
    words = _POINT_WORDS.get(r.level, "points")
    return {"level": r.level, "method": r.method, "grouping": r.group_by, "group": r.group,
            "scale": SCALE_NAMES.get(r.scale, r.scale),
            "n (recognition / control fine-tunes)": f"{r.n} {words} ({r.n_recognition} / {r.n_control})"
            + ("" if r.n_clusters is None else
               f", {r.n_clusters} {'arms' if getattr(r, 'arm_means', False) else 'variants'}")}


def interactions_frame(results: Sequence[InteractionResult]) -> pd.DataFrame:
    return pd.DataFrame([r.to_dict() for r in results])


def specificity_table(results: Sequence[SpecificityResult], replicated: bool = False) -> pd.DataFrame:
    """The shift in preference at matched recognition by the paper-style fit (plain OLS over every adapter's
    point), with its equivalence test. It carries no reading: it rejects a true null far too often with
    replicated arms (docs/coverage.md); the corrected shift (resampled_table) is the one read."""
    rows = []
    groupings = {r.group_by for r in results}
    for r in results:
        rows.append({
            **_finetune_row_head(r),
            "shift in preference at matched recognition": fmt(r.shift),
            "95% CI": fmt_ci(r.ci_low, r.ci_high, why=r.no_interval),
            "p (shift = 0)": fmt_p(r.p, why=r.no_interval),
            "margin": fmt(r.margin),
            "equivalence p (TOST: |shift| < margin)": fmt_p(r.equivalence_p, why=r.no_interval),
            "common slope [95% CI]": est_ci(r.slope, r.slope_ci_low, r.slope_ci_high, r.no_interval),
            "note": r.note,
            CALIBRATION_COL: calibration_label("specificity", r.level, r.method,
                                               pooled_over_datasets(r.group_by, groupings), replicated=replicated)
            if r.ok else "",
        })
    return _drop_empty_calibration(pd.DataFrame(rows))


COMMON_LINE_WORDS = ("one common line", "no common line")


def specificity_frame(results: Sequence[SpecificityResult]) -> pd.DataFrame:
    return pd.DataFrame([r.to_dict() for r in results])


def trend_table(trends: Sequence[TrendResult]) -> pd.DataFrame:
    """The recognition arms' Δ on log10 N: change per tenfold N, 95% CI and p."""
    cols = ["setting", "label", "dataset", "transfer", "evaluator", "scale", "Δ of", "arms (N)",
            "slope per tenfold N [95% CI]", "p", "note"]
    return pd.DataFrame([dict(zip(cols, [
        t.setting, t.label, t.dataset, t.transfer, t.evaluator, SCALE_NAMES.get(t.scale, t.scale), t.question,
        t.arms or DASH, est_ci(t.slope, t.ci_low, t.ci_high), fmt_p(t.p), t.note])) for t in trends], columns=cols)


def trends_frame(trends: Sequence[TrendResult]) -> pd.DataFrame:
    return pd.DataFrame([t.to_dict() for t in trends])


def rows_table(frame: pd.DataFrame, cols: Sequence[str], row: Any) -> pd.DataFrame:
    """A display table with one row per row of ``frame``: ``row(series)`` gives the values of ``cols``."""
    return pd.DataFrame([dict(zip(cols, row(r))) for _, r in frame.iterrows()], columns=list(cols))


def units_table(units: pd.DataFrame) -> pd.DataFrame:
    """The paper-unit points: per setting × label × dataset × evaluator variant, both scales with CIs."""
    cols = ["setting", "label", "dataset", "evaluator", "transfer", "sources", "n articles", "n items",
            "n items left out", "recognition [95% CI]", "preference [95% CI]", "recognition, log-odds [95% CI]",
            "preference, log-odds [95% CI]", "judge competence"]
    return rows_table(units, cols, lambda u: [
        u["setting"], u["label"], u["dataset"], u["evaluator_variant"], u["transfer"], u["sources"],
        fmt_int(u["n_articles"]), fmt_int(u["n_items"]), fmt_int(u["n_items_excluded"]),
        *(est_ci(u[f"{q}_{s}_mean"], u[f"{q}_{s}_ci_low"], u[f"{q}_{s}_ci_high"], FLAT_ARTICLES)
          for s in ("paper", "logodds") for q in ("rec", "pref")),
        u["judge_competence"] or DASH,
    ])


def ci_cell(d: pd.Series, col: str) -> str:
    """``{col}_mean`` with its ``_ci_low``/``_ci_high`` (a mean over articles: a flat interval says why)."""
    return est_ci(d[f"{col}_mean"], d[f"{col}_ci_low"], d[f"{col}_ci_high"], FLAT_ARTICLES)


def holm_cell(d: pd.Series, col: str) -> str:
    """"p (Holm p)" of ``{col}_p`` and ``{col}_p_holm``; a dash without a p."""
    p = fmt_p(d.get(f"{col}_p"))
    return f"{p} ({fmt_p(d.get(f'{col}_p_holm'))})" if p != DASH else DASH


def finetune_vs_base_table(diffs: pd.DataFrame) -> pd.DataFrame:
    """Fine-tuned minus base on the same items, both scales: each Δ with its CI, its t test's p and Holm's p
    (analysis/paired.py), and Δ preference / Δ recognition where Δ recognition is distinguishable from 0."""
    cols = ["setting", "label", "dataset", "fine-tuned evaluator", "transfer", "sources", "n articles", "n items"]
    for s in ("paper", "logodds"):
        scale = "" if s == "paper" else ", log-odds"
        cols += [f"Δ recognition{scale} [95% CI]", f"Δ recognition{scale}: p (Holm p)",
                 f"Δ preference{scale} [95% CI]", f"Δ preference{scale}: p (Holm p)",
                 f"Δ preference / Δ recognition{scale} [95% CI]"]
    cols.append("note")

    def scale_cells(d: pd.Series, s: str) -> list[str]:
        out = []
        for q in ("rec", "pref"):
            out += [ci_cell(d, f"d{q}_{s}"), holm_cell(d, f"d{q}_{s}")]
        ratio = est_ci(d.get(f"ratio_{s}"), d.get(f"ratio_{s}_ci_low"), d.get(f"ratio_{s}_ci_high"))
        note = d.get(f"ratio_{s}_note")
        return out + [ratio if ratio != DASH else (note if isinstance(note, str) and note else DASH)]

    return rows_table(diffs, cols, lambda d: [
        d["setting"], d["label"], d["dataset"], d["evaluator_variant"], d["transfer"], d["sources"] or DASH,
        fmt_int(d["n_articles"]), fmt_int(d["n_items"]), *scale_cells(d, "paper"), *scale_cells(d, "logodds"),
        d["note"] or "",
    ])


def arm_deltas_table(arms: pd.DataFrame) -> pd.DataFrame:
    """Per arm, its adapters' Δs pooled with training randomness (arms.py), both scales: Δ [95% CI], p (Holm
    p) and the between-adapter SD."""
    cols = ["setting", "label", "dataset", "arm", "transfer", "adapters", "n articles"]
    for s in ("paper", "logodds"):
        scale = "" if s == "paper" else ", log-odds"
        for q in ("recognition", "preference"):
            cols += [f"Δ {q}{scale} [95% CI]", f"Δ {q}{scale}: p (Holm p)", f"Δ {q}{scale}: training SD"]
    cols.append("note")

    def scale_cells(d: pd.Series, s: str) -> list[str]:
        out = []
        for q in ("rec", "pref"):
            out += [ci_cell(d, f"d{q}_{s}"), holm_cell(d, f"d{q}_{s}"), fmt(d.get(f"d{q}_{s}_training_sd"))]
        return out

    return rows_table(arms, cols, lambda d: [
        d["setting"], d["label"], d["dataset"], d["arm"], d["transfer"], fmt_int(d["adapters"]),
        fmt_int(d["n_articles"]), *scale_cells(d, "paper"), *scale_cells(d, "logodds"),
        "; ".join(x for x in (d["note"] or "", TWO_ADAPTERS if d["adapters"] == 2 else "") if x)])


# stats/replicates.py's arm interval with 2 adapters: training variance on 1 df (docs/statistics.md, "Training
# variance with few adapters": fresh-seed coverage by training SD at 10 and 20 articles).
TWO_ADAPTERS = ("2 adapters: training variance rests on 1 df; the CI covered 89-92% at training SD 0.4-1.6 in "
                "the simulation (96-97% at SD 0), for a nominal 95%: train 3 or more per arm")


HOLM_ALPHA = 0.05  # the familywise level of the positive control's reading


def positive_control_table(arms: pd.DataFrame, tasks: Sequence[str], toward: Optional[pd.DataFrame] = None
                           ) -> pd.DataFrame:
    """The positive-control arms: Δ preference toward the direction each was trained (positive_control.py), which
    says whether preference moved; Δ recognition toward it (whether the judge now picks that summary whatever it
    is asked); and their Δ self-preference (arms.py), which need not move."""
    sub = arms[arms["finetune_task"].astype(str).isin(list(tasks))] if not arms.empty else arms
    toward = toward if toward is not None else pd.DataFrame()
    keys = ["setting", "label", "dataset", "arm"]
    turned = {tuple(str(d[k]) for k in keys): d for _, d in toward.iterrows()}
    cols = ["setting", "label", "dataset", "arm", "adapters", "trained toward", "items without a direction",
            "Δ preference toward it [95% CI]", "Δ preference toward it, log-odds [95% CI]", "p (Holm p)",
            "Δ recognition toward it, log-odds [95% CI]", "Δ self-preference [95% CI]",
            "Δ self-preference, log-odds [95% CI]", "reading"]

    def reading(d: Optional[pd.Series]) -> str:
        """From the test the table prints, Holm-adjusted across the family's arms at 5%; a non-rejection is
        "not shown to move", never "did not move"."""
        if d is None:
            return "no trained direction (the summaries' texts are not in the results): cannot say"
        p, estimate = d.get("dpref_paper_p_holm"), d.get("dpref_paper_mean")
        if not (pd.notna(p) and pd.notna(estimate)):
            return "no test: cannot say whether preference moved"
        test = f"Holm p {fmt_p(p)}"
        if p < HOLM_ALPHA and estimate > 0:
            return f"preference moved the trained way ({test}): a preference null in this setting is informative"
        if p < HOLM_ALPHA and estimate < 0:
            return f"preference moved against the trained way ({test}): the readout moves, but not as trained"
        return f"preference not shown to move ({test}): a preference null in this setting is uninformative"

    def cells(d: pd.Series) -> list[str]:
        t = turned.get(tuple(str(d[k]) for k in keys))
        toward_cells = ([str(t["toward"]), fmt_int(t["n_items_tied"]), ci_cell(t, "dpref_paper"),
                         ci_cell(t, "dpref_logodds"),
                         f"{fmt_p(t.get('dpref_paper_p'))} ({fmt_p(t.get('dpref_paper_p_holm'))})",
                         ci_cell(t, "drec_logodds")]
                        if t is not None else [DASH] * 6)
        return [d["setting"], d["label"], d["dataset"], d["arm"], fmt_int(d["adapters"]), *toward_cells,
                ci_cell(d, "dpref_paper"), ci_cell(d, "dpref_logodds"), reading(t)]

    return rows_table(sub, cols, cells)


def label_comparison_table(labels: pd.DataFrame) -> pd.DataFrame:
    """Label conditions on the same items (paired.label_vs_reference), both scales: preference under the label
    and under the reference with their CIs, and the paired Δ with its CI, p and Holm's p."""
    cols = ["setting", "dataset", "evaluator", "label", "vs", "sources", "n articles", "n items"]
    for s in ("paper", "logodds"):
        scale = "" if s == "paper" else ", log-odds"
        cols += [f"preference{scale} [95% CI]", f"preference{scale}, vs [95% CI]",
                 f"Δ preference{scale} [95% CI]", f"Δ preference{scale}: p (Holm p)"]
    cols.append("note")

    def scale_cells(d: pd.Series, s: str) -> list[str]:
        return [*(ci_cell(d, f"{side}_{s}") for side in ("pref", "pref_ref", "dpref")), holm_cell(d, f"dpref_{s}")]

    return rows_table(labels, cols, lambda d: [
        d["setting"], d["dataset"], d["evaluator_variant"], d["label"], d["reference"], d["sources"] or DASH,
        fmt_int(d["n_articles"]), fmt_int(d["n_items"]), *scale_cells(d, "paper"), *scale_cells(d, "logodds"),
        d["note"] or "",
    ])


def est_ci(est: float, lo: float, hi: float, why: str = "") -> str:
    """"estimate [lo, hi]"; where there is no interval, "estimate —" or "estimate (why)"."""
    if fmt(est) == DASH:
        return DASH
    ci = fmt_ci(lo, hi, why=why)
    return f"{fmt(est)} {ci}" if ci.startswith("[") or ci == DASH else f"{fmt(est)} ({ci})"


# --- per-cell tables -----------------------------------------------------------------------------

_ROW_KEYS = ["dataset", "setting", "label", "evaluator_variant"]


def evaluator_source_table(cells: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Evaluator × source matrix of one metric ("rec" or "pref"), each entry "mean [CI low, high]".

    Rows are (dataset, setting, label, evaluator incl. fine-tune), columns are sources. Two cells
    with the same key (e.g. the same cell in two pooled sweeps) are shown side by side, not averaged.
    """
    if cells.empty:
        return pd.DataFrame(columns=[*_ROW_KEYS, "(no complete cells)"])
    df = cells.copy()
    df["_entry"] = [
        est_ci(m, lo, hi, FLAT_ARTICLES)
        for m, lo, hi in zip(df[f"{prefix}_mean"], df[f"{prefix}_ci_low"], df[f"{prefix}_ci_high"])
    ]
    keys = [*_ROW_KEYS, "source"]
    # A null key would vanish from a pivot; show it as "null" instead.
    df[keys] = df[keys].astype(object).where(df[keys].notna(), "null").astype(str)
    table = df.groupby(keys, sort=True)["_entry"].agg("; ".join).unstack("source").fillna("").reset_index()
    table.columns.name = None
    return table.rename(columns={"evaluator_variant": "evaluator"})


def mde_sentence(value: Any, n_articles: Any, scale: Any = "paper") -> str:
    """The smallest detectable effect in words, e.g. "with n=14 articles, effects smaller than ±0.040 could
    not be seen"."""
    v, n = fmt(value), fmt_int(n_articles)
    if v == DASH:
        return DASH if n == DASH else f"{DASH} (n={n} articles: too few to tell)"
    unit = "" if scale in (None, "paper") else f" ({SCALE_NAMES.get(scale, scale)} scale)"
    return f"with n={n} articles, effects smaller than ±{v}{unit} could not be seen"


def position_consistency_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Share of items whose answer is the same in both presentation orders, per cell."""
    cols = ["cell_id", *_ROW_KEYS, "source", "pc_recognition", "pc_preference"]
    if cells.empty:
        return pd.DataFrame(columns=["cell", "dataset", "setting", "label", "evaluator", "source", "recognition", "preference"])
    df = cells[cols].copy()
    df["pc_recognition"] = df["pc_recognition"].map(fmt)
    df["pc_preference"] = df["pc_preference"].map(fmt)
    return df.rename(
        columns={
            "cell_id": "cell",
            "evaluator_variant": "evaluator",
            "pc_recognition": "recognition",
            "pc_preference": "preference",
        }
    )


def exclusions_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Items excluded per cell, with one column per exclusion reason, and a total row."""
    if cells.empty:
        return pd.DataFrame(columns=["cell", "evaluator", "source", "dataset", "n items", "n excluded"])
    reasons = sorted({r for ex in cells["exclusions"] for r in (ex or {})})
    rows = []
    for _, c in cells.iterrows():
        row = {
            "cell": c["cell_id"],
            "evaluator": c["evaluator_variant"],
            "source": c["source"],
            "dataset": c["dataset"],
            "n items": c["n_items"],
            "n excluded": c["n_excluded"],
            "excluded (recognition)": c["rec_n_excluded"],
            "excluded (preference)": c["pref_n_excluded"],
        }
        for reason in reasons:
            row[reason] = (c["exclusions"] or {}).get(reason, 0.0)
        rows.append(row)
    df = pd.DataFrame(rows)
    numeric = [c for c in df.columns if c not in ("cell", "evaluator", "source", "dataset")]
    total = {"cell": "total", "evaluator": "", "source": "", "dataset": ""}
    # min_count=1: a column of nulls totals to null ("—"), not to a misleading 0.
    total.update({c: df[c].astype(float).sum(min_count=1) for c in numeric})
    df = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    for c in numeric:
        df[c] = df[c].map(fmt_int)
    return df


def finetune_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tune task (and fine-tune dataset, size, evaluation dataset): means across cells."""
    keys = ["finetune_task", "finetune_dataset", "finetune_n_articles", "dataset", "transfer", "setting", "label"]
    if cells.empty:
        return pd.DataFrame(columns=[*keys, "n cells"])
    rows = []
    for key, sub in cells.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, key))
        row["finetune_dataset"] = row["finetune_dataset"] if isinstance(row["finetune_dataset"], str) else DASH
        row["finetune_n_articles"] = fmt_int(row["finetune_n_articles"])
        row.update(
            {
                "n cells": len(sub),
                "evaluators": ", ".join(sorted(sub["evaluator"].astype(str).unique())),
                "recognition (mean of cells [95% CI])": _mean_ci(sub["rec_mean"]),
                "preference (mean of cells [95% CI])": _mean_ci(sub["pref_mean"]),
                # skipna=False: a cell without the value makes the mean "—", not the mean of the others.
                "position consistency (rec / pref)": f"{fmt(sub['pc_recognition'].mean(skipna=False))} / "
                                                     f"{fmt(sub['pc_preference'].mean(skipna=False))}",
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def problems_table(problems_df: pd.DataFrame, max_error_chars: int = 400) -> pd.DataFrame:
    """Failed / incomplete cells and warnings, with overrides and the (shortened) error message."""
    if problems_df.empty:
        return pd.DataFrame(columns=["cell", "status", "reason", "overrides", "error"])
    df = problems_df[["cell", "status", "reason", "overrides", "error"]].copy()
    df["error"] = df["error"].map(lambda e: _shorten(" ".join(str(e).split()), max_error_chars))
    return df


def _shorten(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# --- rendering -----------------------------------------------------------------------------------


def _md_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    if isinstance(value, float) and math.isnan(value):
        text = DASH
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table: pandas' to_markdown (tabulate), cells escaped for Markdown first.

    Cells are display strings already, so no number parsing or alignment (which would also pad them).
    """
    if df.columns.empty:
        return "_(empty)_"
    if df.empty:
        df = pd.DataFrame([["_(none)_"] + [""] * (len(df.columns) - 1)], columns=df.columns)
    escaped = df.astype(object).map(_md_cell)
    escaped.columns = [_md_cell(c) for c in df.columns]
    return escaped.to_markdown(index=False, tablefmt="github", stralign=None, numalign=None, disable_numparse=True)


def to_text(df: pd.DataFrame, columns: Optional[Iterable[str]] = None) -> str:
    """Fixed-width text for stdout."""
    view = df if columns is None else df[[c for c in columns if c in df.columns]]
    if view.empty:
        return "(none)"
    return view.to_string(index=False)


# --- machine keys ---------------------------------------------------------------------------------

# Beside every display label ("pairwise / none / in_domain", an evaluator variant's name) the CSVs and
# regressions.json carry these plain values, None where one does not apply (a fit's group has no evaluator; a
# paper unit has no single source and both scales as columns), so a program never parses a display string.
GROUP_KEYS = ("setting", "label", "dataset", "transfer")
MACHINE_KEYS = ("level", "method_key", "scale", *GROUP_KEYS, *VARIANT_KEYS, "source")
METHOD_KEYS = {OLS_PLAIN: "ols", OLS_BY_VARIANT: "ols_clustered_by_variant", MIXED_BY_VARIANT: "mixedlm_by_variant",
               OLS_ITEM: "ols_variant_effects_clustered_by_article",
               RESAMPLE_OLS: "ols_dataset_term_article_resample",
               RESAMPLE_CORRECTED: "ols_error_corrected_dataset_term_article_resample"}


def group_keys(*frames: pd.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    """(grouping, group label) -> the group's GROUP_KEYS, for every group the fits make of these frames
    (condition_groups, within dataset and within transfer); a key the grouping does not split by is None."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for frame in frames:
        for within in ("dataset", "transfer"):
            if frame.empty or within not in frame:
                continue
            for name, label, sub in condition_groups(frame, within=within):
                first = sub.iloc[0]
                by = {GROUPINGS[0][0]: BY_CONDITION, BY_EVALUATOR: (*BY_CONDITION, "evaluator")}.get(
                    name, (*BY_CONDITION, within))
                out[(name, label)] = {k: (first[k] if k in by else None) for k in (*GROUP_KEYS, "evaluator")}
    return out


def keyed_record(record: dict[str, Any], groups: dict[tuple[str, str], dict[str, Any]],
                 **fixed: Any) -> dict[str, Any]:
    """``record`` with every MACHINE_KEYS key added where absent: a fit's group keys from ``groups`` (see
    group_keys), its method's key, else ``fixed`` (e.g. level) or None. Existing values are kept."""
    out = dict(record)
    found = groups.get((record.get("group_by"), record.get("group")), {})
    for key in (*GROUP_KEYS, "evaluator"):
        out.setdefault(key, found.get(key, fixed.get(key)))
    if "method" in record:
        out.setdefault("method_key", METHOD_KEYS.get(record["method"]))
    for key in MACHINE_KEYS:
        out.setdefault(key, fixed.get(key))
    return out


def with_machine_keys(df: pd.DataFrame, groups: dict[tuple[str, str], dict[str, Any]], **fixed: Any) -> pd.DataFrame:
    """keyed_record for every row of a frame; the key columns follow the frame's own."""
    cols = [*df.columns, *(k for k in MACHINE_KEYS if k not in df.columns)]
    return pd.DataFrame([keyed_record(r, groups, **fixed) for r in df.to_dict(orient="records")], columns=cols)


def incomplete_units_text(frames: dict[str, pd.DataFrame]) -> str:
    """The warning that lists every unit (of each named frame: paper units, fine-tuned-vs-base rows, ...)
    whose cells do not all carry a field: its value there is left out (—), never averaged over the other
    sources. "" if none."""
    lines = []
    for what, frame in frames.items():
        if frame.empty or "incomplete" not in frame:
            continue
        for r in frame[frame["incomplete"].fillna("").astype(str) != ""].itertuples():
            lines.append(f"{what} {r.evaluator_variant} on {r.dataset} ({r.setting}, label {r.label}): "
                         f"{r.incomplete}")
    if not lines:
        return ""
    return (f"{len(lines)} unit(s) whose cells do not all carry a field: that field is left out (—) for the unit, "
            "not averaged over the other sources: " + "; ".join(lines) + ".")


def cells_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """The per-cell numbers for CSV / W&B (exclusions flattened to text)."""
    if cells.empty:
        return cells
    df = cells.copy()
    df["exclusions"] = df["exclusions"].map(lambda d: "; ".join(f"{k}={fmt_int(v)}" for k, v in sorted((d or {}).items())))
    if "finetune_hyperparameters" in df:
        df["finetune_hyperparameters"] = df["finetune_hyperparameters"].map(
            lambda d: "; ".join(f"{k}={v}" for k, v in sorted((d or {}).items())))
    return df.replace({np.nan: None})


_TREND_READINGS = {
    paper_trend.RISES: "preference rises with recognition across the fine-tunes (corrected CI above 0)",
    paper_trend.FALLS: "preference falls as recognition rises (corrected CI below 0)",
    paper_trend.NOT_SHOWN: "not shown to rise or fall (corrected CI includes 0)",
    paper_trend.NO_INTERVAL: "no corrected interval: cannot say",
}


def paper_trend_table(trends: pd.DataFrame) -> pd.DataFrame:
    """The paper's fine-tune trend per base evaluator (paper_trend.py): the paper's statistic and, for all the
    recognition fine-tunes together, the corrected slope, whose interval carries the reading."""
    cols = ["setting", "label", "base evaluator", "fine-tunes evaluated", "n points", "slope (paper's OLS) [95% CI]",
            "r [95% CI]", "corrected slope [95% CI]", "p", "reading"]
    rows = []
    for _, t in trends.iterrows():
        corrected = "" if t["transfer"] != "all" else (
            f"{fmt(t['corrected_slope'])} {fmt_ci(t['corrected_ci_low'], t['corrected_ci_high'], why=t['corrected_note'])}")
        reading = ("(the paper's statistic only)" if t["transfer"] != "all"
                   else _TREND_READINGS[paper_trend.direction(t["corrected_ci_low"], t["corrected_ci_high"])])
        rows.append([t["setting"], t["label"], t["evaluator"],
                     {"all": "in-domain and transfer", "in_domain": "in-domain",
                      "cross_dataset": "transfer"}.get(t["transfer"], t["transfer"]), int(t["n_points"]),
                     f"{fmt(t['slope'])} {fmt_ci(t['slope_ci_low'], t['slope_ci_high'])}",
                     f"{fmt(t['r'])} {fmt_ci(t['r_ci_low'], t['r_ci_high'])}", corrected,
                     fmt(t["corrected_p"]) if t["transfer"] == "all" else "", reading])
    return pd.DataFrame(rows, columns=cols)
