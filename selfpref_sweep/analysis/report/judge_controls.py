"""Which results mean something: every control of a cell on one line, with a verdict in words.

Asks the judge controls' report modules (sweep/report_modules.control_modules: the measurements whose report side
defines ``control_texts``; built in, the competence control, the placebo and the recognition classifier) for their
columns, and each control with a ``control_reading`` for its reading of the cell (reporting/controls.py), and says,
per cell, whether its judge (1) can do the task at all (the competence control passed), (2) reads the question
(the placebo question answered above chance), and (3) answers recognition and preference apart from the
placebo (not "answering every question alike"). Only a cell that passes all three gives a self-recognition or
self-preference result that means something; a control that was not run is said, never taken as passed. In a
sweep with fine-tuned arms a column says, per arm and its base model, whether the two questions collapse into one
readout (estimate/collapse.py): a collapsed arm's recognition and preference cannot be told apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import pandas as pd

from ...reporting.controls import ControlReading
from ...reporting.formatting import fmt
from ...reporting.grouping import UNIT_KEYS
from ...reporting.items import Design
from ...reporting.method_texts import method_text
from ..sweep.report_modules import control_modules, measurement_reports
from .result import AnalysisResult

NAME = "judge_controls"
SECTION = "Which results mean something: the judge controls per cell"
NOT_RUN = "not run"
CELL_COLUMNS = ["evaluator", "setting", "dataset", "other source"]


def text(result: AnalysisResult) -> str:
    """The section's method text, with the values the controls fill in (``CONTROLS_TEXT_VALUES``: the recognition
    classifier's note on its overall interval)."""
    values = {k: v for mod in control_modules() for k, v in getattr(mod, "CONTROLS_TEXT_VALUES", {}).items()}
    return method_text(NAME, __package__, **values)


def verdict(cell: pd.Series, controls: Sequence[ModuleType] | None = None) -> str:
    """The cell's reading in words: informative, or the first reason it is not (or what was not run), each with
    the figure of the test that decided it. The controls' readings (``controls``: default control_modules()), in
    registry order: the first that makes the cell uninformative decides; then the controls not run; then one that
    cannot tell; then a caveat."""
    controls = control_modules() if controls is None else controls
    readings: list[ControlReading] = [mod.control_reading(cell, NOT_RUN) for mod in controls
                                      if hasattr(mod, "control_reading")]
    for r in readings:
        if r.uninformative:
            return f"uninformative: {r.uninformative}"
    missing = [r.name for r in readings if r.missing]
    if missing:
        return f"unknown: {' and '.join(missing)} {NOT_RUN} or too few articles"
    for r in readings:
        if r.unknown:
            return f"unknown: {r.unknown}"
    for r in readings:
        if r.caveat:
            return f"informative, with a caveat: {r.caveat}"
    evidence = "; ".join(r.evidence for r in readings if r.evidence)
    return f"informative: the judge passes every control ({evidence})" if evidence else \
        "informative: the judge passes every control"


COLLAPSE_COLUMN = "two questions: same answer in both orders (base model's)"
NOT_COLLAPSE_UNIT = "— (neither a fine-tuned arm nor its base model, pairwise)"


def judge_controls_table(cells: pd.DataFrame, collapse: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per cell: the controls (each control's ``CONTROL_COLUMNS``), where the sweep has fine-tuned arms whether
    the cell's two questions collapse (``collapse``: estimate/collapse.question_collapse's rows), and the verdict
    (cells sorted by evaluator, setting, dataset, source)."""
    controls = control_modules()
    with_collapse = collapse is not None and not collapse.empty
    cols = [*CELL_COLUMNS, *(c for mod in controls for c in mod.CONTROL_COLUMNS),
            *([COLLAPSE_COLUMN] if with_collapse else []), "verdict"]
    if cells.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    ordered = cells.sort_values(["evaluator_variant", "setting", "dataset", "source"], kind="stable")
    for _, c in ordered.iterrows():
        rows.append([c["evaluator_variant"], c["setting"], c["dataset"], c["source"],
                     *(t for mod in controls for t in mod.control_texts(c, NOT_RUN)),
                     *([collapse_text(c, collapse)] if with_collapse else []), verdict(c, controls)])
    return pd.DataFrame(rows, columns=cols)


def collapse_text(cell: pd.Series, collapse: pd.DataFrame) -> str:
    """The cell's unit's collapse reading (the share over all its sources' items, beside its base model's)."""
    match = collapse
    for key in UNIT_KEYS:
        match = match[match[key].astype(str) == str(cell[key])]
    if match.empty:
        return NOT_COLLAPSE_UNIT
    r = match.iloc[0]
    base = "" if pd.isna(r["base_same_share"]) else f" ({fmt(r['base_same_share'])})"
    return f"{fmt(r['same_share'])}{base}: {r['reading']}"


def applies(design: Design) -> bool:
    """Some cell ran a control that opens the table (``OPENS_CONTROLS_TABLE``: the newer controls, the placebo and
    the recognition classifier), by its registered measurement name, which Design.measured holds (a report
    module's ``NAME`` names its report item, and the placebo's differs)."""
    return any(getattr(mod, "OPENS_CONTROLS_TABLE", False) and hasattr(mod, "control_texts")
               and m.name in design.measured for m, mod in measurement_reports())
