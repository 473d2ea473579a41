"""statsmodels regressions of self-preference on self-recognition (formula API throughout).

- Headline, the paper's unit: OLS of a unit's preference on its recognition, one point per evaluator
  variant × dataset (averaged over sources, see units.py), per setting × label condition (all datasets,
  and per dataset). Never pooled across settings or label conditions.
- Robustness, the source level (one point per cell): OLS with CIs clustered by evaluator variant, and a
  mixed model with a random intercept per evaluator variant (statsmodels MixedLM; descriptive only below
  MIXED_MIN_GROUPS variants); the item level: OLS with evaluator-variant fixed effects and CIs clustered by
  article (dataset, article_id). Base and fine-tuned evaluators meet only through the evaluator-variant factor.
  Every clustered CI and p-value is CR2 with Bell–McCaffrey degrees of freedom (stats/clustered.py), which holds
  its size with few clusters; where even that cannot, the fit gives its estimate and no CI or p-value.
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

Every fit is made on the paper's scale (the headline) and on the log-odds scale. Degenerate groups (too
few points, no variance in recognition, too few clusters) are never fitted and never crash: their result
has ok=False and a note such as "not enough paper units (n=2)". A fit that has an estimate but no honest
interval (a perfect fit; too few clusters for a clustered test) says why in ``no_interval``, and its CI and
p-value fields are NaN, never a zero-width interval.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
# The light imports: statsmodels.api also loads tsa, graphics, ... (seconds per process).
from statsmodels.regression.linear_model import OLS
from statsmodels.regression.mixed_linear_model import MixedLM
from scipy import stats

from ..config import SELF_RECOGNITION_TASKS, SpecificityMargin
from ..stats.clustered import ClusteredOLS, Estimate, too_few_clusters
from .load import arm_name
from .units import SCALES, key_frame

ALPHA = 0.05  # 95% intervals everywhere
MIN_POINTS = 3  # two points always fit a line exactly: no residual, no interval
# A random-intercept variance from fewer groups is barely estimated, and MixedLM's normal (z) intervals
# ignore that: with fewer variants than this its intervals are shown as descriptive, not as a test.
MIXED_MIN_GROUPS = 6
ON_ONE_LINE = "no interval: every point lies on one line"

# Nothing is pooled across settings or label conditions: every grouping starts with both.
BY_CONDITION = ("setting", "label")
GROUPINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("setting × label", BY_CONDITION),
    ("setting × label × dataset", (*BY_CONDITION, "dataset")),
)

# finetune_task values that train self-recognition (config.SELF_RECOGNITION_TASKS); every other non-"none"
# task is a control.
RECOGNITION_TASKS: tuple[str, ...] = tuple(t.value for t in SELF_RECOGNITION_TASKS)

# The specificity test's equivalence margin per scale: the defaults of analysis.specificity_margin, written once
# in the config schema (config.SpecificityMargin). Paper scale: 0.05, preference 0.50 -> 0.55 at matched
# recognition. Log-odds: 0.2 = logit(0.55), the same shift for a judge without position bias (both orders alike).
SPECIFICITY_MARGIN: dict[str, float] = asdict(SpecificityMargin())

# Levels and methods, as the tables show them.
LEVEL_UNIT, LEVEL_SOURCE, LEVEL_ITEM = "paper unit", "source", "item"
OLS_PLAIN = "OLS"
OLS_BY_VARIANT = "OLS, CIs clustered by evaluator variant"
MIXED_BY_VARIANT = "MixedLM, random intercept per evaluator variant"
OLS_ITEM = "OLS, evaluator-variant fixed effects, CIs clustered by article"
_POINT_NAMES = {LEVEL_UNIT: "paper units", LEVEL_SOURCE: "cells", LEVEL_ITEM: "items"}


@dataclass
class FitResult:
    """One regression of preference on recognition (or why it was not fitted)."""

    level: str  # LEVEL_UNIT, LEVEL_SOURCE or LEVEL_ITEM
    group_by: str  # a GROUPINGS name
    group: str  # the group's value(s)
    n: int  # points used
    ok: bool
    note: str = ""  # why not fitted, or a caveat (e.g. r undefined)
    scale: str = "paper"  # "paper" or "logodds"
    method: str = OLS_PLAIN
    cluster_by: str = ""  # "evaluator variant", "article" or "" (for MixedLM: the random-intercept groups)
    n_clusters: Optional[int] = None
    slope: float = math.nan
    slope_se: float = math.nan
    slope_ci_low: float = math.nan
    slope_ci_high: float = math.nan
    slope_p: float = math.nan
    intercept: float = math.nan
    intercept_ci_low: float = math.nan
    intercept_ci_high: float = math.nan
    r: float = math.nan
    r_ci_low: float = math.nan
    r_ci_high: float = math.nan
    r2: float = math.nan
    no_interval: str = ""  # why the CIs and p-value are absent although the estimate exists
    descriptive: bool = False  # MixedLM with too few groups: its intervals are not a test
    # What the plots need for the fit line's confidence band, without keeping statsmodels objects.
    cov: list[list[float]] = field(default_factory=list)
    df_resid: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    n_clusters: Optional[int] = None
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
    n_clusters: Optional[int] = None
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


def _fisher_ci(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The Fisher z interval of Pearson's r (scipy's default method); needs n > 3. |r| = 1 has none (it would
    be the zero-width [r, r]): NaN, and the fit says why."""
    if len(x) <= 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # |r| = 1: scipy warns about the infinite z
        result = stats.pearsonr(x, y)
    r = float(result.statistic)
    if abs(r) >= 1.0:
        return math.nan, math.nan
    ci = result.confidence_interval(confidence_level=1 - ALPHA)
    return float(ci.low), float(ci.high)


def _too_few(kind: str, n: int, extra: str = "") -> str:
    return f"not enough {kind} (n={n}{'; ' + extra if extra else ''})"


def _usable(df: pd.DataFrame) -> pd.DataFrame:
    keep = np.isfinite(df["recognition"].to_numpy(float)) & np.isfinite(df["preference"].to_numpy(float))
    return df[keep].reset_index(drop=True)


def _ols(data: pd.DataFrame, formula: str) -> Any:
    with warnings.catch_warnings():
        # statsmodels warns about small samples (kurtosis test etc.); our notes say it plainly.
        warnings.simplefilter("ignore")
        return OLS.from_formula(formula, data).fit()


def clustered_ols(data: pd.DataFrame, formula: str, clusters: pd.Series) -> ClusteredOLS:
    """The formula's OLS with CR2 covariance and Bell–McCaffrey df. Not statsmodels' CR1 with t(G-1): with
    few clusters that is not conservative but over-rejects (a true null about 1 time in 5 at 7 clusters, 3
    or 4 treated, where this rejects 1 in 20: tests/test_inference_small_samples.py)."""
    model = OLS.from_formula(formula, data)
    return ClusteredOLS(model.exog, model.endog, clusters.astype(str).to_numpy(), model.exog_names)


def fit_formula(
    data: pd.DataFrame,
    *,
    level: str = LEVEL_UNIT,
    group_by: str = "",
    group: str = "all",
    scale: str = "paper",
    cluster_col: Optional[str] = None,
    cluster_by: str = "",
    variant_effects: bool = False,
) -> FitResult:
    """OLS of ``preference ~ recognition`` on a frame with those columns (rows with a NaN are dropped).

    ``cluster_col`` gives clustered CIs (CR2 with Bell–McCaffrey degrees of freedom, see stats/clustered.py);
    ``variant_effects`` adds ``C(evaluator_variant)`` when more than one variant is present, so the slope is
    within variants.
    """
    df = _usable(data)
    n = len(df)
    kind = _POINT_NAMES.get(level, "points")
    method = OLS_ITEM if variant_effects else (OLS_PLAIN if cluster_col is None else OLS_BY_VARIANT)
    base = dict(level=level, group_by=group_by, group=group, n=n, scale=scale, method=method, cluster_by=cluster_by)
    if n < MIN_POINTS:
        return FitResult(**base, ok=False, note=_too_few(kind, n))
    x, y = df["recognition"].to_numpy(float), df["preference"].to_numpy(float)
    if np.ptp(x) == 0:
        return FitResult(**base, ok=False, note=_too_few(kind, n, "recognition has zero variance"))
    n_variants = int(df["evaluator_variant"].nunique()) if variant_effects else 1
    formula = "preference ~ recognition" + (" + C(evaluator_variant)" if n_variants > 1 else "")
    n_params = 1 + n_variants
    if n <= n_params:
        return FitResult(**base, ok=False, note=_too_few(kind, n, f"{n_params} parameters"))
    n_clusters: Optional[int] = None
    if cluster_col is not None:
        n_clusters = int(df[cluster_col].astype(str).nunique())
        # Fewer clusters than parameters leave the clustered covariance without full rank.
        if n_clusters <= n_params:
            return FitResult(**base, ok=False, n_clusters=n_clusters, note=_too_few(
                kind, n, f"{n_clusters} {cluster_by} cluster(s); clustered CIs need more than {n_params}"))
        fields = _clustered_fields(clustered_ols(df, formula, df[cluster_col]), df[cluster_col], n_variants == 1)
    else:
        fields = _plain_fields(_ols(df, formula), x, y)

    notes: list[str] = []
    r = math.nan
    if n_variants > 1:
        notes.append(f"slope within {n_variants} evaluator variants; intercept not shown")
    elif np.ptp(y) == 0:
        notes.append("preference has zero variance; r undefined")
    else:
        r = float(np.corrcoef(x, y)[0, 1])
    if cluster_col is None and n == MIN_POINTS:
        notes.append("n=3: one residual degree of freedom, intervals are very wide")
    if fields["no_interval"] == ON_ONE_LINE:
        notes.append("perfect fit: zero residuals, so there is no interval")
    return FitResult(**base, ok=True, note="; ".join(notes), n_clusters=n_clusters, r=r,
                     r2=float(r * r) if not math.isnan(r) else math.nan, **fields)


def _perfect_fit(ssr: float, y: np.ndarray) -> bool:
    return ssr <= 1e-12 * max(float(np.sum((y - y.mean()) ** 2)), 1e-300)


def _plain_fields(res: Any, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """The inferential fields of a plain OLS fit; a perfect fit has none (its intervals would be [b, b])."""
    band = dict(cov=np.asarray(res.cov_params().loc[["Intercept", "recognition"], ["Intercept", "recognition"]]
                               ).tolist(), df_resid=float(res.df_resid))
    point = dict(slope=float(res.params["recognition"]), intercept=float(res.params["Intercept"]))
    if _perfect_fit(float(res.ssr), y):
        return dict(**point, **band, slope_se=0.0, no_interval=ON_ONE_LINE)
    ci = res.conf_int(alpha=ALPHA)
    r_lo, r_hi = _fisher_ci(x, y)
    return dict(**point, **band, slope_se=float(res.bse["recognition"]), slope_p=float(res.pvalues["recognition"]),
                slope_ci_low=float(ci.loc["recognition", 0]), slope_ci_high=float(ci.loc["recognition", 1]),
                intercept_ci_low=float(ci.loc["Intercept", 0]), intercept_ci_high=float(ci.loc["Intercept", 1]),
                r_ci_low=r_lo, r_ci_high=r_hi, no_interval="")


def _clustered_fields(res: ClusteredOLS, clusters: pd.Series, show_intercept: bool) -> dict[str, Any]:
    """The inferential fields of a clustered fit. No r interval: the points are not independent, so a Fisher
    interval on n would be too narrow."""
    slope = res.coef("recognition", ALPHA)
    icpt = res.coef("Intercept", ALPHA) if show_intercept else None
    point = dict(slope=slope.estimate, intercept=icpt.estimate if icpt else math.nan,
                 cov=res.cov_frame(["Intercept", "recognition"]).tolist(), df_resid=slope.df)
    why = too_few_clusters(clusters)
    if not why and _perfect_fit(float(res.resid @ res.resid), res.y):
        why = ON_ONE_LINE
    if why:
        return dict(**point, slope_se=slope.se, no_interval=why)
    return dict(**point, slope_se=slope.se, slope_p=slope.p, slope_ci_low=slope.ci_low, slope_ci_high=slope.ci_high,
                intercept_ci_low=icpt.ci_low if icpt else math.nan,
                intercept_ci_high=icpt.ci_high if icpt else math.nan, no_interval="")


def fit_ols(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    level: str = LEVEL_UNIT,
    group_by: str = "",
    group: str = "all",
    scale: str = "paper",
) -> FitResult:
    """Plain OLS of y (preference) on x (recognition); points with a NaN are dropped first."""
    data = pd.DataFrame({"recognition": np.asarray(x, dtype=float), "preference": np.asarray(y, dtype=float)})
    return fit_formula(data, level=level, group_by=group_by, group=group, scale=scale)


def fit_mixed(
    data: pd.DataFrame, *, level: str = LEVEL_SOURCE, group_by: str = "", group: str = "all", scale: str = "paper",
) -> FitResult:
    """MixedLM ``preference ~ recognition`` with a random intercept per evaluator variant (REML; normal
    intervals, as statsmodels gives them). With fewer than MIXED_MIN_GROUPS variants the fit is kept but
    marked descriptive: its z intervals treat a barely estimated variance as known, so they are too narrow."""
    df = _usable(data)
    n = len(df)
    n_groups = int(df["evaluator_variant"].nunique()) if n else 0
    base = dict(level=level, group_by=group_by, group=group, n=n, scale=scale, method=MIXED_BY_VARIANT,
                cluster_by="evaluator variant", n_clusters=n_groups)
    kind = _POINT_NAMES.get(level, "points")
    if n < 5 or n_groups < 3:
        return FitResult(**base, ok=False, note=_too_few(kind, n, f"{n_groups} evaluator variant(s); the mixed "
                                                                  "model needs at least 3 and 5 points"))
    if np.ptp(df["recognition"].to_numpy(float)) == 0:
        return FitResult(**base, ok=False, note=_too_few(kind, n, "recognition has zero variance"))
    descriptive = n_groups < MIXED_MIN_GROUPS
    notes = [f"descriptive only: {n_groups} evaluator variants are too few for the mixed model's intervals to "
             f"be a test (about {MIXED_MIN_GROUPS} needed)"] if descriptive else []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = MixedLM.from_formula("preference ~ recognition", df, groups=df["evaluator_variant"]).fit(reml=True)
    except (ValueError, np.linalg.LinAlgError) as exc:
        return FitResult(**base, ok=False, note=f"the mixed model could not be fitted ({exc})")
    if not res.converged:
        notes.append("did not converge")
    ci = res.conf_int(alpha=ALPHA)
    if not np.isfinite(float(res.bse["recognition"])):
        return FitResult(**base, ok=False, note="the mixed model gave no standard error for the slope")
    if any("boundary" in str(w.message) for w in caught):
        notes.append("variant intercept variance at the boundary (≈ 0): close to OLS")
    else:
        notes.append(f"variant intercept SD {math.sqrt(max(float(res.cov_re.iloc[0, 0]), 0.0)):.3f}")
    return FitResult(
        **base,
        ok=True,
        note="; ".join(notes),
        descriptive=descriptive,
        slope=float(res.params["recognition"]),
        slope_se=float(res.bse["recognition"]),
        slope_ci_low=float(ci.loc["recognition", 0]),
        slope_ci_high=float(ci.loc["recognition", 1]),
        slope_p=float(res.pvalues["recognition"]),
        intercept=float(res.params["Intercept"]),
        intercept_ci_low=float(ci.loc["Intercept", 0]),
        intercept_ci_high=float(ci.loc["Intercept", 1]),
    )


def confidence_band(fit: FitResult, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fitted line and its 95% confidence band (for the mean) at ``xs``."""
    xs = np.asarray(xs, dtype=float)
    X = np.column_stack([np.ones_like(xs), xs])
    pred = fit.intercept + fit.slope * xs
    cov = np.asarray(fit.cov, dtype=float)
    se = np.sqrt(np.einsum("ij,jk,ik->i", X, cov, X))
    t = stats.t.ppf(1 - ALPHA / 2, fit.df_resid) if fit.df_resid > 0 else math.nan
    return pred, pred - t * se, pred + t * se


def _label(key: Any) -> str:
    key = key if isinstance(key, tuple) else (key,)
    return " / ".join("null" if k is None or k != k else str(k) for k in key)


# Per base evaluator, where several base models have fine-tunes in one condition (the paper's GPT-3.5 and Llama
# fine-tunes): their lines are fitted apart too, as the paper fits them, beside the condition's pooled fit.
BY_EVALUATOR = "setting × label × evaluator"


def _evaluator_groups(cond: Any, sub: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    if "evaluator" not in sub or "finetune_task" not in sub:
        return []
    tuned = sub[sub["finetune_task"].notna() & (sub["finetune_task"].astype(str) != "none")]
    bases = sorted(tuned["evaluator"].astype(str).unique())
    if len(bases) < 2:
        return []
    return [(BY_EVALUATOR, _label((*cond, e)), sub[sub["evaluator"].astype(str) == e]) for e in bases]


def condition_groups(df: pd.DataFrame, within: str = "dataset") -> list[tuple[str, str, pd.DataFrame]]:
    """(grouping name, group label, rows): each setting × label condition, then within it each value of
    ``within`` (dataset, or transfer: in-domain / cross-dataset), only where there are several (one would
    repeat the condition's group), then each base evaluator where several have fine-tunes (BY_EVALUATOR)."""
    if df.empty:
        return []
    df = key_frame(df, [*BY_CONDITION, within])
    out = []
    for cond, sub in df.groupby(list(BY_CONDITION), sort=True):
        out.append((GROUPINGS[0][0], _label(cond), sub))
        values = sorted(v for v in sub[within].unique() if not (within == "transfer" and v == "none"))
        if len(values) > 1:
            out += [(f"setting × label × {within}", _label((*cond, v)), sub[sub[within] == v]) for v in values]
        out += _evaluator_groups(cond, sub)
    return out


def _points(df: pd.DataFrame, rec_col: str, pref_col: str, extra: Sequence[str] = ()) -> pd.DataFrame:
    return pd.DataFrame({"recognition": df[rec_col].to_numpy(float), "preference": df[pref_col].to_numpy(float),
                         **{c: df[c].to_numpy() for c in extra}})


def _scales_present(df: pd.DataFrame, template: str) -> list[str]:
    """The scales with data (older sweeps have no log-odds scores)."""
    return [s for s in SCALES if df[template.format(q="rec", s=s)].notna().any()] if not df.empty else ["paper"]


def fit_paper_units(units: pd.DataFrame) -> list[FitResult]:
    """The headline: OLS over paper units, per setting × label (all datasets, and per dataset), both scales."""
    if units.empty:
        return [FitResult(LEVEL_UNIT, GROUPINGS[0][0], "all", 0, ok=False, note=_too_few("paper units", 0))]
    results = []
    for name, group, sub in condition_groups(units):
        for scale in _scales_present(units, "{q}_{s}_mean"):
            pts = _points(sub, f"rec_{scale}_mean", f"pref_{scale}_mean")
            results.append(fit_formula(pts, level=LEVEL_UNIT, group_by=name, group=group, scale=scale))
    return results


def fit_robustness(points: pd.DataFrame, items: pd.DataFrame) -> list[FitResult]:
    """Source-level fits (clustered by evaluator variant, and mixed) and the article-clustered item-level fit,
    per setting × label (and per dataset), both scales."""
    results: list[FitResult] = []
    if points.empty:
        return [FitResult(LEVEL_SOURCE, GROUPINGS[0][0], "all", 0, ok=False, note=_too_few("cells", 0))]
    items = items.assign(_article=items["dataset"].astype(str) + "\x1f" + items["article_id"].astype(str))
    item_groups = {(name, group): sub for name, group, sub in condition_groups(items)}
    for name, group, sub in condition_groups(points):
        for scale in _scales_present(points, "{q}_{s}"):
            pts = _points(sub, f"rec_{scale}", f"pref_{scale}", ["evaluator_variant"])
            kw = dict(group_by=name, group=group, scale=scale)
            results.append(fit_formula(pts, level=LEVEL_SOURCE, cluster_col="evaluator_variant",
                                       cluster_by="evaluator variant", **kw))
            results.append(fit_mixed(pts, level=LEVEL_SOURCE, **kw))
            its = item_groups.get((name, group))
            if its is not None:
                col = SCALES[scale]
                item_pts = _points(its, f"rec_{col}", f"pref_{col}", ["evaluator_variant", "_article"])
                results.append(fit_formula(item_pts, level=LEVEL_ITEM, cluster_col="_article", cluster_by="article",
                                           variant_effects=True, **kw))
    return results


def fit_interaction(
    data: pd.DataFrame,
    *,
    level: str = LEVEL_UNIT,
    group_by: str = "",
    group: str = "all",
    scale: str = "paper",
    recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
    cluster_col: Optional[str] = None,
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


def arm_point_codes(frame: pd.DataFrame) -> Optional[tuple[np.ndarray, list[str]]]:
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
                     cluster_col: Optional[str]) -> dict[str, Any]:
    """The fields a fine-tune comparison (interaction or specificity) records about its points."""
    n, n_rec = int(len(ft)), int(ft["recognition_finetune"].sum())
    return dict(level=level, group_by=group_by, group=group, n=n, n_recognition=n_rec, n_control=n - n_rec,
                scale=scale, method=OLS_PLAIN if cluster_col is None else OLS_BY_VARIANT,
                n_clusters=int(ft[cluster_col].nunique()) if cluster_col is not None else None)


def _finetune_fit(ft: pd.DataFrame, formula: str, cluster_col: Optional[str]
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
                        span: float = math.nan, interaction: Optional[tuple[float, float, float, float]] = None
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
    # corrected shift (tables.resampled_table, specificity_verdict).
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
    cluster_col: Optional[str] = None,
    margin: Optional[float] = None,
    interaction: Optional[InteractionResult] = None,
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
    margins: Optional[Mapping[str, float]] = None, interactions: Sequence[InteractionResult] = (),
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
