"""The points the regressions are fitted on, from the items of results.jsonl.

- The paper's unit: one evaluator variant (base model + fine-tune task + N + fine-tune dataset) × dataset ×
  setting × label condition, its recognition and its preference each averaged over the sources it judged
  against (each source weighted alike, as the paper averages over the other sources).
- The source level: one cell (a unit × one source).

Both means of a point come from the same items: an item excluded in either question is left out of both,
and counted. The paper unit's CIs are t intervals with articles as the clusters (unit_t: the CR2 sandwich and
Bell–McCaffrey df of stats/clustered.py, so the items one article contributes across sources stay together; on the
paper's scale taken on the logit of the mean). A coverage study found the article-clustered percentile bootstrap used
before covering about 89% at 10 articles: it is about ±1.86 SE where t(9) gives ±2.26.
bench/coverage_means.py compared it with BCa (as short), bootstrap-t (holds, but 1.1-1.5× wider, random, and
calls a null Δ on the paper's scale changed 7%) and t on article means (the same as this with one item per
source and article; under unequal counts, as after exclusions, it fell to 94% at 10% excluded items and 88%
at 30%): this one holds 93-97% at 10 and 20 articles except where the articles' values are very skewed
(skewness about -1.3 near the bound: 92.5-93.8%, the percentile gave 87-90%).

A unit is whole or has no value: where its cells do not all carry a scale (one cell without log-odds, or
without any item kept), that scale is NaN for the unit and ``incomplete`` names the cells, never the mean over
the other sources.

The unit's keys, the two scales and the items kept in both questions are the report kit's
(reporting/grouping.py), which the measurements' report sides group by too. A unit's judge_competence is the
judge gates' verdict on its cells (sweep/report_modules.py: the judge-competence control's).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.grouping import SCALES, UNIT_KEYS, incomplete_note, kept_items, key_frame, missing_in
from ...stats.clustered import cell_means_t, logit_interval
from ..sweep.report_modules import unit_judge_status

# Cell attributes that are constant within a unit (the variant fixes them), carried onto the unit's row: with
# the unit keys they name the variant in plain values (evaluator_variant is a display name).
VARIANT_KEYS = ("evaluator", "finetune_task", "finetune_dataset", "finetune_n_articles", "own_summaries",
                "finetune_fingerprint")
_VARIANT_ATTRS = (*VARIANT_KEYS, "transfer", "is_finetuned")
QUESTION_PREFIXES = ("rec", "pref")


def complete_mean(frame: pd.DataFrame, by: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """Group means of ``cols``, NaN for a group where any row lacks the value: pandas' mean skips NaN, which
    would average the rest silently (a unit mean over part of its sources)."""
    grouped = frame.groupby(list(by), sort=True)[list(cols)]
    return grouped.mean().where(grouped.count().eq(grouped.size(), axis=0))


def source_points(items: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: recognition and preference means (both scales) over the items kept in both."""
    cols = ["cell_id", *UNIT_KEYS, "source", *_VARIANT_ATTRS, "n_items", "n_items_excluded",
            *(f"{q}_{s}" for s in SCALES for q in QUESTION_PREFIXES)]
    if items.empty:
        return pd.DataFrame(columns=cols)
    kept, dropped = kept_items(items)
    first = key_frame(items, [*UNIT_KEYS, "source"]).groupby("cell_id", sort=False).first()
    kept_by_cell = dict(list(kept.groupby("cell_id", sort=False)))
    rows = []
    for cell_id, attrs in first.iterrows():
        sub = kept_by_cell.get(cell_id, kept.iloc[:0])
        row = {"cell_id": cell_id, **{k: attrs.get(k) for k in (*UNIT_KEYS, "source", *_VARIANT_ATTRS)}}
        row["n_items"] = int(len(sub))
        row["n_items_excluded"] = int(dropped.get(cell_id, 0))
        for scale, col in SCALES.items():
            rec, pref = _paired(sub, col)
            row[f"rec_{scale}"] = float(rec.mean()) if rec.size else math.nan
            row[f"pref_{scale}"] = float(pref.mean()) if pref.size else math.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def _paired(sub: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    """Recognition and preference values of the items with both present on this scale (older sweeps have no
    log-odds: then nothing)."""
    rec, pref = sub[f"rec_{col}"].to_numpy(float), sub[f"pref_{col}"].to_numpy(float)
    both = np.isfinite(rec) & np.isfinite(pref)
    return rec[both], pref[both]


def _unit_stat(sums: np.ndarray, counts: np.ndarray, axis: int = -1) -> np.ndarray:
    """Mean over sources (axis 0) of each source's item mean over the articles (``axis``); a source with
    no item in a resample sits that draw out."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw where every source is empty: NaN
        return np.nanmean(sums.sum(axis=axis) / counts.sum(axis=axis), axis=0)


def unit_t(sub: pd.DataFrame, value_col: str, confidence: float,
           bounded: bool = False) -> tuple[float, float, float]:
    """The CI and p-value (cell_means_t) of the unit's mean over sources of per-source item means of
    ``value_col``, articles as the clusters (an article's items stay together across sources). ``bounded``
    (the paper's scale, in [0, 1]): the CI is taken on the logit of the mean and mapped back, which keeps
    it inside [0, 1] and gives a skewed mean near a bound (0.85) its longer tail (93-94% at 10 and 20
    articles where the plain interval gave 91-93%, bench/coverage_means.py); the p stays the linear one."""
    values = sub[value_col].to_numpy(float)
    ok = np.isfinite(values)
    if not ok.any():
        return math.nan, math.nan, math.nan
    _, cells = np.unique(sub["source"].to_numpy(str)[ok], return_inverse=True)
    weights = np.full(cells.max() + 1, 1.0 / (cells.max() + 1))
    est, low, high, p = cell_means_t(values[ok], cells, sub["article_id"].to_numpy(str)[ok], weights, confidence)
    if bounded:
        low, high = logit_interval(est, low, high)
    return low, high, p


def unit_mean_ci(
    sub: pd.DataFrame, value_col: str, *, n_resamples: int, confidence: float, seed: int, bounded: bool = False
) -> tuple[float, float]:
    """CI of the unit's mean over sources of per-source item means of ``value_col`` (unit_t; NaN without at
    least 2 articles). No resampling: ``seed`` is unused, and ``n_resamples`` only switches it off at 0 (the
    simulator's power curve needs the means only)."""
    if n_resamples <= 0:
        return math.nan, math.nan
    low, high, _ = unit_t(sub, value_col, confidence, bounded)
    return low, high


def unit_means(kept: pd.DataFrame) -> pd.DataFrame:
    """Per unit (UNIT_KEYS), on each scale: the mean over sources of each source's mean over the kept items
    (items with both questions present on that scale). Columns ``{rec,pref}_{scale}_mean``; NaN where a
    source of the unit has no value on that scale (see paper_units for the cells without any kept item)."""
    keys = [*UNIT_KEYS, "source"]
    out = []
    for scale, col in SCALES.items():
        cols = [f"rec_{col}", f"pref_{col}"]
        both = kept[cols[0]].notna() & kept[cols[1]].notna()
        # Within a source the item mean is over its items with both values (the same items for both
        # questions); a source without any stays in, as NaN, so that the unit is not averaged over the rest.
        per_source = kept.assign(**{c: kept[c].where(both) for c in cols}).groupby(keys, sort=True)[cols].mean()
        per_unit = complete_mean(per_source.reset_index(), UNIT_KEYS, cols)
        out.append(per_unit.rename(columns={f"rec_{col}": f"rec_{scale}_mean", f"pref_{col}": f"pref_{scale}_mean"}))
    return pd.concat(out, axis=1)


def _scale_fields(sub: pd.DataFrame, all_sub: pd.DataFrame, mean: dict[str, float], scale: str, *,
                  n_resamples: int, confidence: float, seed: int) -> tuple[dict[str, float], list[str]]:
    """A unit's means and CIs on one scale, and the cells that lack it. A unit whose cells do not all carry
    the scale gets NaN there (never the mean over the other sources), and the cells are named."""
    col = SCALES[scale]
    has = sub[f"rec_{col}"].notna() & sub[f"pref_{col}"].notna()
    # Checked per cell over all the unit's items: a cell whose items were all excluded lacks it too.
    missing = missing_in(all_sub, has)
    out: dict[str, float] = {}
    for q in QUESTION_PREFIXES:
        name = f"{q}_{scale}"
        if missing:
            out.update({f"{name}_mean": math.nan, f"{name}_ci_low": math.nan, f"{name}_ci_high": math.nan})
            continue
        out[f"{name}_mean"] = mean.get(f"{name}_mean", math.nan)
        # The same seed for both questions: the same article draws, so the two CIs are paired.
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = unit_mean_ci(
            sub[has], f"{q}_{col}", n_resamples=n_resamples, confidence=confidence, seed=seed,
            bounded=scale == "paper")
    return out, missing


def paper_units(
    items: pd.DataFrame, cells: pd.DataFrame | None = None, *, n_resamples: int = 2000,
    confidence: float = 0.95, seed: int = 0,
) -> pd.DataFrame:
    """One row per evaluator variant × dataset × setting × label: recognition and preference averaged over
    sources on the items kept in both questions, on both scales, with t CIs over articles (unit_t).

    A unit whose cells do not all carry a scale gets NaN on it, and ``incomplete`` says which cells lack it
    (``incomplete_fields``: the scales). ``n_resamples=0`` skips the CIs (the simulator's power curve
    needs the means only).
    """
    cols = [*UNIT_KEYS, *_VARIANT_ATTRS, "sources", "n_sources", "n_cells", "n_articles", "n_items",
            "n_items_excluded", "judge_competence", "incomplete", "incomplete_fields"]
    cols += [f"{q}_{s}_{k}" for s in SCALES for q in QUESTION_PREFIXES for k in ("mean", "ci_low", "ci_high")]
    if items.empty:
        return pd.DataFrame(columns=cols)
    kept, dropped = kept_items(items)
    kept = key_frame(kept, UNIT_KEYS)
    means = unit_means(kept)
    kept_by_unit = dict(list(kept.groupby(list(UNIT_KEYS), sort=True)))
    rows = []
    for key, all_sub in key_frame(items, UNIT_KEYS).groupby(list(UNIT_KEYS), sort=True):
        sub = kept_by_unit.get(key, kept.iloc[:0])
        cell_ids = sorted(all_sub["cell_id"].unique())
        first = all_sub.iloc[0]
        row: dict[str, Any] = dict(zip(UNIT_KEYS, key, strict=True))
        row.update({k: first.get(k) for k in _VARIANT_ATTRS})
        row["sources"] = ", ".join(sorted(all_sub["source"].astype(str).unique()))
        row["n_sources"] = int(sub["source"].nunique())
        row["n_cells"] = len(cell_ids)
        row["n_articles"] = int(sub["article_id"].nunique())
        row["n_items"] = int(len(sub))
        row["n_items_excluded"] = int(sum(int(dropped.get(c, 0)) for c in cell_ids))
        row["judge_competence"] = (
            unit_judge_status(cells[cells["cell_id"].isin(cell_ids)]) if cells is not None and not cells.empty else ""
        )
        mean = {k: float(v) for k, v in means.loc[key].items()} if key in means.index else {}
        missing = {}
        for scale in SCALES:
            values, missing[scale] = _scale_fields(sub, all_sub, mean, scale, n_resamples=n_resamples,
                                                   confidence=confidence, seed=seed)
            row.update(values)
        row["incomplete"], row["incomplete_fields"] = incomplete_note(missing)
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


# --- degenerate arms ------------------------------------------------------------------------------------------
# A fine-tuned arm that gives one constant answer (the paper's always_1 and random GPT-3.5 fine-tunes answer "1"
# in both orders, every time) sits at (0.5, 0.5) whatever its items are: the point reflects its training target,
# not a recognition that moves preference, and the fits would read it as a point of the line. Such a unit is
# "degenerate" when, over every kept item of every source, each question's paper-scale score spans at most
# DEGENERATE_BAND (max − min). A judge that gives one answer with at least 97.5% probability in each order has
# every pairwise score within 0.0125 of 0.5: a band 0.025 wide. The paper's always_1 and random GPT-3.5 arms span
# at most 0.021 in the pairwise setting; every arm of the paper not flagged spans 0.05 or more on a question. Both
# questions must be flat, and at least DEGENERATE_MIN_ITEMS items kept, so that a judge with a narrow but real
# spread is not flagged by a small sample (20 draws of an SD-0.02 judge span about 0.075). Base models are never
# flagged: they are the evaluators under study, and a base judge that cannot answer fails the competence control.
DEGENERATE_BAND = 0.025
DEGENERATE_MIN_ITEMS = 20
DEGENERATE_REASON = ("one constant answer: every one of its {n} kept items scored within {band:g} on both "
                     "questions (paper scale)")
DEGENERATE_COLUMNS = [*UNIT_KEYS, *VARIANT_KEYS, "transfer", "n_items", "rec_range", "pref_range", "reason"]


def degenerate_units(items: pd.DataFrame) -> pd.DataFrame:
    """The fine-tuned paper units whose answers are one constant (DEGENERATE_BAND, module comment above): one row
    each (DEGENERATE_COLUMNS), with both questions' score ranges and the reason the fits leave it out."""
    if items.empty or not items["is_finetuned"].astype(bool).any():
        return pd.DataFrame(columns=DEGENERATE_COLUMNS)
    kept, _ = kept_items(items[items["is_finetuned"].astype(bool)])
    kept = key_frame(kept, UNIT_KEYS)
    grouped = kept.groupby(list(UNIT_KEYS), sort=True)
    ranges = grouped[["rec_score", "pref_score"]].max() - grouped[["rec_score", "pref_score"]].min()
    n = grouped.size()
    flat = (n >= DEGENERATE_MIN_ITEMS) & (ranges["rec_score"] <= DEGENERATE_BAND) \
        & (ranges["pref_score"] <= DEGENERATE_BAND)
    first = grouped[[c for c in (*VARIANT_KEYS, "transfer") if c in kept]].first()
    rows = [{**dict(zip(UNIT_KEYS, key, strict=True)), **first.loc[key].to_dict(), "n_items": int(n[key]),
             "rec_range": float(ranges.loc[key, "rec_score"]), "pref_range": float(ranges.loc[key, "pref_score"]),
             "reason": DEGENERATE_REASON.format(n=int(n[key]), band=DEGENERATE_BAND)}
            for key in flat[flat].index]
    return pd.DataFrame(rows, columns=DEGENERATE_COLUMNS)


def without_units(frame: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (items, cells or paper units) without the rows of ``units`` (matched on UNIT_KEYS)."""
    if frame.empty or units.empty:
        return frame
    drop = set(key_frame(units, UNIT_KEYS)[list(UNIT_KEYS)].itertuples(index=False, name=None))
    keys = key_frame(frame[list(UNIT_KEYS)], UNIT_KEYS).itertuples(index=False, name=None)
    return frame[[key not in drop for key in keys]]


def with_degenerate(units: pd.DataFrame, degenerate: pd.DataFrame) -> pd.DataFrame:
    """The paper units with a ``degenerate`` column: the reason a unit is left out of the fits, "" for the rest."""
    reasons = {tuple(str(r[k]) for k in UNIT_KEYS): str(r["reason"]) for _, r in degenerate.iterrows()}
    keys = key_frame(units[list(UNIT_KEYS)], UNIT_KEYS).itertuples(index=False, name=None)
    return units.assign(degenerate=[reasons.get(tuple(k), "") for k in keys])
