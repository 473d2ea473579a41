"""``python -m selfpref_sweep.design --adapters K --articles N [--training-sd S --training-sd-source TEXT] ...``:
what a planned sweep can detect (detectable.py), before anything is trained or judged.

Prints what the figures speak for (a training run, or the recipe), the smallest arm Δ and interaction detected at
80% power, the chance that an equivalence word can be reached where the truth is 0, and with ``--target`` the
smallest design whose arm Δ detects it. Every SD is on the log-odds scale; the defaults are the project's
simulator's default judge (item noise 1.0, two sources), to be replaced by a pilot's figures."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .detectable import Design, describe


def _parser() -> argparse.ArgumentParser:
    d = Design(adapters=1, articles=10)
    p = argparse.ArgumentParser(prog="python -m selfpref_sweep.design", description=__doc__.splitlines()[0])
    p.add_argument("--adapters", type=int, required=True, help="adapters (training runs) per fine-tuned arm")
    p.add_argument("--articles", type=int, required=True, help="evaluation articles per cell")
    p.add_argument("--training-sd", type=float, default=None,
                   help="SD of an adapter's Δ about its recipe's (log-odds); with one adapter per arm, the only way "
                        "to recipe-level figures")
    p.add_argument("--training-sd-source", default="", help="where the stated training SD comes from")
    p.add_argument("--setting", choices=("pairwise", "individual"), default="pairwise",
                   help="printed with the figures; give the setting's own --article-sd from a pilot")
    p.add_argument("--article-sd", type=float, default=1.0,
                   help="SD over articles of one article's paired Δ, fine-tuned − base (default %(default)s)")
    p.add_argument("--point-sd", type=float, default=d.point_sd,
                   help="SD over articles of one article's preference about the line (default %(default)s)")
    p.add_argument("--datasets", type=int, default=d.datasets, help="datasets each arm is judged on")
    p.add_argument("--recognition-arms", type=int, default=d.recognition_arms)
    p.add_argument("--control-arms", type=int, default=d.control_arms)
    p.add_argument("--recognition-sd", type=float, default=d.recognition_sd,
                   help="SD of the arms' recognition (log-odds): how far apart the fine-tunes spread it")
    p.add_argument("--arm-sd", type=float, default=d.arm_sd, help="the arms' own scatter about the line")
    p.add_argument("--margin", type=float, default=0.2, help="equivalence margin for the arm Δ (log-odds)")
    p.add_argument("--slope-margin", type=float, default=0.25,
                   help="equivalence margin for the interaction, as a share of a common slope of 1")
    p.add_argument("--target", type=float, default=None, help="an arm Δ to detect: print the smallest design")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        d = Design(args.adapters, args.articles, args.training_sd, args.training_sd_source, args.article_sd,
                   args.point_sd, args.datasets, args.recognition_arms, args.control_arms, args.recognition_sd,
                   args.arm_sd)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(describe(d, args.margin, args.slope_margin, args.target, args.setting)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
