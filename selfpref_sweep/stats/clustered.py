"""Cluster-robust OLS inference built for few clusters: CR2 with Bell–McCaffrey degrees of freedom.

The sweeps cluster by evaluator variant (3-9 clusters) and by article (about 10). There the usual CR1
sandwich with t(G-1) rejects a true null far too often, worst for a regressor that is constant within
clusters and "on" in only a few of them (a simulation with 7 clusters, 2 treated, rejected about a third of
the time). Two corrections, as Bell & McCaffrey (2002) and Imbens & Kolesár (2016, REStat) recommend:

- CR2, the bias-reduced sandwich: each cluster's residuals are scaled by (I - H_gg)^(-1/2), so the
  estimator is unbiased when the errors are homoskedastic and independent (with one cluster per point it
  is HC2);
- a t reference distribution with the Satterthwaite degrees of freedom of that variance estimate, worked
  out for each tested contrast under the same working model (Imbens & Kolesár's K_BM). With few or
  unbalanced clusters these are far fewer than G - 1, which widens the interval where CR1 is overconfident.

With many clusters behind every regressor (MANY_CLUSTERS: an imported sweep's ~1,000 articles), both corrections
are small (a slope on 300 singleton clusters: CR2's SE 0.3% above CR1's, BM's 80 df against 299 widen the t
quantile 1%; at 1,000 clusters of 4 both under 0.2%), while their per-cluster eigendecompositions cost O(Σ m_g³) (an
item-level fit over the paper's 2,000 articles took minutes): there the sandwich is CR1 (the factor G/(G−1)·(N−1)/(N−K))
with G − 1 degrees of freedom, the default of Stata and statsmodels. A regressor present in fewer clusters keeps CR2 and
BM.

Where even this cannot hold its size (too few clusters overall, or fewer than MIN_CLUSTERS_PER_ARM
clusters on one side of a cluster-constant regressor), callers print no p-value or interval at all:
see ``too_few_clusters``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import expit, logit

MIN_CLUSTERS = 4  # below this the BM degrees of freedom fall under ~2, where t intervals stop meaning much
MIN_CLUSTERS_PER_ARM = 3  # a cluster-constant regressor with 2 clusters on one side cannot hold its size
TOO_FEW = "too few clusters for a clustered test"
_TOL = 1e-10  # eigenvalues of I - H_gg below this are treated as 0 (the pseudo-inverse square root)


@dataclass(frozen=True)
class Estimate:
    """One tested contrast: estimate, CR2 standard error, BM degrees of freedom, interval and p-value."""

    estimate: float
    se: float
    df: float
    ci_low: float
    ci_high: float
    p: float


# Every column of X non-zero in at least this many clusters: CR1 with G − 1 df (module docstring).
MANY_CLUSTERS = 200


def _cluster_order(codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows sorted by cluster, and where each cluster 0..n starts in that order (n + 1 bounds): one sort, not
    one comparison per cluster."""
    order = np.argsort(codes, kind="stable")
    return order, np.searchsorted(codes[order], np.arange(n + 1))


class ClusteredOLS:
    """OLS of y on X with CR2 covariance and per-contrast Bell–McCaffrey degrees of freedom."""

    def __init__(self, X: np.ndarray, y: np.ndarray, groups: Sequence, names: Sequence[str] = ()):
        self.X, self.y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        self.names = list(names) or [f"x{j}" for j in range(self.X.shape[1])]
        self.M = np.linalg.pinv(self.X.T @ self.X)
        self.params = self.M @ self.X.T @ self.y
        self.resid = self.y - self.X @ self.params
        codes, _ = pd.factorize(pd.Series(list(groups)).astype(str))
        self.n_clusters = int(codes.max()) + 1 if codes.size else 0
        order, bounds = _cluster_order(codes, self.n_clusters)
        self.many = self._many_clusters(order, bounds[:-1])
        if self.many:
            self.cov = self._cr1_cov(order, bounds[:-1])
            return
        self._B, self._D, self._C, meat = [], [], [], np.zeros((self.X.shape[1],) * 2)
        rows = [order[bounds[g]:bounds[g + 1]] for g in range(self.n_clusters)]
        adjusted = self._adjusted(rows)
        for g in range(self.n_clusters):
            Xg, Bg = self.X[rows[g]], adjusted[g]  # Bg = A_g X_g
            score = Bg.T @ self.resid[rows[g]]
            meat += np.outer(score, score)
            self._B.append(Bg)
            self._D.append(Bg.T @ Bg)
            self._C.append(Xg.T @ Bg)
        self.cov = self.M @ meat @ self.M

    def _many_clusters(self, order: np.ndarray, starts: np.ndarray) -> bool:
        """Whether every regressor lies in MANY_CLUSTERS clusters or more: then CR1 with G − 1 df (module doc)."""
        if self.n_clusters < MANY_CLUSTERS:
            return False
        present = np.add.reduceat((self.X[order] != 0).astype(np.int64), starts, axis=0) > 0
        return bool(present.sum(axis=0).min() >= MANY_CLUSTERS)

    def _cr1_cov(self, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The CR1 sandwich: the per-cluster scores' outer products, times G/(G−1)·(N−1)/(N−K)."""
        scores = np.add.reduceat(self.X[order] * self.resid[order, None], starts, axis=0)
        n, k, g = self.X.shape[0], self.X.shape[1], self.n_clusters
        factor = g / (g - 1) * (n - 1) / max(n - k, 1)
        return factor * self.M @ (scores.T @ scores) @ self.M

    def _adjusted(self, rows: list) -> list:
        """A_g X_g for every cluster g, A_g = (I - H_gg)^(-1/2): clusters of one size in one batched eigh (many
        small clusters, e.g. a cell's articles, were a Python loop of eigh calls), each matrix the same as alone."""
        out: list = [None] * len(rows)
        by_size: dict = {}
        for g, r in enumerate(rows):
            by_size.setdefault(r.size, []).append(g)
        for size, members in by_size.items():
            Xs = self.X[np.stack([rows[g] for g in members])]  # (clusters, size, k)
            H = np.eye(size) - Xs @ self.M @ Xs.transpose(0, 2, 1)
            vals, vecs = np.linalg.eigh((H + H.transpose(0, 2, 1)) / 2)
            inv = np.where(vals > _TOL, 1.0 / np.sqrt(np.clip(vals, _TOL, None)), 0.0)
            A = (vecs * inv[:, None, :]) @ vecs.transpose(0, 2, 1)
            for j, g in enumerate(members):
                out[g] = A[j] @ Xs[j]
        return out

    def bm_df(self, c: np.ndarray) -> float:
        """Satterthwaite df of c'Vc when the errors are iid (Imbens & Kolesár's K_BM): c'Vc = e'QQ'e, so
        df = tr(Q'Q)^2 / tr((Q'Q)^2), with Q'Q_gh = [g=h] |w_g|^2 - u_g' M u_h, w_g = A_g X_g M c and
        u_g = X_g' w_g (no n × n matrix is formed)."""
        if self.many:
            return float(self.n_clusters - 1)
        v = self.M @ c
        U = np.column_stack([C @ v for C in self._C])
        G = np.diag([v @ D @ v for D in self._D]) - U.T @ self.M @ U
        denom = float(np.sum(G * G))
        return float(np.trace(G) ** 2 / denom) if denom > 0 else math.nan

    def contrast(self, c: Sequence[float], alpha: float = 0.05) -> Estimate:
        c = np.asarray(c, dtype=float)
        est = float(c @ self.params)
        se = math.sqrt(max(float(c @ self.cov @ c), 0.0))
        df = self.bm_df(c)
        if not (se > 0 and df > 0):  # a perfect fit or an unidentified contrast: no interval exists
            return Estimate(est, se, df, math.nan, math.nan, math.nan)
        half = float(stats.t.ppf(1 - alpha / 2, df)) * se
        p = float(2 * stats.t.sf(abs(est) / se, df))
        return Estimate(est, se, df, est - half, est + half, p)

    def coef(self, name: str, alpha: float = 0.05) -> Estimate:
        c = np.zeros(len(self.names))
        c[self.names.index(name)] = 1.0
        return self.contrast(c, alpha)

    def cov_frame(self, names: Sequence[str]) -> np.ndarray:
        idx = [self.names.index(n) for n in names]
        return self.cov[np.ix_(idx, idx)]


def too_few_clusters(groups: Sequence, arm: Sequence[bool] | None = None, arm_names: tuple[str, str] = ("", "")
                     ) -> str:
    """Why a clustered test cannot hold its size here, or "" when it can. ``arm`` marks a cluster-constant
    regressor (e.g. recognition_finetune): each side needs MIN_CLUSTERS_PER_ARM clusters of its own."""
    groups = pd.Series(list(groups)).astype(str)
    n = int(groups.nunique())
    if n < MIN_CLUSTERS:
        return f"{TOO_FEW} ({n} clusters; it needs at least {MIN_CLUSTERS})"
    if arm is None:
        return ""
    on = pd.Series(list(arm), dtype=bool).to_numpy()
    counts = [int(groups[on].nunique()), int(groups[~on].nunique())]
    short = [f"{k} {name}" for k, name in zip(counts, arm_names, strict=True) if k < MIN_CLUSTERS_PER_ARM]
    if short:
        return (f"{TOO_FEW} ({' and '.join(short)} cluster(s); a regressor constant within clusters needs at "
                f"least {MIN_CLUSTERS_PER_ARM} on each side)")
    return ""


def cell_means_t(values: np.ndarray, cells: np.ndarray, articles: np.ndarray, weights: np.ndarray,
                 confidence: float) -> tuple[float, float, float, float]:
    """Σ_c weights[c]·(mean of the items of cell c), with its CI and p-value over articles: OLS of the items on
    cell dummies, the CR2 sandwich clustered by article and a t with Bell–McCaffrey df (ClusteredOLS). With the
    same item count in every (cell, article) this is exactly t(articles − 1) on each article's weighted mean
    over cells; where exclusions leave counts unequal, CR2 and the df keep the coverage (a plain t on the
    articles' linearised contributions fell to 94% at 10% excluded items, 88% at 30%). Returns (estimate,
    low, high, p), so the CI excludes 0 exactly when p < 1 − confidence; NaN interval with fewer than 2
    articles; where every article gives the same value, a zero-width CI (the tables say so) and no p."""
    est = float(np.bincount(cells, values) @ (weights / np.bincount(cells, minlength=weights.size)))
    if np.unique(articles).size < 2:
        return est, math.nan, math.nan, math.nan
    fit = ClusteredOLS(np.eye(weights.size)[cells], values, articles).contrast(weights, alpha=1 - confidence)
    if not fit.se > 1e-12 * max(1.0, abs(est)):  # rounding noise of equal values, not spread
        return est, est, est, math.nan
    return est, fit.ci_low, fit.ci_high, fit.p


def logit_interval(est: float, low: float, high: float) -> tuple[float, float]:
    """A mean in [0, 1]'s interval taken on the logit scale and mapped back (delta method: the SE of logit(m)
    is SE / (m(1 − m)); the df stay): it stays inside [0, 1] and gives a mean near a bound its longer tail
    (93-94% at 10 and 20 articles for a skewed mean at 0.85, where the plain interval gave 91-93%:
    bench/coverage_means.py). Unchanged where it cannot apply (a mean at 0 or 1, no spread)."""
    if not (0 < est < 1 and low < high):
        return low, high
    half = (high - low) / 2 / (est * (1 - est))
    return float(expit(logit(est) - half)), float(expit(logit(est) + half))


def article_mean_ci(values: Sequence[float], articles: Sequence[str], confidence: float,
                    bounded: bool = False) -> tuple[float, float, float]:
    """The item mean of one cell with its CI over articles (cell_means_t with one cell: CR2 clustered by
    article, Bell–McCaffrey df; with one item per article, t(articles − 1) on the items). ``bounded``: a
    quantity in [0, 1], whose interval is taken on the logit scale (logit_interval). NaN CI with fewer than
    2 articles."""
    vals = np.asarray(values, dtype=float)
    est, low, high, _ = cell_means_t(vals, np.zeros(vals.size, dtype=int), np.asarray(articles, dtype=str),
                                     np.ones(1), confidence)
    return (est, *logit_interval(est, low, high)) if bounded else (est, low, high)
