"""Fine-tuned evaluators against their own base model, on the same items.

The paper compares a fine-tuned model's recognition and preference with its base model's. When both judged
the same (article, source) items, the difference can be taken item by item: what the fine-tune changed,
with the articles' own difficulty and the source's summaries held fixed. That is a much tighter comparison
than two unit means with their separate CIs, and it is what a dose-response (recognition at several N,
controls at one) needs.

Per fine-tuned paper unit (evaluator variant × dataset × setting × label) the base unit is the same evaluator,
not fine-tuned, on the same dataset, setting and label. Only items kept in both questions by both models
enter; per source the mean of the item differences, then the mean over sources (as the paper unit averages
sources); the 95% CI is the paper units' t interval over articles (units.unit_t: each article's contribution
to the Δ, mean ± t(articles − 1)·SE), which holds 95% at 10 articles where the percentile bootstrap gave
about 90% (bench/coverage_means.py). A fine-tune evaluated
in-domain starts after its training articles, so it shares items with the base model only when the
evaluation articles were placed past every fine-tune's training articles (`dataset.offset`); without shared
items the row says so instead of comparing different articles.

Each Δ's p-value is the same t test's (the CI excludes 0 exactly when p < 0.05), with Holm's adjustment
across the arms of a family (``with_holm``: many arms read one by one would otherwise find "changes" by
chance). ``dose_trend``, the recognition arms' Δ on log10 N, is a linear combination of the arms' Δs, so it
gets the same t interval on the articles' contributions. Δpref/Δrec per arm, where Δ recognition is
distinguishable from 0, is not linear: it keeps a percentile CI from article-bootstrap draws
(``_article_draws``), the only user of ``n_resamples`` and ``seed`` here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.grouping import SCALES, UNIT_KEYS, incomplete_note, kept_items, key_frame
from ...stats.replicates import replicate_contrast
from ..sweep.load import arm_name
from .units import QUESTION_PREFIXES, _unit_stat, complete_mean, unit_t

_JOIN = ("source", "article_id")
_GROUP = ("setting", "label", "dataset")
_CARRIED = ("evaluator", "finetune_task", "finetune_dataset", "finetune_n_articles", "own_summaries",
            "finetune_fingerprint", "transfer")
COLUMNS = [*UNIT_KEYS, *_CARRIED, "base_variant", "sources", "n_articles", "n_items", "note", "incomplete",
           "incomplete_fields"] + [
    f"d{q}_{s}_{k}" for s in SCALES for q in QUESTION_PREFIXES for k in ("mean", "ci_low", "ci_high")] + [
    f"d{q}_{s}_{k}" for s in SCALES for q in QUESTION_PREFIXES for k in ("p", "p_holm")] + [
    f"ratio_{s}{k}" for s in SCALES for k in ("", "_ci_low", "_ci_high", "_note")]
# Holm's family: the arms of one base evaluator on one dataset, setting and label (so one transfer condition
# per fine-tune dataset), one question and one scale: "did any of these fine-tunes move recognition?".
HOLM_FAMILY = (*_GROUP, "transfer", "evaluator")
_BATCH = 250  # resamples per batch of _article_draws: bounds the memory (sources × batch × articles)
NO_RATIO = "no ratio: Δ recognition's CI includes 0"
ONE_ADAPTER = "one adapter per arm: the CI covers the articles, not training randomness"
NO_RATIO_NO_CI = "no ratio: Δ recognition has no CI"


def _lacking(both: pd.DataFrame, col: str) -> list[str]:
    """The paired sources without any item that both models scored on this scale, and which model lacks the
    values; [] when every source has some, or none has (a scale the sweep never recorded)."""
    cols = {side: [f"{q}_{col}{sfx}" for q in QUESTION_PREFIXES] for side, sfx in (("fine-tuned", ""),
                                                                                  ("base model", "_base"))}
    has = {side: both[c].notna().all(axis=1) for side, c in cols.items()}
    paired = has["fine-tuned"] & has["base model"]
    present = set(both.loc[paired, "source"])
    if not present:
        return []
    out = []
    for source in sorted(set(both["source"]) - present):
        at = both["source"] == source
        sides = [side for side in cols if not has[side][at].any()]
        out.append(f"source={source} ({' and '.join(sides) or 'no item scored by both'})")
    return out


def _pairs(items: pd.DataFrame) -> Iterator[tuple[dict[str, Any], dict[tuple[str, str], pd.DataFrame] | None]]:
    """Per fine-tuned paper unit: its row (coordinates, sources, counts, note) and the item differences,
    fine-tuned minus base, per (question, scale) as frames of source, article_id, v, tuned and base (the two
    judges' values; None without a base)."""
    kept, _ = kept_items(items)
    kept = key_frame(kept, UNIT_KEYS)
    tuned = kept[kept["is_finetuned"].astype(bool)]
    base = kept[~kept["is_finetuned"].astype(bool)]
    # The base model's variant name is its evaluator's (no fine-tune, own summaries generated).
    base = base[base["evaluator_variant"] == base["evaluator"].astype(str)]
    values = [f"{q}_{col}" for col in SCALES.values() for q in QUESTION_PREFIXES]
    for key, sub in tuned.groupby(list(UNIT_KEYS), sort=True):
        first = sub.iloc[0]
        row: dict[str, Any] = {**dict(zip(UNIT_KEYS, key, strict=True)), **{k: first.get(k) for k in _CARRIED}}
        row["base_variant"] = str(first["evaluator"])
        ref = base[(base["evaluator"] == first["evaluator"])
                   & np.logical_and.reduce([base[k] == first[k] for k in _GROUP])]
        row["note"], row["incomplete"], row["incomplete_fields"] = "", "", ""
        if ref.empty:
            yield {**row, "sources": "", "n_articles": 0, "n_items": 0,
                   "note": f"no base-model cells of {first['evaluator']} on this dataset, setting and label"}, None
            continue
        # One base value per (source, article); duplicates (pooled sweeps) are averaged first, NaN unless all
        # carry the value.
        ref_means = complete_mean(ref, _JOIN, values)
        both = sub.join(ref_means, on=list(_JOIN), how="inner", rsuffix="_base")
        row["sources"] = ", ".join(sorted(both["source"].astype(str).unique()))
        row["n_articles"] = int(both["article_id"].nunique())
        row["n_items"] = int(len(both))
        if both.empty:
            row["note"] = ("no items in common with the base model (different evaluation articles: set "
                           "dataset.offset past every fine-tune's training articles to pair them)")
        frames, missing = {}, {}
        for scale, col in SCALES.items():
            missing[scale] = _lacking(both, col)
            for q in QUESTION_PREFIXES:
                tuned, base_value = both[f"{q}_{col}"].astype(float), both[f"{q}_{col}_base"].astype(float)
                # v: the difference; tuned, base: the two judges' own values (arms.py scales a stated training SD
                # to the paper scale with them).
                frame = pd.DataFrame({"source": both["source"], "article_id": both["article_id"],
                                      "v": tuned - base_value, "tuned": tuned, "base": base_value})
                # A scale that a paired source lacks gets no Δ: the mean over the other sources would be another
                # comparison (Δ 0.524 where all sources gave 0.240).
                frames[(q, scale)] = frame.iloc[:0] if missing[scale] else frame[np.isfinite(frame["v"])]
        row["incomplete"], row["incomplete_fields"] = incomplete_note(missing)
        yield row, frames


def _unit_mean(frame: pd.DataFrame) -> float:
    """The mean over sources of each source's mean difference (the paper unit's weighting)."""
    return float(frame.groupby("source")["v"].mean().mean()) if len(frame) else math.nan


def _arm_fields(frames: dict[tuple[str, str], pd.DataFrame], n_resamples: int, confidence: float,
                seed: int) -> dict[str, Any]:
    """Per scale: each question's mean difference with its t CI and the same test's p-value (units.unit_t),
    and Δpref/Δrec with its bootstrap CI."""
    out: dict[str, Any] = {}
    for scale in SCALES:
        pair = [frames[(q, scale)] for q in QUESTION_PREFIXES]
        for k, q in enumerate(QUESTION_PREFIXES):
            name = f"d{q}_{scale}"
            out[f"{name}_mean"] = _unit_mean(pair[k])
            out[f"{name}_ci_low"], out[f"{name}_ci_high"], out[f"{name}_p"] = unit_t(pair[k], "v", confidence)
        out.update(_ratio_fields(out, pair, scale, n_resamples, confidence, seed))
    return out


def _ratio_fields(arm: dict[str, Any], pair: list[pd.DataFrame], scale: str, n_resamples: int,
                  confidence: float, seed: int) -> dict[str, Any]:
    """Δpreference / Δrecognition with a percentile CI from article-bootstrap draws (both Δs on the same
    resampled articles); only where Δ recognition's CI excludes 0 (a ratio over a denominator that may be 0 is
    meaningless). A ratio is not a mean over articles, so it has no t interval; at 10 articles its percentile
    CI is likely narrow, as the means' was."""
    name = f"ratio_{scale}"
    out = {name: math.nan, f"{name}_ci_low": math.nan, f"{name}_ci_high": math.nan, f"{name}_note": ""}
    lo, hi = arm[f"drec_{scale}_ci_low"], arm[f"drec_{scale}_ci_high"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        out[f"{name}_note"] = NO_RATIO_NO_CI if math.isfinite(arm[f"drec_{scale}_mean"]) else ""
        return out
    if lo <= 0 <= hi:
        out[f"{name}_note"] = NO_RATIO
        return out
    out[name] = arm[f"dpref_{scale}_mean"] / arm[f"drec_{scale}_mean"]
    draws = _article_draws(pair, n_resamples=n_resamples, seed=seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = draws[1] / draws[0]
    out[f"{name}_ci_low"], out[f"{name}_ci_high"] = _percentile_ci(ratios, confidence)
    return out


def finetune_vs_base(items: pd.DataFrame, *, n_resamples: int = 2000, confidence: float = 0.95,
                     seed: int = 0) -> pd.DataFrame:
    """One row per fine-tuned paper unit: fine-tuned minus base on the items both judged (columns
    ``d{rec,pref}_{paper,logodds}_{mean,ci_low,ci_high,p,p_holm}`` and ``ratio_{scale}[_ci_low,_ci_high,
    _note]``), or a note on why there is no comparison."""
    if items.empty or not items["is_finetuned"].astype(bool).any():
        return pd.DataFrame(columns=COLUMNS)
    rows: list[dict[str, Any]] = []
    for row, frames in _pairs(items):
        if frames is not None:
            row.update(_arm_fields(frames, n_resamples, confidence, seed))
        rows.append(row)
    out = with_holm(pd.DataFrame(rows, columns=COLUMNS))
    # Readable order: per condition, the recognition arms by N (a dose-response reads down the rows), then each
    # control task's.
    out["_n"] = pd.to_numeric(out["finetune_n_articles"], errors="coerce")
    out["_control"] = out["finetune_task"] != "recognition"
    out = out.sort_values([*_GROUP, "transfer", "_control", "finetune_task", "_n", "evaluator_variant"],
                          kind="stable")
    return out.drop(columns=["_n", "_control"]).reset_index(drop=True)


def _article_draws(frames: Sequence[pd.DataFrame], *, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap draws (frames × resamples) of each frame's unit mean (mean over sources of per-source means of
    v), every frame on the same resampled articles (the ratio's CI)."""
    ids, sums, counts = _stacked(frames)
    if n_resamples <= 0 or ids.size < 2:  # one article: nothing to resample
        return np.full((len(frames), 0), math.nan)
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, n_resamples, _BATCH):
        idx = rng.integers(0, ids.size, (min(_BATCH, n_resamples - start), ids.size))
        out.append(np.stack([_unit_stat(sums[k][:, idx], counts[k][:, idx]) for k in range(len(frames))]))
    return np.concatenate(out, axis=1)


def _stacked(frames: Sequence[pd.DataFrame]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The article ids, and sums and counts of v (frames × sources × articles) on shared axes, so that article
    j is the same article in every frame."""
    ids = np.unique(np.concatenate([f["article_id"].to_numpy(str) for f in frames] or [np.array([], str)]))
    sources = np.unique(np.concatenate([f["source"].to_numpy(str) for f in frames] or [np.array([], str)]))
    sums = np.zeros((len(frames), sources.size, ids.size))
    counts = np.zeros_like(sums)
    for k, f in enumerate(frames):
        at = (np.searchsorted(sources, f["source"].to_numpy(str)), np.searchsorted(ids, f["article_id"].to_numpy(str)))
        np.add.at(sums[k], at, f["v"].to_numpy(float))
        np.add.at(counts[k], at, 1.0)
    return ids, sums, counts


def _percentile_ci(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    d = draws[np.isfinite(draws)]
    if d.size < 2:
        return math.nan, math.nan
    lo, hi = np.quantile(d, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def with_holm(diffs: pd.DataFrame, family: Sequence[str] = HOLM_FAMILY) -> pd.DataFrame:
    """``d{q}_{scale}_p_holm``: Holm's adjustment of ``d{q}_{scale}_p`` within each family (the arms of one
    evaluator on one dataset, setting and label; one question, one scale). It holds the chance of any false
    "this fine-tune changed it" in the family at 5%, whatever the dependence between the arms."""
    out = diffs.copy()
    for scale in SCALES:
        for q in QUESTION_PREFIXES:
            col = f"d{q}_{scale}_p"
            out[f"{col}_holm"] = math.nan
            if out.empty:
                continue
            for _, sub in key_frame(out, family).groupby(list(family), sort=False):
                p = sub[col].astype(float)
                p = p[np.isfinite(p)]
                if len(p):
                    out.loc[p.index, f"{col}_holm"] = holm(p.to_numpy())
    return out


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values: the k-th smallest times (m - k + 1), made monotone, capped at 1.
    The same numbers as statsmodels' multipletests(method="holm") (tests/test_specificity.py), which runs a
    full gc.collect() on every call: seconds over a sweep's families, minutes over a simulation's."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p)
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * np.arange(p.size, 0, -1)))
    out = np.empty_like(p)
    out[order] = adjusted
    return out


@dataclass
class TrendResult:
    """The slope of the recognition arms' Δ (fine-tuned − base) on log10 N, for one question and scale. With one
    fine-tune per N its CI covers the evaluation articles' sampling, not the training run's own randomness."""

    setting: str
    label: str
    dataset: str
    transfer: str
    evaluator: str
    finetune_dataset: str
    scale: str
    question: str  # "recognition" or "preference"
    arms: str  # the arms' N, e.g. "2, 10, 50"
    n_arms: int
    ok: bool
    slope: float = math.nan  # change in Δ per tenfold N
    ci_low: float = math.nan
    ci_high: float = math.nan
    p: float = math.nan
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_QUESTION_NAMES = {"rec": "recognition", "pref": "preference"}


def dose_trend(items: pd.DataFrame, recognition_tasks: Sequence[str] = ("recognition",), *,
               n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> list[TrendResult]:
    """Per evaluator × dataset × setting × label (and fine-tune dataset): the OLS slope of the recognition arms'
    Δ recognition and Δ preference on log10 N (training articles), with a t CI and p-value over articles: the
    slope is a linear combination of the arms' Δs, so each article contributes that combination of its
    contributions to the arms' Δs (they judged the same items, so their Δs are correlated, and an article's
    contributions stay together). ``n_resamples`` and ``seed`` are unused (kept for callers). log N, not N: the doses
    are geometric (2, 10, 50), so each weighs alike, where on N the largest would decide the slope alone; learning
    curves are about linear in log N. The base model (N = 0) is not a point: its Δ is 0 by definition, and log 0 is
    undefined."""
    if items.empty or not items["is_finetuned"].astype(bool).any():
        return []
    arms = [(row, frames) for row, frames in _pairs(items)
            if frames is not None and row["finetune_task"] in set(recognition_tasks) and row["n_items"] > 0]
    keys = (*_GROUP, "transfer", "evaluator", "finetune_dataset")
    groups: dict[tuple, list] = {}
    for row, frames in arms:
        groups.setdefault(tuple(str(row[k]) for k in keys), []).append((row, frames))
    out = []
    for key, members in groups.items():
        n = np.array([pd.to_numeric(r["finetune_n_articles"], errors="coerce") for r, _ in members], dtype=float)
        members = [m for m, ok in zip(members, np.isfinite(n) & (n > 0), strict=True) if ok]
        x = np.log10(n[np.isfinite(n) & (n > 0)])
        for scale in SCALES:
            for q in QUESTION_PREFIXES:
                base = TrendResult(*key, scale=scale, question=_QUESTION_NAMES[q], n_arms=len(members),
                                   arms=", ".join(f"{v:g}" for v in sorted(10 ** x)), ok=False)
                out.append(_trend(base, x, [f[(q, scale)] for _, f in members], confidence,
                                  [arm_name(str(r["evaluator_variant"])) for r, _ in members]))
    return out


def _trend(base: TrendResult, x: np.ndarray, frames: list[pd.DataFrame], confidence: float,
           arms: Sequence[str] = ()) -> TrendResult:
    """``arms``: each frame's arm (load.arm_name); adapters of one arm are seeds of one fine-tune, whose spread
    puts training randomness into the interval (stats.replicates)."""
    if np.unique(x).size < 2:
        base.note = "a trend needs recognition arms at 2 or more N"
        return base
    xc = x - x.mean()
    means = np.array([_unit_mean(f) for f in frames])
    base.ok, base.slope = True, float(xc @ (means - means.mean()) / (xc @ xc))
    if not math.isfinite(base.slope):  # an arm without the scale: no slope, so no interval
        return base
    # The slope is Σ_k xc_k·Δ_k / xc·xc, and Δ_k the mean over arm k's sources of their mean differences: one
    # weighted sum of (arm, source) cell means, tested over articles as the Δs are, plus the adapters' own
    # variance where an arm has several.
    arms = list(arms) or [str(k) for k in range(len(frames))]
    fit = replicate_contrast(frames, arms, xc / (xc @ xc), confidence)
    base.ci_low, base.ci_high, base.p = fit["ci_low"], fit["ci_high"], fit["p"]
    replicated = len(set(arms)) < len(arms)
    notes = []
    if np.unique(x).size == 2:
        notes.append("2 doses: the line passes through both")
    if replicated:
        notes.append(f"adapters pooled per arm; training SD {fit['training_sd']:.3f} in the CI")
    else:
        notes.append(ONE_ADAPTER)
    if len(set(zip(x, arms, strict=True))) < np.unique(x).size or len(set(arms)) > np.unique(x).size:
        notes.append("several arms at one N (e.g. other hyperparameters), fitted together")
    base.note = "; ".join(notes)
    return base


# --- label conditions on the same items -----------------------------------------------------------------------
# The source-label experiment (conf/label/) changes only the preference prompt: the same evaluator judges the
# same (source, article) items with the summaries tagged correctly, swapped or at random. Its comparison is
# each label condition against the unlabelled prompt on those items, paired as fine-tuned vs base is.

LABEL_REFERENCE = "none"  # conf/label/none.yaml: no source labels
_LABEL_UNIT = ("setting", "dataset", "evaluator_variant")
_LABEL_SIDES = ("pref", "pref_ref", "dpref")  # preference under the label, under the reference, their Δ
# Which orders a label run asked, and so what it is compared on: a run that asked one order only (the paper's Llama
# label runs: own summary first) is compared with the reference's same order, never with its two-order mean, which
# holds a position bias the one order does not cancel (and the other way round). The items frame's
# pref_forward_score / pref_backward_score (sweep/load.py) are each order's P(own); one order has no log-odds.
BOTH_ORDERS = "both"
ONE_ORDER = {"forward": "own summary first", "backward": "own summary second"}
ONE_ORDER_NOTE = ("one order asked ({order}): compared with the {reference} run's same order, on the paper's scale "
                  "only (one order's score is not position-debiased, so it has no log-odds)")
NO_SAME_ORDER = "the {reference} run holds no per-order readings, so there is no same-order comparison"
LABEL_COLUMNS = [*_LABEL_UNIT, "label", "reference", "orders", "sources", "n_articles", "n_items", "note"] + [
    f"{side}_{s}_{k}" for s in SCALES for side in _LABEL_SIDES for k in ("mean", "ci_low", "ci_high")] + [
    f"dpref_{s}_{k}" for s in SCALES for k in ("p", "p_holm")]


def has_label_pairs(items: pd.DataFrame) -> bool:
    """Whether one evaluator variant judged some (source, article) of a dataset and setting under two or more
    label conditions: the design of the source-label experiment."""
    if items.empty:
        return False
    keyed = key_frame(items, [*_LABEL_UNIT, "label", "source"])
    return bool((keyed.groupby([*_LABEL_UNIT, *_JOIN])["label"].nunique() > 1).any())


def label_vs_reference(items: pd.DataFrame, reference: str = LABEL_REFERENCE, *,
                       confidence: float = 0.95) -> pd.DataFrame:
    """One row per evaluator variant × dataset × setting and label condition other than ``reference``: on the
    items kept in both questions under both conditions (same source and article), preference under the label
    (``pref_*``) and under the reference (``pref_ref_*``), each the paper unit's mean with its t CI, and the
    paired difference label − reference (``dpref_*``) with the fine-tuned-vs-base Δs' article-clustered t CI
    and p (units.unit_t); Holm's p across the labels of one unit and scale."""
    if items.empty or not has_label_pairs(items):
        return pd.DataFrame(columns=LABEL_COLUMNS)
    kept = key_frame(kept_items(items)[0], [*_LABEL_UNIT, "label"])
    rows = []
    for key, unit in kept.groupby(list(_LABEL_UNIT), sort=True):
        ref = unit[unit["label"] == reference]
        for label, sub in unit[unit["label"] != reference].groupby("label", sort=True):
            orders = orders_asked(sub)
            row = {**dict(zip(_LABEL_UNIT, key, strict=True)), "label": label, "reference": reference,
                   "orders": orders}
            rows.append({**row, **_label_fields(sub, ref, reference, confidence, orders)})
    out = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    for scale in SCALES:
        col = f"dpref_{scale}_p"
        for _, sub in out.groupby(list(_LABEL_UNIT), sort=False):
            p = sub[col].astype(float)
            p = p[np.isfinite(p)]
            if len(p):
                out.loc[p.index, f"{col}_holm"] = holm(p.to_numpy())
    return out


def orders_asked(sub: pd.DataFrame) -> str:
    """"forward" or "backward" where every item of ``sub`` holds that order of its preference verdict alone (a
    run that asked one order); BOTH_ORDERS otherwise (both orders, or no per-order readings: the verdict's score)."""
    cols = [f"pref_{order}_score" for order in ONE_ORDER]
    if sub.empty or not set(cols) <= set(sub.columns):
        return BOTH_ORDERS
    has = {order: sub[col].notna() for order, col in zip(ONE_ORDER, cols, strict=True)}
    for order, other in (("forward", "backward"), ("backward", "forward")):
        if (has[order] & ~has[other]).all():
            return order
    return BOTH_ORDERS


def _compared_columns(orders: str) -> dict[str, str | None]:
    """Per scale, the preference column both conditions are compared on (None: not compared on that scale)."""
    if orders == BOTH_ORDERS:
        return {scale: f"pref_{col}" for scale, col in SCALES.items()}
    return {"paper": f"pref_{orders}_score", "logodds": None}


def _label_fields(sub: pd.DataFrame, ref: pd.DataFrame, reference: str, confidence: float,
                  orders: str = BOTH_ORDERS) -> dict[str, Any]:
    """The counts, means, CIs and Δ of one label condition against the reference on their shared items, on the
    orders the label run asked (orders_asked)."""
    out: dict[str, Any] = {"sources": "", "n_articles": 0, "n_items": 0, "note": ""}
    if ref.empty:
        out["note"] = f"no items under label={reference} for this evaluator, dataset and setting"
        return out
    compared = _compared_columns(orders)
    values = [c for c in compared.values() if c is not None]
    # One reference value per (source, article), as the base model's in _pairs (duplicates from pooled sweeps).
    both = sub.join(complete_mean(ref, _JOIN, values), on=list(_JOIN), how="inner", rsuffix="_ref")
    out.update(sources=", ".join(sorted(both["source"].astype(str).unique())),
               n_articles=int(both["article_id"].nunique()), n_items=int(len(both)))
    if both.empty:
        out["note"] = f"no items in common with label={reference}"
        return out
    if orders != BOTH_ORDERS:
        same = both[f"{compared['paper']}_ref"].notna().any()
        out["note"] = (ONE_ORDER_NOTE if same else NO_SAME_ORDER).format(order=ONE_ORDER[orders], reference=reference)
    for scale, col in compared.items():
        if col is None:  # one order: no log-odds
            out.update({f"{side}_{scale}_{k}": math.nan for side in _LABEL_SIDES for k in ("mean", "ci_low",
                                                                                         "ci_high")})
            out[f"dpref_{scale}_p"] = math.nan
            continue
        label_v, ref_v = both[col].astype(float), both[f"{col}_ref"].astype(float)
        for side, v in zip(_LABEL_SIDES, (label_v, ref_v, label_v - ref_v), strict=True):
            frame = pd.DataFrame({"source": both["source"], "article_id": both["article_id"], "v": v})
            frame = frame[np.isfinite(frame["v"])]
            # A source without the scale (an older sweep's log-odds) leaves the scale out, never the mean over
            # the other sources (as the paper units do).
            whole = frame["source"].nunique() == both["source"].nunique()
            low, high, p = unit_t(frame, "v", confidence, bounded=side != "dpref" and scale == "paper") \
                if whole else (math.nan, math.nan, math.nan)
            out[f"{side}_{scale}_mean"] = _unit_mean(frame) if whole else math.nan
            out[f"{side}_{scale}_ci_low"], out[f"{side}_{scale}_ci_high"] = low, high
            if side == "dpref":
                out[f"dpref_{scale}_p"] = p
    return out
