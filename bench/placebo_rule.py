"""The placebo rule's words at the sizes people run: how often each says "alike", "apart" or "undetermined".

The placebo asks a third question on the items of a cell; the rule (selfpref_sweep/measurements/placebo/
placebo_rule.py) compares how often preference agrees with recognition against how often the placebo does, on
the same items. Each item is one of: both agree with recognition (a), only preference (b), only the placebo (c),
neither (e). d = P(b) − P(c); preference's link beyond chance is L = P(a) + P(b) − 0.5.

Scenarios (each drawn ``--reps`` times per item count, multinomial):

- *boundary*: d = L/2 exactly, where "alike" (d < L/2) is just false: its rate is the word's size (≤ 5%);
- *one readout*: the placebo answers as preference does (d = 0): "alike" is true; its rate is the power;
- *placebo at chance, link L*: the placebo agrees with recognition half the time, independently: "alike" is false
  (d = L) and "apart" is true. The issue that replaced the absolute margin: at a link of 0.05 and 1,000 items the
  old rule (95% upper bound on d below 0.10) said "alike" 40% of the time and "apart" 59%;
- *apart null*: the two agree equally often (d = 0) with a link: "apart" is false; its rate is its size.

Both rules are shown: the current one (relative margin, placebo_rule.read) and the old absolute one, inlined here
for the comparison only.

    python bench/placebo_rule.py [--reps 4000] [--items 10 20 50 200 1000] [--seed 11] [--out-md FILE]

About a minute on one core at the defaults.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from selfpref_sweep.measurements.placebo import placebo_rule as R  # noqa: E402

OLD_MARGIN = 0.10  # the absolute margin the rule used before


def scenarios() -> list[tuple[str, str, tuple[float, float, float, float]]]:
    """(name, the word whose rate is read, (a, b, c, e) probabilities)."""
    def at_chance(link: float) -> tuple[float, float, float, float]:
        p_pref = 0.5 + link  # the placebo agrees half the time, whatever preference does
        return p_pref / 2, p_pref / 2, (1 - p_pref) / 2, (1 - p_pref) / 2

    return [
        ("boundary d = L/2 (L 0.4): alike is false", R.ALIKE, (0.7, 0.2, 0.0, 0.1)),
        ("boundary d = L/2 (L 0.2): alike is false", R.ALIKE, (0.5, 0.2, 0.1, 0.2)),
        ("one readout, L 0.4: alike is true", R.ALIKE, (0.9, 0.0, 0.0, 0.1)),
        ("one readout, L 0.2: alike is true", R.ALIKE, (0.7, 0.0, 0.0, 0.3)),
        ("placebo at chance, L 0.05: alike is false", R.ALIKE, at_chance(0.05)),
        ("placebo at chance, L 0.05: apart is true", R.APART, at_chance(0.05)),
        ("placebo at chance, L 0.3: apart is true", R.APART, at_chance(0.3)),
        ("equal agreement, L 0.2: apart is false", R.APART, (0.55, 0.15, 0.15, 0.15)),
    ]


@cache
def new_word(n: int, a: int, b: int, c: int) -> str | None:
    return R.read(n, a + b, b, c).outcome


@cache
def old_word(n: int, a: int, b: int, c: int) -> str | None:
    """The rule before the relative margin: alike when the 95% upper bound on d is below 0.10."""
    word = R.read(n, a + b, b, c).outcome
    if word in (R.ALIKE, R.UNDETERMINED):
        return R.ALIKE if R.upper_bound(n, b, c) < OLD_MARGIN else R.UNDETERMINED
    return word


def rates(n: int, probs: tuple[float, ...], reps: int, rng: np.random.Generator) -> tuple[Counter, Counter]:
    draws = rng.multinomial(n, probs, size=reps)
    new, old = Counter(), Counter()
    for a, b, c, _ in draws:
        new[new_word(n, int(a), int(b), int(c))] += 1
        old[old_word(n, int(a), int(b), int(c))] += 1
    return new, old


def table(reps: int, items: list[int], seed: int) -> str:
    rng = np.random.default_rng(seed)
    lines = ["| scenario | rate of | items | current rule | old rule (absolute 0.10) |", "|---|---|---|---|---|"]
    for name, word, probs in scenarios():
        for n in items:
            new, old = rates(n, probs, reps, rng)
            cells = []
            for counts in (new, old):
                p = counts[word] / reps
                cells.append(f"{100 * p:.1f}% ± {100 * (p * (1 - p) / reps) ** 0.5:.1f}")
            lines.append(f"| {name} | {word} | {n} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=4000)
    p.add_argument("--items", type=int, nargs="+", default=[10, 20, 50, 200, 1000])
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--out-md", type=Path, default=None)
    args = p.parse_args(argv)
    text = table(args.reps, args.items, args.seed)
    print(text)
    if args.out_md is not None:
        args.out_md.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
