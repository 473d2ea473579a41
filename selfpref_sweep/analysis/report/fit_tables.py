"""The fits' display tables (the headline, its corrected refit, robustness, specificity, the interaction, the dose
and the paper's fine-tune trend), each row with the simulated calibration label where the coverage study found
its interval or test off its stated rate, and their numeric frames for the CSVs and W&B."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ...reporting.formatting import DASH, SCALE_NAMES, est_ci, fmt, fmt_ci, fmt_int, fmt_p
from ..estimate import paper_trend
from ..estimate.finetune_tests import (
    SPECIFICITY_MARGIN,
    InteractionResult,
    SpecificityResult,
    specificity_verdict,
    tost_p,
)
from ..estimate.fit import FitResult
from ..estimate.paired import TrendResult
from ..estimate.resample import INTERACTION, REPORTED, SHIFT, ResampledFit, reported
from ..study.calibration import calibration_label, pooled_over_datasets

# Beside rows whose interval or test missed its stated rate in the simulator's coverage study.
CALIBRATION_COL = "simulated calibration"
ESTIMAND_COL = "speaks for"


def training_sd_column(adapters: int) -> str:
    """The name of the fit's training-variance column. With one adapter per arm a fit cannot tell training
    randomness from an arm's own departure from the line: the SD it shows is σ̂, the arms' scatter about the line
    beyond what the articles explain (training_variance.py). With replicated arms it is τ̂, the spread between an
    arm's adapters: training randomness itself."""
    return ("arms' SD about the line beyond articles, σ̂ (adapters)" if adapters <= 1
            else "training SD between an arm's adapters, τ̂ (adapters)")


def estimand(adapters: int) -> str:
    """What a fine-tune fit's words are about: with one training run per arm, those runs (another run of the same
    fine-tune recipe may land elsewhere); with replicated arms, the recipe, its training randomness in the
    interval."""
    return ("these training runs (one per arm), not the recipe" if adapters <= 1
            else f"the recipe: {adapters} or more adapters per arm, their spread in the interval")
_POINT_WORDS = {"paper unit": "paper units", "source": "cells", "item": "items"}


def regression_table(fits: Sequence[FitResult], adapters: int = 1) -> pd.DataFrame:
    """Display table of fits: slope, intercept, r and their 95% CIs, R², n; unfitted groups say why.

    Level and method columns appear only when the fits mix them (the robustness table). ``adapters``: the
    adapters of the sweep's replicated arms (1: none), which choose the coverage study that labels the rows
    (calibration.py)."""
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
                CALIBRATION_COL: calibration_label("fit", f.level, f.method,
                                                   pooled_over_datasets(f.group_by, groupings),
                                                   adapters=adapters) if f.ok else "",
            }
        )
        rows.append(row)
    return drop_empty_calibration(pd.DataFrame(rows))


def drop_empty_calibration(table: pd.DataFrame) -> pd.DataFrame:
    """The calibration column only where some row has a label (analysis/calibration.py)."""
    if CALIBRATION_COL in table and not table[CALIBRATION_COL].astype(bool).any():
        return table.drop(columns=[CALIBRATION_COL])
    return table


PAPER_STATISTIC = "the paper's statistic: plain OLS over the variant × dataset points"
_COEFFICIENTS = {"slope": "slope", "intercept": "intercept", "shift": "shift in preference at matched recognition",
                 "interaction": "interaction: recognition × recognition_finetune"}


def paper_statistic_table(fits: Sequence[FitResult], adapters: int = 1) -> pd.DataFrame:
    """The headline regression table, its rows labelled as the paper's statistic (set a replication against
    the paper's number here; the corrected fit is resampled_table's)."""
    table = regression_table(fits, adapters)
    if not table.empty:
        table["statistic"] = PAPER_STATISTIC  # last: the columns before it are regression_table's
    return table


def resampled_table(fits: Sequence[ResampledFit], adapters: int = 1,
                    margins: dict[str, float] | None = None) -> pd.DataFrame:
    """The fits refitted on one joint article resample (resample.py), each coefficient by the method the
    coverage study chose (resample.REPORTED): estimate, 95% CI, p, and what the fit rests on. The shift rows
    carry the specificity reading (finetune_tests.specificity_verdict, TOST against ``margins`` per scale), with the
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
            training_sd_column(adapters): f"{fmt(f.training_sd)} ({f.n_adapters})" if f.ok else DASH,
            "reliability of recognition": fmt(f.reliability, 2), "reading": reading or DASH,
            ESTIMAND_COL: estimand(adapters) if f.ok else DASH, "note": f.note,
            CALIBRATION_COL: _resampled_label(f, reading, groupings, adapters) if f.ok else "",
        })
    return drop_empty_calibration(pd.DataFrame(rows))


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


def _resampled_label(f: ResampledFit, reading: str, groupings: set[str], adapters: int) -> str:
    """A row's calibration label, and the interaction test's where the shift's reading rests on it."""
    pooled = pooled_over_datasets(f.group_by, groupings)
    labels = [calibration_label(f"resampled {f.what}", f.level, f.method, pooled, adapters=adapters)]
    if reading.startswith(COMMON_LINE_WORDS):
        inter = calibration_label(f"resampled {INTERACTION}", f.level, REPORTED[INTERACTION], pooled,
                                  adapters=adapters)
        labels.append(f"the interaction test behind this reading {inter}" if inter else "")
    return "; ".join(label for label in labels if label)


def fits_frame(fits: Sequence[FitResult]) -> pd.DataFrame:
    """Numeric version of the fits (CSV, W&B); drops the band internals."""
    df = pd.DataFrame([f.to_dict() for f in fits])
    return df.drop(columns=["cov", "df_resid"], errors="ignore")


def interaction_table(results: Sequence[InteractionResult], adapters: int = 1,
                      resampled: Sequence[ResampledFit] = ()) -> pd.DataFrame:
    """The recognition-vs-control interaction. Its test is the report's one interaction test, the resampled fit
    of the same points (resample.REPORTED: OLS with a dataset term, the article resample's SE and, with
    replicated arms, the training variance), which the specificity reading uses too; the plain fit gives the two
    kinds' slopes. Without a resampled row (resampling off, or no such group) the plain fit's test is shown and
    its row says so. The calibration label is the shown test's."""
    tests = {(f.level, f.group_by, f.group, f.scale): f for f in reported(resampled) if f.what == INTERACTION}
    groupings, test_groupings = {r.group_by for r in results}, {f.group_by for f in tests.values()}
    rows = []
    for r in results:
        t = tests.get((r.level, r.group_by, r.group, r.scale))
        if t is not None:
            why = t.no_interval or ("" if t.ok else t.note)
            test = {"interaction test": t.method, "interaction [95% CI]": est_ci(t.estimate, t.ci_low, t.ci_high, why),
                    "p": fmt_p(t.p, why=why),
                    training_sd_column(adapters): f"{fmt(t.training_sd)} ({t.n_adapters})" if t.ok else DASH,
                    ESTIMAND_COL: estimand(adapters) if t.ok else DASH}
            label = _resampled_label(t, "", test_groupings, adapters) if t.ok and math.isfinite(t.p) else ""
        else:
            test = {"interaction test": f"{r.method} (no resampled fit of these points)",
                    "interaction [95% CI]": est_ci(r.estimate, r.ci_low, r.ci_high, r.no_interval),
                    "p": fmt_p(r.p, why=r.no_interval), training_sd_column(adapters): DASH,
                    ESTIMAND_COL: estimand(adapters)}
            label = _interaction_label(r, groupings, adapters)
        rows.append({
            **_finetune_row_head(r),
            **test,
            "plain fit: slope, control fine-tunes [95% CI]": est_ci(
                r.slope_control, r.slope_control_ci_low, r.slope_control_ci_high, r.no_interval),
            "plain fit: slope, recognition fine-tunes [95% CI]": est_ci(
                r.slope_recognition, r.slope_recognition_ci_low, r.slope_recognition_ci_high, r.no_interval),
            "note": r.note,
            CALIBRATION_COL: label,
        })
    return drop_empty_calibration(pd.DataFrame(rows))


def _interaction_label(r: Any, groupings: set[str], adapters: int) -> str:
    """The interaction test's calibration label ("" for a row without a test)."""
    if not (r.ok and math.isfinite(r.p)):
        return ""
    return calibration_label("interaction", r.level, r.method, pooled_over_datasets(r.group_by, groupings),
                             adapters=adapters)


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


def specificity_table(results: Sequence[SpecificityResult], adapters: int = 1) -> pd.DataFrame:
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
                                               pooled_over_datasets(r.group_by, groupings), adapters=adapters)
            if r.ok else "",
        })
    return drop_empty_calibration(pd.DataFrame(rows))


COMMON_LINE_WORDS = ("one common line", "no common line")


def specificity_frame(results: Sequence[SpecificityResult]) -> pd.DataFrame:
    return pd.DataFrame([r.to_dict() for r in results])


def trend_table(trends: Sequence[TrendResult]) -> pd.DataFrame:
    """The recognition arms' Δ on log10 N: change per tenfold N, 95% CI and p."""
    cols = ["setting", "label", "dataset", "transfer", "evaluator", "scale", "Δ of", "arms (N)",
            "slope per tenfold N [95% CI]", "p", "note"]
    return pd.DataFrame([dict(zip(cols, [
        t.setting, t.label, t.dataset, t.transfer, t.evaluator, SCALE_NAMES.get(t.scale, t.scale), t.question,
        t.arms or DASH, est_ci(t.slope, t.ci_low, t.ci_high), fmt_p(t.p), t.note], strict=True)) for t in trends],
        columns=cols)


def trends_frame(trends: Sequence[TrendResult]) -> pd.DataFrame:
    return pd.DataFrame([t.to_dict() for t in trends])


_TREND_READINGS = {
    paper_trend.RISES: "preference rises with recognition across the fine-tunes (corrected CI above 0)",
    paper_trend.FALLS: "preference falls as recognition rises (corrected CI below 0)",
    paper_trend.NOT_SHOWN: "not shown to rise or fall (corrected CI includes 0)",
    paper_trend.NO_INTERVAL: "no corrected interval: cannot say",
}


def paper_trend_table(trends: pd.DataFrame) -> pd.DataFrame:
    """The paper's fine-tune trend per base evaluator (paper_trend.py): the paper's statistic and, for all the
    recognition fine-tunes together, the corrected slope, whose interval carries the reading; the fit's note
    (e.g. the degenerate fine-tunes its line leaves out)."""
    cols = ["setting", "label", "base evaluator", "fine-tunes evaluated", "n points", "slope (paper's OLS) [95% CI]",
            "r [95% CI]", "corrected slope [95% CI]", "p", "reading", "note"]
    rows = []
    for _, t in trends.iterrows():
        corrected = "" if t["transfer"] != "all" else (
            f"{fmt(t['corrected_slope'])} "
            f"{fmt_ci(t['corrected_ci_low'], t['corrected_ci_high'], why=t['corrected_note'])}")
        reading = ("(the paper's statistic only)" if t["transfer"] != "all"
                   else _TREND_READINGS[paper_trend.direction(t["corrected_ci_low"], t["corrected_ci_high"])])
        rows.append([t["setting"], t["label"], t["evaluator"],
                     {"all": "in-domain and transfer", "in_domain": "in-domain",
                      "cross_dataset": "transfer"}.get(t["transfer"], t["transfer"]), int(t["n_points"]),
                     f"{fmt(t['slope'])} {fmt_ci(t['slope_ci_low'], t['slope_ci_high'])}",
                     f"{fmt(t['r'])} {fmt_ci(t['r_ci_low'], t['r_ci_high'])}", corrected,
                     fmt(t["corrected_p"]) if t["transfer"] == "all" else "", reading, t["note"] or ""])
    return pd.DataFrame(rows, columns=cols)


def interaction_robustness_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """The interaction's robustness (finetune_tests.interaction_robustness): one row per base evaluator, scale and
    variant; None where no base evaluator has two or more control tasks."""
    if frame.empty:
        return None
    cols = ["setting / label", "evaluator", "scale", "variant", "points (recognition, control)",
            "interaction [95% CI]", "p", "control slope [95% CI]", "note"]
    rows = [[f"{r['setting']} / {r['label']}", r["evaluator"], SCALE_NAMES.get(r["scale"], r["scale"]), r["variant"],
             f"{fmt_int(r['n'])} ({fmt_int(r['n_recognition'])}, {fmt_int(r['n_control'])})",
             est_ci(r["estimate"], r["ci_low"], r["ci_high"]), fmt_p(r["p"]),
             est_ci(r["slope_control"], r["slope_control_ci_low"], r["slope_control_ci_high"]), r["note"] or ""]
            for _, r in frame.iterrows()]
    return pd.DataFrame(rows, columns=cols)
