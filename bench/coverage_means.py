"""Coverage of 95% intervals for a paper unit's mean and a fine-tuned arm's Δ at 10 and 20 articles.

The article-clustered percentile bootstrap that gave the paper units' and the Δs' CIs covered
about 90% at 10 articles. This bench draws sweeps with a known truth and counts how often each candidate
interval holds it:

- percentile: the old interval, quantiles of the unit statistic over resampled articles (units._unit_stat);
- BCa: scipy.stats.bootstrap(method="BCa") on the same statistic;
- bootstrap-t: resampled articles, each draw studentized by its own standard error from the articles'
  contributions (``contributions`` below);
- t: mean ± t(n−1)·sd/√n over the articles' contributions (each article's mean over sources of its item
  means, linearised where counts differ);
- new: what the analysis now uses (units.unit_t): OLS of the items on source dummies with the CR2 sandwich
  clustered by article and Bell–McCaffrey df (the same as t where every (source, article) has one item),
  and for a unit on the paper's scale the interval on the logit of the mean, mapped back.

The data: 2 sources, one item per (source, article) with 10% of items excluded at random (so counts differ),
an article effect shared by both sources and both models, a source effect, and item noise, on the log-odds
scale; the paper's scale is expit of it (bounded, and skewed near the bound: truth about 0.85). A unit's
truth is the mean over sources of each source's expected value (Gauss-Hermite quadrature); an arm's truth
is the fine-tune's expected change (its own effect per article varies around it). "null Δ" is an arm that
changes nothing: coverage there is 1 − the rate of CIs excluding 0.

    python bench/coverage_means.py [--reps 600] [--resamples 999] [--articles 10 20] [--seed 23]

Prints one row per regime × case × articles: each method's coverage in % with its Monte Carlo SE, and its
mean width relative to the new interval's. About 5 minutes on one core at the defaults (20 ms a sweep).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from selfpref_sweep.analysis.estimate.units import _unit_stat, unit_t  # noqa: E402

SOURCES = np.array([-0.4, 0.4])  # source effects (log-odds)
EXCLUDED = 0.10
# (article SD, item SD, paper-scale centre giving a truth of about 0.85), log-odds: the simulator's item noise
# with a larger article effect; and a stress test where articles dominate, so that on the paper's scale the
# articles' values pile up near 1 with a long tail toward 0.5 (skewness of the article values about -1.3).
REGIMES = {"moderate": (0.5, 1.0, 2.15), "strong skew": (1.2, 0.5, 2.3)}
CASES = {  # name: (scale, fine-tune effect or None for a unit, its sd over articles)
    "unit, log-odds": ("logodds", None, 0.0),
    "unit, paper ~0.85": ("paper", None, 0.0),
    "Δ, log-odds": ("logodds", 0.3, 0.2),
    "Δ, paper": ("paper", 0.5, 0.3),
    "null Δ, log-odds": ("logodds", 0.0, 0.0),
    "null Δ, paper": ("paper", 0.0, 0.0),
}
METHODS = ("percentile", "BCa", "bootstrap-t", "t", "new")
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)


def expected(scale: str, centre: float, sd: float) -> float:
    """E[value] of one source's items: the centre on log-odds, E[expit(N(centre, sd))] on the paper's."""
    if scale == "logodds":
        return centre
    return float(_WEIGHTS @ expit(centre + sd * _NODES) / _WEIGHTS.sum())


def truth(case: tuple) -> float:
    scale, centre, delta, delta_sd, article_sd, item_sd = case
    base_sd = math.hypot(article_sd, item_sd)
    base = np.mean([expected(scale, centre + s, base_sd) for s in SOURCES])
    if delta is None:
        return float(base)
    tuned = np.mean([expected(scale, centre + s + delta, math.hypot(base_sd, delta_sd)) for s in SOURCES])
    return float(tuned - base)


def draw(case: tuple, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One sweep's item sums and counts (sources × articles) of the unit's values, or of the arm's item
    differences (items kept by both models)."""
    scale, centre, delta, delta_sd, article_sd, item_sd = case
    link = expit if scale == "paper" else (lambda x: x)
    eta = centre + SOURCES[:, None] + rng.normal(0, article_sd, n)[None, :]
    kept = rng.random((2, n)) >= EXCLUDED
    base = link(eta + rng.normal(0, item_sd, (2, n)))
    if delta is None:
        values = base
    else:
        kept &= rng.random((2, n)) >= EXCLUDED  # the fine-tuned model's own exclusions
        tuned = link(eta + delta + rng.normal(0, delta_sd, n)[None, :] + rng.normal(0, item_sd, (2, n)))
        values = tuned - base
    return np.where(kept, values, 0.0), kept.astype(float)


def contributions(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each article's share of the unit mean (sources × ... × articles in, ... × articles out): per source
    (sum − m·count) / (items / articles) + m, m the source's mean, averaged over sources; their mean is the
    unit mean."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        n_items = counts.sum(axis=-1, keepdims=True)
        m = sums.sum(axis=-1, keepdims=True) / n_items
        return np.nanmean((sums - m * counts) / (n_items / sums.shape[-1]) + m, axis=0)


def new_interval(sums: np.ndarray, counts: np.ndarray, bounded: bool) -> tuple[float, float]:
    """units.unit_t on the items (one per kept (source, article))."""
    source, article = np.nonzero(counts)
    frame = pd.DataFrame({"source": source.astype(str), "article_id": article.astype(str),
                          "v": sums[source, article]})
    return unit_t(frame, "v", 0.95, bounded)[:2]


def intervals(sums: np.ndarray, counts: np.ndarray, resamples: int, rng: np.random.Generator,
              bounded: bool) -> dict:
    n = sums.shape[-1]
    est = float(_unit_stat(sums, counts))
    idx = rng.integers(0, n, (resamples, n))
    boot = _unit_stat(sums[:, idx], counts[:, idx])
    z_boot = contributions(sums[:, idx], counts[:, idx])  # resamples × articles
    se_boot = z_boot.std(axis=-1, ddof=1) / math.sqrt(n)
    z = contributions(sums, counts)
    se = z.std(ddof=1) / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_star = (boot - est) / se_boot
    t_lo, t_hi = np.nanquantile(t_star[np.isfinite(t_star)], [0.975, 0.025])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa's degenerate-jackknife warnings on rare draws
        bca = stats.bootstrap((sums, counts), _unit_stat, paired=True, vectorized=True, axis=-1,
                              n_resamples=resamples, method="BCa", random_state=rng).confidence_interval
    half = stats.t.ppf(0.975, n - 1) * se
    return {"t": (est - half, est + half), "new": new_interval(sums, counts, bounded),
            "percentile": tuple(np.nanquantile(boot, [0.025, 0.975])), "BCa": (bca.low, bca.high),
            "bootstrap-t": (est - t_lo * se, est - t_hi * se)}


def row(case: tuple, n: int, reps: int, resamples: int, rng: np.random.Generator) -> list[str]:
    """Each method's "coverage % (MC SE) [mean width / t's]" over ``reps`` sweeps of ``n`` articles."""
    true, bounded = truth(case), case[0] == "paper" and case[2] is None
    hits = {m: [] for m in METHODS}
    widths = {m: [] for m in METHODS}
    for _ in range(reps):
        for m, (lo, hi) in intervals(*draw(case, n, rng), resamples, rng, bounded).items():
            hits[m].append(lo <= true <= hi)
            widths[m].append(hi - lo)
    cells = []
    for m in METHODS:
        p = float(np.mean(hits[m]))
        width = np.nanmean(widths[m]) / np.nanmean(widths["new"])
        cells.append(f"{100 * p:5.1f} ({100 * math.sqrt(p * (1 - p) / reps):.1f}) [{width:.2f}]")
    return cells


def run(reps: int, resamples: int, articles: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    print(f"{reps} sweeps per row, {resamples} resamples; coverage % (Monte Carlo SE) [mean width / new's]")
    print(f"{'regime':<12}{'case':<19}{'n':>3}{'truth':>8}" + "".join(f"{m:>19}" for m in METHODS))
    for regime, (article_sd, item_sd, paper_centre) in REGIMES.items():
        for name, (scale, delta, delta_sd) in CASES.items():
            case = (scale, paper_centre if scale == "paper" else 0.5, delta, delta_sd, article_sd, item_sd)
            for n in articles:
                cells = row(case, n, reps, resamples, rng)
                print(f"{regime:<12}{name:<19}{n:>3}{truth(case):8.3f}" + "".join(f"{c:>19}" for c in cells),
                      flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=600)
    p.add_argument("--resamples", type=int, default=999)
    p.add_argument("--articles", type=int, nargs="+", default=[10, 20])
    p.add_argument("--seed", type=int, default=23)
    args = p.parse_args()
    start = time.perf_counter()
    run(args.reps, args.resamples, args.articles, args.seed)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
