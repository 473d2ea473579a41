"""The surface-feature baseline's settings: fields of `judge` (judge.surface_baseline, judge.surface_folds)."""

from __future__ import annotations

from dataclasses import dataclass

from ...schema_fields import Range, Switch, ranged


@dataclass
class SurfaceSettings:
    # A surface-feature authorship baseline (length, punctuation, lexical features; no model asked):
    # cross-validated with articles as groups. auto: on where the cell has enough articles for its folds.
    surface_baseline: Switch = Switch.auto
    surface_folds: int = ranged(5, Range(low=2, high=50, integer=True))
