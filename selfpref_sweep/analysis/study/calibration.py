"""Labels for the report's rows whose interval or test does not hold its stated rate at the sizes sweeps run.

The planted-bias simulator's coverage mode measures every interval and test the report prints on sweeps with
a known truth (the dose-response design, 10 and 20 articles per dataset, article effects shared by every
variant, source and question) and writes its table twice: as Markdown for readers (docs/coverage.md) and as
data (calibration.json beside this module):

    python -m selfpref_sweep.analysis.study.simulate --coverage --reps 100 --articles 10,20 --workers 2 \
        --cache outputs/coverage_reps.jsonl --out-md docs/coverage.md \
        --out-json selfpref_sweep/analysis/study/calibration.json

A sweep whose fine-tuned arms are replicated (several adapters per arm, ``finetune_task.seed``) is scored by a
second table, the same study with 3 adapters per arm and training randomness (adapter SD 0.1 on the log-odds
scale, pairwise, 10 articles: docs/results/coverage_adapters.md), written the same way to
calibration_replicated.json:

    python -m selfpref_sweep.analysis.study.simulate --coverage --reps 300 --articles 10 --settings pairwise \
        --adapters-per-arm 3 --adapter-sd 0.1 --workers 2 --cache outputs/cov/cov_arms_sd0.1.jsonl \
        --out-json selfpref_sweep/analysis/study/calibration_replicated.json

More adapters make more points, so a test that is conservative with one adapter per arm can over-reject with
three (the interaction test did on every adapter's points; it is now fitted on arm means); a replicated sweep's
rows carry the replicated study's labels.

Each kind of report row is scored by some rows of that table (SCORED_BY). Where they show it off its target
(95% intervals covering 93-97%, 5% tests rejecting 3-7%), the report prints the row with a label that says, in
words, what the simulation found, with the figures read from the data, instead of bare: so no reader takes it
at its stated rate. A row is off when one of its simulated figures is wholly outside the target (Monte Carlo
interval included), or when most of them lie outside it on the same side. Re-running the coverage mode after
changing a method updates the labels; nothing here is typed by hand but which table rows score which report
rows.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

from ...reporting.grouping import BY_EVALUATOR, GROUPINGS, LEVEL_SOURCE, LEVEL_UNIT
from ..estimate.fit import MIXED_BY_VARIANT, OLS_BY_VARIANT, OLS_PLAIN
from ..estimate.resample import RESAMPLE_CORRECTED, RESAMPLE_OLS

POOLED = GROUPINGS[0][0]  # "setting × label": every dataset (or transfer condition) of a condition together
# The study behind each table: one adapter per arm (the default), or replicated arms.
DATA_FILES = {False: "calibration.json", True: "calibration_replicated.json"}
SEE = {False: "docs/coverage.md", True: "docs/results/coverage_adapters.md"}
FAILS = "does not hold"  # coverage.FAILS (not imported: coverage.py pulls in the whole estimation)
FAR_TOO_NARROW = 0.6  # an interval covering under 60% is read as descriptive only

# (what, level, method, pooled over datasets) -> the coverage table's row keys (prefixes) that score it; None
# matches either. "what": "fit" (fit.FitResult), "specificity", or "resampled <coefficient>" (resample.py).
SCORED_BY: tuple[tuple[tuple[str, str | None, str | None, bool | None], tuple[str, ...]], ...] = (
    (("fit", LEVEL_UNIT, OLS_PLAIN, True), ("slope|all|", "intercept|all|")),
    (("fit", LEVEL_UNIT, OLS_PLAIN, False), ("slope|dataset|", "intercept|dataset|")),
    (("fit", LEVEL_SOURCE, OLS_BY_VARIANT, True), ("src|all|",)),
    (("fit", LEVEL_SOURCE, OLS_BY_VARIANT, False), ("src|dataset|",)),
    (("fit", LEVEL_SOURCE, MIXED_BY_VARIANT, None), ("mixed|all|",)),
    (("specificity", LEVEL_UNIT, None, True), ("specificity|paper unit|all|",)),
    (("specificity", LEVEL_UNIT, None, False), ("specificity|paper unit|transfer|",)),
    (("specificity", LEVEL_SOURCE, None, True), ("specificity|source|all|",)),
    (("specificity", LEVEL_SOURCE, None, False), ("specificity|source|transfer|",)),
    (("interaction", LEVEL_UNIT, None, True), ("interaction|paper unit|all|",)),
    (("interaction", LEVEL_UNIT, None, False), ("interaction|paper unit|transfer|",)),
    (("interaction", LEVEL_SOURCE, None, True), ("interaction|source|all|",)),
    (("interaction", LEVEL_SOURCE, None, False), ("interaction|source|transfer|",)),
    *((((f"resampled {what}", level, method, pooled),
        (f"{tag}|{what}|{level}|{'all' if pooled else grouping}|",))
       for method, tag in ((RESAMPLE_CORRECTED, "rs"), (RESAMPLE_OLS, "rsols"))
       for what, levels, grouping in (("slope", (LEVEL_UNIT, LEVEL_SOURCE), "dataset"),
                                      ("intercept", (LEVEL_UNIT,), "dataset"),
                                      ("shift", (LEVEL_UNIT, LEVEL_SOURCE), "transfer"),
                                      ("interaction", (LEVEL_UNIT, LEVEL_SOURCE), "transfer"))
       for level in levels for pooled in (True, False))),
)


@functools.cache
def _data(replicated: bool = False) -> dict[str, Any]:
    """The shipped coverage table of one design (empty when the file is absent: no labels)."""
    try:
        return json.loads(resources.files(__package__).joinpath(DATA_FILES[replicated]).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def _shipped(replicated: bool = False) -> tuple[dict[str, Any], ...]:
    """The shipped table's rows (one adapter per arm, or replicated arms)."""
    return tuple(_data(replicated).get("rows", ()))


def _targets() -> dict[str, Sequence[float]]:
    """The targets the tables were scored against (coverage.TARGETS, as the study wrote them)."""
    return dict(_data(False).get("targets", {}) or _data(True).get("targets", {}))


def _study(replicated: bool) -> str:
    """Where a label's figures come from, in words: the simulated design and its write-up."""
    if not replicated:
        return f"simulated, {SEE[False]}"
    design = _data(True).get("design", {})
    settings = "/".join(sorted({str(r.get("setting")) for r in _shipped(True)}))  # the study's settings only
    return (f"simulated{f' ({settings})' if settings else ''} with {design.get('adapters_per_arm', 'several')} "
            f"adapters per arm and training SD {design.get('adapter_sd', '?')}, {SEE[True]}")


def _side(row: Mapping[str, Any], targets: Mapping[str, Sequence[float]]) -> int:
    """-1 below the target, +1 above, 0 inside (the point rate)."""
    lo, hi = targets[row["kind"]]
    return -1 if row["rate"] < lo else 1 if row["rate"] > hi else 0


def _span(rates: Iterable[float]) -> str:
    values = sorted(100 * r for r in rates)
    lo, hi = values[0], values[-1]
    return f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}%"


def describe(rows: Sequence[Mapping[str, Any]], pooled: bool, targets: Mapping[str, Sequence[float]],
             study: str = f"simulated, {SEE[False]}") -> str:
    """The label for a report row scored by ``rows`` (coverage-table records) against ``targets`` (kind -> the
    band a rate should lie in), or "" where they show it at its stated rate; ``study`` says where the figures
    come from."""
    if not rows:
        return ""
    sides = [_side(r, targets) for r in rows]
    failed = [s for r, s in zip(rows, sides, strict=True) if r["verdict"] == FAILS and s]
    outside = [s for s in sides if s]
    if failed:
        side = max(set(failed), key=failed.count)
    elif len(outside) * 2 > len(rows) and len(set(outside)) == 1:
        side = outside[0]
    else:
        return ""
    kind = rows[0]["kind"]
    where = " pooled over datasets" if pooled else ""
    if kind == "coverage":
        low = min(r["rate"] for r in rows)
        word = ("far too narrow" if low < FAR_TOO_NARROW else "under-covers") if side < 0 else \
            "over-covers (conservative)"
    else:
        word = "over-rejects" if side > 0 else "conservative (rejects less often than stated)"
    by_n: dict[int, list[float]] = {}
    for r in rows:
        by_n.setdefault(int(r["n_articles"]), []).append(float(r["rate"]))
    unit = "" if kind == "coverage" else " of sweeps"
    figures = ", ".join(f"{_span(v)}{unit} at {n} articles" for n, v in sorted(by_n.items()))
    what = "coverage" if kind == "coverage" else "a true null was rejected in"
    nominal = "95%" if kind == "coverage" else "5%"
    tail = "; descriptive only" if word == "far too narrow" else ""
    return f"{word}{where}: {what} {figures}, for a nominal {nominal}{tail} ({study})"


def pooled_over_datasets(group_by: str, groupings: Iterable[str]) -> bool:
    """Whether a row of grouping ``group_by`` pools several datasets (or transfer conditions): the pooled
    grouping (or one base evaluator's, grouping.BY_EVALUATOR), in a sweep that also has per-dataset rows (with one
    dataset they are the same points)."""
    return group_by in (POOLED, BY_EVALUATOR) and any(g not in (POOLED, BY_EVALUATOR) for g in groupings)


def scoring_rows(what: str, level: str, method: str, pooled: bool,
                 records: Sequence[Mapping[str, Any]] | None = None,
                 replicated: bool = False) -> list[Mapping[str, Any]]:
    """The coverage-table records (default: the shipped ones of the sweep's design) that score a report row of
    this kind."""
    records = _shipped(replicated) if records is None else records
    for (kind, lvl, meth, pool), prefixes in SCORED_BY:
        if kind == what and lvl in (None, level) and meth in (None, method) and pool in (None, pooled):
            return [r for r in records if any(str(r["key"]).startswith(p) for p in prefixes)]
    return []


def calibration_label(what: str, level: str, method: str, pooled: bool,
                      records: Sequence[Mapping[str, Any]] | None = None, replicated: bool = False) -> str:
    """The label of a row of kind ``what`` ("fit", "specificity", "interaction" or "resampled <coefficient>",
    e.g. "resampled slope"), or "" where the simulation found it at its stated rate (or did not measure it).
    ``replicated``: the sweep's fine-tuned arms have several adapters each (reporting.items.Design.replicated), so the
    replicated study scores it."""
    return describe(scoring_rows(what, level, method, pooled, records, replicated), pooled, _targets(),
                    _study(replicated))
