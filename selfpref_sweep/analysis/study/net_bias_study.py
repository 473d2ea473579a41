"""Calibration of the net-of-quality estimators (analysis/self_bias/): sweeps drawn with a known self term κ per
judge, known author quality and judge leniency, scored as the report reads them.

``python -m selfpref_sweep.analysis.study.net_bias_study --design paper --reps 400 --seed 20261207``

The process (log-odds scale, where the additive model holds by construction):

- each author A has a quality q_A, and each of its outputs (one per article) its own quality u_{A,i} ~ N(0, σ_u)
  that every judge sees alike;
- pairwise, judge J on (its own output, X's) of article i: d = (q_own + u_own,i) − (q_X + u_X,i) + κ_J + ε,
  ε ~ N(0, σ_e); the two orders' P(own) are expit(d ± b_J), b_J the judge's position bias. The item's log-odds
  score is d (the mean of the two orders' logits); its paper score the mean of the two probabilities;
- individual, judge J's rating of A's output: exp(μ + α_J + q_A + u_A,i + κ_J·[A = own(J)] + ε): additive on the log
  scale, a 1-5-like score on the paper's.

Truths: κ_J on the log-odds scale. On the paper's scale the additive model is an approximation (probabilities
squash toward 0 and 1), so its truth is the pseudo-true κ: the additive fit to the population cell means (a draw
of ``TRUTH_ARTICLES`` articles). Scored per judge: the pooled κ interval's coverage (each scale), the
per-reference intervals' coverage, the verdict word's rate where κ = 0 (the size of "favours/disfavours its own"),
and the fit test's rejection rate. Targets as the coverage study's: coverage 93-97%, size 3-7%."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit

from ..self_bias import cross_judge
from ..self_bias.net_bias import CROSS_JUDGE, self_bias_frame
from .coverage import TARGETS, aggregate
from .coverage_mode import print_and_write

TRUTH_ARTICLES = 100_000
_MU = math.log(3.0)  # the individual ratings' centre: a score near 3 of 5


@dataclass(frozen=True)
class NetBiasDesign:
    """One design: judges (each the author of its own outputs), common references, articles, and what is planted."""

    name: str
    judges: tuple[str, ...]
    references: tuple[str, ...]
    articles: int
    kappa: tuple[float, ...]  # per judge, log-odds
    quality: tuple[float, ...]  # per author: the judges' own, then the references
    setting: str = "pairwise"
    leniency: tuple[float, ...] = ()  # per judge (individual)
    position: tuple[float, ...] = ()  # per judge (pairwise)
    output_sd: float = 0.5
    noise_sd: float = 0.7

    @property
    def authors(self) -> tuple[str, ...]:
        return (*self.judges, *self.references)


DESIGNS = {
    # The paper's: three judges (each also an author), two common references, 1,000 articles.
    "paper": NetBiasDesign("paper", ("gpt4", "gpt35", "llama"), ("human", "claude"), 1000, (0.5, 0.0, -0.3),
                           (0.6, 0.2, -0.5, 0.3, 0.0), position=(0.4, -0.8, 1.5)),
    # A small sweep: two judges and the human summaries, 20 articles (just identified: no fit test).
    "small": NetBiasDesign("small", ("a", "b"), ("human",), 20, (0.4, 0.0), (0.3, 0.0, -0.2), position=(0.5, -1.0)),
    # The small design with a third judge: over-identified, so the fit test runs.
    "small3": NetBiasDesign("small3", ("a", "b", "c"), ("human",), 20, (0.4, 0.0, -0.3), (0.3, 0.0, -0.4, -0.2),
                            position=(0.5, -1.0, 0.0)),
    # A ceiling: qualities far apart, so that P(own) sits near 0 or 1 for some pairs.
    "ceiling": NetBiasDesign("ceiling", ("gpt4", "gpt35", "llama"), ("human", "claude"), 1000, (0.5, 0.0, -0.3),
                             (2.5, 0.5, -2.0, 1.0, -0.5), position=(0.4, -0.8, 1.5)),
}
DESIGNS["paper_individual"] = replace(DESIGNS["paper"], name="paper_individual", setting="individual",
                                      kappa=(0.10, 0.0, -0.06), quality=(0.12, 0.04, -0.1, 0.06, 0.0),
                                      leniency=(0.05, -0.05, 0.1), output_sd=0.1, noise_sd=0.15)
DESIGNS["small_individual"] = replace(DESIGNS["small"], name="small_individual", setting="individual",
                                      kappa=(0.10, 0.0), quality=(0.06, 0.0, -0.04), leniency=(0.05, -0.05),
                                      output_sd=0.1, noise_sd=0.15)


def _pairwise_frame(d: NetBiasDesign, rng: np.random.Generator, n: int, kappa: Sequence[float]) -> pd.DataFrame:
    q = np.asarray(d.quality)
    u = rng.normal(0.0, d.output_sd, (len(d.authors), n))
    parts = []
    for j, judge in enumerate(d.judges):
        for x, other in enumerate(d.authors):
            if x == j:
                continue
            diff = q[j] + u[j] - q[x] - u[x] + kappa[j] + rng.normal(0.0, d.noise_sd, n)
            b = d.position[j] if d.position else 0.0
            score = 0.5 * (expit(diff + b) + expit(diff - b))
            parts.append(pd.DataFrame({"evaluator_variant": judge, "own_author": judge, "other_author": other,
                                       "cell_id": f"{judge}/{other}", "article_id": np.arange(n).astype(str),
                                       "pref_score": score, "pref_logodds": diff,
                                       "pref_own_value": np.nan, "pref_other_value": np.nan}))
    return pd.concat(parts, ignore_index=True)


def _individual_frame(d: NetBiasDesign, rng: np.random.Generator, n: int, kappa: Sequence[float]) -> pd.DataFrame:
    q = np.asarray(d.quality)
    u = rng.normal(0.0, d.output_sd, (len(d.authors), n))
    parts = []
    for j, judge in enumerate(d.judges):
        rating = {x: np.exp(_MU + d.leniency[j] + q[x] + u[x] + (kappa[j] if x == j else 0.0)
                            + rng.normal(0.0, d.noise_sd, n)) for x in range(len(d.authors))}
        for x, other in enumerate(d.authors):
            if x == j:
                continue
            own, theirs = rating[j], rating[x]
            parts.append(pd.DataFrame({"evaluator_variant": judge, "own_author": judge, "other_author": other,
                                       "cell_id": f"{judge}/{other}", "article_id": np.arange(n).astype(str),
                                       "pref_score": own / (own + theirs), "pref_logodds": np.log(own / theirs),
                                       "pref_own_value": own, "pref_other_value": theirs}))
    return pd.concat(parts, ignore_index=True)


def draw_items(d: NetBiasDesign, rng: np.random.Generator, n: int | None = None,
               kappa: Sequence[float] | None = None) -> pd.DataFrame:
    """One sweep's items frame (the columns analysis/sweep/load.py gives that the estimators read)."""
    n = d.articles if n is None else n
    kappa = d.kappa if kappa is None else kappa
    frame = (_individual_frame if d.setting == "individual" else _pairwise_frame)(d, rng, n, kappa)
    fixed = {"setting": d.setting, "label": "none", "dataset": "simulated", "is_finetuned": False,
             "pref_excluded": False, "pref_exclusion_reason": None, "own_anchor": np.nan, "other_anchor": np.nan,
             "own_correct": None, "other_correct": None, "own_family": None, "other_family": None,
             "judge_family": None}
    return frame.assign(**fixed)


def truths(d: NetBiasDesign, kappa: Sequence[float], seed: int, articles: int = TRUTH_ARTICLES
           ) -> dict[tuple[str, str, str], float]:
    """(scale, reference, judge) -> the true κ: planted on the log-odds scale; on the paper's, the additive fit to
    the population cell means (pooled and per reference)."""
    out = {("logodds", ref, j): float(k) for j, k in zip(d.judges, kappa, strict=True)
           for ref in (cross_judge.POOLED_REFERENCE, *d.references, cross_judge.JUDGES_ONLY)}
    big = draw_items(d, np.random.default_rng(seed), articles, kappa)
    big["article_id"] = "0"  # one article: the cell means are what the fit reads
    frame, _ = self_bias_frame(big)
    paper = frame[(frame["scale"] == "paper") & (frame["estimator"] == CROSS_JUDGE)]
    out.update({("paper", r.reference, r.judge): float(r.estimate) for r in paper.itertuples()})
    return out


def _score_rep(frame: pd.DataFrame, truth: dict, d: NetBiasDesign, kappa: Sequence[float]) -> dict[str, Any]:
    """One rep's trials: per (scale, reference, judge) coverage; per scale, judge with κ = 0, the verdict word;
    per scale, the fit test's rejection."""
    out: dict[str, Any] = {}
    rows = frame[frame["estimator"] == CROSS_JUDGE]
    zero = {j for j, k in zip(d.judges, kappa, strict=True) if k == 0}
    for r in rows.itertuples():
        t = truth.get((r.scale, r.reference, r.judge))
        if t is None:
            continue
        ok = math.isfinite(r.ci_low) and math.isfinite(r.ci_high)
        key = f"cover|{r.scale}|{'pooled' if r.reference == cross_judge.POOLED_REFERENCE else 'reference'}"
        out.setdefault(key, []).append(bool(ok and r.ci_low <= t <= r.ci_high))
    for scale, sub in rows[rows["reference"] == cross_judge.POOLED_REFERENCE].groupby("scale"):
        # Family-wise, as Holm promises: the test a word comes from (Holm p, and the fit test not rejecting) fires
        # for some judge with κ = 0. On the paper's scale the report prints no word; this is why.
        nulls = sub[sub["judge"].isin(zero)]
        if len(nulls):
            fit_ok = ~(nulls["fit_p"] < 0.05)
            out[f"size|{scale}"] = [bool(((nulls["p_holm"] < 0.05) & fit_ok).any())]
    for scale, sub in rows.groupby("scale"):
        p = sub["fit_p"].iloc[0]
        if math.isfinite(p):
            out.setdefault(f"fit|{scale}", []).append(bool(p < 0.05))
    return out


def run(d: NetBiasDesign, reps: int, seed: int, null: bool = False) -> pd.DataFrame:
    """Coverage and size over ``reps`` sweeps (κ planted, or all 0 with ``null``); a row per measure with its MC SE."""
    kappa = tuple(0.0 for _ in d.judges) if null else d.kappa
    truth = truths(d, kappa, seed + 1)
    rng = np.random.default_rng(seed)
    trials: dict[str, list[list[bool]]] = {}
    for _ in range(reps):
        frame, _ = self_bias_frame(draw_items(d, rng, kappa=kappa))
        for key, hits in _score_rep(frame, truth, d, kappa).items():
            trials.setdefault(key, []).append(hits)
    return _table(trials)


_LABELS = {"cover": ("coverage", "κ 95% CI covers the truth"),
           "size": ("size", "the verdict's test fires for some judge whose κ = 0 (family-wise)"),
           "fit": ("fit", "fit test rejects at 5%")}


def _table(trials: dict[str, list[list[bool]]]) -> pd.DataFrame:
    rows = []
    for key, per_rep in sorted(trials.items()):
        kind, scale, *rest = key.split("|")
        target_kind, label = _LABELS[kind]
        # The coverage study's pooled rate and rep-clustered MC SE (a rep's judges share its articles); the fit
        # test's rate has no target, so no reading.
        cell = aggregate(([sum(x), len(x), 0] for x in per_rep), target_kind if target_kind in TARGETS else "size")
        rows.append({"measure": label + (f" ({rest[0]})" if rest else ""), "scale": scale, "rate": cell.rate,
                     "mc_se": cell.se, "trials": cell.trials,
                     "reading": cell.verdict if target_kind in TARGETS else ""})
    return pd.DataFrame(rows)


def markdown(d: NetBiasDesign, planted: pd.DataFrame, null: pd.DataFrame, reps: int, seed: int, secs: float) -> str:
    lines = [f"### Design `{d.name}`", "", f"`{json_line(d)}`", "",
             f"{reps} sweeps with κ planted and {reps} with every κ = 0; seed {seed}; {secs:.0f} s.", "",
             "| measure | κ | scale | rate | MC SE | trials | reading |", "|---|---|---|---|---|---|---|"]
    for which, table in (("planted", planted), ("all 0", null)):
        for r in table.itertuples():
            lines.append(f"| {r.measure} | {which} | {r.scale} | {r.rate:.3f} | {r.mc_se:.3f} | {r.trials} | "
                         f"{r.reading} |")
    return "\n".join(lines) + "\n"


def json_line(d: NetBiasDesign) -> str:
    return ", ".join(f"{k}={v}" for k, v in asdict(d).items())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfpref_sweep.analysis.study.net_bias_study",
                                     description="Coverage and size of the net-of-quality estimators.")
    parser.add_argument("--design", choices=sorted(DESIGNS), action="append", required=True)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--out-md", type=Path, default=None)
    args = parser.parse_args(argv)
    parts = []
    for name in args.design:
        d, start = DESIGNS[name], time.perf_counter()
        planted, null = run(d, args.reps, args.seed), run(d, args.reps, args.seed + 7, null=True)
        parts.append(markdown(d, planted, null, args.reps, args.seed, time.perf_counter() - start))
    print_and_write("\n".join(parts), args.out_md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
