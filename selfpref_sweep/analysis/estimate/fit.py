"""statsmodels regressions of self-preference on self-recognition (formula API throughout): the headline and
its robustness fits. The fine-tune tests (specificity, the interaction) are finetune_tests.py's.

- Headline, the paper's unit: OLS of a unit's preference on its recognition, one point per evaluator
  variant × dataset (averaged over sources, see units.py), per setting × label condition (all datasets,
  and per dataset). Never pooled across settings or label conditions.
- Robustness, the source level (one point per cell): OLS with CIs clustered by evaluator variant, and a
  mixed model with a random intercept per evaluator variant (statsmodels MixedLM; descriptive only below
  MIXED_MIN_GROUPS variants); the item level: OLS with evaluator-variant fixed effects and CIs clustered by
  article (dataset, article_id). Base and fine-tuned evaluators meet only through the evaluator-variant factor.
  Every clustered CI and p-value is CR2 with Bell–McCaffrey degrees of freedom (stats/clustered.py), which holds
  its size with few clusters; where even that cannot, the fit gives its estimate and no CI or p-value.

Every fit is made on the paper's scale (the headline) and on the log-odds scale. Degenerate groups (too
few points, no variance in recognition, too few clusters) are never fitted and never crash: their result
has ok=False and a note such as "not enough paper units (n=2)". A fit that has an estimate but no honest
interval (a perfect fit; too few clusters for a clustered test) says why in ``no_interval``, and its CI and
p-value fields are NaN, never a zero-width interval. The groupings (condition_groups), the levels and the
conventions (ALPHA, MIN_POINTS, clustered_ols) are the report kit's (reporting/grouping.py, regression.py).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

# The light imports: statsmodels.api also loads tsa, graphics, ... (seconds per process).
from statsmodels.regression.linear_model import OLS
from statsmodels.regression.mixed_linear_model import MixedLM

from ...reporting.grouping import GROUPINGS, LEVEL_ITEM, LEVEL_SOURCE, LEVEL_UNIT, SCALES, condition_groups
from ...reporting.regression import ALPHA, MIN_POINTS, clustered_ols
from ...stats.clustered import ClusteredOLS, too_few_clusters

# A random-intercept variance from fewer groups is barely estimated, and MixedLM's normal (z) intervals
# ignore that: with fewer variants than this its intervals are shown as descriptive, not as a test.
MIXED_MIN_GROUPS = 6
ON_ONE_LINE = "no interval: every point lies on one line"

# Methods, as the tables show them.
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
    n_clusters: int | None = None
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


def fit_formula(
    data: pd.DataFrame,
    *,
    level: str = LEVEL_UNIT,
    group_by: str = "",
    group: str = "all",
    scale: str = "paper",
    cluster_col: str | None = None,
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
    n_clusters: int | None = None
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
