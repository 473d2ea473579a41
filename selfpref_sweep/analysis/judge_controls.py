"""Which results mean something: every control of a cell on one line, with a verdict in words.

Asks the control plug-ins' report modules (competence, placebo, recognition classifier) and says,
per cell, whether its judge (1) can do the task at all (the competence control passed), (2) reads the question
(the placebo question answered above chance), and (3) answers recognition and preference apart from the
placebo (not "answering every question alike"). Only a cell that passes all three gives a self-recognition or
self-preference result that means something; a control that was not run is said, never taken as passed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..measurements.competence import competence_report
from ..measurements.placebo import placebo_report, placebo_rule
from ..measurements.recognition_classifier import classifier_report
from ..measurements.recognition_classifier.classifier_report import OVERALL_CONSERVATIVE
from .method_texts import method_text

NAME = "judge_controls"
SECTION = "Which results mean something: the judge controls per cell"
NOT_RUN = "not run"
TEXT = method_text("judge_controls", overall_conservative=OVERALL_CONSERVATIVE)


def verdict(cell: pd.Series) -> str:
    """The cell's reading in words: informative, or the first reason it is not (or what was not run), each with
    the figure of the test that decided it."""
    competence, placebo = competence_report.passed(cell), placebo_report.read(cell)
    outcome, evidence = placebo_report.reading(cell)
    # A placebo asked pairwise in an individual cell (older cells; a question without an individual prompt)
    # speaks to the pairwise format, not to the cell's own questions, so there it qualifies the verdict instead
    # of deciding it. Asked one summary at a time, it decides as in a pairwise cell.
    other_format = cell.get("setting") == "individual" and not placebo_report.asked_individually(cell)
    if competence is False:
        return ("uninformative: the judge failed the competence control "
                f"({competence_report.control_text(cell, NOT_RUN)})")
    if placebo is False and not other_format:
        return ("uninformative: the judge does not answer the placebo question (does not read the question; "
                f"{placebo_report.control_texts(cell, NOT_RUN)[0]})")
    if outcome == placebo_rule.ALIKE:
        return f"uninformative: the judge answers recognition, preference and the placebo alike ({evidence})"
    missing = [name for name, value in (("competence", competence), ("placebo", placebo)) if value is None]
    if missing:
        return f"unknown: {' and '.join(missing)} {NOT_RUN} or too few articles"
    if outcome == placebo_rule.UNDETERMINED:
        return f"unknown: the placebo shows the questions neither apart nor alike ({evidence})"
    if placebo is False:
        return ("informative, with a caveat: the judge passes the individual competence control and does not answer "
                f"alike ({evidence}), but the placebo, asked pairwise, was not answered above chance")
    placebo_test = {placebo_rule.APART: "placebo told apart: ", placebo_rule.NO_LINK: "no link for the placebo to "
                    "explain: "}.get(outcome, "")
    return f"informative: the judge passes every control ({placebo_test}{evidence})" if evidence else \
        "informative: the judge passes every control"


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
        accuracy, agreement = placebo_report.control_texts(c, NOT_RUN)
        rec_accuracy, auroc = classifier_report.control_texts(c, NOT_RUN)
        rows.append([c["evaluator_variant"], c["setting"], c["dataset"], c["source"],
                     competence_report.control_text(c, NOT_RUN), accuracy,
                     agreement, rec_accuracy, auroc, verdict(c)])
    return pd.DataFrame(rows, columns=cols)


def applies(design: Any) -> bool:
    """Some cell ran the placebo or the recognition classifier (the newer controls)."""
    return bool({placebo_report.NAME, classifier_report.NAME} & design.measured)
