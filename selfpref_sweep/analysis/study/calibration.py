"""Labels for the report's rows whose interval or test does not hold its stated rate at the sizes sweeps run.

The planted-bias simulator's coverage mode measures every interval and test the report prints on sweeps with
a known truth (the dose-response design, 10 and 20 articles per dataset, article effects shared by every
variant, source and question) and writes its table twice: as Markdown for readers (docs/coverage.md) and as
data (calibration.json beside this module):

    python -m selfpref_sweep.analysis.study.simulate --coverage --reps 100 --articles 10,20 --workers 2 \
        --cache outputs/coverage_reps.jsonl --out-md docs/coverage.md \
        --out-json selfpref_sweep/analysis/study/calibration.json

A sweep whose fine-tuned arms are replicated (several adapters per arm, ``finetune_task.seed``) is scored by the
replicated studies instead: the same study with 2 to 5 adapters per arm and training randomness from none to
large (adapter SD 0 to 1.6 on the log-odds scale), one table per design (docs/coverage.md, "Across designs"):
calibration_replicated.json (3 adapters, SD 0.1, docs/results/coverage_adapters.md) and designs/*.json, written
the same way:

    python -m selfpref_sweep.analysis.study.simulate --coverage --reps 200 --seed 20261205 --articles 10 \
        --settings pairwise --adapters-per-arm 2 --adapter-sd 0.4 --workers 2 --cache outputs/acc/sd04_k2.jsonl \
        --out-json selfpref_sweep/analysis/study/designs/sd04_k2.json

More adapters make more points, so a test that is conservative with one adapter per arm can over-reject with
three (the interaction test did on every adapter's points; it is now fitted on arm means). A replicated sweep's
rows carry the labels of every design with its adapter count (the nearest one simulated), over all training SDs:
the SD is not known when the report is written, and a label then says at which SD the figures were off.

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
# The studies behind the labels: one adapter per arm (the default), and the replicated-arm designs, one table per
# adapters-per-arm × training SD (calibration_replicated.json, and designs/*.json: docs/coverage.md, "Across
# designs"). A replicated sweep reads every table of the adapter count nearest its own, whatever the training SD.
ONE_ADAPTER_FILE = "calibration.json"
REPLICATED_FILES = ("calibration_replicated.json",)
DESIGNS_DIR = "designs"
SEE = {False: "docs/coverage.md", True: "docs/coverage.md (Across designs)"}
FAILS = "does not hold"  # coverage.FAILS (not imported: coverage.py pulls in the whole estimation)
FAR_TOO_NARROW = 0.6  # an interval covering under 60% is read as descriptive only

# Report rows outside the fits: an arm's pooled Δ interval (per question), its test, and Holm's family-wise
# error over the fine-tuned-vs-base tests.
ARM_RECOGNITION, ARM_PREFERENCE = "arm Δ recognition", "arm Δ preference"
ARM_TEST, HOLM_FWER = "arm Δ test", "Holm family-wise error"

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
    # An arm's adapters pooled (arms.py: the per-arm table), and Holm's family over the adapters' Δ tests.
    ((ARM_RECOGNITION, None, None, None), ("arm|dnull|rec|", "arm|dalt|rec|")),
    ((ARM_PREFERENCE, None, None, None), ("arm|dnull|pref|", "arm|dalt|pref|")),
    ((ARM_TEST, None, None, None), ("arm|dp|",)),
    ((HOLM_FWER, None, None, None), ("holm|",)),
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
def _read(name: str) -> dict[str, Any]:
    """One shipped coverage table (empty when the file is absent: no labels from it)."""
    try:
        return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


@functools.cache
def _replicated_tables() -> tuple[dict[str, Any], ...]:
    """Every shipped replicated-arm table (3 adapters at SD 0.1, and the designs/ folder), each with a design."""
    folder = resources.files(__package__).joinpath(DESIGNS_DIR)
    names = [*REPLICATED_FILES, *(f"{DESIGNS_DIR}/{f.name}" for f in sorted(folder.iterdir(), key=lambda f: f.name)
                                  if f.name.endswith(".json"))] if folder.is_dir() else list(REPLICATED_FILES)
    return tuple(t for t in map(_read, names) if t.get("design", {}).get("adapters_per_arm", 1) > 1)


def _tables(adapters: int = 1) -> tuple[dict[str, Any], ...]:
    """The tables that label a sweep whose replicated arms have ``adapters`` adapters (1: no replicated arm):
    the one-adapter study, or every replicated design with the adapter count nearest it (both, on a tie)."""
    if adapters <= 1:
        return (_read(ONE_ADAPTER_FILE),) if _read(ONE_ADAPTER_FILE) else ()
    tables = _replicated_tables()
    if not tables:
        return ()
    gap = min(abs(t["design"]["adapters_per_arm"] - adapters) for t in tables)
    return tuple(t for t in tables if abs(t["design"]["adapters_per_arm"] - adapters) == gap)


def _design_tag(design: Mapping[str, Any]) -> str:
    """A replicated design in a label's words: its training SD, and its article-by-judge effects if planted."""
    extra = [f"{what} article effects SD {design[key]:g}" for what, key in
             (("per-arm", "arm_article_sd"), ("per-adapter", "variant_article_sd")) if design.get(key)]
    return ", ".join([f"training SD {design.get('adapter_sd', 0):g}", *extra])


@functools.cache  # every labelled report row reads it
def _shipped(adapters: int = 1) -> tuple[dict[str, Any], ...]:
    """The rows of the tables that label a sweep with ``adapters`` adapters per replicated arm; a replicated
    table's rows carry its design (``design_tag``), which the label's figures name."""
    if adapters <= 1:
        return tuple(row for t in _tables(1) for row in t.get("rows", ()))
    return tuple({**row, "design_tag": _design_tag(t["design"])} for t in _tables(adapters) for row in t["rows"])


def _targets() -> dict[str, Sequence[float]]:
    """The targets the tables were scored against (coverage.TARGETS, as the study wrote them)."""
    for table in (_read(ONE_ADAPTER_FILE), *_replicated_tables()):
        if table.get("targets"):
            return dict(table["targets"])
    return {}


def _study(adapters: int = 1) -> str:
    """Where a label's figures come from, in words: the simulated designs and their write-up."""
    if adapters <= 1:
        return f"simulated, {SEE[False]}"
    tables = _tables(adapters)
    counts = "/".join(str(k) for k in sorted({t["design"]["adapters_per_arm"] for t in tables})) or "several"
    settings = "/".join(sorted({str(r.get("setting")) for t in tables for r in t["rows"]}))  # the studies' own
    return f"simulated{f' ({settings})' if settings else ''} with {counts} adapters per arm, {SEE[True]}"


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
    by_design: dict[tuple[str, int], list[float]] = {}  # a replicated table's figures name its design
    for r in rows:
        by_design.setdefault((str(r.get("design_tag", "")), int(r["n_articles"])), []).append(float(r["rate"]))
    unit = "" if kind == "coverage" else " of sweeps"
    figures = ", ".join(f"{_span(v)}{unit} at {n} articles" + (f" ({tag})" if tag else "")
                        for (tag, n), v in sorted(by_design.items(), key=lambda kv: (kv[0][1], kv[0][0])))
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
                 adapters: int = 1) -> list[Mapping[str, Any]]:
    """The coverage-table records (default: the shipped ones of the sweep's design) that score a report row of
    this kind."""
    records = _shipped(adapters) if records is None else records
    for (kind, lvl, meth, pool), prefixes in SCORED_BY:
        if kind == what and lvl in (None, level) and meth in (None, method) and pool in (None, pooled):
            return [r for r in records if any(str(r["key"]).startswith(p) for p in prefixes)]
    return []


def calibration_label(what: str, level: str, method: str, pooled: bool,
                      records: Sequence[Mapping[str, Any]] | None = None, adapters: int = 1) -> str:
    """The label of a row of kind ``what`` (SCORED_BY's: "fit", "specificity", "interaction", "resampled
    <coefficient>" such as "resampled slope", an arm's pooled Δ, Holm's family), or "" where the simulation found
    it at its stated rate (or did not measure it). ``adapters``: the adapters of the sweep's replicated arms
    (reporting.items.Design.adapters_per_arm; 1 when none is replicated), which choose the study that scores it."""
    return describe(scoring_rows(what, level, method, pooled, records, adapters), pooled, _targets(),
                    _study(adapters))
