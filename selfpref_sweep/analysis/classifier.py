"""Authorship read as a classification, per cell: the judge's recognition answers as a classifier (accuracy per
presentation order, AUROC, calibration; recognition_classifier.py) and the surface-feature baseline that asks
no model (surface_baseline.py). Both come from summary.json, through the cell frame's rc_* and sb_* columns.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pandas as pd

from .tables import DASH, fmt, fmt_ci, fmt_int

_CELL = ("evaluator_variant", "source", "dataset", "setting", "label")
_CELL_HEAD = {"evaluator_variant": "evaluator variant", "source": "source", "dataset": "dataset",
              "setting": "setting", "label": "label"}


def _on(cells: pd.DataFrame, column: str) -> pd.Series:
    """Which cells recorded the measurement on (a NaN/None of an older cell, or an off one, is False)."""
    if cells.empty or column not in cells:
        return pd.Series(False, index=cells.index, dtype=bool)
    return cells[column].map(lambda v: isinstance(v, (bool, np.bool_)) and bool(v)).astype(bool)


def has_classifiers(cells: pd.DataFrame) -> bool:
    """Some cell recorded recognition as a classifier or the surface baseline."""
    return bool(_on(cells, "rc_enabled").any() or _on(cells, "sb_enabled").any())


def has_reliability(cells: pd.DataFrame) -> bool:
    return bool(not cells.empty and "rc_reliability" in cells
                and cells["rc_reliability"].map(lambda b: bool(reliability_points(b)[2].sum())).any())


def reliability_points(bins: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean predicted, observed frequency, count) of a cell's non-empty reliability bins (empty arrays when
    the cell recorded none)."""
    rows = [b for b in bins if isinstance(b, dict) and b.get("count")] if isinstance(bins, list) else []
    return (np.array([float(b["mean_predicted"]) for b in rows]), np.array([float(b["observed"]) for b in rows]),
            np.array([int(b["count"]) for b in rows], dtype=int))


def _with_ci(value: Any, low: Any, high: Any) -> str:
    text = fmt(value)
    return text if text == DASH else f"{text} {fmt_ci(low, high)}"


def _split(c: Any, pairwise_key: str, individual_key: str) -> str:
    key = pairwise_key if c.setting == "pairwise" else individual_key
    return _with_ci(getattr(c, key), getattr(c, f"{key}_ci_low"), getattr(c, f"{key}_ci_high"))


def classifier_table(cells: pd.DataFrame) -> Optional[pd.DataFrame]:
    """Per cell that read recognition as a classifier: accuracy per order (pairwise: own shown first, own
    shown second; individual: own at 1/2, other at 1/2) and overall, each with its Wilson 95% CI, AUROC, ECE
    and the items used. None where no cell recorded it."""
    on = cells[_on(cells, "rc_enabled")]
    if on.empty:
        return None
    return pd.DataFrame([{
        **{_CELL_HEAD[k]: getattr(c, k) for k in _CELL},
        "accuracy: forward · own": _split(c, "rc_accuracy_forward", "rc_accuracy_own"),
        "accuracy: backward · other": _split(c, "rc_accuracy_backward", "rc_accuracy_other"),
        "accuracy overall [95% CI]": _with_ci(c.rc_accuracy, c.rc_accuracy_ci_low, c.rc_accuracy_ci_high),
        "AUROC": fmt(c.rc_auroc) if not math.isnan(c.rc_auroc) else (c.rc_auroc_reason or DASH),
        "ECE": fmt(c.rc_ece), "items": fmt_int(c.rc_n), "excluded": fmt_int(c.rc_n_excluded),
    } for c in on.itertuples()])


def surface_table(cells: pd.DataFrame) -> Optional[pd.DataFrame]:
    """Per cell that recorded the surface baseline (on or off): its held-out accuracy with the Wilson 95% CI,
    AUROC, items, folds and leading features beside the judge's verbal recognition accuracy; a cell where it
    did not run says why. None where no cell recorded it."""
    recorded = cells[cells["sb_enabled"].map(lambda v: isinstance(v, (bool, np.bool_)))] if "sb_enabled" in cells \
        else cells.iloc[0:0]
    if recorded.empty:
        return None
    return pd.DataFrame([{
        **{_CELL_HEAD[k]: getattr(c, k) for k in _CELL},
        "judge's recognition accuracy": fmt(getattr(c, "rc_accuracy", math.nan)),
        "surface baseline accuracy [95% CI]": _with_ci(c.sb_accuracy, c.sb_accuracy_ci_low, c.sb_accuracy_ci_high),
        "AUROC": fmt(c.sb_auroc), "items": fmt_int(c.sb_n), "folds": fmt_int(c.sb_folds),
        "leading features (standardized coefficient)": c.sb_top_features or DASH,
        "note": "" if not math.isnan(c.sb_accuracy) else c.sb_reason,
    } for c in recorded.itertuples()])


# The coverage study's finding for the pairwise overall accuracy (docs/coverage.md): an item's mean of two hits
# (0, ½ or 1) varies less than the binomial trial Wilson assumes, so its interval is too wide, never too narrow.
OVERALL_CONSERVATIVE = (
    "In pairwise cells that overall interval is conservative: simulated sweeps with a known truth found it "
    "covering 99.9-100% for a nominal 95% at 10 and 20 articles, where the per-order intervals (and the "
    "individual setting's) held 94.6-96.4% (docs/coverage.md).")

CLASSIFIER_TEXT = (
    "The judge's recognition answers read as a classifier, from each cell's summary.json. Pairwise: accuracy is "
    "the share of readings that give the own summary more than ½ (a tie counts ½), forward (own shown first) and "
    "backward (own shown second) apart, then over both; a judge that always answers \"1\" scores 1 forward and 0 "
    "backward. AUROC ranks P(answer \"1\") for own-first against own-second readings, so no position bias moves "
    "it (½ = chance). Individual: accuracy is the share of items with P(Yes | own) above P(Yes | other); the "
    "split columns are the accuracy at ½ on own summaries (Yes) and on other summaries (No); AUROC ranks P(Yes) "
    "of own against other summaries. ECE is the expected calibration error of the same probability over "
    "judge.calibration_bins equal-width bins (0 = calibrated); the figure shows its reliability bins (the "
    "diagonal is perfect calibration, point size the bin's readings). Accuracies carry Wilson intervals; over both "
    "orders each item counts once (the mean of its two readings), since its two orders share an article. "
    + OVERALL_CONSERVATIVE + " AUROC and ECE are descriptive here: they carry no interval.")

SURFACE_TEXT = (
    "Can own summaries be told from other summaries without asking any model? A logistic regression on surface "
    "features (length, sentence count, punctuation per character, digit and uppercase shares, type-token ratio, "
    "stopword share, Flesch reading ease) of own − other, cross-validated with articles as groups "
    "(GroupKFold, judge.surface_folds), gives per item a held-out P(own); its accuracy is the share of items "
    "above ½ with a Wilson 95% interval. A judge whose recognition accuracy is no better than this baseline "
    "needs no more than these features to 'recognize' itself. The leading features are the largest "
    "standardized coefficients of a fit on every item (> 0: own has more of it).")


def classifier_note(cells: pd.DataFrame) -> str:
    n = int(_on(cells, "rc_enabled").sum())
    return CLASSIFIER_TEXT if n else "No cell recorded recognition as a classifier."


def surface_note(cells: pd.DataFrame) -> str:
    ran = int((_on(cells, "sb_enabled") & cells.get("sb_accuracy", pd.Series(dtype=float)).notna()).sum()) \
        if not cells.empty else 0
    return SURFACE_TEXT + (f" It ran in {ran} cell(s)." if ran else " It ran in no cell (the table says why).")
