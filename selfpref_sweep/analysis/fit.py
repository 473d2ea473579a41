"""statsmodels regressions of self-preference on self-recognition (formula API throughout).

- Headline, the paper's unit: OLS of a unit's preference on its recognition, one point per evaluator
  variant × dataset (averaged over sources, see units.py), per setting × label condition (all datasets,
  and per dataset). Never pooled across settings or label conditions.
- Robustness, the source level (one point per cell): OLS with CIs clustered by evaluator variant, and a
  mixed model with a random intercept per evaluator variant (statsmodels MixedLM); the item level: OLS with
  evaluator-variant fixed effects and CIs clustered by article (dataset, article_id). Base and fine-tuned
  evaluators meet only through the evaluator-variant factor.
- Recognition vs control fine-tunes: preference ~ recognition * recognition_finetune over fine-tuned
  points, at the paper unit (OLS) and at the source level (clustered by evaluator variant).

Every fit is made on the paper's scale (the headline) and on the log-odds scale. Degenerate groups (too
few points, no variance in recognition, too few clusters) are never fitted and never crash: their result
has ok=False and a note such as "not enough paper units (n=2)".
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
# The light imports: statsmodels.api also loads tsa, graphics, ... (seconds per process).
from statsmodels.regression.linear_model import OLS
from statsmodels.regression.mixed_linear_model import MixedLM
from scipy import stats

from .units import SCALES, key_frame

ALPHA = 0.05  # 95% intervals everywhere
MIN_POINTS = 3  # two points always fit a line exactly: no residual, no interval

# Nothing is pooled across settings or label conditions: every grouping starts with both.
BY_CONDITION = ("setting", "label")
GROUPINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("setting × label", BY_CONDITION),
    ("setting × label × dataset", (*BY_CONDITION, "dataset")),
)

# finetune_task values that train self-recognition; every other non-"none" task is a control.
RECOGNITION_TASKS: tuple[str, ...] = ("recognition",)

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fisher_ci(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The Fisher z interval of Pearson's r (scipy's default method); needs n > 3, and |r| = 1 maps to an
    interval of width 0."""
    if len(x) <= 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # |r| = 1: scipy warns about the infinite z
        result = stats.pearsonr(x, y)
    r = float(result.statistic)
    if abs(r) >= 1.0:
        return r, r
    ci = result.confidence_interval(confidence_level=1 - ALPHA)
    return float(ci.low), float(ci.high)


def _too_few(kind: str, n: int, extra: str = "") -> str:
    return f"not enough {kind} (n={n}{'; ' + extra if extra else ''})"


def _usable(df: pd.DataFrame) -> pd.DataFrame:
    keep = np.isfinite(df["recognition"].to_numpy(float)) & np.isfinite(df["preference"].to_numpy(float))
    return df[keep].reset_index(drop=True)


def _ols(data: pd.DataFrame, formula: str, clusters: Optional[pd.Series]) -> Any:
    with warnings.catch_warnings():
        # statsmodels warns about small samples (kurtosis test etc.); our notes say it plainly.
        warnings.simplefilter("ignore")
        model = OLS.from_formula(formula, data)
        if clusters is None:
            return model.fit()
        codes, _ = pd.factorize(clusters)
        # t-based intervals with G-1 degrees of freedom: conservative when clusters are few.
        return model.fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)


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

    ``cluster_col`` gives clustered CIs (t with clusters - 1 degrees of freedom); ``variant_effects`` adds
    ``C(evaluator_variant)`` when more than one variant is present, so the slope is within variants.
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
    clusters = None
    if cluster_col is not None:
        clusters = df[cluster_col].astype(str)
        n_clusters = int(clusters.nunique())
        # A cluster-robust covariance needs more clusters than parameters to be of full rank.
        if n_clusters <= n_params:
            return FitResult(**base, ok=False, n_clusters=n_clusters, note=_too_few(
                kind, n, f"{n_clusters} {cluster_by} cluster(s); clustered CIs need more than {n_params}"))
    res = _ols(df, formula, clusters)
    ci = res.conf_int(alpha=ALPHA)

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
    if float(res.ssr) <= 1e-12 * max(float(np.sum((y - y.mean()) ** 2)), 1e-300):
        notes.append("perfect fit: zero residuals, so the intervals have zero width")
    # Clustered points are not independent, so a Fisher interval on n would be too narrow.
    r_lo, r_hi = _fisher_ci(x, y) if cluster_col is None else (math.nan, math.nan)
    show_intercept = n_variants == 1
    return FitResult(
        **base,
        ok=True,
        note="; ".join(notes),
        n_clusters=n_clusters,
        slope=float(res.params["recognition"]),
        slope_se=float(res.bse["recognition"]),
        slope_ci_low=float(ci.loc["recognition", 0]),
        slope_ci_high=float(ci.loc["recognition", 1]),
        slope_p=float(res.pvalues["recognition"]),
        intercept=float(res.params["Intercept"]) if show_intercept else math.nan,
        intercept_ci_low=float(ci.loc["Intercept", 0]) if show_intercept else math.nan,
        intercept_ci_high=float(ci.loc["Intercept", 1]) if show_intercept else math.nan,
        r=r,
        r_ci_low=r_lo,
        r_ci_high=r_hi,
        r2=float(r * r) if not math.isnan(r) else math.nan,
        cov=np.asarray(res.cov_params().loc[["Intercept", "recognition"], ["Intercept", "recognition"]]).tolist(),
        df_resid=float(n_clusters - 1) if n_clusters is not None else float(res.df_resid),
    )


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
    intervals, as statsmodels gives them)."""
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
    notes = []
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


def condition_groups(df: pd.DataFrame, within: str = "dataset") -> list[tuple[str, str, pd.DataFrame]]:
    """(grouping name, group label, rows): each setting × label condition, then within it each value of
    ``within`` (dataset, or transfer: in-domain / cross-dataset), only where there are several (one would
    repeat the condition's group)."""
    if df.empty:
        return []
    df = key_frame(df, [*BY_CONDITION, within])
    out = []
    for cond, sub in df.groupby(list(BY_CONDITION), sort=True):
        out.append((GROUPINGS[0][0], _label(cond), sub))
        values = sorted(v for v in sub[within].unique() if not (within == "transfer" and v == "none"))
        if len(values) > 1:
            out += [(f"setting × label × {within}", _label((*cond, v)), sub[sub[within] == v]) for v in values]
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
    ``preference ~ recognition * recognition_finetune``.

    ``data`` has recognition, preference, finetune_task (and evaluator_variant when clustered). Only
    fine-tuned points enter: the question is about the two kinds of fine-tune, and base models belong to
    neither.
    """
    ft = data[data["finetune_task"].notna() & (data["finetune_task"] != "none")]
    ft = _usable(ft.assign(recognition_finetune=ft["finetune_task"].isin(list(recognition_tasks)).astype(int)))
    is_rec = ft["recognition_finetune"].to_numpy()
    n, n_rec = int(len(ft)), int(is_rec.sum())
    n_ctl = n - n_rec
    method = OLS_PLAIN if cluster_col is None else OLS_BY_VARIANT
    n_clusters = int(ft[cluster_col].nunique()) if cluster_col is not None else None
    base = dict(level=level, group_by=group_by, group=group, n=n, n_recognition=n_rec, n_control=n_ctl,
                scale=scale, method=method, n_clusters=n_clusters)
    kind = _POINT_NAMES.get(level, "points")

    # The interaction is identified only if each kind has >= 2 points with different recognition, and a
    # residual degree of freedom (or, clustered, a cluster) is left over the 4 parameters.
    rec = ft["recognition"].to_numpy(float)
    problems = []
    if n == 0:
        problems.append("no fine-tuned points")
    else:
        for label, mask in (("recognition", is_rec == 1), ("control", is_rec == 0)):
            sub = rec[mask]
            if sub.size < 2:
                problems.append(f"{label} fine-tunes need at least 2 {kind}")
            elif np.ptp(sub) == 0:
                problems.append(f"recognition has zero variance among {label} fine-tunes")
        if n < 5 and not problems:
            problems.append(f"4 parameters need at least 5 {kind}")
        if n_clusters is not None and n_clusters < 5 and not problems:
            problems.append(f"{n_clusters} evaluator variants; clustered CIs over 4 parameters need at least 5")
    if problems:
        note = (f"not enough {kind} (n={n}; recognition fine-tunes n={n_rec}, control fine-tunes n={n_ctl}): "
                + "; ".join(problems))
        return InteractionResult(**base, ok=False, note=note)

    res = _ols(ft, "preference ~ recognition * recognition_finetune",
               None if cluster_col is None else ft[cluster_col].astype(str))
    ci = res.conf_int(alpha=ALPHA)
    term = "recognition:recognition_finetune"
    # The slope for recognition fine-tunes is recognition + the interaction: a linear contrast.
    contrast = res.t_test(f"recognition + {term} = 0")
    c_lo, c_hi = np.asarray(contrast.conf_int(alpha=ALPHA))[0]
    # A kind with exactly 2 points fits its line through both with no residual: its slope's CI (and the
    # interaction's) then comes from the other kind's scatter alone, which a reader should be told.
    thin = [label for label, count in (("recognition", n_rec), ("control", n_ctl)) if count == 2]
    note = "; ".join(f"the {label} fine-tunes' slope rests on 2 {kind}, so its CI comes from the other kind's "
                     "scatter alone" for label in thin)
    return InteractionResult(
        **base,
        ok=True,
        note=note,
        estimate=float(res.params[term]),
        se=float(res.bse[term]),
        ci_low=float(ci.loc[term, 0]),
        ci_high=float(ci.loc[term, 1]),
        p=float(res.pvalues[term]),
        slope_control=float(res.params["recognition"]),
        slope_control_ci_low=float(ci.loc["recognition", 0]),
        slope_control_ci_high=float(ci.loc["recognition", 1]),
        slope_recognition=float(np.asarray(contrast.effect).ravel()[0]),
        slope_recognition_ci_low=float(c_lo),
        slope_recognition_ci_high=float(c_hi),
    )


def fit_interactions(
    units: pd.DataFrame, points: pd.DataFrame, recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
) -> list[InteractionResult]:
    """The recognition-vs-control interaction at the paper unit (OLS) and the source level (clustered by
    evaluator variant), per setting × label and per transfer condition, both scales."""
    out: list[InteractionResult] = []
    for level, frame, template, cluster in (
        (LEVEL_UNIT, units, "{q}_{s}_mean", None),
        (LEVEL_SOURCE, points, "{q}_{s}", "evaluator_variant"),
    ):
        if frame.empty:
            out.append(InteractionResult(level, "setting × label", "all", 0, 0, 0, ok=False,
                                         note=f"not enough {_POINT_NAMES[level]} (n=0)"))
            continue
        for name, group, sub in condition_groups(frame, within="transfer"):
            for scale in _scales_present(frame, template):
                data = _points(sub, template.format(q="rec", s=scale), template.format(q="pref", s=scale),
                               ["finetune_task", "evaluator_variant"])
                out.append(fit_interaction(data, level=level, group_by=name, group=group, scale=scale,
                                           recognition_tasks=recognition_tasks, cluster_col=cluster))
    return out
