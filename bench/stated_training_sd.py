"""Coverage of a one-adapter arm's Δ interval (analysis/estimate/arms.py) for the recipe, with a training SD the
user states (analysis.training_sd), right or wrong, on fresh draws; and the articles-only interval for what it
speaks for without one, that training run.

    python bench/stated_training_sd.py --reps 1000 --seed 20261207

One adapter judges n articles (two sources). An item's base log-odds is 0.8 + an article effect N(0, 0.5²) + item
noise N(0, 0.5²); the fine-tuned judge's adds the recipe's Δ (0), the adapter's training deviation u ~ N(0, τ²),
an article effect on the difference N(0, 0.3²) and item noise N(0, 0.8²). The log-odds frame holds the items'
differences; the paper frame the differences of their probabilities (σ), with the two judges' probabilities the
arm scales a stated SD by. The recipe's truth is 0 on log-odds and, on the paper scale, the expected difference over
every draw (u included), by Monte Carlo; the training run's truth is its own u on log-odds. Per row, how often
each 95% interval covers: without a stated SD, of the recipe and of the run; with the true τ stated, half of it,
and twice it.
"""

from __future__ import annotations

import argparse
import math
from multiprocessing import Pool

import numpy as np
import pandas as pd

from selfpref_sweep.analysis.estimate.arms import StatedTrainingSD, stated_variance
from selfpref_sweep.stats.replicates import pooled_delta

BASE, BASE_ARTICLE_SD, BASE_ITEM_SD, DIFF_ARTICLE_SD, DIFF_ITEM_SD = 0.8, 0.5, 0.5, 0.3, 0.8
SOURCES = ("human", "gpt4")


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def draw(rng: np.random.Generator, tau: float, n: int) -> tuple[float, pd.DataFrame, pd.DataFrame]:
    """(u, log-odds frame, paper frame) of one adapter's items."""
    u = rng.normal(0, tau) if tau > 0 else 0.0
    shape = (len(SOURCES), n)
    base = BASE + rng.normal(0, BASE_ARTICLE_SD, n) + rng.normal(0, BASE_ITEM_SD, shape)
    tuned = base + u + rng.normal(0, DIFF_ARTICLE_SD, n) + rng.normal(0, DIFF_ITEM_SD, shape)
    keys = {"source": np.repeat(SOURCES, n), "article_id": [f"a{i}" for i in range(n)] * len(SOURCES)}
    logodds = pd.DataFrame({**keys, "v": (tuned - base).ravel()})
    paper = pd.DataFrame({**keys, "v": (sigmoid(tuned) - sigmoid(base)).ravel(), "tuned": sigmoid(tuned).ravel(),
                          "base": sigmoid(base).ravel()})
    return u, logodds, paper


def paper_truth(tau: float, seed: int, size: int = 2_000_000) -> float:
    """The recipe's paper-scale Δ: E[σ(tuned) − σ(base)] over articles, items and training draws."""
    rng = np.random.default_rng([seed, 99, int(round(tau * 10))])
    base = BASE + rng.normal(0, math.hypot(BASE_ARTICLE_SD, BASE_ITEM_SD), size)
    tuned = base + rng.normal(0, math.sqrt(tau ** 2 + DIFF_ARTICLE_SD ** 2 + DIFF_ITEM_SD ** 2), size)
    return float(np.mean(sigmoid(tuned) - sigmoid(base)))


def covers(fit: dict, truth: float) -> bool:
    return bool(fit["ci_low"] <= truth <= fit["ci_high"])


def row(task: tuple) -> list[dict]:
    tau, n, reps, seed = task
    rng = np.random.default_rng([seed, int(round(tau * 10)), n])
    truths = {"logodds": 0.0, "paper": paper_truth(tau, seed)}
    stated = {"true SD stated": tau, "half of it": tau / 2, "twice it": 2 * tau}
    hits: dict[tuple[str, str], list[bool]] = {}
    for _ in range(reps):
        u, *frames = draw(rng, tau, n)
        for scale, frame in zip(("logodds", "paper"), frames, strict=True):
            bare = pooled_delta([frame])
            hits.setdefault((scale, "no SD: the recipe"), []).append(covers(bare, truths[scale]))
            if scale == "logodds":
                hits.setdefault((scale, "no SD: the run"), []).append(covers(bare, u))
            for name, sd in stated.items():
                var = stated_variance(StatedTrainingSD(sd, "bench"), 1, scale, frame)
                hits.setdefault((scale, name), []).append(covers(pooled_delta([frame], var), truths[scale]))
    out = []
    for scale in ("logodds", "paper"):
        rates = {name: round(float(np.mean(v)), 3) for (s, name), v in hits.items() if s == scale}
        out.append({"scale": scale, "training SD": tau, "articles": n, **rates})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    tasks = [(t, n, args.reps, args.seed) for n in (10, 20, 50) for t in (0.0, 0.1, 0.4, 1.6)]
    with Pool(args.workers) as pool:
        rows = [r for rs in pool.map(row, tasks) for r in rs]
    table = pd.DataFrame(rows).sort_values(["scale", "articles", "training SD"], kind="stable")
    print(f"MC SE of a rate near 0.95 at {args.reps} reps: {math.sqrt(0.95 * 0.05 / args.reps):.3f}\n")
    print(table.to_markdown(index=False))


if __name__ == "__main__":
    main()
