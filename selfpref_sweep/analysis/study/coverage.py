"""Scoring the analysis' intervals and tests against known truths: the simulator's coverage mode.

``python -m selfpref_sweep.analysis.study.simulate --coverage`` (coverage_mode.py) draws many sweeps from a design
whose every quantity has a known true value, runs the analysis on each in memory (``analyse``: the calls
job/pipeline.run_analysis makes, with the same arguments), and counts, per printed interval, how often it covers
the truth and, per test, how often it rejects a true null. This module knows nothing of how the sweeps are
drawn: it takes the analysis of one sweep and a ``Truth`` (the true paper units, cells and Δs), and
aggregates the per-rep counts into a table with Monte Carlo standard errors, each row marked against the
target (95% intervals cover 93–97%, 5% tests reject 3–7%).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...records.schema import QUESTION_PREFIX
from ...reporting.grouping import GROUPINGS, LEVEL_SOURCE, LEVEL_UNIT, SCALES, condition_groups
from ...stats.article_means import article_mean
from ...stats.classifier_metrics import hit, proportion
from ..estimate.estimates import Estimates, estimate
from ..estimate.finetune_tests import RECOGNITION_TASKS, fit_interactions, fit_specificities
from ..estimate.fit import MIXED_BY_VARIANT, OLS_BY_VARIANT, FitResult, fit_formula, fit_paper_units
from ..estimate.paired import holm
from ..estimate.per_source import article_test
from ..estimate.resample import METHODS, RESAMPLE_CORRECTED, true_resampled
from ..sweep.load import arm_name

ALPHA = 0.05
# A one-sided size: how often one direction's word fires under its null, against 2.5% (the same ±40% band).
TARGETS = {"coverage": (0.93, 0.97), "size": (0.03, 0.07), "one-sided size": (0.015, 0.035)}
HOLDS, FAILS, UNDECIDED = "holds", "does not hold", "undecided"
_Z = 1.96  # the Monte Carlo interval: estimate ± 1.96 MC SE
_NULL = 1e-12  # a true Δ this small is 0 (the design plants exact zeros)
_ALL = GROUPINGS[0][0]  # "setting × label": every dataset of the condition
_QUESTIONS = {prefix: q for q, prefix in QUESTION_PREFIX.items()}  # "rec" -> "recognition"


@dataclass(frozen=True)
class Row:
    key: str
    kind: str  # "coverage" (of a 95% interval), "size" (rejection rate of a 5% test under its null) or
    # "one-sided size" (one direction's rejections: 2.5% each)
    label: str


def _rows() -> list[Row]:
    """Every row of the table, in its order."""
    rows = []
    for scale in SCALES:
        for q, name in _QUESTIONS.items():
            rows.append(Row(f"unit|{q}|{scale}", "coverage", f"paper-unit mean, {name}, {scale}"))
    for scale in SCALES:
        for q, name in _QUESTIONS.items():
            rows.append(Row(f"dnull|{q}|{scale}", "coverage", f"Δ {name} CI, arms with true Δ = 0, {scale}"))
            rows.append(Row(f"dalt|{q}|{scale}", "coverage", f"Δ {name} CI, arms with true Δ ≠ 0, {scale}"))
        rows.append(Row(f"dp|{scale}", "size", f"Δ p < 0.05 (raw), arms with true Δ = 0, {scale}"))
        rows.append(Row(f"holm|{scale}", "size", f"Holm family-wise error over the null arms, {scale}"))
    for scale in SCALES:  # arms.py: an arm's adapters pooled, training randomness in the interval
        for q, name in _QUESTIONS.items():
            rows.append(Row(f"arm|dnull|{q}|{scale}", "coverage", f"arm Δ {name} CI (adapters pooled), true Δ = 0, "
                                                                  f"{scale}"))
            rows.append(Row(f"arm|dalt|{q}|{scale}", "coverage", f"arm Δ {name} CI (adapters pooled), true Δ ≠ 0, "
                                                                 f"{scale}"))
        rows.append(Row(f"arm|dp|{scale}", "size", f"arm Δ p < 0.05 (raw, adapters pooled), true Δ = 0, {scale}"))
    for scale in SCALES:
        for key, name in (("slope", "headline slope"), ("intercept", "headline intercept")):
            rows.append(Row(f"{key}|all|{scale}", "coverage", f"{name} CI (all datasets), {scale}"))
            rows.append(Row(f"{key}|dataset|{scale}", "coverage", f"{name} CI (per dataset), {scale}"))
        rows.append(Row(f"src|all|{scale}", "coverage", f"source-level clustered slope CI (all datasets), {scale}"))
        rows.append(Row(f"src|dataset|{scale}", "coverage", f"source-level clustered slope CI (per dataset), {scale}"))
        rows.append(Row(f"mixed|all|{scale}", "coverage", f"source-level MixedLM slope CI (all datasets), {scale}"))
    for test in ("specificity", "interaction"):
        for level in (LEVEL_UNIT, LEVEL_SOURCE):
            for scale in SCALES:
                for grp, gname in _TEST_GROUPINGS:
                    rows.append(Row(f"{test}|{level}|{grp}|{scale}", "size",
                                    f"{test} test, {level}, {gname}, {scale}"))
    for scale in SCALES:
        for q, name in _QUESTIONS.items():
            rows.append(Row(f"trend|{q}|{scale}", "coverage", f"dose trend of Δ {name} CI, {scale}"))
    return rows + _cell_rows() + _resampled_rows()


# The fine-tune tests' groupings: pooled over datasets, both transfer conditions together (the rows calibration.py
# reads), and each alone, so that a pooled row can be set beside the in-domain and cross-dataset ones.
_TEST_GROUPINGS = (("all", "all"), ("transfer", "per transfer"), ("in", "in-domain"), ("cross", "cross-dataset"))
_SPLIT = {"in_domain": "in", "cross_dataset": "cross"}


# The per-cell rows: what summary.json and the per-source table print for one evaluator against one source.
_ORDERS = {"all": "over both orders", "forward": "own shown first", "backward": "own shown second"}


def _cell_rows() -> list[Row]:
    rows = [Row(f"cell|{q}|{scale}", "coverage", f"cell mean CI (one source, as summary.json), {name}, {scale}")
            for scale in SCALES for q, name in _QUESTIONS.items()]
    rows += [Row("srcp|logodds", "size", "per-source t test of recognition (raw), true cell log-odds as the null"),
             Row("srcholm|logodds", "size", "per-source Holm family-wise error across a group's sources, recognition")]
    rows += [Row(f"acc|{order}", "coverage", f"recognition accuracy Wilson CI (classifier), {name}")
             for order, name in _ORDERS.items()]
    return rows


# The joint article resample's rows (resample.py), both methods: "rs" corrected, "rsols" uncorrected.
_RS_TAGS = {RESAMPLE_CORRECTED: ("rs", "corrected fit"), METHODS[0]: ("rsols", "resample OLS")}
_RS_TEST_GROUPINGS = (("all", "all, dataset term"), *_TEST_GROUPINGS[1:])  # pooled fits carry a dataset term


def _resampled_rows() -> list[Row]:
    rows = []
    for method in (RESAMPLE_CORRECTED, METHODS[0]):
        tag, name = _RS_TAGS[method]
        for scale in SCALES:
            for what, level in (("slope", LEVEL_UNIT), ("intercept", LEVEL_UNIT), ("slope", LEVEL_SOURCE)):
                for grp, gname in (("all", "all datasets, dataset term"), ("dataset", "per dataset")):
                    rows.append(Row(f"{tag}|{what}|{level}|{grp}|{scale}", "coverage",
                                    f"{name}: {level} {what} CI ({gname}), {scale}"))
            for what in ("shift", "interaction"):
                for level in (LEVEL_UNIT, LEVEL_SOURCE):
                    for grp, gname in _RS_TEST_GROUPINGS:
                        rows.append(Row(f"{tag}|{what}|{level}|{grp}|{scale}", "size",
                                        f"{name}: {what} test, {level}, {gname}, {scale}"))
    # The report's two specificity words, each alone: "positive shift" (the corrected shift's interval above the
    # truth) and "negative shift" (below it), each promised at 2.5%.
    for scale in SCALES:
        for sign, word in _DIRECTIONS.items():
            for level in (LEVEL_UNIT, LEVEL_SOURCE):
                for grp, gname in _RS_TEST_GROUPINGS:
                    rows.append(Row(f"rs{sign}|shift|{level}|{grp}|{scale}", "one-sided size",
                                    f"corrected fit: \"{word}\" under a true shift, {level}, {gname}, {scale}"))
    return rows


_DIRECTIONS = {"+": "positive shift", "-": "negative shift"}
_KIND_NAMES = {"coverage": "coverage of 95% CI", "size": "size of 5% test",
               "one-sided size": "one side of a 5% test (2.5%)"}


ROWS = _rows()


@dataclass
class Truth:
    """The true values of one design: paper units (``{q}_{scale}_mean``), cells (``{q}_{scale}``, with source)
    and fine-tuned-vs-base Δs (``d{q}_{scale}_mean``), keyed as the analysis keys them."""

    units: pd.DataFrame
    points: pd.DataFrame
    diffs: pd.DataFrame


Analysed = Estimates  # what one simulated sweep's analysis gives


def analyse(items: pd.DataFrame) -> Analysed:
    """The report's estimates (analysis.estimates.estimate, as pipeline.run_analysis calls it) on an items frame,
    with no files written; the cells only set judge_competence, which nothing here reads."""
    return estimate(items)


# --- one rep's counts: row key -> [hits, trials, no interval] -------------------------------------------

Counts = dict[str, list[int]]


def add_trial(counts: Counts, key: str, hit: bool | None) -> None:
    """One trial of a row; hit None: the analysis gave no interval (counted as a miss, and as such)."""
    c = counts.setdefault(key, [0, 0, 0])
    c[0] += int(bool(hit))
    c[1] += 1
    c[2] += int(hit is None)


def covers(low: float, high: float, truth: float) -> bool | None:
    """Whether [low, high] holds ``truth``; None without an interval."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    return bool(low <= truth <= high)


def _keyed(frame: pd.DataFrame, truth: pd.DataFrame, on: Iterable[str]) -> pd.DataFrame:
    on = list(on)
    return frame.assign(**{k: frame[k].astype(str) for k in on}).merge(
        truth.assign(**{k: truth[k].astype(str) for k in on}), on=on, suffixes=("", "_true"))


def unit_counts(res: Analysed, truth: Truth, counts: Counts) -> None:
    both = _keyed(res.units, truth.units, ["dataset", "evaluator_variant"])
    for scale in SCALES:
        for q in _QUESTIONS:
            name = f"{q}_{scale}"
            for r in both.itertuples():
                hit = covers(getattr(r, f"{name}_ci_low"), getattr(r, f"{name}_ci_high"),
                             getattr(r, f"{name}_mean_true"))
                add_trial(counts, f"unit|{q}|{scale}", hit)


def diff_counts(res: Analysed, truth: Truth, counts: Counts) -> None:
    """Δ CIs against the true Δ; the raw p-values' and Holm's rejections among the arms whose true Δ is 0."""
    both = _keyed(res.diffs, truth.diffs, ["dataset", "evaluator_variant"])
    for scale in SCALES:
        for q in _QUESTIONS:
            name = f"d{q}_{scale}"
            true = both[f"{name}_mean_true"].to_numpy(float)
            null = np.abs(true) < _NULL
            for k, r in enumerate(both.itertuples()):
                hit = covers(getattr(r, f"{name}_ci_low"), getattr(r, f"{name}_ci_high"), true[k])
                add_trial(counts, f"{'dnull' if null[k] else 'dalt'}|{q}|{scale}", hit)
            p, holm = both[f"{name}_p"].to_numpy(float), both[f"{name}_p_holm"].to_numpy(float)
            for k in np.flatnonzero(null):
                add_trial(counts, f"dp|{scale}", p[k] < ALPHA if math.isfinite(p[k]) else None)
            # A family is one dataset (one base evaluator, setting and label), one question, one scale.
            for _, idx in both.groupby("dataset").groups.items():
                at = both.index.get_indexer(idx)
                if null[at].any():
                    add_trial(counts, f"holm|{scale}", bool(np.any(holm[at][null[at]] < ALPHA)))


def arm_counts(res: Analysed, truth: Truth, counts: Counts) -> None:
    """The pooled arms' Δ CIs (arms.py) against the arm's true Δ (every adapter of an arm has the arm's)."""
    if res.arms.empty:
        return
    true = truth.diffs.assign(arm=[arm_name(v) for v in truth.diffs["evaluator_variant"].astype(str)])
    both = _keyed(res.arms, true.drop_duplicates(["dataset", "arm"]), ["dataset", "arm"])
    for scale in SCALES:
        for q in _QUESTIONS:
            name = f"d{q}_{scale}"
            for r in both.itertuples():
                t = getattr(r, f"{name}_mean_true")
                null = abs(t) < _NULL
                add_trial(counts, f"arm|{'dnull' if null else 'dalt'}|{q}|{scale}",
                     covers(getattr(r, f"{name}_ci_low"), getattr(r, f"{name}_ci_high"), t))
                if null:
                    p = getattr(r, f"{name}_p")
                    add_trial(counts, f"arm|dp|{scale}", p < ALPHA if math.isfinite(p) else None)


def _by_group(fits: Iterable[Any]) -> dict[tuple, Any]:
    return {(getattr(f, "level", ""), f.group_by, f.group, f.scale): f for f in fits}


def _grouping(group_by: str) -> str:
    return "all" if group_by == _ALL else ("transfer" if group_by.endswith("transfer") else "dataset")


def _test_keys(prefix: str, level: str, group_by: str, group: str, scale: str) -> list[str]:
    """A fine-tune test's row keys: its grouping's, and for a transfer group also its own condition's."""
    g = _grouping(group_by)
    keys = [f"{prefix}|{level}|{g}|{scale}"]
    split = _SPLIT.get(str(group).rsplit("/", 1)[-1].strip()) if g == "transfer" else None
    return keys + ([f"{prefix}|{level}|{split}|{scale}"] if split else [])


def fit_counts(res: Analysed, true_fits: Mapping[str, dict], counts: Counts) -> None:
    """The headline slope and intercept, the source-level clustered and mixed slopes, against the slopes of
    the true points."""
    headline = _by_group(true_fits["headline"])
    for f in res.unit_fits:
        t = headline.get((f.level, f.group_by, f.group, f.scale))
        if t is None:
            continue
        g = _grouping(f.group_by)
        add_trial(counts, f"slope|{g}|{f.scale}", covers(f.slope_ci_low, f.slope_ci_high, t.slope))
        add_trial(counts, f"intercept|{g}|{f.scale}", covers(f.intercept_ci_low, f.intercept_ci_high, t.intercept))
    source = _by_group(true_fits["source"])
    for f in res.robustness_fits:
        t = source.get((f.level, f.group_by, f.group, f.scale))
        if t is None or f.method not in (OLS_BY_VARIANT, MIXED_BY_VARIANT):
            continue
        g = _grouping(f.group_by)
        if f.method == OLS_BY_VARIANT:
            add_trial(counts, f"src|{g}|{f.scale}", covers(f.slope_ci_low, f.slope_ci_high, t.slope))
        elif g == "all":
            add_trial(counts, f"mixed|all|{f.scale}", covers(f.slope_ci_low, f.slope_ci_high, t.slope))


def test_counts(res: Analysed, true_fits: Mapping[str, dict], counts: Counts) -> None:
    """Specificity and interaction: rejections of "the parameter is its true value" (0 where every fine-tune
    lies on one line, where the CI excluding it is the printed p < 0.05)."""
    for test, results, attr in (("specificity", res.specificity, "shift"),
                                ("interaction", res.interactions, "estimate")):
        truths = _by_group(true_fits[test])
        for r in results:
            t = truths.get((r.level, r.group_by, r.group, r.scale))
            if t is None or not math.isfinite(getattr(t, attr)):
                continue
            hit = covers(r.ci_low, r.ci_high, getattr(t, attr))
            for key in _test_keys(test, r.level, r.group_by, r.group, r.scale):
                add_trial(counts, key, None if hit is None else not hit)


def trend_counts(res: Analysed, truth: Truth, counts: Counts) -> None:
    true = true_trends(truth)
    for t in res.trends:
        q = "rec" if t.question == "recognition" else "pref"
        value = true.get((str(t.dataset), t.scale, q), math.nan)
        if math.isfinite(value):
            add_trial(counts, f"trend|{q}|{t.scale}", covers(t.ci_low, t.ci_high, value))


def resampled_counts(res: Analysed, true_fits: Mapping[str, Any], counts: Counts) -> None:
    """The joint article resample's rows against the same fits on the true points: slope and intercept CIs
    cover, shift and interaction tests reject (a row without an interval counts as a miss, and as such)."""
    truths = {(f.what, f.level, f.group_by, f.group, f.scale): f.estimate for f in true_fits.get("resampled", [])}
    for f in res.resampled:
        t = truths.get((f.what, f.level, f.group_by, f.group, f.scale), math.nan)
        if f.method not in _RS_TAGS or not f.ok or not math.isfinite(t):
            continue
        hit = covers(f.ci_low, f.ci_high, t)
        prefix = f"{_RS_TAGS[f.method][0]}|{f.what}"
        if f.what in ("shift", "interaction"):
            for key in _test_keys(prefix, f.level, f.group_by, f.group, f.scale):
                add_trial(counts, key, None if hit is None else not hit)
            if f.what == "shift" and f.method == RESAMPLE_CORRECTED:
                for sign, fired in (("+", f.ci_low > t), ("-", f.ci_high < t)):
                    for key in _test_keys(f"rs{sign}|shift", f.level, f.group_by, f.group, f.scale):
                        add_trial(counts, key, None if hit is None else bool(fired))
        else:
            add_trial(counts, f"{prefix}|{f.level}|{_grouping(f.group_by)}|{f.scale}", hit)


def cell_counts(items: pd.DataFrame, truth: Truth, counts: Counts, confidence: float = 1 - ALPHA) -> None:
    """Per cell (one evaluator variant against one source): the cell's mean CI on each scale as summary.json
    computes it (article_means.article_mean over the cell's articles) against the true cell value; the per-source
    table's t test (per_source.article_test) of "the cell's log-odds mean is its true value", raw and Holm-adjusted
    across the sources of one variant and dataset (its family); and the recognition classifier's Wilson
    accuracy (recognition_classifier: P(own) > 1/2 per order, each item's two orders averaged) against its
    truth (coverage_truth)."""
    keys = ["dataset", "evaluator_variant", "source"]
    true = {tuple(str(r[k]) for k in keys): r for r in truth.points.to_dict("records")}
    families: dict[tuple, list[float]] = {}
    for (dataset, variant, source), sub in items.groupby(keys, sort=False):
        t = true.get((str(dataset), str(variant), str(source)))
        if t is None:
            continue
        for q in _QUESTIONS:
            kept = sub[~sub[f"{q}_excluded"].astype(bool)]
            articles = kept["article_id"].astype(str).tolist()
            for scale, column in (("paper", "score"), ("logodds", "logodds")):
                ci = article_mean(kept[f"{q}_{column}"].to_numpy(float), articles, confidence,
                                  bounded=scale == "paper")
                hit_ = None if ci["ci_low"] is None else covers(ci["ci_low"], ci["ci_high"], t[f"{q}_{scale}"])
                add_trial(counts, f"cell|{q}|{scale}", hit_)
            if q == "rec":
                _accuracy_counts(kept, t, counts, confidence)
                per_article = kept["rec_logodds"].groupby(kept["article_id"]).mean()
                p = article_test(per_article.to_numpy(float), float(t["rec_logodds"]))["p"]
                add_trial(counts, "srcp|logodds", p < ALPHA if math.isfinite(p) else None)
                families.setdefault((dataset, variant), []).append(p)
    for ps in families.values():
        ps = [p for p in ps if math.isfinite(p)]
        if len(ps) >= 2:
            add_trial(counts, "srcholm|logodds", bool(np.any(holm(np.asarray(ps)) < ALPHA)))


def _accuracy_counts(kept: pd.DataFrame, t: Mapping[str, Any], counts: Counts, confidence: float) -> None:
    forward = [hit(p, 0.5) for p in kept["rec_p_forward"].to_numpy(float)]
    backward = [hit(p, 0.5) for p in kept["rec_p_backward"].to_numpy(float)]
    hits = {"all": [0.5 * (f + b) for f, b in zip(forward, backward, strict=True)], "forward": forward,
            "backward": backward}
    for order in _ORDERS if "rec_acc_forward" in t and math.isfinite(t["rec_acc_forward"]) else ("all",):
        ci = proportion(hits[order], confidence)
        truth_key = "rec_acc" if order == "all" else f"rec_acc_{order}"
        add_trial(counts, f"acc|{order}", None if ci["ci_low"] is None else covers(ci["ci_low"], ci["ci_high"],
                                                                              t[truth_key]))


def rep_counts(res: Analysed, truth: Truth, true_fits: Mapping[str, Any],
               items: pd.DataFrame | None = None, adapters: Truth | None = None) -> Counts:
    """Every row's [hits, trials, no interval] in one simulated sweep (the per-cell rows need its ``items``).
    ``adapters``: each adapter's own truth, for the rows that describe one adapter (cells, units, Δs); default
    ``truth``, the arms' population values, which the arms' pooled rows and the fits aim at."""
    counts: Counts = {}
    own = truth if adapters is None else adapters
    if items is not None:
        cell_counts(items, own, counts)
    unit_counts(res, own, counts)
    diff_counts(res, own, counts)
    arm_counts(res, truth, counts)
    fit_counts(res, true_fits, counts)
    test_counts(res, true_fits, counts)
    trend_counts(res, truth, counts)
    resampled_counts(res, true_fits, counts)
    return counts


# --- the true fits -------------------------------------------------------------------------------------


def true_fits(truth: Truth) -> dict[str, list]:
    """The analysis' own fits on the true points: the values its estimates aim at (a perfect fit gives the
    estimate and no interval)."""
    source: list[FitResult] = []
    for name, group, sub in condition_groups(truth.points):
        for scale in SCALES:
            pts = pd.DataFrame({"recognition": sub[f"rec_{scale}"].to_numpy(float),
                                "preference": sub[f"pref_{scale}"].to_numpy(float)})
            source.append(fit_formula(pts, level=LEVEL_SOURCE, group_by=name, group=group, scale=scale))
    interactions = fit_interactions(truth.units, truth.points, RECOGNITION_TASKS)
    return {"headline": fit_paper_units(truth.units), "source": source,
            "specificity": fit_specificities(truth.units, truth.points, RECOGNITION_TASKS, None, interactions),
            "interaction": interactions,
            "resampled": true_resampled(truth.units, truth.points, RECOGNITION_TASKS)}


def true_trends(truth: Truth) -> dict[tuple[str, str, str], float]:
    """(dataset, scale, q) -> the OLS slope of the recognition arms' true Δ on log10 N (as paired.dose_trend)."""
    arms = truth.diffs[truth.diffs["finetune_task"].isin(RECOGNITION_TASKS)]
    out = {}
    for dataset, sub in arms.groupby("dataset"):
        x = np.log10(sub["finetune_n_articles"].to_numpy(float))
        if np.unique(x).size < 2:
            continue
        for scale in SCALES:
            for q in _QUESTIONS:
                out[(str(dataset), scale, q)] = float(np.polyfit(x, sub[f"d{q}_{scale}_mean"].to_numpy(float), 1)[0])
    return out


# --- the table -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One row at one article count: the rate, its Monte Carlo SE, and the verdict against the target."""

    rate: float
    se: float
    trials: int
    no_interval: int
    verdict: str
    # The rate among the trials with an interval: a refusal counts as a miss in ``rate`` (a test that gives no
    # interval rejects nothing), and an outside scorer that drops refusals reads this one.
    given_interval: float = math.nan

    def text(self) -> str:
        if not math.isfinite(self.rate):
            return "—"
        extra = ""
        if self.no_interval:
            given = f", {100 * self.given_interval:.1f}% of those with one" if math.isfinite(self.given_interval) \
                else ""
            extra = f"; no interval in {self.no_interval}{given}"
        return f"{100 * self.rate:.1f}% ± {100 * self.se:.1f} ({self.verdict}{extra})"


def verdict(rate: float, se: float, kind: str, reps: int) -> str:
    """Against the target: holds when the rate itself lies inside it; does not hold when its whole MC interval
    (rate ± 1.96 SE) lies outside; otherwise undecided (the rate outside, its interval reaching in), and an
    undecided row needs more reps (coverage mode's --until-decided), never a pass. Where every rep agreed (rate
    0 or 1, SE 0) the interval is the rule of three's, [0, 3/reps] or [1 − 3/reps, 1]."""
    lo, hi = TARGETS[kind]
    if lo <= rate <= hi:
        return HOLDS
    mc_lo, mc_hi = rate - _Z * se, rate + _Z * se
    if se == 0 and rate in (0.0, 1.0):
        mc_lo, mc_hi = (0.0, 3 / reps) if rate == 0 else (1 - 3 / reps, 1.0)
    if mc_hi < lo or mc_lo > hi:
        return FAILS
    return UNDECIDED


def aggregate(reps: Iterable[Counts], kind: str) -> Cell:
    """Pooled rate Σhits / Σtrials over reps, with the rep-clustered (ratio-estimator) MC SE: the trials of
    one rep share its articles, so they are not independent."""
    reps = list(reps)
    h = np.array([c[0] for c in reps], dtype=float)
    t = np.array([c[1] for c in reps], dtype=float)
    missing = int(sum(c[2] for c in reps))
    if t.sum() == 0:
        return Cell(math.nan, math.nan, 0, 0, "")
    rate = float(h.sum() / t.sum())
    n = len(t)
    se = float(math.sqrt(np.sum((h - rate * t) ** 2) * n / max(n - 1, 1)) / t.sum()) if n > 1 else math.nan
    given = float(h.sum() / (t.sum() - missing)) if t.sum() > missing else math.nan
    return Cell(rate, se, int(t.sum()), missing, verdict(rate, se, kind, n) if math.isfinite(se) else UNDECIDED,
                given)


def coverage_table(records: Iterable[Mapping[str, Any]]) -> dict[str, pd.DataFrame]:
    """Per setting: one row per ROWS entry, one column per article count ("10 articles": Cell), from the per-rep
    records (setting, n_articles, rep, counts)."""
    by: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in records:
        by.setdefault((r["setting"], int(r["n_articles"])), []).append(r)
    out = {}
    for setting in dict.fromkeys(s for s, _ in by):
        ns = sorted(n for s, n in by if s == setting)
        rows = []
        for row in ROWS:
            line: dict[str, Any] = {"row": row.label, "kind": row.kind}
            for n in ns:
                reps = [r["counts"][row.key] for r in by[(setting, n)] if row.key in r["counts"]]
                line[f"{n} articles"] = aggregate(reps, row.kind) if reps else None
                line[f"reps at {n}"] = len(by[(setting, n)])
            if any(line[f"{n} articles"] is not None for n in ns):
                rows.append(line)
        out[setting] = pd.DataFrame(rows)
    return out


def undecided(tables: Mapping[str, pd.DataFrame]) -> list[tuple[str, int]]:
    """The (setting, article count) pairs with an undecided row: where more reps are needed."""
    out = []
    for setting, df in tables.items():
        for col in [c for c in df.columns if c.endswith(" articles")]:
            if any(isinstance(cell, Cell) and cell.verdict == UNDECIDED for cell in df[col]):
                out.append((setting, int(col.split()[0])))
    return out


def table_records(tables: Mapping[str, pd.DataFrame], command: str = "") -> dict[str, Any]:
    """The tables as data (calibration.py reads them to label the report's rows): per setting, row and article
    count its key, label, kind, rate, Monte Carlo SE, verdict, trials and reps."""
    rows = []
    by_label = {r.label: r for r in ROWS}
    for setting, df in tables.items():
        for _, line in df.iterrows():
            row = by_label[line["row"]]
            for col in [c for c in df.columns if c.endswith(" articles")]:
                cell = line[col]
                if isinstance(cell, Cell) and math.isfinite(cell.rate):
                    rows.append({"setting": setting, "n_articles": int(col.split()[0]), "key": row.key,
                                 "label": row.label, "kind": row.kind, "rate": cell.rate,
                                 "se": cell.se if math.isfinite(cell.se) else None, "verdict": cell.verdict,
                                 "trials": cell.trials, "no_interval": cell.no_interval,
                                 "rate_given_interval": cell.given_interval if cell.no_interval
                                 and math.isfinite(cell.given_interval) else None,
                                 "reps": int(line[f"reps at {col.split()[0]}"])})
    return {"command": command, "targets": {k: list(v) for k, v in TARGETS.items()}, "rows": rows}


def markdown(tables: Mapping[str, pd.DataFrame], header: str) -> str:
    """The tables as Markdown, one per setting."""
    lines = [header, ""]
    for setting, df in tables.items():
        ns = [c for c in df.columns if c.endswith(" articles")]
        reps = ", ".join(f"{df[f'reps at {c.split()[0]}'].iloc[0]} reps at {c}" for c in ns)
        lines += [f"### Setting: {setting} ({reps})", "",
                  "| quantity | kind | " + " | ".join(ns) + " |", "|---|---|" + "---|" * len(ns)]
        for _, r in df.iterrows():
            cells = [r[c].text() if isinstance(r[c], Cell) else "—" for c in ns]
            kind = _KIND_NAMES[r["kind"]]
            lines.append(f"| {r['row']} | {kind} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
