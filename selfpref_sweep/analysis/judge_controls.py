"""Which results mean something: every control of a cell on one line, with a verdict in words.

Reads the cell frame's columns of the control plug-ins (competence, placebo, recognition classifier) and says,
per cell, whether its judge (1) can do the task at all (the competence control passed), (2) reads the question
(the placebo question answered above chance), and (3) answers recognition and preference apart from the
placebo (not "answering every question alike"). Only a cell that passes all three gives a self-recognition or
self-preference result that means something; a control that was not run is said, never taken as passed.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pandas as pd

from ..measurements import number
from .classifier import OVERALL_CONSERVATIVE
from .tables import DASH, fmt, fmt_ci

NAME = "judge_controls"
SECTION = "Which results mean something: the judge controls per cell"
NOT_RUN = "not run"
TEXT = (
    "One line per cell. *Competence*: can the judge tell this article's summary from another article's (log-odds "
    "of the right answer beyond any position bias, pass rule in the cell's `judge_competence` block)? "
    "*Placebo*: does it answer a question whose answer is in the text (which summary is longer?) above chance "
    "(the CI of its log-odds of the right answer above 0, as the competence control reads it; the column shows "
    "the log-odds and the paper scale)? The placebo is asked pairwise in every cell, so in an individual cell a "
    "placebo not answered says the judge cannot do the pairwise format, and only qualifies the verdict. *Alike*: does the placebo's choice follow the recognition choice at "
    "least as often as the preference choice does? If so, the recognition-preference link is the judge answering "
    "every question alike. *Recognition accuracy* and *AUROC* read the recognition answers as a classifier "
    "(AUROC is position-free; ½ = chance). " + OVERALL_CONSERVATIVE + " A cell's self-recognition and self-preference results mean something "
    "only where the verdict is \"informative\"; a control that was not run is named, not counted as passed."
)


def _flag(value: Any) -> Optional[bool]:
    """A yes/no column's value (numpy's bool too); None for a missing or non-boolean one."""
    return bool(value) if isinstance(value, (bool, np.bool_)) else None


def placebo_read(cell: pd.Series) -> Optional[bool]:
    """True: the placebo is answered above chance, read as the competence control is, on the log-odds of the right
    answer (content beyond any position bias: its CI above 0), or, without log-odds, its mean P(correct)'s CI above
    ½; False: it is not; None: no placebo measured."""
    if _flag(cell.get("pl_enabled")) is not True:
        return None
    low, chance = number(cell.get("pl_accuracy_logodds_ci_low")), 0.0
    if not math.isfinite(low):
        low, chance = number(cell.get("pl_accuracy_ci_low")), 0.5
    return bool(low > chance) if math.isfinite(low) else False


def verdict(cell: pd.Series) -> str:
    """The cell's reading in words: informative, or the first reason it is not (or what was not run)."""
    competence, placebo, alike = _flag(cell.get("jc_passed")), placebo_read(cell), _flag(cell.get("pl_alike"))
    # The placebo is always asked pairwise; in an individual cell its accuracy speaks to the pairwise format, not
    # to the cell's own questions, so there it qualifies the verdict instead of deciding it.
    individual = cell.get("setting") == "individual"
    if competence is False:
        return "uninformative: the judge failed the competence control"
    if placebo is False and not individual:
        return "uninformative: the judge does not answer the placebo question (does not read the question)"
    if alike is True:
        return "uninformative: the judge answers recognition, preference and the placebo alike"
    missing = [name for name, value in (("competence", competence), ("placebo", placebo)) if value is None]
    if missing:
        return f"unknown: {' and '.join(missing)} {NOT_RUN} or too few articles"
    if placebo is False:
        return ("informative, with a caveat: the judge passes the individual competence control and does not answer "
                "alike, but the placebo, asked pairwise, was not answered above chance")
    return "informative: the judge passes every control"


def _competence(cell: pd.Series) -> str:
    if cell.get("jc_enabled") is not True:
        return NOT_RUN
    passed = _flag(cell.get("jc_passed"))
    state = "passed" if passed else "failed" if passed is False else "too few to tell"
    if math.isfinite(number(cell.get("jc_logodds_mean"))):
        est = f"{fmt(cell['jc_logodds_mean'])} {fmt_ci(cell['jc_logodds_ci_low'], cell['jc_logodds_ci_high'])}"
    else:  # an older cell, read on the paper's scale
        est = f"P(correct) {fmt(cell.get('jc_mean'))}"
    return f"{state}: {est}"


def _placebo(cell: pd.Series) -> tuple[str, str]:
    if cell.get("pl_enabled") is not True:
        return NOT_RUN, NOT_RUN
    accuracy = (f"log-odds {fmt(cell.get('pl_accuracy_logodds_mean'))} "
                f"{fmt_ci(cell.get('pl_accuracy_logodds_ci_low'), cell.get('pl_accuracy_logodds_ci_high'))}; "
                f"P(correct) {fmt(cell['pl_accuracy_mean'])}")
    alike = _flag(cell.get("pl_alike"))
    agreement = (f"placebo {fmt(cell['pl_agree_recognition'])} vs preference "
                 f"{fmt(cell['pl_pref_agree_recognition'])}")
    word = "alike" if alike else "apart" if alike is False else "no link to explain"
    return accuracy, f"{word} ({agreement})"


def _classifier(cell: pd.Series) -> tuple[str, str]:
    if cell.get("rc_enabled") is not True:
        return NOT_RUN, NOT_RUN
    accuracy = f"{fmt(cell['rc_accuracy'])} {fmt_ci(cell['rc_accuracy_ci_low'], cell['rc_accuracy_ci_high'])}"
    return accuracy, fmt(cell.get("rc_auroc")) if math.isfinite(number(cell.get("rc_auroc"))) else DASH


def judge_controls_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the controls and the verdict (cells sorted by evaluator, setting, dataset, source)."""
    cols = ["evaluator", "setting", "dataset", "other source", "competence (log-odds [95% CI])",
            "placebo: right answer (log-odds [95% CI]; P(correct))", "placebo vs preference: agreement with recognition",
            "recognition accuracy [95% CI]", "recognition AUROC", "verdict"]
    if cells.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    ordered = cells.sort_values(["evaluator_variant", "setting", "dataset", "source"], kind="stable")
    for _, c in ordered.iterrows():
        accuracy, agreement = _placebo(c)
        rec_accuracy, auroc = _classifier(c)
        rows.append([c["evaluator_variant"], c["setting"], c["dataset"], c["source"], _competence(c), accuracy,
                     agreement, rec_accuracy, auroc, verdict(c)])
    return pd.DataFrame(rows, columns=cols)


def has_controls(cells: pd.DataFrame) -> bool:
    """Some cell ran the placebo or the recognition classifier (the newer controls)."""
    if cells.empty:
        return False
    return bool(cells.get("pl_enabled", pd.Series(dtype=object)).map(lambda v: v is True).any()
                or cells.get("rc_enabled", pd.Series(dtype=object)).map(lambda v: v is True).any())
