"""``python -m selfpref_sweep.analysis.study.acceptance T1.json T2.json ...``: several coverage runs side by side.

Each coverage run (``simulate --coverage ... --out-json T.json``) scores one design. This puts the runs of several
designs (adapters per arm, training SD, setting, article count) in one table, grouped by what the report prints:
per group of rows and per design, the range of the rows' rates and how many hold, are undecided or do not hold
(coverage.verdict), then every row that does not hold, with its rate. Nothing is recomputed: the figures are
the runs' own.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...reporting.grouping import LEVEL_UNIT
from ..estimate.resample import REPORTED
from .calibration import SCORED_BY, calibration_label, describe
from .coverage import FAILS, HOLDS, TARGETS, UNDECIDED
from .coverage_mode import print_and_write

# What the report prints, and the coverage rows (key prefixes) that score it.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Recognition and preference apart: training randomness is planted on preference, so a pooled range would
    # hide a preference row that misses behind recognition rows that hold.
    ("arm Δ recognition CI (adapters pooled), true Δ = 0", ("arm|dnull|rec|",)),
    ("arm Δ preference CI (adapters pooled), true Δ = 0", ("arm|dnull|pref|",)),
    ("arm Δ recognition CI (adapters pooled), true Δ ≠ 0", ("arm|dalt|rec|",)),
    ("arm Δ preference CI (adapters pooled), true Δ ≠ 0", ("arm|dalt|pref|",)),
    ("arm Δ p < 0.05 (raw), true Δ = 0", ("arm|dp|",)),
    ("one adapter's Δ recognition CI", ("dnull|rec|", "dalt|rec|")),
    ("one adapter's Δ preference CI", ("dnull|pref|", "dalt|pref|")),
    ("one adapter's Δ p, raw and Holm", ("dp|", "holm|")),
    ("specificity word: corrected shift test", ("rs|shift|",)),
    ("specificity words, each direction (2.5% each)", ("rs+|shift|", "rs-|shift|")),
    ("the report's interaction test (resample OLS)", ("rsols|interaction|",)),
    ("corrected slope and intercept CIs", ("rs|slope|", "rs|intercept|")),
    ("paper's statistic: plain OLS slope and intercept", ("slope|", "intercept|")),
    ("plain specificity and interaction tests (descriptive)", ("specificity|", "interaction|")),
    ("paper-unit means", ("unit|",)),
    ("cell means, per-source tests, classifier accuracy", ("cell|", "srcp|", "srcholm|", "acc|")),
    ("dose trend", ("trend|",)),
)


# Rows whose report item carries its own label rather than calibration.py's (key prefix -> where it is said).
LABELLED_ELSEWHERE = {
    "acc|all": "the recognition classifier's table text: its interval over both orders is conservative "
               "(measurements/recognition_classifier/texts/overall_conservative.md)",
}


def design_name(payload: dict[str, Any], setting: str, n_articles: int) -> str:
    d = payload["design"]
    return f"{d['adapters_per_arm']} adapters, SD {d['adapter_sd']:g}, {setting}, {n_articles} articles"


def columns(payloads: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Design name -> its rows (one per coverage row), over every run's settings and article counts."""
    out: dict[str, list[dict[str, Any]]] = {}
    for payload in payloads:
        for row in payload["rows"]:
            out.setdefault(design_name(payload, row["setting"], int(row["n_articles"])), []).append(row)
    return out


def group_cell(rows: Sequence[dict[str, Any]], prefixes: Sequence[str]) -> str:
    mine = [r for r in rows if r["key"].startswith(tuple(prefixes))]
    if not mine:
        return "—"
    rates = [100 * r["rate"] for r in mine]
    counts = {v: sum(r["verdict"] == v for r in mine) for v in (HOLDS, UNDECIDED, FAILS)}
    return (f"{min(rates):.1f}–{max(rates):.1f}% ({counts[HOLDS]} hold, {counts[UNDECIDED]} undecided, "
            f"{counts[FAILS]} not)")


def markdown(payloads: Sequence[dict[str, Any]], command: str) -> str:
    cols = columns(payloads)
    names = list(cols)
    adapters = {design_name(p, r["setting"], int(r["n_articles"])): int(p["design"]["adapters_per_arm"])
                for p in payloads for r in p["rows"]}
    reps = {n: max(r["reps"] for r in rows) for n, rows in cols.items()}
    lines = ["## Coverage across designs", "", f"Command: `{command}`", "",
             "Each cell: the range of the rows' rates (coverage of a 95% CI, or size of a 5% test), and how many "
             "rows hold (the rate inside 93–97% or 3–7%), are undecided (outside, its Monte Carlo interval reaching "
             "in) or do not hold (the whole Monte Carlo interval outside).", "",
             "| report rows | " + " | ".join(f"{n} ({reps[n]} reps)" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for label, prefixes in GROUPS:
        lines.append(f"| {label} | " + " | ".join(group_cell(cols[n], prefixes) for n in names) + " |")
    lines += ["", "Where a design's rows are off their target and the report would print them without a label "
              "(its labels come from the shipped tables of its adapter count: calibration.py):", ""]
    gaps = [f"- {n}: {gap}" for n in names for gap in label_gaps(cols[n], adapters[n])]
    lines += gaps or ["- none"]
    lines += ["", "Labelled by their own report item, not counted above: "
              + "; ".join(f"`{key}`, {where}" for key, where in LABELLED_ELSEWHERE.items()) + "."]
    return "\n".join(lines) + "\n"


def _direction(label: str) -> str:
    """A label's side of its target ("" for no label): too narrow or over-rejecting ("liberal"), or not."""
    if not label:
        return ""
    return "liberal" if label.startswith(("under-covers", "far too narrow", "over-rejects")) else "conservative"


def label_gaps(rows: Sequence[dict[str, Any]], adapters: int) -> list[str]:
    """The report rows (calibration.SCORED_BY) this design's figures put off target (calibration.describe) where
    the shipped table the report reads gives no label or one on the other side, and the rows no label covers
    (arm and adapter Δs, means, the dose trend) that do not hold."""
    out = []
    for (what, level, method, pooled), prefixes in SCORED_BY:
        if what.startswith("resampled ") and method != REPORTED.get(what.split()[1]):
            continue  # a resampled method the report does not print for this coefficient
        mine = [r for r in rows if r["key"].startswith(prefixes)]
        found = describe(mine, bool(pooled), TARGETS, "this design")
        if not found:
            continue
        shipped = calibration_label(what, level or LEVEL_UNIT, method or "", True if pooled is None else pooled,
                                    adapters=adapters)
        if _direction(shipped) != _direction(found):
            label = f"{what}, {level or 'any level'}, {method or 'its method'}" + (", pooled" if pooled else "")
            out.append(f"{label}: {found}; the report's label: {shipped or 'none'}")
    scored = tuple(p for _, prefixes in SCORED_BY for p in prefixes) + tuple(LABELLED_ELSEWHERE)
    out += [f"{r['label']}: {100 * r['rate']:.1f}% ± {100 * (r['se'] or 0):.1f} (no label covers this row)"
            for r in rows if r["verdict"] == FAILS and not r["key"].startswith(scored)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m selfpref_sweep.analysis.study.acceptance",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("tables", nargs="+", type=Path, help="coverage runs' --out-json files")
    p.add_argument("--out-md", type=Path, default=None, help="also write the table to this Markdown file")
    args = p.parse_args(argv)
    try:
        payloads = [json.loads(t.read_text(encoding="utf-8")) for t in args.tables]
    except (OSError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    command = "python -m selfpref_sweep.analysis.study.acceptance " + " ".join(
        sys.argv[1:] if argv is None else argv)
    text = markdown(payloads, command)
    print_and_write(text, args.out_md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
