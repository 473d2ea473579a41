"""Each registered measurement's report side (``Measurement.report_module``, e.g.
measurements/familiarity/familiarity_report.py), imported when the analysis first asks (the cell never loads
it), and what the analysis asks of them by name instead of importing a measurement:

- the judge controls (``control_texts(cell, not_run)`` with its ``CONTROL_COLUMNS``, ``control_reading``): the
  report's judge-controls table sets them side by side (report/judge_controls.py);
- the judge gates (``failed_judges(cells)``, with ``judge_text``, ``failed_judges_lines``, ``unit_status``,
  ``control_summary`` and the summary box's sentences): a control that a judge must pass for its results to say
  anything, which the report's first lines, the summary box and the paper units name (the judge-competence
  control).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pandas as pd

from ...measurements import Measurement, flag, registered


def report_module(m: Measurement) -> ModuleType | None:
    """A measurement's report side, imported when the analysis first asks (the cell never loads it)."""
    if not m.report_module:
        return None
    return importlib.import_module(m.report_module, sys.modules[type(m).__module__].__package__)


def measurement_reports() -> list[tuple[Measurement, ModuleType]]:
    return [(m, mod) for m in registered() if (mod := report_module(m)) is not None]


def recorded(m: Measurement, mod: ModuleType | None, cells: pd.DataFrame) -> bool:
    """Some cell recorded the measurement: the report module's own test, else its `<prefix>_enabled` column."""
    if mod is not None and hasattr(mod, "recorded"):
        return bool(mod.recorded(cells))
    column = f"{m.prefix}_enabled"
    return bool(not cells.empty and column in cells and cells[column].map(lambda v: flag(v) is True).any())


def control_modules() -> list[ModuleType]:
    """The report modules of the judge controls (those with ``control_texts``), in registry order: the
    judge-controls table's columns and verdict."""
    return [mod for _, mod in measurement_reports() if hasattr(mod, "control_texts")]


def judge_gates() -> list[ModuleType]:
    """The report modules of the controls a judge must pass (those with ``failed_judges``), in registry order."""
    return [mod for _, mod in measurement_reports() if hasattr(mod, "failed_judges")]


def failed_judges(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells whose judge failed some gate (judge_gates), in the cells' order."""
    failed = pd.Series(False, index=cells.index)
    for gate in judge_gates():
        failed |= cells.index.isin(gate.failed_judges(cells).index)
    return cells[failed]


def unit_judge_status(cells: pd.DataFrame) -> str:
    """The gates' verdict on a paper unit's cells: "failed" where one failed, else the first verdict ("passed"),
    "" where no gate recorded one."""
    statuses = [status for gate in judge_gates() if (status := gate.unit_status(cells))]
    return "failed" if "failed" in statuses else (statuses[0] if statuses else "")
