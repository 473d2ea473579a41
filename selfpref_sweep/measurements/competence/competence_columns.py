"""The judge-competence control's verdict columns read back from the analysis' cell frame (jc_*): the few
questions the rest of the analysis asks about the control (through its report module, which re-exports them:
analysis/sweep/report_modules.py finds it as a judge gate), kept apart from the module's report items.
"""

from __future__ import annotations

import pandas as pd

from .. import flag


def passed(cell: pd.Series) -> bool | None:
    """True / False: the cell's judge passed / failed the control; None: not run, or too few articles to tell."""
    return flag(cell.get("jc_passed"))


def ran(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells whose control gave a verdict (passed or failed)."""
    if cells.empty or "jc_passed" not in cells:
        return cells.iloc[0:0]
    return cells[cells["jc_passed"].map(lambda v: v is True or v is False)]


def failed_judges(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells whose judge failed the competence control (the report names them)."""
    if cells.empty or "jc_passed" not in cells:
        return cells.iloc[0:0]
    return cells[cells["jc_passed"].map(lambda v: v is False)]


def unit_status(cells: pd.DataFrame) -> str:
    """The verdict of a paper unit's cells: "failed" if any failed, "passed" if all that ran passed, "" when none
    recorded it."""
    if cells.empty or "jc_passed" not in cells:
        return ""
    verdicts = [v for v in cells["jc_passed"] if isinstance(v, bool)]
    if not verdicts:
        return ""
    return "failed" if not all(verdicts) else "passed"
