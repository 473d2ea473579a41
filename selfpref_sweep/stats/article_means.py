"""A mean over a cell's articles as the records give it: its t interval over articles (the CR2 sandwich clustered
by article, clustered.article_mean_ci) in the record's form, and the smallest effect its articles could detect.
The cell's question statistics (records/scores.py), the measurements' blocks and the coverage study use them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from .clustered import article_mean_ci

# The smallest detectable effect: a two-sided test at level MDE_ALPHA that detects it with probability MDE_POWER.
MDE_ALPHA = 0.05
MDE_POWER = 0.8


def _article_sums(values: np.ndarray, groups: Sequence[str]):
    """Per article (group): the sum of its items' values and their count."""
    _, index = np.unique(np.asarray(groups), return_inverse=True)
    return np.bincount(index, weights=values), np.bincount(index).astype(float)


def article_mean(values: Sequence[float], groups: Sequence[str], confidence: float,
                 bounded: bool = False) -> dict[str, float | None]:
    """Mean with a CI over articles (groups): the CR2 sandwich clustered by article and a t with
    Bell–McCaffrey df (clustered.article_mean_ci), so items that share an article are not treated as
    independent; ``bounded`` (a value in [0, 1]) takes the interval on the logit scale. The article-clustered
    percentile bootstrap used before covered about 88-90% for a nominal 95% at 10 articles
    (bench/coverage_means.py); this is the interval the analysis gives its paper units."""
    vals = np.asarray(values, dtype=float)
    if vals.size == 0:
        return {"mean": None, "ci_low": None, "ci_high": None}
    mean, low, high = article_mean_ci(vals, [str(g) for g in groups], confidence, bounded)
    if math.isnan(low):  # one article: no spread over articles to go on
        return {"mean": float(vals.mean()), "ci_low": None, "ci_high": None}
    return {"mean": float(vals.mean()), "ci_low": float(low), "ci_high": float(high)}


def detectable_effect(values: Sequence[float], groups: Sequence[str], scale: str, alpha: float = MDE_ALPHA,
                      power: float = MDE_POWER) -> dict[str, Any]:
    """The smallest detectable effect (MDE): the distance from no bias (|mean - 0.5| on the paper's score,
    |mean| on the log-odds) that a two-sided one-sample t-test at level `alpha` would detect with
    probability `power`, given how much the scores vary.

    Articles are the independent units (as in the bootstrap): with k articles whose mean scores (the
    cluster means) have standard deviation s,

        MDE = (t_{1 - alpha/2, k-1} + t_{power, k-1}) * s / sqrt(k),

    the usual shift approximation of the noncentral t (near exact from about 5 articles, a little
    optimistic below). value and sd are None with fewer than 2 articles."""
    vals = np.asarray(values, dtype=float)
    sums, counts = _article_sums(vals, groups)
    k = len(sums)
    out: dict[str, Any] = {"value": None, "n_articles": k, "sd": None, "alpha": alpha, "power": power,
                           "scale": scale}
    if k < 2:
        return out
    sd = float(np.std(sums / counts, ddof=1))
    t = scipy_stats.t
    out.update(value=float((t.ppf(1 - alpha / 2, k - 1) + t.ppf(power, k - 1)) * sd / math.sqrt(k)), sd=sd)
    return out
