"""Replicates of a treatment that judged the same articles: their mean difference with both the articles' and the
replicates' own variance (analysis/arms.py pools an arm's adapters with it; paired.dose_trend adds training
randomness to its slope)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from .clustered import ClusteredOLS

ALPHA = 0.05


def _adapter_design(frames: Sequence[pd.DataFrame]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Items of k adapters' difference frames as (values, cell codes, articles, cell→adapter); a cell is an
    (adapter, source)."""
    stacked = pd.concat([f.assign(_adapter=a) for a, f in enumerate(frames)], ignore_index=True)
    codes, keys = pd.factorize(pd.MultiIndex.from_frame(stacked[["_adapter", "source"]]))
    return (stacked["v"].to_numpy(float), codes, stacked["article_id"].to_numpy(str),
            keys.get_level_values(0).to_numpy())


def replicate_contrast(frames: Sequence[pd.DataFrame], groups: Sequence, weights: Sequence[float],
                       confidence: float = 1 - ALPHA, stated_var: float | None = None) -> dict[str, float]:
    """Σ_a weights[a]·Δ_a over replicates a (each a frame of source, article_id, v: item differences; Δ_a the
    mean over its sources of their means), replicates of one ``groups`` label being runs of one treatment.

    Its variance has two parts: the articles' (the contrast's CR2 t over articles, Bell–McCaffrey df: the
    replicates judged the same articles, so their Δs move together) and the replicates' own, τ²·Σ weights²,
    τ² their variance beyond what the articles explain, from the spread within groups S = Σ_g Σ_{a∈g} (Δ_a −
    Δ̄_g)² on d = Σ_g (k_g − 1) df and what the articles put into it, N = Σ_g Σ_{a∈g} var_articles(Δ_a − Δ̄_g).
    training_sd reports the moment estimate √max(0, (S − N)/d). The interval's variance uses the
    median-unbiased one, τ̃² = max(0, S/χ²_d(½) − N/d) (χ²_d(½) the median of a chi-square on d df, below d):
    the moment estimate is truncated at 0 and its plug-in df rises just where it comes out too small, which
    under-covered (0.92 at τ = 0.4, 0.84 at τ = 1.6 with 2 adapters). Its df follow Hartung and Knapp
    (few_replicate_split): where the spread shows training randomness, each replicate's whole own part is read
    from that spread on d df, and only the part they share keeps the articles' df (docs/results/
    arm_interval_coverage.md gives the coverage). Without a group of 2+ replicates τ² is not estimable: the
    interval is the articles' and training_sd is NaN, unless the caller states τ² (``stated_var``, a training
    variance the user gives from elsewhere, on this contrast's scale): then τ²·Σ weights² joins the variance as
    known (infinite df) and training_sd reports its root. Replicates, where there are, always win over it.
    Returns mean, ci_low, ci_high, p, training_sd, df."""
    out = dict(mean=math.nan, ci_low=math.nan, ci_high=math.nan, p=math.nan, training_sd=math.nan, df=math.nan)
    keep = [a for a, f in enumerate(frames) if len(f)]
    if not keep:
        return out
    frames = [frames[a] for a in keep]
    groups = np.asarray(pd.factorize(pd.Series([groups[a] for a in keep], dtype=object).astype(str))[0])
    w = np.asarray([weights[a] for a in keep], dtype=float)
    values, cells, articles, adapter_of = _adapter_design(frames)
    k = len(frames)
    per_cell = 1.0 / np.bincount(adapter_of, minlength=k)[adapter_of]  # the mean over a replicate's sources

    def cell_weights(a_weights: np.ndarray) -> np.ndarray:
        return per_cell * a_weights[adapter_of]

    deltas = np.array([float(np.bincount(cells, values) @ (cell_weights(np.eye(k)[a]) /
                                                           np.bincount(cells, minlength=per_cell.size)))
                       for a in range(k)])
    out["mean"] = float(w @ deltas)
    if np.unique(articles).size < 2:
        return out
    ols = ClusteredOLS(np.eye(per_cell.size)[cells], values, articles)
    art = ols.contrast(cell_weights(w))
    v_art, df_art = art.se ** 2, art.df
    v_train, df_train = 0.0, math.inf
    sizes = np.bincount(groups)
    df_tau = float(np.sum(np.maximum(sizes - 1, 0)))
    if df_tau >= 1:
        spread, noise = _spread_within_groups(groups, deltas, lambda a_weights: ols.contrast(cell_weights(a_weights)))
        out["training_sd"] = math.sqrt(max(0.0, (spread - noise) / df_tau))
        v_art, v_train, df_train = few_replicate_split(v_art, spread, noise, df_tau, float(w @ w))
    elif stated_var is not None:
        out["training_sd"] = math.sqrt(stated_var)
        v_train = stated_var * float(w @ w)
    interval = two_part_t(out["mean"], v_art, df_art, v_train, df_train, confidence)
    out.update({k: v for k, v in interval.items() if k != "se"})
    return out


def _spread_within_groups(groups: np.ndarray, deltas: np.ndarray, contrast: Callable) -> tuple[float, float]:
    """(S, N): the replicates' spread about their group means, and what the articles put into it (the articles'
    variance of each Δ_a − Δ̄_g, ``contrast`` giving a replicate-weight contrast's fit)."""
    k = deltas.size
    spread, noise = 0.0, 0.0
    for g in np.flatnonzero(np.bincount(groups) >= 2):
        members = np.flatnonzero(groups == g)
        centre = np.zeros(k)
        centre[members] = 1.0 / members.size
        spread += float(np.sum((deltas[members] - deltas[members].mean()) ** 2))
        noise += sum(contrast(np.eye(k)[a] - centre).se ** 2 for a in members)
    return spread, noise


def few_replicate_split(v_art: float, spread: float, noise: float, df: float, sum_w2: float
                        ) -> tuple[float, float, float]:
    """The interval's two variance parts, (articles', training's, training's df), for a contrast with weights w
    (Σw² = ``sum_w2``) over replicates whose spread within groups is ``spread`` on ``df`` df, ``noise`` of it the
    articles'. A replicate's own variance is read from the spread, S/χ²_d(½), where that exceeds what the
    articles give it, N/d; then the whole own part (the articles' share and training's) goes on d df and only
    the shared part, v_art − Σw²·N/d, keeps the articles' df (Hartung & Knapp 2001's idea: the variance the
    few replicates estimate is read on their df). The total is the median-unbiased rule's, so the interval is
    never narrower than that rule's; where the spread shows nothing beyond the articles, it is the articles'.
    With 3 adapters at training SD 0.4 this rule covered 0.944 where the split on the articles' df covered
    0.922-0.928 (docs/results/arm_interval_coverage.md)."""
    own, tau2 = noise / df, median_unbiased_tau2(spread, noise, df)
    if tau2 == 0:
        return v_art, 0.0, math.inf
    return max(0.0, v_art - own * sum_w2), (own + tau2) * sum_w2, df


def median_unbiased_tau2(spread: float, noise: float, df: float) -> float:
    """τ² for the interval (replicate_contrast): the between-replicate spread scaled by the median of its
    chi-square, less what the articles put into it; 0 at least."""
    return max(0.0, spread / float(stats.chi2.ppf(0.5, df)) - noise / df)


def two_part_t(est: float, v_art: float, df_art: float, v_train: float = 0.0, df_train: float = math.inf,
               confidence: float = 1 - ALPHA) -> dict[str, float]:
    """est ± t × SE, SE² = v_art (articles, on df_art) + v_train (training randomness, on df_train), t on the two
    parts' Welch-Satterthwaite df (df_art alone when v_train is 0). Returns se, and df, ci_low, ci_high and p
    where an interval exists."""
    total = v_art + v_train
    se = math.sqrt(total) if total >= 0 else math.nan
    if not (se > 0 and df_art > 0 and math.isfinite(est)):
        return dict(se=se)
    df = total ** 2 / (v_art ** 2 / df_art + v_train ** 2 / df_train) if v_train > 0 else df_art
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    return dict(se=se, df=df, ci_low=est - half, ci_high=est + half, p=float(2 * stats.t.sf(abs(est) / se, df)))


def pooled_delta(frames: Sequence[pd.DataFrame], stated_var: float | None = None) -> dict[str, float]:
    """The mean Δ of the replicates of one treatment that have data (replicate_contrast, weights 1/k over them:
    a replicate without values does not pull the mean toward 0); ``stated_var``: replicate_contrast's."""
    present = [f for f in frames if len(f)]
    k = len(present)
    return replicate_contrast(present, [0] * k, [1.0 / k] * k if k else [], stated_var=stated_var)
