"""Recognition read as a classifier: its settings, fields of `judge` (judge.recognition_classifier,
judge.calibration_bins)."""

from __future__ import annotations

from dataclasses import dataclass

from ...schema_fields import Range, Switch, ranged


@dataclass
class ClassifierSettings:
    # Recognition read as a classifier (accuracy per order, AUROC, calibration), from the cell's own
    # recognition answers: no extra calls, so auto is on.
    recognition_classifier: Switch = Switch.auto
    calibration_bins: int = ranged(10, Range(low=2, high=100, integer=True))
