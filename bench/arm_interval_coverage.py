"""Coverage of an arm's pooled Δ interval (stats/replicates.pooled_delta) with few adapters, against the rules
it replaced, on fresh draws.

    python bench/arm_interval_coverage.py --reps 1000 --seed 20261202

k adapters of one arm judge the same articles (both sources): each item difference is the adapter's training
deviation N(0, τ²) + a shared article effect N(0, 0.3²) + item noise N(0, 0.8²); the truth is 0. Per row: how
often each rule's 95% interval covers it. The moment rule: τ² by moments, truncated at 0, Welch-Satterthwaite df
on its plug-in; the median-unbiased rule: τ² median-unbiased (stats/replicates.median_unbiased_tau2), same df
rule; the rule in use (stats/replicates.few_replicate_split, Hartung-Knapp's idea): the same variance as the
median-unbiased rule, but where the adapters' spread exceeds what the articles put into it, the whole
per-adapter part (the articles' share and training's) is read from that spread, on k - 1 df, and only the
articles' common part keeps the articles' df; it is never narrower than the median-unbiased rule.
"""

from __future__ import annotations

import argparse
import math
from multiprocessing import Pool

import numpy as np
import pandas as pd

from selfpref_sweep.stats import replicates as R
from selfpref_sweep.stats.clustered import ClusteredOLS


def frames(rng, k: int, tau: float, n_articles: int, noise: float = 0.8, article_sd: float = 0.3):
    article = rng.normal(0, article_sd, n_articles)
    sources = ("human", "gpt4")
    ids = [f"a{i}" for i in range(n_articles)] * len(sources)
    return [pd.DataFrame({"source": np.repeat(sources, n_articles), "article_id": ids,
                          "v": rng.normal(0, tau) + np.tile(article, len(sources))
                          + rng.normal(0, noise, len(ids))}) for _ in range(k)]


def _pieces(fr) -> tuple[int, np.ndarray, float, float, float, float]:
    """What replicate_contrast computes for one group, weights 1/k: k, the adapters' Δs, the articles' variance of
    the mean and its df, the spread S and what the articles put into it, N."""
    k = len(fr)
    w = np.full(k, 1 / k)
    values, cells, articles, adapter_of = R._adapter_design(fr)
    per_cell = 1.0 / np.bincount(adapter_of, minlength=k)[adapter_of]
    counts = np.bincount(cells, minlength=per_cell.size)
    deltas = np.array([float(np.bincount(cells, values) @ (per_cell * np.eye(k)[a][adapter_of] / counts))
                       for a in range(k)])
    ols = ClusteredOLS(np.eye(per_cell.size)[cells], values, articles)
    art = ols.contrast(per_cell * w[adapter_of])
    spread = float(np.sum((deltas - deltas.mean()) ** 2))
    noise = sum(ols.contrast(per_cell * (np.eye(k)[a] - w)[adapter_of]).se ** 2 for a in range(k))
    return k, deltas, art.se ** 2, art.df, spread, noise


def old_rule_covers(pieces: tuple) -> bool:
    """The moment rule, from the same pieces replicate_contrast computes (one group, weights 1/k)."""
    k, deltas, v_art, df_art, spread, noise = pieces
    v_train = max(0.0, (spread - noise) / (k - 1)) / k
    fit = R.two_part_t(float(deltas.mean()), v_art, df_art, v_train, k - 1)
    return fit["ci_low"] <= 0 <= fit["ci_high"]


def median_unbiased_rule_covers(pieces: tuple) -> bool:
    """The rule before the one in use: the median-unbiased τ² on k - 1 df beside the articles' whole variance on
    the articles' df."""
    k, deltas, v_art, df_art, spread, noise = pieces
    v_train = R.median_unbiased_tau2(spread, noise, k - 1) / k
    fit = R.two_part_t(float(deltas.mean()), v_art, df_art, v_train, k - 1)
    return fit["ci_low"] <= 0 <= fit["ci_high"]


def row(task: tuple) -> dict:
    k, tau, n, reps, seed = task
    rng = np.random.default_rng([seed, k, int(round(tau * 10)), n])
    in_use, old, median_unbiased = [], [], []
    for _ in range(reps):
        fr = frames(rng, k, tau, n)
        fit = R.pooled_delta(fr)
        in_use.append(fit["ci_low"] <= 0 <= fit["ci_high"])
        pieces = _pieces(fr)
        old.append(old_rule_covers(pieces))
        median_unbiased.append(median_unbiased_rule_covers(pieces))
    p = float(np.mean(in_use))
    return {"adapters": k, "training SD": tau, "articles": n, "moment rule": round(float(np.mean(old)), 3),
            "median-unbiased rule": round(float(np.mean(median_unbiased)), 3), "rule in use": round(p, 3),
            "MC SE": round(math.sqrt(p * (1 - p) / reps), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    tasks = [(k, t, n, args.reps, args.seed) for n in (10, 20) for k in (2, 3, 4, 5) for t in (0.0, 0.1, 0.4, 1.6)]
    with Pool(args.workers) as pool:
        print(pd.DataFrame(pool.map(row, tasks)).to_markdown(index=False))


if __name__ == "__main__":
    main()
