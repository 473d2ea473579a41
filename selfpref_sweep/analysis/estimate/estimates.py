"""The analysis' estimates from a sweep's items: paper units, source points, fine-tuned-vs-base Δs, the fits,
the fine-tune comparisons, the dose trend and the fits refitted on one joint article resample (resample.py).
One function computes them, so the report (pipeline.run_analysis) and the simulator's coverage study
(coverage.analyse) measure the same thing. Degenerate arms (units.degenerate_units: one constant answer) keep
their units, Δs and arm rows, and stay out of every fit of preference on recognition; each fit whose group held
one says how many in its note."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ...config import POSITIVE_CONTROL_TASKS
from ...reporting.grouping import BY_EVALUATOR, GROUPINGS, UNIT_KEYS, key_frame
from .arms import StatedTrainingSD, arm_deltas
from .finetune_tests import (
    RECOGNITION_TASKS,
    ROBUSTNESS_COLUMNS,
    SPECIFICITY_MARGIN,
    InteractionResult,
    SpecificityResult,
    fit_interactions,
    fit_specificities,
    interaction_robustness,
)
from .fit import FitResult, fit_paper_units, fit_robustness
from .paired import TrendResult, dose_trend, finetune_vs_base
from .paper_trend import paper_trends
from .positive_control import positive_control_arms
from .resample import ResampledFit, article_resample
from .units import DEGENERATE_COLUMNS, degenerate_units, paper_units, source_points, without_units

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
    # The training SD the user stated for one-adapter arms (arms.StatedTrainingSD), None where none was.
    training_sd: StatedTrainingSD | None = None
    # Per positive-control arm, its Δ preference toward the direction it was trained (positive_control.py).
    positive_controls: pd.DataFrame = field(default_factory=pd.DataFrame)
    # Per base evaluator, the paper's line over its recognition fine-tunes alone (paper_trend.py).
    paper_trends: pd.DataFrame = field(default_factory=pd.DataFrame)
    # The fine-tuned units left out of every fit for one constant answer (units.degenerate_units), with the reason.
    degenerate: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DEGENERATE_COLUMNS))
    # Per base evaluator with two or more control tasks, the interaction's robustness (finetune_tests.py).
    interaction_robustness: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ROBUSTNESS_COLUMNS))


def estimate(items: pd.DataFrame, cells: pd.DataFrame | None = None,
             recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
             specificity_margin: Mapping[str, float] | None = None,
             training_sd: StatedTrainingSD | None = None) -> Estimates:
    """Every estimate the report prints from the items (``cells`` only adds the judge-competence status to the
    units); ``specificity_margin`` per scale overrides finetune_tests.SPECIFICITY_MARGIN; ``training_sd``: a
    stated training SD for one-adapter arms (arms.py), None where none is stated. Positive-control arms
    (config.POSITIVE_CONTROL_TASKS: trained to move preference directly) have their units, Δs and arm rows, and
    stay out of every fit of preference on recognition, which they would bend by construction; so do degenerate
    arms (one constant answer: units.degenerate_units), which carry no slope information, with a note per fit."""
    units = paper_units(items, cells, seed=0)
    degenerate = degenerate_units(items)
    fitted = items[~items["finetune_task"].astype(str).isin(POSITIVE_CONTROLS)] if "finetune_task" in items else items
    fitted_units = units[~units["finetune_task"].astype(str).isin(POSITIVE_CONTROLS)] \
        if "finetune_task" in units else units
    robustness = interaction_robustness(fitted_units, degenerate, recognition_tasks)
    fitted, fitted_units = without_units(fitted, degenerate), without_units(fitted_units, degenerate)
    points = source_points(fitted)
    margins = {**SPECIFICITY_MARGIN, **{k: float(v) for k, v in (specificity_margin or {}).items()}}
    interactions = fit_interactions(fitted_units, points, recognition_tasks)
    specificity = fit_specificities(fitted_units, points, recognition_tasks, margins, interactions)
    noted = _left_out_counts(degenerate)
    return Estimates(
        units=units, points=points, diffs=finetune_vs_base(items, seed=0),
        unit_fits=_noted(fit_paper_units(fitted_units), noted),
        robustness_fits=_noted(fit_robustness(points, fitted), noted), interactions=_noted(interactions, noted),
        specificity=_noted(specificity, noted),
        trends=dose_trend(items, recognition_tasks, seed=0), specificity_margin=margins,
        resampled=_noted(article_resample(fitted, recognition_tasks, seed=0), noted),
        arms=arm_deltas(items, training_sd), positive_controls=positive_control_arms(items, training_sd),
        training_sd=training_sd,
        paper_trends=_noted_trends(paper_trends(fitted_units, fitted, recognition_tasks), degenerate,
                                   recognition_tasks),
        degenerate=degenerate, interaction_robustness=robustness)


LEFT_OUT = "{n} degenerate fine-tuned unit(s) left out: one constant answer"


def _left_out_counts(degenerate: pd.DataFrame) -> Counter:
    """(grouping, group label) -> how many degenerate units that group of a fit would have held (the labels of
    reporting.grouping.condition_groups: the condition, and within it the dataset, transfer and base evaluator)."""
    counts: Counter = Counter()
    for row in key_frame(degenerate, [*UNIT_KEYS, "transfer", "evaluator"]).itertuples(index=False):
        cond = f"{row.setting} / {row.label}"
        counts.update([(GROUPINGS[0][0], cond), (GROUPINGS[1][0], f"{cond} / {row.dataset}"),
                       ("setting × label × transfer", f"{cond} / {row.transfer}"),
                       (BY_EVALUATOR, f"{cond} / {row.evaluator}")])
    return counts


def _noted(results: list[Any], counts: Counter) -> list[Any]:
    """Each fit whose group held degenerate units, with how many were left out in its note."""
    for r in results:
        n = counts.get((r.group_by, r.group), 0)
        if n:
            r.note = "; ".join(x for x in (r.note, LEFT_OUT.format(n=n)) if x)
    return results


def _noted_trends(trends: pd.DataFrame, degenerate: pd.DataFrame, recognition_tasks: Sequence[str]) -> pd.DataFrame:
    """The paper's trend rows (recognition fine-tunes of one base evaluator), with the degenerate recognition
    fine-tunes each row's line left out counted in its note."""
    rec = degenerate[degenerate["finetune_task"].astype(str).isin(list(recognition_tasks))]
    if trends.empty or rec.empty:
        return trends
    trends = trends.copy()
    for i, row in trends.iterrows():
        at = rec[(rec["setting"] == row["setting"]) & (rec["label"] == row["label"])
                 & (rec["evaluator"].astype(str) == row["evaluator"])
                 & ((row["transfer"] == "all") | (rec["transfer"].astype(str) == row["transfer"]))]
        if len(at):
            trends.at[i, "note"] = "; ".join(x for x in (row["note"], LEFT_OUT.format(n=len(at))) if x)
    return trends
