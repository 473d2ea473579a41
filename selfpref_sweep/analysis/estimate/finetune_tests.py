"""The fine-tune tests: does preference follow recognition, whatever moved it?

- Specificity, the causal question: preference ~ recognition + recognition_finetune over fine-tuned points
  (one common slope), at the paper unit (OLS) and at the source level (clustered by evaluator variant). The
  recognition_finetune coefficient is the shift in preference at matched recognition, with a TOST
  equivalence test against a margin per scale. If recognition drives preference, whatever moved it, every
  fine-tune lies on one line and the shift is 0.
- Recognition vs control fine-tunes: preference ~ recognition * recognition_finetune over fine-tuned
  points, at the paper unit (OLS) and at the source level (clustered by evaluator variant). Its
  interaction, the difference of the two slopes, is also 0 on one common line: a non-zero one says the two
  kinds do not share a line, not that recognition drives preference. With replicated arms (several adapters
  per arm) it is fitted on each arm's mean over its adapters (arm_means), one point per arm as with one adapter.

Both on the paper's scale and on the log-odds scale, per setting × label and per transfer condition; degenerate
groups and missing intervals are handled as fit.py's fits handle them (ok=False with a note; ``no_interval``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ...config import SELF_RECOGNITION_TASKS, SpecificityMargin
from ...reporting.grouping import LEVEL_SOURCE, LEVEL_UNIT, condition_groups
from ...reporting.regression import ALPHA, clustered_ols
from ...stats.clustered import Estimate, too_few_clusters
from ..sweep.load import arm_name
from .fit import (
    _POINT_NAMES,
    OLS_BY_VARIANT,
    OLS_PLAIN,
    ON_ONE_LINE,
    _ols,
    _perfect_fit,
    _points,
    _scales_present,
    _usable,
)
from .units import without_units

# finetune_task values that train self-recognition (config.SELF_RECOGNITION_TASKS); every other non-"none"
# task is a control.
RECOGNITION_TASKS: tuple[str, ...] = tuple(t.value for t in SELF_RECOGNITION_TASKS)

# The specificity test's equivalence margin per scale: the defaults of analysis.specificity_margin, written once
# in the config schema (config.SpecificityMargin). Paper scale: 0.05, preference 0.50 -> 0.55 at matched
# recognition. Log-odds: 0.2 = logit(0.55), the same shift for a judge without position bias (both orders alike).
SPECIFICITY_MARGIN: dict[str, float] = asdict(SpecificityMargin())


@dataclass
class InteractionResult:
    """preference ~ recognition * recognition_finetune over the fine-tuned points of one group."""

    level: str
    group_by: str
    group: str
    n: int
    n_recognition: int
    n_control: int
    ok: bool
    note: str = ""
    scale: str = "paper"
    method: str = OLS_PLAIN
    n_clusters: int | None = None
    estimate: float = math.nan  # slope(recognition fine-tunes) - slope(control fine-tunes)
    se: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p: float = math.nan
    slope_control: float = math.nan
    slope_control_ci_low: float = math.nan
    slope_control_ci_high: float = math.nan
    slope_recognition: float = math.nan
    slope_recognition_ci_low: float = math.nan
    slope_recognition_ci_high: float = math.nan
    no_interval: str = ""  # why the CIs and p-value are absent although the estimates exist
    arm_means: bool = False  # replicated arms: fitted on each arm's mean over its adapters (arm_means)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SpecificityResult:
    """preference ~ recognition + recognition_finetune over the fine-tuned points of one group: the shift in
    preference at matched recognition (recognition fine-tunes above the controls' line), and whether it is
    equivalent to 0 within ``margin`` (TOST)."""

    level: str
    group_by: str
    group: str
    n: int
    n_recognition: int
    n_control: int
    ok: bool
    note: str = ""
    scale: str = "paper"
    method: str = OLS_PLAIN
    n_clusters: int | None = None
    shift: float = math.nan  # the recognition_finetune coefficient
    se: float = math.nan
    df: float = math.nan  # residual df (OLS) or Bell–McCaffrey df (clustered)
    ci_low: float = math.nan
    ci_high: float = math.nan
    p: float = math.nan  # H0: shift = 0
    slope: float = math.nan  # the common slope of preference on recognition
    slope_ci_low: float = math.nan
    slope_ci_high: float = math.nan
    margin: float = math.nan
    equivalence_p: float = math.nan  # TOST: the larger of the two one-sided p-values (H0: |shift| >= margin)
    recognition_span: float = math.nan  # the range of recognition over the fine-tuned points: the margin's yardstick
    interaction_p: float = math.nan  # the interaction test on the same points (fit_interaction)
    no_interval: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_interaction(
    data: pd.DataFrame,
    *,
    level: str = LEVEL_UNIT,
    group_by: str = "",
    group: str = "all",
    scale: str = "paper",
    recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
    cluster_col: str | None = None,
) -> InteractionResult:
    """Whether the preference-on-recognition slope differs between recognition fine-tunes and control
    fine-tunes: the coefficient of recognition:recognition_finetune in
    ``preference ~ recognition * recognition_finetune``. If recognition drives preference, whatever moved it,
    every fine-tune lies on one common line and this is 0: it tests whether the two kinds share a slope, not
    whether recognition causes preference (fit_specificity asks that, at matched recognition).

    ``data`` has recognition, preference, finetune_task (and evaluator_variant when clustered). Only
    fine-tuned points enter: the question is about the two kinds of fine-tune, and base models belong to
    neither. Clustered, recognition_finetune is constant within each cluster, so each kind needs enough
    clusters of its own for the test (clustered.too_few_clusters); with fewer the row has estimates only.
    """
    ft, pooled = arm_means(_finetuned(data, recognition_tasks))
    base = _finetune_counts(ft, level=level, group_by=group_by, group=group, scale=scale, cluster_col=cluster_col)
    base["arm_means"] = bool(pooled)
    n, n_rec, n_ctl = base["n"], base["n_recognition"], base["n_control"]
    kind = _POINT_NAMES.get(level, "points")
    if pooled:
        kind = f"arm means of {kind}"
    problems = _interaction_problems(ft["recognition"].to_numpy(float), ft["recognition_finetune"].to_numpy(), kind)
    if problems:
        note = (f"not enough {kind} (n={n}; recognition fine-tunes n={n_rec}, control fine-tunes n={n_ctl}): "
                + "; ".join(problems))
        return InteractionResult(**base, ok=False, note=note)
    fields = _interaction_fields(*_finetune_fit(ft, "preference ~ recognition * recognition_finetune", cluster_col))
    # A kind with exactly 2 points fits its line through both with no residual: its slope's CI (and the
    # interaction's) then comes from the other kind's scatter alone, which a reader should be told.
    thin = [label for label, count in (("recognition", n_rec), ("control", n_ctl)) if count == 2]
    note = "; ".join([pooled] * bool(pooled) + [
        f"the {label} fine-tunes' slope rests on 2 {kind}, so its CI comes from the other kind's scatter alone"
        for label in thin])
    return InteractionResult(**base, ok=True, note=note, **fields)


# Replicated fine-tunes and the interaction. An arm's adapters share its recognition (training randomness moves
# preference), so with several adapters per arm the points pile up at each arm's recognition, and each carries
# recognition's full sampling error. OLS slopes are attenuated by that error, the more where recognition spans
# less: the control arms' slope more than the recognition arms', so the two differ on a common line, and the
# extra points shrink the interval around that difference. The coverage study found the interaction rejecting a
# true common slope in up to 17% of sweeps with 3 adapters per arm (docs/results/coverage_adapters.md). Fitted on
# each arm's mean over its adapters, the interaction has one point per arm, as with one adapter, with less
# error variance, and the arm means' scatter about the lines carries the training randomness: 5-9% there.
ARM_MEANS_NOTE = "replicated arms: each arm's adapters averaged into one point ({n} points from {m})"


def arm_point_codes(frame: pd.DataFrame) -> tuple[np.ndarray, list[str]] | None:
    """(per row the number of its arm point, each arm point's arm name), where some arm has several adapters
    among ``frame``'s rows (evaluator_variant, with dataset and source where present): an arm point is one arm
    on one dataset (and source). None where every arm has one adapter: nothing to pool."""
    if frame.empty or "evaluator_variant" not in frame:
        return None
    variants = frame["evaluator_variant"].astype(str)
    arms = variants.map(arm_name)
    if (arms == variants).all():
        return None
    keys = [arms] + [frame[c].astype(str) for c in ("dataset", "source") if c in frame]
    codes, uniques = pd.MultiIndex.from_arrays(keys).factorize()
    if len(uniques) == len(frame):
        return None
    return np.asarray(codes), [str(u[0]) for u in uniques]


def arm_means(ft: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The fine-tuned points with each arm's adapters averaged into one point per dataset (and source), and the
    note that says so ("" and the points unchanged where no arm has several adapters)."""
    found = arm_point_codes(ft)
    if found is None:
        return ft, ""
    codes, arms = found
    first = ft.groupby(codes, sort=True).first()
    means = ft.groupby(codes, sort=True)[["recognition", "preference"]].mean()
    out = first.assign(recognition=means["recognition"], preference=means["preference"],
                       evaluator_variant=arms).reset_index(drop=True)
    return out, ARM_MEANS_NOTE.format(n=len(out), m=len(ft))


def _finetune_counts(ft: pd.DataFrame, *, level: str, group_by: str, group: str, scale: str,
                     cluster_col: str | None) -> dict[str, Any]:
    """The fields a fine-tune comparison (interaction or specificity) records about its points."""
    n, n_rec = int(len(ft)), int(ft["recognition_finetune"].sum())
    return dict(level=level, group_by=group_by, group=group, n=n, n_recognition=n_rec, n_control=n - n_rec,
                scale=scale, method=OLS_PLAIN if cluster_col is None else OLS_BY_VARIANT,
                n_clusters=int(ft[cluster_col].nunique()) if cluster_col is not None else None)


def _finetune_fit(ft: pd.DataFrame, formula: str, cluster_col: str | None
                  ) -> tuple[Callable[[np.ndarray], Estimate], list[str], str]:
    """The formula fitted over fine-tuned points: a function giving any linear contrast's estimate, the
    parameter names, and why there is no honest interval ("" when there is one). Plain OLS at the paper unit;
    clustered by variant (CR2), where recognition_finetune, constant within clusters, needs enough of each kind."""
    if cluster_col is None:
        res = _ols(ft, formula)
        why = ON_ONE_LINE if _perfect_fit(float(res.ssr), ft["preference"].to_numpy(float)) else ""
        return (lambda c: _plain_contrast(res, c)), list(res.params.index), why
    cres = clustered_ols(ft, formula, ft[cluster_col])
    why = too_few_clusters(ft[cluster_col], ft["recognition_finetune"].to_numpy() == 1,
                           ("recognition fine-tune", "control fine-tune"))
    return (lambda c: cres.contrast(c, ALPHA)), cres.names, why


def _interaction_problems(rec: np.ndarray, is_rec: np.ndarray, kind: str) -> list[str]:
    """Why the interaction is not identified: each kind needs >= 2 points with different recognition, and a
    residual degree of freedom must be left over the 4 parameters."""
    if rec.size == 0:
        return ["no fine-tuned points"]
    problems = []
    for label, mask in (("recognition", is_rec == 1), ("control", is_rec == 0)):
        sub = rec[mask]
        if sub.size < 2:
            problems.append(f"{label} fine-tunes need at least 2 {kind}")
        elif np.ptp(sub) == 0:
            problems.append(f"recognition has zero variance among {label} fine-tunes")
    if rec.size < 5 and not problems:
        problems.append(f"4 parameters need at least 5 {kind}")
    return problems


def _plain_contrast(res: Any, c: np.ndarray) -> Estimate:
    test = res.t_test(c)
    lo, hi = np.asarray(test.conf_int(alpha=ALPHA))[0]
    return Estimate(float(np.ravel(test.effect)[0]), float(np.ravel(test.sd)[0]), float(res.df_resid),
                    float(lo), float(hi), float(np.ravel(test.pvalue)[0]))


def _interaction_fields(contrast: Any, names: list[str], no_interval: str) -> dict[str, Any]:
    """The interaction, the control slope and the recognition slope (recognition + the interaction, a linear
    contrast); estimates only when ``no_interval`` says why there is no honest interval."""
    term = "recognition:recognition_finetune"
    vec = {name: np.array([1.0 if k == name else 0.0 for k in names]) for name in ("recognition", term)}
    inter, ctl, rec = (contrast(vec[term]), contrast(vec["recognition"]),
                       contrast(vec["recognition"] + vec[term]))
    out = dict(estimate=inter.estimate, se=inter.se, slope_control=ctl.estimate, slope_recognition=rec.estimate,
               no_interval=no_interval)
    if not no_interval:
        out.update(ci_low=inter.ci_low, ci_high=inter.ci_high, p=inter.p, slope_control_ci_low=ctl.ci_low,
                   slope_control_ci_high=ctl.ci_high, slope_recognition_ci_low=rec.ci_low,
                   slope_recognition_ci_high=rec.ci_high)
    return out


def fit_interactions(
    units: pd.DataFrame, points: pd.DataFrame, recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
) -> list[InteractionResult]:
    """The recognition-vs-control interaction at the paper unit (OLS) and the source level (clustered by
    evaluator variant), per setting × label and per transfer condition, both scales."""
    out: list[InteractionResult] = []
    for level, name, group, scale, data, cluster in _finetune_groups(units, points):
        if data is None:
            out.append(InteractionResult(level, name, group, 0, 0, 0, ok=False,
                                         note=f"not enough {_POINT_NAMES[level]} (n=0)"))
            continue
        out.append(fit_interaction(data, level=level, group_by=name, group=group, scale=scale,
                                   recognition_tasks=recognition_tasks, cluster_col=cluster))
    return out


def _finetune_groups(units: pd.DataFrame, points: pd.DataFrame) -> Any:
    """(level, grouping, group, scale, points or None when the level has none, cluster column): the
    groups the fine-tune comparisons are fitted on, at the paper unit (plain OLS) and at the source level
    (clustered by evaluator variant), per setting × label and per transfer condition, both scales."""
    for level, frame, template, cluster in (
        (LEVEL_UNIT, units, "{q}_{s}_mean", None),
        (LEVEL_SOURCE, points, "{q}_{s}", "evaluator_variant"),
    ):
        if frame.empty:
            yield level, "setting × label", "all", "paper", None, cluster
            continue
        for name, group, sub in condition_groups(frame, within="transfer"):
            for scale in _scales_present(frame, template):
                data = _points(sub, template.format(q="rec", s=scale), template.format(q="pref", s=scale),
                               ["finetune_task", "evaluator_variant", *(c for c in ("dataset", "source") if c in sub)])
                yield level, name, group, scale, data, cluster


def _finetuned(data: pd.DataFrame, recognition_tasks: Sequence[str]) -> pd.DataFrame:
    """The fine-tuned points with usable values, and recognition_finetune (1: a recognition task)."""
    ft = data[data["finetune_task"].notna() & (data["finetune_task"] != "none")]
    return _usable(ft.assign(recognition_finetune=ft["finetune_task"].isin(list(recognition_tasks)).astype(int)))


def tost_p(estimate: float, se: float, df: float, margin: float) -> float:
    """Two one-sided t tests of H0: |effect| >= margin; the larger p. Below ALPHA, the 90% interval lies inside
    (-margin, margin): the effect is shown to be smaller than the margin (NaN without an interval)."""
    if not (se > 0 and df > 0 and margin > 0 and math.isfinite(estimate)):
        return math.nan
    p_above = float(stats.t.sf((estimate + margin) / se, df))  # H0: effect <= -margin
    p_below = float(stats.t.cdf((estimate - margin) / se, df))  # H0: effect >= +margin
    return max(p_above, p_below)


# The interaction's equivalence margin: "one common line" needs the two kinds' slopes shown within this much of
# each other (preference per unit of recognition, the same on both scales), not merely not shown to differ.
SLOPE_MARGIN = 0.5


def specificity_verdict(ci_low: float, ci_high: float, equivalence_p: float, margin: float,
                        span: float = math.nan, interaction: tuple[float, float, float, float] | None = None
                        ) -> str:
    """The specificity test's outcome in words (empty without an interval), read from the fit the report names
    for the shift (the corrected one: resample.REPORTED). ``span``: the recognition range the fine-tunes span,
    which the margin is stated against. ``interaction``: (estimate, se, df, p) of the report's interaction test
    on the same points. "One common line" needs two equivalence tests: TOST of the shift within the margin and
    TOST of the slope difference within SLOPE_MARGIN; an interaction that does not reject is "not shown to
    differ", never one line."""
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        return ""
    equivalent = math.isfinite(equivalence_p) and equivalence_p < ALPHA
    within = f"±{margin:g}"
    if math.isfinite(span) and span > 0:
        within += f" ({margin / span:.0%} of the {span:.3g} recognition range the fine-tunes span)"
    ci = f"95% CI [{ci_low:.3f}, {ci_high:.3f}]"
    if ci_low > 0 or ci_high < 0:
        way = "more" if ci_low > 0 else "less"
        text = (f"{'positive' if ci_low > 0 else 'negative'} shift ({ci}): recognition fine-tunes prefer their own "
                f"summaries {way} than their recognition predicts")
        return text + (f", though by less than {within} (TOST p = {equivalence_p:.3f})" if equivalent else "")
    if not equivalent:
        tost = f"TOST p = {equivalence_p:.3f}" if math.isfinite(equivalence_p) else "no TOST"
        return f"inconclusive: neither a shift ({ci}) nor equivalence within {within} ({tost})"
    shift = f"the shift is within {within} (TOST p = {equivalence_p:.3f})"
    if interaction is None or not math.isfinite(interaction[3]):
        return f"shift within {within} (TOST p = {equivalence_p:.3f}); whether the slopes agree is untested"
    est, se, df, p = interaction
    if p < ALPHA:
        return f"no common line: {shift}, but the interaction test rejects a common slope (p = {p:.3f})"
    slope_p = tost_p(est, se, df, SLOPE_MARGIN)
    if math.isfinite(slope_p) and slope_p < ALPHA:
        return (f"one common line: {shift} and the slopes are within ±{SLOPE_MARGIN:g} of each other "
                f"(interaction TOST p = {slope_p:.3f})")
    return (f"shift within {within} (TOST p = {equivalence_p:.3f}); the slopes are not shown to differ "
            f"(interaction p = {p:.3f}) nor shown within ±{SLOPE_MARGIN:g} (TOST p = {slope_p:.3f})")


def _specificity_problems(rec: np.ndarray, is_rec: np.ndarray, kind: str) -> list[str]:
    """Why the shift is not identified: each kind needs a point, recognition must vary within a kind (else
    the common slope and the shift are confounded), and a residual degree of freedom must remain."""
    if rec.size == 0:
        return ["no fine-tuned points"]
    masks = {"recognition": is_rec == 1, "control": is_rec == 0}
    problems = [f"no {label} fine-tunes" for label, mask in masks.items() if not mask.any()]
    if not problems and not any(mask.sum() >= 2 and np.ptp(rec[mask]) > 0 for mask in masks.values()):
        problems.append("recognition does not vary within either kind, so the common slope is not identified")
    if rec.size < 4 and not problems:
        problems.append(f"3 parameters need at least 4 {kind}")
    return problems


def _specificity_fields(contrast: Any, names: list[str], no_interval: str, margin: float) -> dict[str, Any]:
    """The shift and the common slope; their intervals and the TOST unless ``no_interval``."""
    def vec(name: str) -> np.ndarray:
        return np.array([1.0 if k == name else 0.0 for k in names])

    shift, slope = contrast(vec("recognition_finetune")), contrast(vec("recognition"))
    out = dict(shift=shift.estimate, se=shift.se, df=shift.df, slope=slope.estimate, no_interval=no_interval)
    if no_interval:
        return out
    eq_p = tost_p(shift.estimate, shift.se, shift.df, margin)
    # No reading here: this paper-style fit over-rejects a true null (docs/coverage.md); the report reads the
    # corrected shift (report/fit_tables.resampled_table, specificity_verdict).
    out.update(ci_low=shift.ci_low, ci_high=shift.ci_high, p=shift.p, slope_ci_low=slope.ci_low,
               slope_ci_high=slope.ci_high, equivalence_p=eq_p)
    return out


def fit_specificity(
    data: pd.DataFrame,
    *,
    level: str = LEVEL_UNIT,
    group_by: str = "",
    group: str = "all",
    scale: str = "paper",
    recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
    cluster_col: str | None = None,
    margin: float | None = None,
    interaction: InteractionResult | None = None,
) -> SpecificityResult:
    """The causal question at matched recognition: the recognition_finetune coefficient of
    ``preference ~ recognition + recognition_finetune`` (one common slope) over fine-tuned points, with a
    TOST against ``margin`` (default SPECIFICITY_MARGIN[scale]).

    If recognition drives preference whatever moved it, every fine-tune lies on one line: shift 0. Positive:
    recognition fine-tunes raise preference beyond what their recognition predicts; negative: below it.
    Base models are left out: a shift common to every fine-tune (fine-tuning as such, e.g. on position bias)
    would otherwise be read as the recognition fine-tunes' own. Clustered, recognition_finetune is constant
    within clusters, so each kind needs enough clusters (too_few_clusters); with fewer, estimates only.
    """
    ft = _finetuned(data, recognition_tasks)
    base = _finetune_counts(ft, level=level, group_by=group_by, group=group, scale=scale, cluster_col=cluster_col)
    base["margin"] = SPECIFICITY_MARGIN.get(scale, math.nan) if margin is None else float(margin)
    n, n_rec = base["n"], base["n_recognition"]
    kind = _POINT_NAMES.get(level, "points")
    problems = _specificity_problems(ft["recognition"].to_numpy(float), ft["recognition_finetune"].to_numpy(), kind)
    if problems:
        return SpecificityResult(**base, ok=False, note=f"not enough {kind} (n={n}; recognition fine-tunes "
                                 f"n={n_rec}, control fine-tunes n={n - n_rec}): " + "; ".join(problems))
    # The interaction on the same points (``interaction``, where the caller has fitted it already): "one common
    # line" needs it not to reject a common slope.
    if interaction is None:
        interaction = fit_interaction(data, level=level, group_by=group_by, group=group, scale=scale,
                                      recognition_tasks=recognition_tasks, cluster_col=cluster_col)
    base["recognition_span"] = float(np.ptp(ft["recognition"].to_numpy(float)))
    base["interaction_p"] = interaction.p
    fields = _specificity_fields(*_finetune_fit(ft, "preference ~ recognition + recognition_finetune", cluster_col),
                                 base["margin"])
    # One point of a kind is its own distance from the other kind's line: its CI is that line's scatter alone.
    thin = [label for label, count in (("recognition", n_rec), ("control", n - n_rec)) if count == 1]
    note = "; ".join(f"one {label} fine-tune {kind[:-1]}: the shift is its distance from the other kind's line, "
                     "and its CI comes from that kind's scatter alone" for label in thin)
    return SpecificityResult(**base, ok=True, note=note, **fields)


def fit_specificities(
    units: pd.DataFrame, points: pd.DataFrame, recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
    margins: Mapping[str, float] | None = None, interactions: Sequence[InteractionResult] = (),
) -> list[SpecificityResult]:
    """The specificity test at the paper unit (OLS) and the source level (clustered by evaluator variant),
    per setting × label and per transfer condition, both scales; ``margins`` per scale (SPECIFICITY_MARGIN).
    ``interactions``: fit_interactions' results on the same points, which the verdicts read (fitted here where
    absent)."""
    margins = {**SPECIFICITY_MARGIN, **(margins or {})}
    fitted = {(r.level, r.group_by, r.group, r.scale): r for r in interactions}
    out: list[SpecificityResult] = []
    for level, name, group, scale, data, cluster in _finetune_groups(units, points):
        if data is None:
            out.append(SpecificityResult(level, name, group, 0, 0, 0, ok=False,
                                         note=f"not enough {_POINT_NAMES[level]} (n=0)"))
            continue
        out.append(fit_specificity(data, level=level, group_by=name, group=group, scale=scale,
                                   recognition_tasks=recognition_tasks, cluster_col=cluster,
                                   margin=margins.get(scale), interaction=fitted.get((level, name, group, scale))))
    return out


# --- the interaction's robustness ----------------------------------------------------------------------------
ROBUSTNESS_COLUMNS = ["setting", "label", "evaluator", "scale", "variant", "n", "n_recognition", "n_control",
                      "estimate", "ci_low", "ci_high", "p", "slope_control", "slope_control_ci_low",
                      "slope_control_ci_high", "method", "note"]
AS_REPORTED, ONE_CLUSTER_PER_MODEL, DEGENERATE_KEPT = ("as reported", "each fine-tuned model's points one cluster",
                                                       "degenerate arms kept")
DUPLICATES_DROPPED = "without arms that share one fine-tune identity (nor degenerate arms)"


def shared_identity(units: pd.DataFrame) -> pd.Series:
    """Per paper unit, whether its fine-tune identity (summary.json's finetune fingerprint) is also another arm's:
    two arms that may be one model's judgements (the paper's xsum random and always_1 fine-tunes share one model
    id)."""
    if "finetune_fingerprint" not in units or units.empty:
        return pd.Series(False, index=units.index)
    fp = units["finetune_fingerprint"].fillna("").astype(str)
    arms = units.assign(_fp=fp)[fp != ""].groupby("_fp")["evaluator_variant"].nunique()
    return fp.isin(set(arms[arms > 1].index))


def _robustness_variants(units: pd.DataFrame, degenerate: pd.DataFrame, recognition_tasks: Sequence[str]
                         ) -> list[tuple[str, pd.DataFrame, str | None]]:
    """(variant, the units it fits, its cluster column) for one base evaluator's fine-tuned paper units."""
    kept = without_units(units, degenerate)
    out = [(AS_REPORTED, kept, None), (ONE_CLUSTER_PER_MODEL, kept, "evaluator_variant")]
    controls = sorted(set(kept["finetune_task"].astype(str)) - set(recognition_tasks))
    out += [(f"without {task}", kept[kept["finetune_task"].astype(str) != task], None) for task in controls]
    shared = shared_identity(units)  # flagged whether or not they are degenerate too (the paper's are)
    if shared.any():
        out.append((DUPLICATES_DROPPED, without_units(kept, units[shared]), None))
    if len(kept) < len(units):
        out.append((DEGENERATE_KEPT, units, None))
    return out


def interaction_robustness(units: pd.DataFrame, degenerate: pd.DataFrame,
                           recognition_tasks: Sequence[str] = RECOGNITION_TASKS) -> pd.DataFrame:
    """Per setting × label × base evaluator with two or more control tasks, the recognition-vs-control interaction
    and the control slope at the paper unit (plain OLS) as reported, with each fine-tuned model's points (its
    datasets) one cluster (CR2, BM df), leaving out one control task at a time, without arms that share one fine-tune
    identity (flagged duplicates), and with the degenerate arms the fits leave out kept: whether the reading rests on
    one task, one model's two points, a duplicated model, or constant answerers."""
    tuned = units[units["finetune_task"].notna() & (units["finetune_task"].astype(str) != "none")] \
        if not units.empty else units
    rows = []
    for (setting, label, evaluator), sub in tuned.groupby(["setting", "label", "evaluator"], sort=True):
        if len(set(sub["finetune_task"].astype(str)) - set(recognition_tasks)) < 2:
            continue
        for scale in _scales_present(sub, "{q}_{s}_mean"):
            for variant, data, cluster in _robustness_variants(sub, degenerate, recognition_tasks):
                pts = _points(data, f"rec_{scale}_mean", f"pref_{scale}_mean", ["finetune_task", "evaluator_variant"])
                r = fit_interaction(pts, scale=scale, recognition_tasks=recognition_tasks, cluster_col=cluster)
                rows.append({"setting": setting, "label": label, "evaluator": evaluator, "scale": scale,
                             "variant": variant, **{k: getattr(r, k) for k in ROBUSTNESS_COLUMNS[5:]}})
    return pd.DataFrame(rows, columns=ROBUSTNESS_COLUMNS)
