"""Length-controlled self-preference: the self-preference left once the two summaries' length difference is
regressed out, beside the raw one, per paper unit (grouping.UNIT_KEYS) and scale, as AlpacaEval's
length-controlled win rate and Arena-Hard's style control do it for a judge's preference between two answers.

Per unit and scale, on the items of the paper unit's preference mean (kept in both questions, with the scale's
values: grouping.kept_items) whose two summaries both have a word count above 0 (the rest are left out and
counted), an item-level OLS of the preference score, centred on no bias (log-odds as it is, the paper's score
minus 0.5), on

- d_len = log(own_words / other_words), the length difference (AlpacaEval's length control takes a squashed
  token-count difference, Arena-Hard's style control (a - b) / (a + b); the log ratio is as free of scale and
  flips its sign when the two summaries swap). It is *not* centred at its mean: its 0 is "both summaries the
  same length", the point the controlled preference is read at (centred at its mean, the intercept would be
  the raw mean again);
- one indicator per source: the controlled preference is the mean of the sources' intercepts (each source
  weighted alike, as the paper unit averages over sources) and the raw one the mean of the sources' item means,
  the same estimate as the paper unit's, so the two are comparable.

Both come with 95% t intervals clustered by article from stats/clustered.ClusteredOLS, the paper units'
machinery (the CR2 sandwich and Bell–McCaffrey df; see there for a sweep with very many articles), back on the
scale (+0.5 on the paper's). delta = controlled − raw; with one length slope b for the unit it is exactly
−b × (the sources' mean of d_len), so its uncertainty is the length coefficient's. With fewer than
stats.clustered.MIN_CLUSTERS articles there is no interval or p and no verdict: the row says so. The controlled
value is an adjusted estimate under that linear model, not a bound: it moves with the model's form wherever the
items sit far from equal length.

Per source (``length_controlled_by_source``, from the same fit): that source's intercept, the adjusted
preference against it at equal length, with its article-clustered interval, beside its raw item mean, and where
the items lie: the share whose own summary is at least as long as the other's, and the share at most as long.
Where either share is under EXTRAPOLATION_SHARE, equal length lies at the edge of that source's items and the
intercept is read off the line beyond them (``extrapolates``). The pooled value averages these intercepts, so
one source's pairs can make it: GPT-3.5 on the paper's CNN, whose own summaries are shorter than GPT-4's in
nearly every pair.

"Style": the items frame holds the two summaries' word counts and no other surface feature of their texts (the
surface-feature baseline records its prediction per item, not the features), so only length is controlled.

Speed: the fits are ClusteredOLS's own, so that the raw interval is the paper unit's machinery and not a second
implementation of it. The imported paper sweep has about 140 units of ~4,000 items and ~1,000 articles each, two
fits a unit and scale: about 8 s on 2 cores, as ClusteredOLS takes a sweep with that many articles by its
many-cluster path (clustered.py); through the per-cluster CR2 path alone it took about 65 s.

Its section in the report, table and data files: report/length_control_section.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.grouping import UNIT_KEYS, kept_items, key_frame
from ...reporting.regression import ALPHA
from ...stats.clustered import ClusteredOLS, Estimate, too_few_clusters
from .units import VARIANT_KEYS

WORDS = ("own_words", "other_words")
# (scale, the items' column suffix, no bias on it); the log-odds scale (position-debiased) first: the primary.
CONTROLLED_SCALES = (("logodds", "logodds", 0.0), ("paper", "score", 0.5))
_CARRIED = (*VARIANT_KEYS, "transfer")  # constant within a unit: the variant in plain values
COLUMNS = [*UNIT_KEYS, *_CARRIED, "scale", "n_items", "n_articles", "n_left_out", "raw", "raw_ci_low", "raw_ci_high",
           "raw_p", "controlled", "controlled_ci_low", "controlled_ci_high", "controlled_p", "delta", "length_coef",
           "length_coef_ci_low", "length_coef_ci_high", "length_coef_p", "mean_log_length_ratio", "note"]
_FITTED = COLUMNS[COLUMNS.index("raw"):COLUMNS.index("note")]
NO_VARIATION = "the length difference does not vary within the unit's sources: there is nothing to control for"
# Per source: its adjusted preference at equal length (its intercept in the unit's fit) beside its raw mean, and
# how its items sit around equal length.
BY_SOURCE_COLUMNS = [*UNIT_KEYS, *_CARRIED, "scale", "source", "n_items", "n_articles", "raw", "raw_ci_low",
                     "raw_ci_high", "adjusted", "adjusted_ci_low", "adjusted_ci_high", "adjusted_p",
                     "share_own_at_least_as_long", "share_own_at_most_as_long", "extrapolates", "note"]
_SOURCE_FITTED = BY_SOURCE_COLUMNS[BY_SOURCE_COLUMNS.index("raw"):BY_SOURCE_COLUMNS.index("adjusted_p") + 1]
# Under this share of a source's items on one side of equal length, its intercept is read off the line beyond
# its items (the issue's reading of the paper's CNN: 1% of GPT-3.5's pairs with GPT-4 have its own summary at
# least as long).
EXTRAPOLATION_SHARE = 0.10
EXTRAPOLATES = "the estimate extrapolates: under {share:.0%} of the items lie on one side of equal length"


def empty_frame() -> pd.DataFrame:
    return pd.DataFrame(columns=COLUMNS)


def empty_by_source() -> pd.DataFrame:
    return pd.DataFrame(columns=BY_SOURCE_COLUMNS)


def length_difference(items: pd.DataFrame) -> np.ndarray:
    """log(own_words / other_words) per item; NaN where either count is missing or not above 0."""
    own = pd.to_numeric(items[WORDS[0]], errors="coerce").to_numpy(float)
    other = pd.to_numeric(items[WORDS[1]], errors="coerce").to_numpy(float)
    ok = np.isfinite(own) & np.isfinite(other) & (own > 0) & (other > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, np.log(own / other), np.nan)


def has_word_counts(items: pd.DataFrame) -> bool:
    """Some item scored in preference carries both summaries' word counts: the design this item applies to."""
    if items.empty or not set(WORDS) <= set(items.columns):
        return False
    scored = ~items["pref_excluded"].astype(bool) & items["pref_score"].notna()
    return bool(np.isfinite(length_difference(items[scored])).any())


def _blank(note: str) -> dict[str, Any]:
    return {**{k: math.nan for k in _FITTED}, "note": note}


def _contrasts(X: np.ndarray, y: np.ndarray, articles: np.ndarray, contrasts: list[np.ndarray], alpha: float
               ) -> list[Estimate]:
    fit = ClusteredOLS(X, y, articles)
    return [fit.contrast(c, alpha) for c in contrasts]


def _fit(used: pd.DataFrame, col: str, null: float, confidence: float
         ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The raw and length-controlled preference of one unit on one scale (module docstring), back on the scale;
    and per source, from the same two fits, its raw mean and its adjusted preference at equal length."""
    y = used[f"pref_{col}"].to_numpy(float) - null
    d_len = used["_d_len"].to_numpy(float)
    names, source = np.unique(used["source"].to_numpy(str), return_inverse=True)
    n_sources = len(names)
    dummies, mean_over_sources = np.eye(n_sources)[source], np.full(n_sources, 1.0 / n_sources)
    articles, alpha = used["article_id"].to_numpy(str), 1 - confidence
    raw, *raw_by_source = _contrasts(dummies, y, articles, [mean_over_sources, *np.eye(n_sources)], alpha)
    X = np.column_stack([dummies, d_len])
    controlled, coef, *adjusted = _contrasts(
        X, y, articles, [np.r_[mean_over_sources, 0.0], np.r_[np.zeros(n_sources), 1.0],
                         *(np.r_[e, 0.0] for e in np.eye(n_sources))], alpha)
    out = {"raw": raw.estimate + null, "raw_ci_low": raw.ci_low + null, "raw_ci_high": raw.ci_high + null,
           "raw_p": raw.p, "controlled": controlled.estimate + null, "controlled_ci_low": controlled.ci_low + null,
           "controlled_ci_high": controlled.ci_high + null, "controlled_p": controlled.p,
           "delta": controlled.estimate - raw.estimate, "length_coef": coef.estimate,
           "length_coef_ci_low": coef.ci_low, "length_coef_ci_high": coef.ci_high, "length_coef_p": coef.p,
           "mean_log_length_ratio": float(np.bincount(source, d_len) @ (mean_over_sources / np.bincount(source))),
           "note": ""}
    by_source = [_source_fields(str(name), source == k, d_len, articles, raw_by_source[k], adjusted[k], null)
                 for k, name in enumerate(names)]
    if np.linalg.matrix_rank(X) < X.shape[1]:  # d_len constant within each source: the control is not identified
        out.update({k: math.nan for k in _FITTED if k.startswith(("controlled", "delta", "length_coef"))})
        out["note"] = NO_VARIATION
        for row in by_source:
            row.update({k: math.nan for k in _SOURCE_FITTED if k.startswith("adjusted")}, note=NO_VARIATION)
    why = too_few_clusters(articles)
    if why:  # no interval, p or verdict: the t of so few articles cannot hold its rate
        no_verdict = f"{why}, the clusters being articles: no verdict"
        for row, fitted in ((out, _FITTED), *((r, _SOURCE_FITTED) for r in by_source)):
            row.update({k: math.nan for k in fitted if k.endswith(("_ci_low", "_ci_high", "_p"))})
            row["note"] = "; ".join(n for n in (row["note"], no_verdict) if n)
    return out, by_source


def _source_fields(name: str, at: np.ndarray, d_len: np.ndarray, articles: np.ndarray, raw: Estimate,
                   adjusted: Estimate, null: float) -> dict[str, Any]:
    """One source's raw mean, its adjusted preference at equal length, and where its items lie around equal
    length (d_len 0: the same word count); ``extrapolates`` where under EXTRAPOLATION_SHARE lie on one side."""
    at_least, at_most = float(np.mean(d_len[at] >= 0)), float(np.mean(d_len[at] <= 0))
    extrapolates = min(at_least, at_most) < EXTRAPOLATION_SHARE
    return {"source": name, "n_items": int(at.sum()), "n_articles": int(np.unique(articles[at]).size),
            "raw": raw.estimate + null, "raw_ci_low": raw.ci_low + null, "raw_ci_high": raw.ci_high + null,
            "adjusted": adjusted.estimate + null, "adjusted_ci_low": adjusted.ci_low + null,
            "adjusted_ci_high": adjusted.ci_high + null, "adjusted_p": adjusted.p,
            "share_own_at_least_as_long": at_least, "share_own_at_most_as_long": at_most,
            "extrapolates": extrapolates,
            "note": EXTRAPOLATES.format(share=EXTRAPOLATION_SHARE) if extrapolates else ""}


def _unit_row(key: tuple, all_sub: pd.DataFrame, sub: pd.DataFrame, scale: str, col: str, null: float,
              confidence: float) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """One unit on one scale, and its rows per source; None where no item of the unit carries the scale (an
    older sweep's log-odds)."""
    if not all_sub[f"pref_{col}"].notna().any():
        return None
    scored = sub[sub[f"rec_{col}"].notna() & sub[f"pref_{col}"].notna()]
    usable = np.isfinite(scored["_d_len"].to_numpy(float))
    used = scored[usable]
    first = all_sub.iloc[0]
    keys = {**dict(zip(UNIT_KEYS, key, strict=True)), **{k: first.get(k) for k in _CARRIED}, "scale": scale}
    row: dict[str, Any] = {**keys, "n_items": int(len(used)), "n_articles": int(used["article_id"].nunique()),
                           "n_left_out": int((~usable).sum())}
    cells = all_sub.drop_duplicates("cell_id")
    present = set(used["cell_id"])
    missing = [f"source={c.source} (cell {c.cell_id})" for c in cells.itertuples() if c.cell_id not in present]
    if missing:  # a whole unit or none: never the mean over the other sources
        return {**row, **_blank("no item with the scale's scores and both word counts in " + ", ".join(missing)
                                + ": the unit is not averaged over its other sources")}, []
    fields, by_source = _fit(used, col, null, confidence)
    return {**row, **fields}, [{**keys, **r} for r in by_source]


def length_control_frames(items: pd.DataFrame, confidence: float = 1 - ALPHA) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per paper unit × scale: COLUMNS, as length_controlled; per unit × scale × source: BY_SOURCE_COLUMNS, each
    source's adjusted preference at equal length with its article-clustered CI and where its items lie), from
    one fit per unit and scale."""
    if items.empty or not set(WORDS) <= set(items.columns):
        return empty_frame(), empty_by_source()
    needed = [c for c in ("cell_id", *UNIT_KEYS, *_CARRIED, "source", "article_id", *WORDS, "rec_excluded",
                          "pref_excluded", "rec_score", "pref_score", "rec_logodds", "pref_logodds") if c in items]
    items = key_frame(items[needed], UNIT_KEYS)
    kept, _ = kept_items(items)
    kept["_d_len"] = length_difference(kept)
    kept_by_unit = dict(list(kept.groupby(list(UNIT_KEYS), sort=True)))
    rows, source_rows = [], []
    for key, all_sub in items.groupby(list(UNIT_KEYS), sort=True):
        sub = kept_by_unit.get(key, kept.iloc[:0])
        for scale, col, null in CONTROLLED_SCALES:
            fitted = _unit_row(key, all_sub, sub, scale, col, null, confidence)
            if fitted is not None:
                rows.append(fitted[0])
                source_rows += fitted[1]
    return pd.DataFrame(rows, columns=COLUMNS), pd.DataFrame(source_rows, columns=BY_SOURCE_COLUMNS)


def length_controlled(items: pd.DataFrame, confidence: float = 1 - ALPHA) -> pd.DataFrame:
    """One row per paper unit × scale (COLUMNS): the raw and the length-controlled self-preference with their 95%
    CIs (clustered by article), the controlled one's p against no bias, delta = controlled − raw, the length
    coefficient with its CI, how many items and articles entered and how many items were left out for a
    missing or zero word count; ``note`` says why a row has no interval or no value."""
    return length_control_frames(items, confidence)[0]
