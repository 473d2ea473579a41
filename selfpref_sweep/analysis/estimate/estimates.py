"""The analysis' estimates from a sweep's items: paper units, source points, fine-tuned-vs-base Δs, the fits,
the fine-tune comparisons, the dose trend and the fits refitted on one joint article resample (resample.py).
One function computes them, so the report (pipeline.run_analysis) and the simulator's coverage study
(coverage.analyse) measure the same thing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from ...config import POSITIVE_CONTROL_TASKS
from .arms import arm_deltas
from .finetune_tests import (
    RECOGNITION_TASKS,
    SPECIFICITY_MARGIN,
    InteractionResult,
    SpecificityResult,
    fit_interactions,
    fit_specificities,
)
from .fit import FitResult, fit_paper_units, fit_robustness
from .paired import TrendResult, dose_trend, finetune_vs_base
from .paper_trend import paper_trends
from .positive_control import positive_control_arms
from .resample import ResampledFit, article_resample
from .units import paper_units, source_points

POSITIVE_CONTROLS = tuple(t.value for t in POSITIVE_CONTROL_TASKS)


@dataclass
class Estimates:
    units: pd.DataFrame  # the paper's unit: evaluator variant × dataset × setting × label
    points: pd.DataFrame  # the source level: one row per cell
    diffs: pd.DataFrame  # fine-tuned minus base model on the same items, per fine-tuned paper unit
    unit_fits: list[FitResult]  # the headline
    robustness_fits: list[FitResult]
    interactions: list[InteractionResult]
    specificity: list[SpecificityResult]
    trends: list[TrendResult]
    specificity_margin: dict[str, float] = field(default_factory=lambda: dict(SPECIFICITY_MARGIN))
    # The headline, specificity and interaction refitted on one joint article resample (resample.py): dataset
    # term, recognition's measurement error corrected; the paper's plain OLS stays in unit_fits.
    resampled: list[ResampledFit] = field(default_factory=list)
    # Per arm (a fine-tune recipe), its adapters' Δs pooled with training randomness (arms.py).
    arms: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Per positive-control arm, its Δ preference toward the direction it was trained (positive_control.py).
    positive_controls: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Per base evaluator, the paper's line over its recognition fine-tunes alone (paper_trend.py).
    paper_trends: pd.DataFrame = field(default_factory=pd.DataFrame)


def estimate(items: pd.DataFrame, cells: pd.DataFrame | None = None,
             recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
             specificity_margin: Mapping[str, float] | None = None) -> Estimates:
    """Every estimate the report prints from the items (``cells`` only adds the judge-competence status to the
    units); ``specificity_margin`` per scale overrides finetune_tests.SPECIFICITY_MARGIN. Positive-control arms
    (config.POSITIVE_CONTROL_TASKS: trained to move preference directly) have their units, Δs and arm rows, and
    stay out of every fit of preference on recognition, which they would bend by construction."""
    units = paper_units(items, cells, seed=0)
    fitted = items[~items["finetune_task"].astype(str).isin(POSITIVE_CONTROLS)] if "finetune_task" in items else items
    fitted_units = units[~units["finetune_task"].astype(str).isin(POSITIVE_CONTROLS)] \
        if "finetune_task" in units else units
    points = source_points(fitted)
    margins = {**SPECIFICITY_MARGIN, **{k: float(v) for k, v in (specificity_margin or {}).items()}}
    interactions = fit_interactions(fitted_units, points, recognition_tasks)
    return Estimates(
        units=units, points=points, diffs=finetune_vs_base(items, seed=0), unit_fits=fit_paper_units(fitted_units),
        robustness_fits=fit_robustness(points, fitted), interactions=interactions,
        specificity=fit_specificities(fitted_units, points, recognition_tasks, margins, interactions),
        trends=dose_trend(items, recognition_tasks, seed=0), specificity_margin=margins,
        resampled=article_resample(fitted, recognition_tasks, seed=0), arms=arm_deltas(items),
        positive_controls=positive_control_arms(items),
        paper_trends=paper_trends(fitted_units, fitted, recognition_tasks))
