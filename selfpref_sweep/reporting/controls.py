"""What a control says of one cell, for the report's judge-controls table: a measurement whose report module defines
``control_reading(cell, not_run)`` gives one ``ControlReading`` per cell, and the table's verdict reads them in
registry order (analysis/report/judge_controls.py): the first control that makes the cell uninformative decides,
then any that was not run, then any that cannot tell, then any caveat; else the cell is informative, with each
control's evidence."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ControlReading:
    """One control's reading of one cell; every text is a clause of the verdict, "" where it does not apply."""

    name: str  # the control as the verdict names it when it was not run ("competence", "placebo")
    uninformative: str = ""  # why the cell's results mean nothing, e.g. "the judge failed the competence control (…)"
    missing: bool = False  # not run, or too few articles to tell
    unknown: str = ""  # ran, and cannot tell either way (why, with its figures)
    caveat: str = ""  # informative, with this caveat
    evidence: str = ""  # the figures of the test that passed the cell
