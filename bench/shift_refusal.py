"""How the corrected specificity shift behaves when its interval is printed only above a reliability threshold.

The corrected shift (analysis/estimate/resample.py) prints no interval where recognition's estimated
reliability is under MIN_RELIABILITY. That rule reads the sample's own recognition spread, so it may select
sweeps whose errors lean one way. This bench draws sweeps from the coverage simulator's design, fits every
corrected shift row with the rule switched off (only a failed correction still refuses), and records each row's
estimate, interval, reliability and truth, so that any threshold (or none) can be scored on the same sweeps:
the rate at which the interval excludes the true shift among the rows a rule prints, and how many it prints.

    python bench/shift_refusal.py --reps 200 --adapters-per-arm 3 --adapter-sd 0.1 \
        --arm-article-sd 0.3 --variant-article-sd 0.2 --out outputs/shift_refusal.jsonl

Resumable: reps already in ``--out`` are kept. ``--score`` reads the file and prints the table.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import zlib
from pathlib import Path

import numpy as np

from selfpref_sweep.analysis.estimate import resample as RS
from selfpref_sweep.analysis.estimate.finetune_tests import RECOGNITION_TASKS
from selfpref_sweep.analysis.estimate.units import degenerate_units, without_units
from selfpref_sweep.analysis.study.coverage import true_fits
from selfpref_sweep.analysis.study.coverage_mode import CoverageDesign, coverage_truth
from selfpref_sweep.analysis.study.design import draw_adapter_deviations, draw_items


@functools.lru_cache(maxsize=8)
def _truths(design: CoverageDesign, setting: str, n_articles: int) -> dict[tuple, float]:
    """The fits on the design's true points (the arms' population values): what the rows aim at."""
    return {(f.what, f.level, f.group_by, f.group, f.scale): f.estimate
            for f in true_fits(coverage_truth(design.spec(setting, n_articles)))["resampled"]}


def one_rep(design: CoverageDesign, setting: str, n_articles: int, rep: int, seed: int) -> list[dict]:
    """The corrected shift and slope rows of one simulated sweep (the coverage mode's own stream), rule switched off."""
    rng = np.random.default_rng([seed, zlib.crc32(setting.encode()), n_articles, rep])
    spec = design.spec(setting, n_articles)
    deviations = draw_adapter_deviations(spec, rng)
    items = draw_items(spec, rng, adapter_deviations=deviations)
    truths = _truths(design, setting, n_articles)
    fitted = without_units(items, degenerate_units(items))
    draws: dict[float, dict[str, float]] = {}

    def interval(est: float, d: np.ndarray, *args: float, **kw: float) -> dict[str, float]:
        """The fit's own interval, with the draws' centre and spread kept aside (by estimate) for the table's
        other candidates."""
        draws[est] = {"draw_median": float(np.median(d)), "draw_mean": float(np.mean(d)),
                      "draw_sd": float(np.std(d, ddof=1)), "draw_q025": float(np.quantile(d, 0.025)),
                      "draw_q975": float(np.quantile(d, 0.975))}
        return saved_interval(est, d, *args, **kw)

    saved, RS.MIN_RELIABILITY = RS.MIN_RELIABILITY, -math.inf
    saved_interval, RS._interval = RS._interval, interval
    try:
        fits = RS.article_resample(fitted, RECOGNITION_TASKS, seed=0)
    finally:
        RS.MIN_RELIABILITY, RS._interval = saved, saved_interval
    out = []
    for f in fits:
        if f.what not in (RS.SHIFT, RS.SLOPE) or f.method != RS.RESAMPLE_CORRECTED:
            continue
        out.append({"rep": rep, "what": f.what, "level": f.level, "group_by": f.group_by, "group": str(f.group),
                    "scale": f.scale,
                    "estimate": f.estimate, "se": f.se, "df": f.df, "ci_low": f.ci_low, "ci_high": f.ci_high,
                    "reliability": f.reliability, "ok": f.ok, "note": f.note,
                    "truth": truths.get((f.what, f.level, f.group_by, f.group, f.scale), math.nan),
                    **draws.get(f.estimate, {})})
    return out


RULES = (None, 0.2, 0.5)  # none (only a failed correction refuses), the new threshold, the old one


def _frame(rows: list[dict]):
    import pandas as pd

    frame = pd.DataFrame(rows)
    split = frame["group"].str.rsplit("/", n=1).str[-1].str.strip()
    frame["kind"] = frame["level"] + ", " + np.where(frame["group_by"].str.contains("transfer"), split, "pooled")
    frame["printed"] = np.isfinite(frame["ci_low"]) & np.isfinite(frame["ci_high"])
    frame["miss"] = frame["printed"] & ~((frame["ci_low"] <= frame["truth"]) & (frame["truth"] <= frame["ci_high"]))
    frame["err"] = frame["estimate"] - frame["truth"]
    return frame


def _cell(sub, rule: float | None) -> str:
    keep = sub["printed"] & ((sub["reliability"] >= rule) if rule is not None else True)
    n = int(keep.sum())
    if not n:
        return f"0/{len(sub)} printed"
    rate = float(sub.loc[keep, "miss"].mean())
    se = math.sqrt(rate * (1 - rate) / n)
    return f"{100 * rate:.1f}% ± {100 * se:.1f} ({n}/{len(sub)}, {sub.loc[keep, 'err'].median():+.3f})"


def score(rows: list[dict], what: str = RS.SHIFT) -> str:
    """A markdown table per row kind and scale: under each rule, the rate at which a printed interval misses
    the truth (± its Monte Carlo SE), then (printed/rows, the printed rows' median error)."""
    frame = _frame(rows)
    frame = frame[frame["what"] == what]
    head = ["row", "scale", *("no threshold" if r is None else f"reliability ≥ {r}" for r in RULES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (kind, scale), sub in frame.groupby(["kind", "scale"]):
        lines.append(f"| {kind} | {scale} | " + " | ".join(_cell(sub, r) for r in RULES) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--seed", type=int, default=20261205)
    p.add_argument("--articles", type=int, default=10)
    p.add_argument("--setting", default="pairwise")
    p.add_argument("--adapters-per-arm", type=int, default=3)
    p.add_argument("--adapter-sd", type=float, default=0.1)
    p.add_argument("--arm-article-sd", type=float, default=0.3)
    p.add_argument("--variant-article-sd", type=float, default=0.2)
    p.add_argument("--out", type=Path, default=Path("outputs/shift_refusal.jsonl"))
    p.add_argument("--score", action="store_true", help="only score what --out holds")
    p.add_argument("--what", default=RS.SHIFT, choices=(RS.SHIFT, RS.SLOPE), help="the rows to score")
    a = p.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in a.out.read_text().splitlines()] if a.out.exists() else []
    if not a.score:
        design = CoverageDesign(adapters_per_arm=a.adapters_per_arm, adapter_sd=a.adapter_sd,
                                arm_article_sd=a.arm_article_sd, variant_article_sd=a.variant_article_sd)
        done = {r["rep"] for r in rows}
        with a.out.open("a") as fh:
            for rep in range(a.reps):
                if rep in done:
                    continue
                new = one_rep(design, a.setting, a.articles, rep, a.seed)
                fh.write("".join(json.dumps(r) + "\n" for r in new))
                fh.flush()
                rows += new
    print(score(rows, a.what))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
