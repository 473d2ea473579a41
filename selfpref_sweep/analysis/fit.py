"""statsmodels regressions of self-preference on self-recognition.

- Cell level (the paper's analysis): OLS of a cell's mean preference on its mean recognition,
  pooled and per dataset, setting, transfer condition, label and dataset x transfer.
- Item level (robustness): OLS of item preference score on item recognition score with standard
  errors clustered by article (dataset, article_id), because one article is judged in many cells.
- Interaction: does the slope differ between recognition fine-tunes and control fine-tunes?
  preference ~ recognition * is_recognition_finetune over fine-tuned cells.

Degenerate groups (too few points, no variance in recognition, a single cluster) are never fitted
and never crash: their result has ok=False and a note such as "not enough cells (n=2)".
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
from statsmodels.tools.tools import add_constant
from scipy import stats

ALPHA = 0.05  # 95% intervals everywhere
MIN_POINTS = 3  # two points always fit a line exactly: no residual, no interval

# (name shown in tables, columns grouped by). None = pooled over everything.
GROUPINGS: tuple[tuple[str, Optional[tuple[str, ...]]], ...] = (
    ("pooled", None),
    ("dataset", ("dataset",)),
    ("setting", ("setting",)),
    ("transfer", ("transfer",)),
    ("label", ("label",)),
    ("dataset x transfer", ("dataset", "transfer")),
)

# finetune_task values that train self-recognition; every other non-"none" task is a control.
RECOGNITION_TASKS: tuple[str, ...] = ("recognition",)


@dataclass
class FitResult:
    """One regression of preference on recognition (or why it was not fitted)."""

    level: str  # "cell" or "item"
    group_by: str  # a GROUPINGS name
    group: str  # the group's value(s), "all" when pooled
    n: int  # points used (cells or items)
    ok: bool
    note: str = ""  # why not fitted, or a caveat (e.g. r undefined)
    n_clusters: Optional[int] = None  # item level: articles
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
    """preference ~ recognition * is_recognition_finetune over fine-tuned cells of one group."""

    group_by: str
    group: str
    n: int
    n_recognition: int
    n_control: int
    ok: bool
    note: str = ""
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


def fit_ols(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    level: str = "cell",
    group_by: str = "pooled",
    group: str = "all",
    clusters: Optional[Sequence[Any]] = None,
) -> FitResult:
    """OLS of y (preference) on x (recognition), with clustered SEs when ``clusters`` is given.

    Points with a NaN in x or y are dropped first (callers list those cells separately).
    """
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    n = int(xa.size)
    kind = "cells" if level == "cell" else "items"
    base = dict(level=level, group_by=group_by, group=group, n=n)
    if n < MIN_POINTS:
        return FitResult(**base, ok=False, note=_too_few(kind, n))
    if np.ptp(xa) == 0:
        return FitResult(**base, ok=False, note=_too_few(kind, n, "recognition has zero variance"))

    X = add_constant(xa, has_constant="add")
    n_clusters: Optional[int] = None
    with warnings.catch_warnings():
        # statsmodels warns about small samples (kurtosis test etc.); our notes say it plainly.
        warnings.simplefilter("ignore")
        if clusters is None:
            res = OLS(ya, X).fit()
        else:
            codes, uniques = pd.factorize(pd.Series(list(clusters))[keep].reset_index(drop=True))
            n_clusters = int(len(uniques))
            if n_clusters < 2:
                return FitResult(
                    **base, ok=False, n_clusters=n_clusters,
                    note=_too_few(kind, n, f"{n_clusters} article cluster; clustered SEs need at least 2"),
                )
            # t-based intervals with G-1 degrees of freedom: conservative when articles are few.
            res = OLS(ya, X).fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)
    ci = np.asarray(res.conf_int(alpha=ALPHA))
    params = np.asarray(res.params)
    bse = np.asarray(res.bse)
    pvalues = np.asarray(res.pvalues)

    notes: list[str] = []
    if np.ptp(ya) == 0:
        r = math.nan
        notes.append("preference has zero variance; r undefined")
    else:
        r = float(np.corrcoef(xa, ya)[0, 1])
    if n == MIN_POINTS:
        notes.append("n=3: one residual degree of freedom, intervals are very wide")
    if float(res.ssr) <= 1e-12 * max(float(np.sum((ya - ya.mean()) ** 2)), 1e-300):
        notes.append("perfect fit: zero residuals, so the intervals have zero width")
    if clusters is None:
        r_lo, r_hi = _fisher_ci(xa, ya)
    else:
        # Items within an article are not independent, so a Fisher interval on n items would be
        # too narrow; the clustered slope CI is the robustness check.
        r_lo, r_hi = math.nan, math.nan
    df_resid = float(n_clusters - 1) if n_clusters is not None else float(res.df_resid)
    return FitResult(
        **base,
        ok=True,
        note="; ".join(notes),
        n_clusters=n_clusters,
        slope=float(params[1]),
        slope_se=float(bse[1]),
        slope_ci_low=float(ci[1, 0]),
        slope_ci_high=float(ci[1, 1]),
        slope_p=float(pvalues[1]),
        intercept=float(params[0]),
        intercept_ci_low=float(ci[0, 0]),
        intercept_ci_high=float(ci[0, 1]),
        r=r,
        r_ci_low=r_lo,
        r_ci_high=r_hi,
        r2=float(r * r) if not math.isnan(r) else math.nan,
        cov=np.asarray(res.cov_params()).tolist(),
        df_resid=df_resid,
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


def _groups(df: pd.DataFrame, cols: Optional[tuple[str, ...]]) -> list[tuple[str, pd.DataFrame]]:
    if cols is None:
        return [("all", df)]
    out = []
    # dropna=False: a null dataset/setting is its own group, not silently dropped.
    for key, sub in df.groupby(list(cols), dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        out.append((" / ".join("null" if k is None or k != k else str(k) for k in key), sub))
    return out


def fit_cell_level(cells: pd.DataFrame) -> list[FitResult]:
    """Cell-level OLS for every grouping; cells with a null mean are left out (and listed elsewhere)."""
    usable = cells.dropna(subset=["rec_mean", "pref_mean"]) if not cells.empty else cells
    results: list[FitResult] = []
    for name, cols in GROUPINGS:
        if usable.empty:
            results.append(FitResult("cell", name, "all", 0, ok=False, note=_too_few("cells", 0)))
            continue
        for group, sub in _groups(usable, cols):
            results.append(fit_ols(sub["rec_mean"], sub["pref_mean"], level="cell", group_by=name, group=group))
    return results


def cluster_keys(items: pd.DataFrame) -> pd.Series:
    """Cluster id of each item: the article within its dataset (ids may collide across datasets)."""
    return items["dataset"].astype(str) + "\x1f" + items["article_id"].astype(str)


def fit_item_level(items: pd.DataFrame, groupings: Sequence[str] = ("pooled", "dataset")) -> list[FitResult]:
    """Item-level OLS with article-clustered SEs; items need both scores non-null."""
    usable = items.dropna(subset=["rec_score", "pref_score"]) if not items.empty else items
    results: list[FitResult] = []
    for name, cols in GROUPINGS:
        if name not in groupings:
            continue
        if usable.empty:
            results.append(FitResult("item", name, "all", 0, ok=False, note=_too_few("items", 0)))
            continue
        for group, sub in _groups(usable, cols):
            results.append(
                fit_ols(
                    sub["rec_score"], sub["pref_score"], level="item", group_by=name, group=group,
                    clusters=cluster_keys(sub).tolist(),
                )
            )
    return results


def fit_interaction(
    cells: pd.DataFrame,
    *,
    group_by: str = "pooled",
    group: str = "all",
    recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
) -> InteractionResult:
    """Test whether the preference-on-recognition slope differs between recognition fine-tunes and
    control fine-tunes: the coefficient of recognition x is_recognition_finetune.

    Only fine-tuned cells enter (finetune_task != "none"): the question is about the two kinds of
    fine-tune, and base-model cells belong to neither.
    """
    ft = cells[cells["finetune_task"].notna() & (cells["finetune_task"] != "none")] if not cells.empty else cells
    ft = ft.dropna(subset=["rec_mean", "pref_mean"]) if not ft.empty else ft
    is_rec = ft["finetune_task"].isin(list(recognition_tasks)).to_numpy(dtype=float) if not ft.empty else np.array([])
    n, n_rec = int(len(ft)), int(is_rec.sum())
    n_ctl = n - n_rec
    base = dict(group_by=group_by, group=group, n=n, n_recognition=n_rec, n_control=n_ctl)

    # The interaction is identified only if each kind has >= 2 cells with different recognition,
    # and a residual degree of freedom is left (n > 4 parameters).
    rec = ft["rec_mean"].to_numpy(dtype=float) if n else np.array([])
    problems = []
    if n == 0:
        problems.append("no fine-tuned cells")
    else:
        for label, mask in (("recognition", is_rec == 1), ("control", is_rec == 0)):
            sub = rec[mask]
            if sub.size < 2:
                problems.append(f"{label} fine-tunes need at least 2 cells")
            elif np.ptp(sub) == 0:
                problems.append(f"recognition has zero variance among {label} fine-tunes")
        if n < 5 and not problems:
            problems.append("4 parameters need at least 5 cells")
    if problems:
        note = (f"not enough cells (n={n}; recognition fine-tunes n={n_rec}, control fine-tunes n={n_ctl}): "
                + "; ".join(problems))
        return InteractionResult(**base, ok=False, note=note)

    pref = ft["pref_mean"].to_numpy(dtype=float)
    X = np.column_stack([np.ones(n), rec, is_rec, rec * is_rec])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = OLS(pref, X).fit()
    ci = np.asarray(res.conf_int(alpha=ALPHA))
    # slope for recognition fine-tunes = b_rec + b_interaction: a linear contrast.
    contrast = res.t_test(np.array([[0.0, 1.0, 0.0, 1.0]]))
    c_lo, c_hi = np.asarray(contrast.conf_int(alpha=ALPHA))[0]
    return InteractionResult(
        **base,
        ok=True,
        estimate=float(res.params[3]),
        se=float(res.bse[3]),
        ci_low=float(ci[3, 0]),
        ci_high=float(ci[3, 1]),
        p=float(res.pvalues[3]),
        slope_control=float(res.params[1]),
        slope_control_ci_low=float(ci[1, 0]),
        slope_control_ci_high=float(ci[1, 1]),
        slope_recognition=float(np.asarray(contrast.effect).ravel()[0]),
        slope_recognition_ci_low=float(c_lo),
        slope_recognition_ci_high=float(c_hi),
    )


def fit_interactions(cells: pd.DataFrame, recognition_tasks: Sequence[str] = RECOGNITION_TASKS) -> list[InteractionResult]:
    """The interaction test pooled and per transfer condition (in-domain / cross-dataset)."""
    out = [fit_interaction(cells, recognition_tasks=recognition_tasks)]
    if not cells.empty:
        for transfer in ("in_domain", "cross_dataset"):
            sub = cells[cells["transfer"] == transfer]
            if not sub.empty:
                out.append(fit_interaction(sub, group_by="transfer", group=transfer, recognition_tasks=recognition_tasks))
    return out
