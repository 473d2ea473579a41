"""Self-preference where answers can be checked (Chen et al. 2025): on the items where the judge's own output is
right and the other's wrong, choosing its own is legitimate; where its own is wrong and the other's right, it is
harmful. Per judge, the preference verdict's mean on each kind of item (the paper's scale: P(own chosen); the
log-odds scale: the position-debiased log-odds), with its interval clustered by article.

The harmful rate has a yardstick: another judge's choice on the same pairs. Where judge X (whose own output is the
other one) judged the same article's pair, P_X(J's output chosen) = 1 − P_X(own chosen); the paired difference
P_J(own chosen) − P_X(J's output chosen) on the articles both judged is the harm self-preference adds
(``harmful_excess``, reference X), clustered by article."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...stats.clustered import article_mean_ci, cell_means_t, too_few_clusters
from .observations import SELF_BIAS_SCALES

LEGITIMATE, HARMFUL, EXCESS = "legitimate", "harmful", "harmful_excess"
_CONFIDENCE = 0.95


def _values(sub: pd.DataFrame, scale: str) -> pd.Series:
    return pd.to_numeric(sub["pref_logodds" if scale == "logodds" else "pref_score"], errors="coerce")


def _mean_row(y: np.ndarray, articles: np.ndarray, null: float, bounded: bool) -> dict[str, Any]:
    """The mean with its interval over articles and its p against ``null`` (a probability's interval on the logit
    scale where ``bounded``)."""
    out = {"estimate": float(np.mean(y)) if y.size else math.nan, "ci_low": math.nan, "ci_high": math.nan,
           "p": math.nan, "note": ""}
    why = too_few_clusters(articles)
    if why or y.size == 0:
        out["note"] = f"{why}, the clusters being articles: no interval" if why else "no such item"
        return out
    _, _, _, p = cell_means_t(y - null, np.zeros(y.size, dtype=int), articles, np.ones(1), _CONFIDENCE)
    est, low, high = article_mean_ci(y, articles, _CONFIDENCE, bounded=bounded)
    out.update(estimate=est, ci_low=low, ci_high=high, p=p)
    return out


def _kept(items: pd.DataFrame) -> pd.DataFrame:
    ok = ~items["pref_excluded"].astype(bool)
    both = items["own_correct"].map(lambda v: isinstance(v, bool)) & items["other_correct"].map(
        lambda v: isinstance(v, bool))
    return items[ok & both]


def _excess_rows(kept: pd.DataFrame, judge: str, harm: pd.DataFrame, scale: str) -> list[dict[str, Any]]:
    """Against each other judge whose own output is the other one on J's harmful items."""
    rows = []
    own_author = harm["own_author"].iloc[0]
    for other_judge, theirs in kept[kept["own_author"].isin(set(harm["other_author"]))].groupby("evaluator_variant"):
        theirs = theirs[theirs["other_author"] == own_author]
        pairs = harm.merge(theirs[["article_id", "pref_score", "pref_logodds"]], on="article_id", suffixes=("", "_x"))
        if pairs.empty or other_judge == judge:
            continue
        if scale == "paper":  # P_J(own) − P_X(J's output): a difference of probabilities, 0 = no excess
            d = pairs["pref_score"].to_numpy(float) - (1 - pairs["pref_score_x"].to_numpy(float))
        else:
            d = pairs["pref_logodds"].to_numpy(float) + pairs["pref_logodds_x"].to_numpy(float)
        ok = np.isfinite(d)
        row = _mean_row(d[ok], pairs["article_id"].to_numpy(str)[ok], 0.0, bounded=False)
        rows.append({**row, "term": EXCESS, "reference": str(other_judge), "n_items": int(ok.sum()),
                     "n_own": int(ok.sum()), "n_articles": int(pairs["article_id"][ok].nunique())})
    return rows


def verifiable_rows(items: pd.DataFrame, scale: str) -> list[dict[str, Any]]:
    """Per judge (base evaluators) in one (setting, label, dataset) group: legitimate and harmful self-preference,
    and the harmful rate's excess over each other judge's on the same pairs."""
    if scale not in SELF_BIAS_SCALES or items.empty or "own_correct" not in items:
        return []
    kept = _kept(items)
    rows = []
    for judge, sub in kept.groupby("evaluator_variant", sort=True):
        own_right, other_right = sub["own_correct"].astype(bool), sub["other_correct"].astype(bool)
        for term, mask in ((LEGITIMATE, own_right & ~other_right), (HARMFUL, ~own_right & other_right)):
            part = sub[mask]
            y = _values(part, scale).to_numpy(float)
            ok = np.isfinite(y)
            null, bounded = (0.5, True) if scale == "paper" else (0.0, False)
            rows.append({**_mean_row(y[ok], part["article_id"].to_numpy(str)[ok], null, bounded), "judge": str(judge),
                         "term": term, "reference": "", "n_items": int(ok.sum()), "n_own": int(ok.sum()),
                         "n_articles": int(part["article_id"][ok].nunique())})
            if term == HARMFUL and ok.any():
                rows += [{**r, "judge": str(judge)} for r in _excess_rows(kept, str(judge), part[ok], scale)]
    return rows
