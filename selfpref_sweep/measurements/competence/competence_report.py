"""The judge-competence control's report side: its columns read back from the cell frame (jc_*), the cells whose
judge failed it, and its two report items (the failed judges near the top, and per cell the smallest detectable
effect beside the control). Other parts of the analysis (the paper units, the judge controls, the summary box,
the report's first lines) ask this module about the control instead of reading its columns, through the names
the analysis looks for (analysis/sweep/report_modules.py): as a judge control (``CONTROL_COLUMNS``,
``control_texts``, ``control_reading``) and as a judge gate (``failed_judges`` and the texts below it).
"""

from __future__ import annotations

import math

import pandas as pd

from ...reporting.controls import ControlReading
from ...reporting.formatting import DASH, FLAT_ARTICLES, est_ci, fmt, fmt_ci, fmt_int, mde_sentence, rows_table
from ...reporting.items import NOT_LOGGED, ReportItem
from ...reporting.method_texts import method_text
from .. import number
from .competence_columns import failed_judges, passed, ran, unit_status

__all__ = ["failed_judges", "passed", "ran", "unit_status"]

PACKAGE = __package__  # its texts/ folder holds its method prose

NAME = "competence"
JUDGE_FAILED = "the judge could not do this task; a null here is uninformative"
COMPETENCE_COLUMN = "judge competence [95% CI]"


def competence_text(cell: pd.Series) -> str:
    """The control of one cell: its log-odds [CI] (the scale the pass rule reads) and its paper scale [CI]
    (pairwise: P(correct); individual: P(Yes) for the true summary over both summaries' P(Yes)), with n; an older
    cell without log-odds gives the paper scale alone; or why there is none."""
    if cell.get("jc_enabled") is None:
        return f"{DASH} (not recorded)"
    if not cell.get("jc_enabled"):
        return f"off ({cell.get('jc_reason')})" if cell.get("jc_reason") else "off"
    paper = "paper scale " + est_ci(cell["jc_mean"], cell["jc_ci_low"], cell["jc_ci_high"], FLAT_ARTICLES)
    logodds = pd.to_numeric(pd.Series([cell.get("jc_logodds_mean")]), errors="coerce").iloc[0]
    if math.isfinite(logodds):
        ci = est_ci(logodds, cell.get("jc_logodds_ci_low"), cell.get("jc_logodds_ci_high"), FLAT_ARTICLES)
        paper = f"log-odds {ci}; {paper}"
    return f"{paper} (n={fmt_int(cell['jc_n'])})"


def control_text(cell: pd.Series, not_run: str) -> str:
    """The control in the judge-controls table: passed / failed / too few to tell, with its log-odds [CI]."""
    if cell.get("jc_enabled") is not True:
        return not_run
    verdict = passed(cell)
    state = "passed" if verdict else "failed" if verdict is False else "too few to tell"
    if math.isfinite(number(cell.get("jc_logodds_mean"))):
        est = f"{fmt(cell['jc_logodds_mean'])} {fmt_ci(cell['jc_logodds_ci_low'], cell['jc_logodds_ci_high'])}"
    else:  # an older cell, read on the paper's scale
        est = f"P(correct) {fmt(cell.get('jc_mean'))}"
    return f"{state}: {est}"


# --- as a judge control: its column of the judge-controls table, and its reading of a cell ----------------------
CONTROL_COLUMNS = ("competence (log-odds [95% CI])",)


def control_texts(cell: pd.Series, not_run: str) -> tuple[str]:
    return (control_text(cell, not_run),)


def control_reading(cell: pd.Series, not_run: str) -> ControlReading:
    """A judge that failed the control makes the cell uninformative; one not run (or too few articles) unknown."""
    verdict = passed(cell)
    failed = f"the judge failed the competence control ({control_text(cell, not_run)})" if verdict is False else ""
    return ControlReading("competence", uninformative=failed, missing=verdict is None)


def judge_verdict(cell: pd.Series) -> str:
    verdict = passed(cell)
    if verdict is True:
        return "passed"
    if verdict is False:
        return f"FAILED: {JUDGE_FAILED}"
    return DASH


def failed_judges_table(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells whose judge failed the competence control, with the control's result."""
    cols = ["cell", "evaluator", "source", "dataset", "setting", "label", COMPETENCE_COLUMN, "threshold"]
    return rows_table(failed_judges(cells), cols, lambda c: [
        c["cell_id"], c["evaluator_variant"], c["source"], c["dataset"], c["setting"], c["label"],
        competence_text(c), fmt(c["jc_threshold"])])


def quality_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the smallest detectable effect of each question and the judge-competence control."""
    cols = ["cell", "evaluator", "source", "dataset", "setting", "label", "recognition: smallest detectable effect",
            "preference: smallest detectable effect", COMPETENCE_COLUMN, "judge"]
    return rows_table(cells, cols, lambda c: [
        c["cell_id"], c["evaluator_variant"], c["source"], c["dataset"], c["setting"], c["label"],
        mde_sentence(c["rec_mde"], c["rec_mde_n_articles"], c["rec_mde_scale"]),
        mde_sentence(c["pref_mde"], c["pref_mde_n_articles"], c["pref_mde_scale"]),
        competence_text(c), judge_verdict(c)])


def judge_text(cells: pd.DataFrame) -> str:
    failed = failed_judges(cells)
    if failed.empty:
        recorded = int(cells["jc_enabled"].map(lambda v: v is True).sum()) if "jc_enabled" in cells else 0
        return (f"No cell's judge failed the competence control ({recorded} cell(s) ran it)." if recorded
                else "No cell recorded the judge-competence control.")
    names = "; ".join(f"{c.cell_id} ({c.evaluator_variant} vs {c.source} on {c.dataset}, {c.setting}, "
                      f"label {c.label})" for c in failed.itertuples())
    return (f"{len(failed)} cell(s) whose judge failed the competence control: {JUDGE_FAILED}. "
            f"Their results say nothing either way: {names}.")


# --- as a judge gate: what the report's first lines and its summary box say of the judges that failed ----------
ALL_FAILED_TEXT = ("Nothing about self-recognition or self-preference: every cell's judge failed the competence "
                   "control, so its nulls are uninformative.")
SOME_FAILED_TEXT = "Where a judge failed the competence control, a null says nothing about that judge."


def failed_judges_lines(cells: pd.DataFrame) -> list[str]:
    """The command's lines on the judges that failed ([] when none did)."""
    failed = failed_judges(cells)
    if failed.empty:
        return []
    return (["", f"{len(failed)} cell(s) whose judge failed the competence control ({JUDGE_FAILED}):"]
            + [f"  {c.cell_id}: {c.evaluator_variant} vs {c.source} on {c.dataset}" for c in failed.itertuples()])


def control_summary(cells: pd.DataFrame) -> str:
    """The summary box's line on the control: where it ran, and whose judge failed it."""
    done = ran(cells)
    if done.empty:
        return "The judge-competence control did not run (it is on by default for local judges)."
    failed = failed_judges(cells)
    if failed.empty:
        return f"Judge competence passed in all {len(done)} cell(s) that ran it."
    names = ", ".join(sorted({str(v) for v in failed["evaluator_variant"].dropna()})) or DASH
    return (f"Judge competence passed in {len(done) - len(failed)} of {len(done)} cell(s); it failed for {names} "
            f"(that judge could not tell an article's own summary from another article's).")


QUALITY_TEXT = method_text("quality", PACKAGE)


ITEMS = (
    ReportItem("failed_judges", "Judges that failed the competence control", lambda r: judge_text(r.data.cells),
               lambda r: failed_judges_table(r.data.cells), to_wandb=NOT_LOGGED, after="problems"),
    ReportItem("quality", "Per cell: the smallest detectable effect and the judge-competence control",
               QUALITY_TEXT, lambda r: quality_table(r.data.cells)),
)
