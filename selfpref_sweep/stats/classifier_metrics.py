"""A binary classifier's metrics, read off its probabilities: accuracy as a proportion with its Wilson interval,
AUROC (or why there is none), and calibration (the expected calibration error with its reliability bins).

Shared by the measurements that read authorship as a classification: the judge's recognition answers
(measurements/recognition_classifier) and the surface-feature baseline (measurements/surface_baseline). Every function
returns a JSON-ready dict, so summary.json holds exactly what is computed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from statsmodels.stats.proportion import proportion_confint

# AUROC needs readings of both classes; with a single one per class it can only be 0, 1/2 or 1.
MIN_PER_CLASS = 2


def hit(score: float, rival: float) -> float:
    """1 when `score` beats `rival`, 1/2 for a tie, 0 otherwise (a tie is a coin flip, not a miss)."""
    return 1.0 if score > rival else 0.5 if score == rival else 0.0


def wilson(successes: float, n: int, confidence: float) -> tuple[float, float]:
    """The Wilson interval of `successes` out of n (n > 0): it stays inside [0, 1] and is not zero-width at n of
    n."""
    low, high = proportion_confint(successes, n, alpha=1.0 - confidence, method="wilson")
    return float(low), float(high)


def proportion(hits: Sequence[float], confidence: float) -> dict[str, float | None]:
    """The share of hits (each 1, 1/2 or 0) with its Wilson interval; value and interval null without
    readings."""
    n = len(hits)
    if n == 0:
        return {"value": None, "ci_low": None, "ci_high": None, "n": 0}
    k = float(np.sum(hits))
    low, high = wilson(k, n, confidence)
    return {"value": k / n, "ci_low": low, "ci_high": high, "n": n}


def auroc(labels: Sequence[bool], scores: Sequence[float]) -> dict[str, Any]:
    """The area under the ROC curve of `scores` for telling `labels` apart (the chance that a random positive
    outscores a random negative, ties 1/2); null with the reason when a class has too few readings."""
    from sklearn.metrics import roc_auc_score  # scikit-learn is slow to import; only cells that compute need it

    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    out: dict[str, Any] = {"value": None, "n_positive": n_pos, "n_negative": n_neg, "reason": None}
    if n_pos == 0 or n_neg == 0:
        out["reason"] = "only one class among the readings" if n_pos + n_neg else "no readings"
    elif min(n_pos, n_neg) < MIN_PER_CLASS:
        out["reason"] = f"too few readings: fewer than {MIN_PER_CLASS} in a class"
    else:
        out["value"] = float(roc_auc_score(y, np.asarray(scores, dtype=float)))
    return out


def reliability(predicted: Sequence[float], labels: Sequence[bool], n_bins: int) -> dict[str, Any]:
    """Calibration over `n_bins` equal-width bins of the predicted probability: per bin its range, the mean
    predicted probability, the observed frequency of the label and the count (null means for an empty bin);
    the expected calibration error is the count-weighted mean of |mean predicted - observed| (null without
    readings)."""
    p = np.clip(np.asarray(predicted, dtype=float), 0.0, 1.0)
    y = np.asarray(labels, dtype=float)
    # Rounded first, so that 1 - 0.9 (0.0999...) falls in the same bin as 0.1; exactly 1 joins the top bin.
    index = np.minimum(np.floor(np.round(p * n_bins, 9)).astype(int), n_bins - 1)
    counts = np.bincount(index, minlength=n_bins)
    sum_p = np.bincount(index, weights=p, minlength=n_bins)
    sum_y = np.bincount(index, weights=y, minlength=n_bins)
    bins = []
    for b in range(n_bins):
        c = int(counts[b])
        bins.append({"low": b / n_bins, "high": (b + 1) / n_bins, "count": c,
                     "mean_predicted": float(sum_p[b] / c) if c else None,
                     "observed": float(sum_y[b] / c) if c else None})
    ece = float(np.abs(sum_p - sum_y).sum() / p.size) if p.size else None  # sum_b n_b/N |p_b - y_b|
    return {"ece": ece, "n_bins": n_bins, "n": int(p.size), "bins": bins}
