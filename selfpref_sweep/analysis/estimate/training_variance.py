"""Training randomness in the article-resample fits (resample.py): how far a fresh training run of every
fine-tuned evaluator would move a coefficient, beyond what the articles move it.

Two sources, as in a two-level random-effects meta-regression (DerSimonian & Laird 1986, by the method of
moments):

- **adapters within an arm** (one fine-tune recipe, other seeds): each adapter's preference is its arm's plus a
  deviation u ~ (0, τ²) that shifts all its points alike (every dataset and source it was judged on). Where
  some arm has several adapters, τ² comes from the adapters' spread about their arm's mean, on Σ(k_a − 1)
  degrees of freedom: directly, not from the points' scatter about the line, which holds the arms' departures
  too and has only as many df as there are arms beyond the fit's coefficients;
- **arms**: an arm's departure from the line, δ ~ (0, σ²), shared by all its adapters and points. σ² is what the
  residual scatter about the line holds beyond the articles and τ². A whole arm's departure gets the arm's
  variance, not that of k independent adapters. With one adapter per arm the two cannot be told apart, and σ²
  carries both (the fit's only training term, as before replicated arms).

The base model is not trained: its points carry neither. The article part of every spread comes from the
resample's draws. The interval adds both parts' variance to the articles' and takes t on their
Welch-Satterthwaite df; τ² enters it median-unbiased (stats.replicates.median_unbiased_tau2: the moment estimate
is truncated at 0 and its plug-in df rises just where it comes out too small), σ² by its moment estimate on
(arms − coefficients that vary across arms) df. The row's training SD is τ's moment estimate where arms are
replicated, σ's otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...stats.replicates import median_unbiased_tau2

Solve = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (x, y: points × draws) -> coefficients, draws × p


@dataclass
class AdapterPoints:
    """The adapters' own points, for the spread within arms: x, y are adapter points × (1 + draws) (column 0 the
    sample); ``row`` the fit point whose design row each shares (its own, or its arm mean's); ``group`` its arm
    point (arm × dataset × source); ``adapter`` and ``arm`` its names."""

    x: np.ndarray
    y: np.ndarray
    row: np.ndarray
    group: np.ndarray
    adapter: np.ndarray
    arm: np.ndarray

    def columns(self, cols: np.ndarray) -> AdapterPoints:
        return AdapterPoints(self.x[:, cols], self.y[:, cols], self.row, self.group, self.adapter, self.arm)


@dataclass
class Membership:
    """Who shares a training deviation in a fit: per fit point its arm ("" where untrained: the base model),
    the weight of each adapter's deviation in it (fit points × adapters: 1 for an adapter's own point, 1/k in
    the mean of an arm's k adapters), and the adapters' own points where some arm has several."""

    arm: np.ndarray
    adapters: np.ndarray
    within: AdapterPoints | None = None

    @property
    def n_adapters(self) -> int:
        """The trained adapters among the fit's points."""
        return int(np.count_nonzero(self.adapters.any(axis=0)))

    def columns(self, cols: np.ndarray) -> Membership:
        """The same, the adapters' points restricted to the draws ``cols`` (as the fit's)."""
        return Membership(self.arm, self.adapters, self.within.columns(cols) if self.within is not None else None)

    @classmethod
    def of_points(cls, adapter: np.ndarray, arm: np.ndarray, trained: np.ndarray,
                  arm_points: np.ndarray | None, x: np.ndarray, y: np.ndarray) -> Membership:
        """A fit on every adapter's own points (``arm_points``: each point's arm point, None where no arm is
        replicated)."""
        arm = np.where(trained, arm.astype(str), "")
        names = pd.unique(adapter[trained].astype(str))
        weights = (adapter.astype(str)[:, None] == names[None, :]) & trained[:, None]
        within = None
        if arm_points is not None:
            rows = np.flatnonzero(trained)
            within = AdapterPoints(x[rows], y[rows], rows, np.asarray(arm_points)[rows],
                                   adapter.astype(str)[rows], arm[rows])
        return cls(arm, weights.astype(float), within)

    @classmethod
    def of_arm_means(cls, pool: np.ndarray, arm: np.ndarray, codes: np.ndarray, adapter: np.ndarray,
                     x: np.ndarray, y: np.ndarray) -> Membership:
        """A fit on arm means: ``pool`` (arm points × adapter points, rows summing to 1) averaged the adapters'
        points x, y; ``codes`` each adapter point's arm point, ``arm`` each arm point's arm."""
        names = pd.unique(adapter.astype(str))
        onehot = (adapter.astype(str)[:, None] == names[None, :]).astype(float)
        arm = np.asarray(arm).astype(str)
        return cls(arm, pool @ onehot, AdapterPoints(x, y, np.asarray(codes), np.asarray(codes),
                                                     adapter.astype(str), arm[codes]))


@dataclass
class TrainingVariance:
    """Per coefficient the variance a fresh draw of every training run adds (``v``) and its df; the row's
    fields."""

    v: np.ndarray
    df: np.ndarray
    n_adapters: int
    training_sd: float
    training_df: float

    def fields(self) -> dict:
        return dict(n_adapters=self.n_adapters, training_sd=self.training_sd, training_df=self.training_df)


def none(p: int, n_adapters: int) -> TrainingVariance:
    """No training term (the row has no interval, or nothing to estimate it from)."""
    return TrainingVariance(np.zeros(p), np.full(p, math.inf), n_adapters, math.nan, math.nan)


def _coefficient_map(solve: Solve, x0: np.ndarray) -> np.ndarray:
    """A (p × points): how each point's preference moves the coefficients at the sample's recognition x0
    (``solve`` is affine in y given x, so this is exact for the corrected fit too)."""
    n = x0.size
    probe = solve(np.repeat(x0[:, None], n + 1, axis=1), np.hstack([np.eye(n), np.zeros((n, 1))]))
    return (probe[:n] - probe[n]).T


def _within_arm_spread(within: AdapterPoints, F: np.ndarray, a: np.ndarray, coefs: np.ndarray
                       ) -> tuple[float, float, float] | None:
    """(S, N, d): the adapters' spread about their arm's mean, preference off the fitted line averaged over each
    adapter's points (column 0 the sample, the others the draws, ``coefs`` their coefficients: columns × p);
    what the articles put into it; and its df Σ(k_a − 1). None without an arm of two adapters."""
    adapters = pd.Series(within.adapter)
    d = float(adapters.nunique() - pd.Series(within.arm).nunique())
    if d < 1:
        return None
    fitted = F[within.row] @ coefs.T + within.x * (a[within.row] @ coefs.T)
    resid = within.y - fitted  # adapter points × columns
    centred = resid - pd.DataFrame(resid).groupby(within.group).transform("mean").to_numpy()
    e = pd.DataFrame(centred).groupby(within.adapter).mean().to_numpy()  # adapters × columns
    spread = float(np.sum(e[:, 0] ** 2))
    noise = float(np.nansum(np.var(e[:, 1:], axis=1, ddof=1))) if e.shape[1] > 2 else 0.0
    return spread, noise, d


def training_variance(solve: Solve, x: np.ndarray, y: np.ndarray, F: np.ndarray, a: np.ndarray, est: np.ndarray,
                      beta: np.ndarray, members: Membership, n_fixed: int) -> TrainingVariance:
    """The training part of every coefficient's variance (module doc). x, y: fit points × (1 + draws), column 0
    the sample; ``est`` the sample's coefficients, ``beta`` the draws' (draws × p); ``n_fixed`` the coefficients
    that vary across arms (σ²'s df are the arms less these)."""
    p = F.shape[1]
    trained = members.arm != ""
    arm_names = pd.unique(members.arm[trained])
    n_adapters = members.n_adapters
    A = _coefficient_map(solve, x[:, 0])
    if not np.isfinite(A).all() or beta.shape[0] < 2 or not trained.any():
        return none(p, n_adapters)
    D_arm = (members.arm[:, None] == arm_names[None, :]).astype(float)
    D_ad = members.adapters
    R = np.eye(x.shape[0]) - (F + x[:, :1] * a) @ A
    resid = y[:, 0] - (F + x[:, :1] * a) @ est
    draws = y[:, 1:] - F @ beta.T - x[:, 1:] * (a @ beta.T)
    article_part = float(np.nansum(np.var(draws, axis=1, ddof=1)))
    c_arm, c_ad = float(np.sum((R @ D_arm) ** 2)), float(np.sum((R @ D_ad) ** 2))
    within = (_within_arm_spread(members.within, F, a, np.vstack([est, beta]))
              if members.within is not None else None)
    rss = float(resid @ resid)
    df_arm = float(len(arm_names) - n_fixed + (0 if trained.all() else 1))
    if within is None:  # one adapter per arm (or none replicated): σ² holds training randomness and departures
        if df_arm < 1 or not c_ad > 0:
            return none(p, n_adapters)
        sigma2 = max(0.0, (rss - article_part) / c_ad)
        v = sigma2 * np.sum((A @ D_ad) ** 2, axis=1)
        return TrainingVariance(v, np.full(p, df_arm), n_adapters, math.sqrt(sigma2), df_arm)
    spread, noise, d = within
    tau2_moment, tau2 = max(0.0, (spread - noise) / d), median_unbiased_tau2(spread, noise, d)
    v_tau = tau2 * np.sum((A @ D_ad) ** 2, axis=1)
    v_arm, sigma2 = np.zeros(p), 0.0
    if df_arm >= 1 and c_arm > 0:
        sigma2 = max(0.0, (rss - article_part - tau2 * c_ad) / c_arm)
        v_arm = sigma2 * np.sum((A @ D_arm) ** 2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        denominator = v_tau ** 2 / d + (v_arm ** 2 / df_arm if df_arm >= 1 else 0.0)
        df = np.where(denominator > 0, (v_tau + v_arm) ** 2 / denominator, math.inf)
    return TrainingVariance(v_tau + v_arm, df, n_adapters, math.sqrt(tau2_moment), d)
