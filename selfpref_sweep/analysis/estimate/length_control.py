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
stats.clustered.MIN_CLUSTERS articles there is no interval or p and no verdict: the row says so.

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


def empty_frame() -> pd.DataFrame:
    return pd.DataFrame(columns=COLUMNS)


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


def _fit(used: pd.DataFrame, col: str, null: float, confidence: float) -> dict[str, Any]:
    """The raw and length-controlled preference of one unit on one scale (module docstring), back on the scale."""
    y = used[f"pref_{col}"].to_numpy(float) - null
    d_len = used["_d_len"].to_numpy(float)
    _, source = np.unique(used["source"].to_numpy(str), return_inverse=True)
    n_sources = int(source.max()) + 1
    dummies, mean_over_sources = np.eye(n_sources)[source], np.full(n_sources, 1.0 / n_sources)
    articles, alpha = used["article_id"].to_numpy(str), 1 - confidence
    (raw,) = _contrasts(dummies, y, articles, [mean_over_sources], alpha)
    X = np.column_stack([dummies, d_len])
    controlled, coef = _contrasts(X, y, articles, [np.r_[mean_over_sources, 0.0], np.r_[np.zeros(n_sources), 1.0]],
                                  alpha)
    out = {"raw": raw.estimate + null, "raw_ci_low": raw.ci_low + null, "raw_ci_high": raw.ci_high + null,
           "raw_p": raw.p, "controlled": controlled.estimate + null, "controlled_ci_low": controlled.ci_low + null,
           "controlled_ci_high": controlled.ci_high + null, "controlled_p": controlled.p,
           "delta": controlled.estimate - raw.estimate, "length_coef": coef.estimate,
           "length_coef_ci_low": coef.ci_low, "length_coef_ci_high": coef.ci_high, "length_coef_p": coef.p,
           "mean_log_length_ratio": float(np.bincount(source, d_len) @ (mean_over_sources / np.bincount(source))),
           "note": ""}
    if np.linalg.matrix_rank(X) < X.shape[1]:  # d_len constant within each source: the control is not identified
        out.update({k: math.nan for k in _FITTED if k.startswith(("controlled", "delta", "length_coef"))})
        out["note"] = NO_VARIATION
    why = too_few_clusters(articles)
    if why:  # no interval, p or verdict: the t of so few articles cannot hold its rate
        out.update({k: math.nan for k in _FITTED if k.endswith(("_ci_low", "_ci_high", "_p"))})
        out["note"] = "; ".join(n for n in (out["note"], f"{why}, the clusters being articles: no verdict") if n)
    return out


def _unit_row(key: tuple, all_sub: pd.DataFrame, sub: pd.DataFrame, scale: str, col: str, null: float,
              confidence: float) -> dict[str, Any] | None:
    """One unit on one scale; None where no item of the unit carries the scale (an older sweep's log-odds)."""
    if not all_sub[f"pref_{col}"].notna().any():
        return None
    scored = sub[sub[f"rec_{col}"].notna() & sub[f"pref_{col}"].notna()]
    usable = np.isfinite(scored["_d_len"].to_numpy(float))
    used = scored[usable]
    first = all_sub.iloc[0]
    row: dict[str, Any] = {**dict(zip(UNIT_KEYS, key, strict=True)), **{k: first.get(k) for k in _CARRIED},
                           "scale": scale,
                           "n_items": int(len(used)), "n_articles": int(used["article_id"].nunique()),
                           "n_left_out": int((~usable).sum())}
    cells = all_sub.drop_duplicates("cell_id")
    present = set(used["cell_id"])
    missing = [f"source={c.source} (cell {c.cell_id})" for c in cells.itertuples() if c.cell_id not in present]
    if missing:  # a whole unit or none: never the mean over the other sources
        return {**row, **_blank("no item with the scale's scores and both word counts in " + ", ".join(missing)
                                + ": the unit is not averaged over its other sources")}
    return {**row, **_fit(used, col, null, confidence)}


def length_controlled(items: pd.DataFrame, confidence: float = 1 - ALPHA) -> pd.DataFrame:
    """One row per paper unit × scale (COLUMNS): the raw and the length-controlled self-preference with their 95%
    CIs (clustered by article), the controlled one's p against no bias, delta = controlled − raw, the length
    coefficient with its CI, how many items and articles entered and how many items were left out for a
    missing or zero word count; ``note`` says why a row has no interval or no value."""
    if items.empty or not set(WORDS) <= set(items.columns):
        return empty_frame()
    needed = [c for c in ("cell_id", *UNIT_KEYS, *_CARRIED, "source", "article_id", *WORDS, "rec_excluded",
                          "pref_excluded", "rec_score", "pref_score", "rec_logodds", "pref_logodds") if c in items]
    items = key_frame(items[needed], UNIT_KEYS)
    kept, _ = kept_items(items)
    kept["_d_len"] = length_difference(kept)
    kept_by_unit = dict(list(kept.groupby(list(UNIT_KEYS), sort=True)))
    rows = []
    for key, all_sub in items.groupby(list(UNIT_KEYS), sort=True):
        sub = kept_by_unit.get(key, kept.iloc[:0])
        rows += [r for scale, col, null in CONTROLLED_SCALES
                 if (r := _unit_row(key, all_sub, sub, scale, col, null, confidence)) is not None]
    return pd.DataFrame(rows, columns=COLUMNS)
