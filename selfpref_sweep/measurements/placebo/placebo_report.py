"""The placebo question's report side. Question sensitivity: does the judge read the question?

Cells that asked the placebo question (placebo_cell.py: a third question on the cell's own pairs, in the
cell's format, whose right answer is in the text and not about authorship, e.g. which summary has more words) record
per item its log-odds of picking the own summary, in the same orientation as recognition and preference. Two
comparisons are read from them, per cell and pooled per evaluator variant × setting × label (never across
settings or label conditions):

- the item-level slope of preference log-odds on recognition log-odds next to the slope of placebo log-odds
  on recognition log-odds (OLS, CIs clustered by article: CR2 with Bell–McCaffrey df, stats/clustered.py; pooled
  rows have cell fixed effects, so the slope is within cells);
- how often the placebo's choice (the sign of its log-odds) agrees with the recognition choice, next to how
  often the preference choice does, on the same items, with Wilson intervals.

If the placebo follows recognition as closely as preference does, the recognition-preference link is the judge
answering every question alike. Cells without placebo data (older sweeps, judges whose calls cost, where auto
leaves it off) are listed with the reason.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.controls import ControlReading
from ...reporting.formatting import DASH, fmt, fmt_ci, fmt_int, fmt_p, fmt_proportion
from ...reporting.grouping import key_frame
from ...reporting.items import ReportItem
from ...reporting.method_texts import method_text
from ...reporting.regression import ALPHA, MIN_POINTS, clustered_ols
from ...stats.clustered import ClusteredOLS, too_few_clusters
from .. import flag, number
from . import placebo_rule

PACKAGE = __package__  # its texts/ folder holds its method prose

NAME = "question_sensitivity"  # the report item's (and its table's) name
SECTION = "Does the judge read the question? A placebo question"
NO_PLACEBO = "no placebo measured"
_LOGODDS = ("rec_logodds", "pref_logodds", "pl_logodds")
ALIKE = "alike: the judge may answer every question alike"
APART = "told apart: preference follows recognition more closely than the placebo does"
UNDETERMINED = "undetermined: the data tell neither apart nor alike"
NO_LINK = "no link to explain: preference agrees with recognition on half the items or fewer"
_WORDS = {placebo_rule.APART: APART, placebo_rule.ALIKE: ALIKE, placebo_rule.UNDETERMINED: UNDETERMINED,
          placebo_rule.NO_LINK: NO_LINK}
CELL_TEST = "McNemar's exact test; Clopper-Pearson bound"
POOLED_TEST = "article-clustered t (CR2, Bell-McCaffrey df)"


@dataclass
class SensitivityRow:
    """One cell or one pooled group: both slopes on recognition and both agreement counts, or why none."""

    level: str  # "cell" or "pooled"
    group: str
    evaluator_variant: str
    setting: str
    label: str
    n_cells: int = 0
    n: int = 0  # items scored in all three questions
    pref_slope: float = math.nan
    pref_slope_ci_low: float = math.nan
    pref_slope_ci_high: float = math.nan
    placebo_slope: float = math.nan
    placebo_slope_ci_low: float = math.nan
    placebo_slope_ci_high: float = math.nan
    no_interval: str = ""  # why the preference slope has no interval
    placebo_no_interval: str = ""  # why the placebo slope has none
    n_agreement: int = 0  # items with a choice in all three questions
    placebo_agree: int = 0
    pref_agree: int = 0
    preference_only: int = 0  # discordant items: preference agrees with recognition, the placebo does not
    placebo_only: int = 0  # ... and the reverse
    test: str = ""  # CELL_TEST (placebo_rule) for a cell; POOLED_TEST for cells that share articles
    p: float = math.nan  # the test of no difference (told apart: p < 0.05 with preference ahead)
    upper: float = math.nan  # the upper bound the alike test reads (placebo_rule; pooled: on d − s·L)
    evidence: str = ""  # the test's figures in words, printed beside the reading
    reading: str = ""  # APART, ALIKE, UNDETERMINED, NO_LINK, or why there is no placebo

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def placebo_items(items: pd.DataFrame) -> pd.DataFrame:
    """Items scored in all three questions (finite log-odds each), with an article cluster key."""
    if items.empty or "pl_logodds" not in items:
        return items.iloc[0:0].assign(_article=pd.Series(dtype=str))
    finite = np.all(np.isfinite(items[list(_LOGODDS)].to_numpy(float)), axis=1)
    kept = items[finite]
    return kept.assign(_article=kept["dataset"].astype(str) + "\x1f" + kept["article_id"].astype(str))


def _slope(df: pd.DataFrame, y: str) -> tuple[float, float, float, str]:
    """(slope of y on rec_logodds, CI low, CI high, why no CI), cell fixed effects when several cells."""
    if len(df) < MIN_POINTS or df["rec_logodds"].nunique() < 2:
        return math.nan, math.nan, math.nan, f"too few items or no spread in recognition (n={len(df)})"
    formula = f"{y} ~ rec_logodds" + (" + C(cell_id)" if df["cell_id"].nunique() > 1 else "")
    est = clustered_ols(df, formula, df["_article"]).coef("rec_logodds", ALPHA)
    why = too_few_clusters(df["_article"])
    if why or not math.isfinite(est.ci_low):
        return est.estimate, math.nan, math.nan, why or "no interval: every item lies on one line"
    return est.estimate, est.ci_low, est.ci_high, ""


def _agreement(df: pd.DataFrame) -> tuple[int, int, int, int, int]:
    """(items with a choice in all three, placebo agrees with recognition, preference agrees with it, only
    preference agrees, only the placebo agrees)."""
    signs = np.sign(df[list(_LOGODDS)].to_numpy(float))
    chosen = signs[np.all(signs != 0, axis=1)]
    placebo, pref = chosen[:, 2] == chosen[:, 0], chosen[:, 1] == chosen[:, 0]
    return len(chosen), int(placebo.sum()), int(pref.sum()), int((pref & ~placebo).sum()), int((placebo & ~pref).sum())


def _cell_reading(row: SensitivityRow) -> None:
    """A cell's reading, by the cell's own rule (placebo_rule.read: its items are distinct articles)."""
    reading = placebo_rule.read(row.n_agreement, row.pref_agree, row.preference_only, row.placebo_only)
    row.test, row.p, row.upper = CELL_TEST, reading.mcnemar_p, reading.upper
    row.evidence, row.reading = reading.evidence(), _WORDS[reading.outcome]


def _pooled_reading(df: pd.DataFrame, row: SensitivityRow) -> None:
    """A pooled row's reading at the article level: its cells share articles, so its items are not independent
    pairs and McNemar's test does not apply. Each item scores +1 (only preference agrees with recognition), -1
    (only the placebo) or 0; their mean is the difference d, tested by OLS on a constant with CR2 errors clustered
    by article: told apart when p < 0.05 with d > 0. Alike, as the cell's rule, when d is below ALIKE_SHARE of
    preference's link beyond chance: each item's score less that share of (preference agrees − 0.5), whose mean
    is d − s·L, has a one-sided 95% upper bound below 0. Else undetermined (also with too few articles for a
    clustered test)."""
    signs = np.sign(df[list(_LOGODDS)].to_numpy(float))
    chosen = np.all(signs != 0, axis=1)
    pref, placebo = signs[chosen, 1] == signs[chosen, 0], signs[chosen, 2] == signs[chosen, 0]
    z = (pref & ~placebo).astype(float) - (placebo & ~pref).astype(float)
    articles = df["_article"].to_numpy()[chosen]
    row.test = POOLED_TEST
    why = too_few_clusters(articles)
    if why:
        word = placebo_rule.UNDETERMINED if row.pref_agree / row.n_agreement > 0.5 else placebo_rule.NO_LINK
        row.evidence, row.reading = why, _WORDS[word]
        return
    if np.ptp(z) == 0:  # every item alike (say, none discordant): no variance to cluster; the exact rule
        _cell_reading(row)
        row.test = f"{CELL_TEST} (every item scores {z[0]:+.0f}, so clustering changes nothing)"
        return
    share = placebo_rule.ALIKE_SHARE
    fit = ClusteredOLS(np.ones((len(z), 1)), z, articles, ["d"])
    test = fit.coef("d", ALPHA)
    relative = z - share * (pref.astype(float) - 0.5)
    bound = ClusteredOLS(np.ones((len(z), 1)), relative, articles, ["d"]).coef("d", 2 * ALPHA)
    row.p, row.upper = test.p, bound.ci_high
    if row.pref_agree / row.n_agreement <= 0.5:
        word = placebo_rule.NO_LINK
    elif test.p < ALPHA and test.estimate > 0:
        word = placebo_rule.APART
    else:
        word = placebo_rule.ALIKE if bound.ci_high < 0 else placebo_rule.UNDETERMINED
    row.evidence = (f"d = {test.estimate:.3f} over {fit.n_clusters} articles, p = {fmt_p(test.p)}; 95% upper "
                    f"bound on d − {share:g}·(preference's link beyond chance) {bound.ci_high:.3f} against 0")
    row.reading = _WORDS[word]


def fit_group(df: pd.DataFrame, row: SensitivityRow) -> SensitivityRow:
    """Fill a row's slopes, agreement counts and reading from its items (placebo_items)."""
    row.n, row.n_cells = len(df), int(df["cell_id"].nunique())
    row.pref_slope, row.pref_slope_ci_low, row.pref_slope_ci_high, why = _slope(df, "pref_logodds")
    row.no_interval = why
    (row.placebo_slope, row.placebo_slope_ci_low, row.placebo_slope_ci_high,
     row.placebo_no_interval) = _slope(df, "pl_logodds")
    row.n_agreement, row.placebo_agree, row.pref_agree, row.preference_only, row.placebo_only = _agreement(df)
    if not row.n_agreement:
        row.reading = "no item with a choice in all three questions"
    elif row.level == "pooled":
        _pooled_reading(df, row)
    else:
        _cell_reading(row)
    return row


def no_placebo_reason(cell: pd.Series, n_items: int) -> str:
    """Why a cell has no placebo rows ("" when it has)."""
    enabled = flag(cell.get("pl_enabled"))
    if enabled is None:
        return f"{NO_PLACEBO}: the cell records no placebo block (a sweep from before it existed)"
    if not enabled:
        return f"{NO_PLACEBO}: {cell.get('pl_reason') or 'off'}"
    return "" if n_items else f"{NO_PLACEBO}: no item scored in recognition, preference and the placebo"


def sensitivity_rows(cells: pd.DataFrame, items: pd.DataFrame) -> list[SensitivityRow]:
    """A row per complete cell (fitted, or why there is no placebo), then per evaluator variant × setting ×
    label with placebo data in several cells, a pooled row."""
    if cells.empty:
        return []
    kept = placebo_items(items)
    by_cell = dict(list(kept.groupby("cell_id", sort=False))) if not kept.empty else {}
    rows = []
    for cell in key_frame(cells, ["evaluator_variant", "setting", "label"]).itertuples(index=False):
        cell = pd.Series(cell._asdict())
        sub = by_cell.get(cell["cell_id"], kept.iloc[0:0])
        row = SensitivityRow("cell", f"{cell['cell_id']}: {cell['evaluator_variant']} vs {cell['source']} on "
                             f"{cell['dataset']}", cell["evaluator_variant"], cell["setting"], cell["label"])
        why = no_placebo_reason(cell, len(sub))
        rows.append(fit_group(sub, row) if not why else SensitivityRow(**{**row.to_dict(), "reading": why}))
    if kept.empty:
        return rows
    for (variant, setting, label), sub in key_frame(kept, ["evaluator_variant", "setting", "label"]).groupby(
            ["evaluator_variant", "setting", "label"], sort=True):
        if sub["cell_id"].nunique() > 1:
            group = f"{variant}, all its cells ({sub['cell_id'].nunique()})"
            rows.append(fit_group(sub, SensitivityRow("pooled", group, variant, setting, label)))
    return rows


def sensitivity_frame(cells: pd.DataFrame, items: pd.DataFrame) -> pd.DataFrame:
    columns = list(SensitivityRow.__dataclass_fields__)
    return pd.DataFrame([r.to_dict() for r in sensitivity_rows(cells, items)], columns=columns)


def _slope_text(est: float, low: float, high: float, why: str) -> str:
    return DASH if not math.isfinite(est) else f"{fmt(est)} {fmt_ci(low, high, why=why)}"


def sensitivity_table(data: Any) -> pd.DataFrame:
    """The report's table (data: analysis.sweep.load.SweepData)."""
    frame = sensitivity_frame(data.cells, data.items)
    rows = []
    for r in frame.itertuples(index=False):
        measured = not r.reading.startswith(NO_PLACEBO)
        rows.append({
            "level": r.level, "cell / group": r.group, "setting": r.setting, "label": r.label,
            "items": fmt_int(r.n) if measured else DASH,
            "preference ~ recognition slope [95% CI]": _slope_text(r.pref_slope, r.pref_slope_ci_low,
                                                                   r.pref_slope_ci_high, r.no_interval),
            "placebo ~ recognition slope [95% CI]": _slope_text(r.placebo_slope, r.placebo_slope_ci_low,
                                                               r.placebo_slope_ci_high, r.placebo_no_interval),
            "placebo agrees with recognition": fmt_proportion(r.placebo_agree, r.n_agreement) if measured else DASH,
            "preference agrees with recognition": fmt_proportion(r.pref_agree, r.n_agreement) if measured else DASH,
            "only preference agrees / only the placebo": f"{r.preference_only} / {r.placebo_only}"
                if measured and r.n_agreement else DASH,
            "reading (test: p; bound)": f"{r.reading} ({r.test}: {r.evidence})" if r.evidence else r.reading})
    return pd.DataFrame(rows, columns=["level", "cell / group", "setting", "label", "items",
                                       "preference ~ recognition slope [95% CI]",
                                       "placebo ~ recognition slope [95% CI]", "placebo agrees with recognition",
                                       "preference agrees with recognition",
                                       "only preference agrees / only the placebo", "reading (test: p; bound)"])


_WHAT_TEXT = method_text("question_sensitivity", PACKAGE)


def sensitivity_text(result: Any) -> str:
    """The section's prose, with the cells where the judge answers every question alike named."""
    frame = sensitivity_frame(result.data.cells, result.data.items)
    if frame.empty:
        return _WHAT_TEXT + "\n\nNo complete cell."
    cells = frame[frame["level"] == "cell"]
    missing = cells[cells["reading"].str.startswith(NO_PLACEBO)]
    measured = len(cells) - len(missing)
    if not measured:
        outcome = ("No cell measured the placebo question, so this sweep cannot tell whether its judges read the "
                   "question.")
    else:
        counts = [(word.split(":")[0], cells[cells["reading"] == word]["group"].tolist())
                  for word in (APART, ALIKE, UNDETERMINED, NO_LINK)]
        outcome = (f"Of the {measured} cell(s) with a placebo: " +
                   "; ".join(f"{name} {len(groups)}" for name, groups in counts) + ".")
        for name, groups in counts[1:3]:
            if groups:
                outcome += f" {name.capitalize()}: {'; '.join(groups)}."
        if counts[1][1]:
            outcome += (" There the placebo follows recognition within the margin of how closely preference does, "
                        "so the recognition-preference link may be the judge answering every question alike.")
    if len(missing):
        reasons = missing["reading"].str.slice(len(NO_PLACEBO) + 2).value_counts()
        outcome += (f" {len(missing)} cell(s) have {NO_PLACEBO} (" +
                    "; ".join(f"{n}: {why}" for why, n in reasons.items()) + ").")
    return _WHAT_TEXT + "\n\n" + outcome


# --- the placebo in the judge-controls table --------------------------------------------------------------------
CONTROL_COLUMNS = ("placebo: right answer (log-odds [95% CI]; P(correct))",
                   "placebo vs preference: agreement with recognition")
OPENS_CONTROLS_TABLE = True  # a newer control: where some cell ran it, the report shows the judge-controls table


def read(cell: pd.Series) -> bool | None:
    """True: the placebo is answered above chance, read as the competence control is, on the log-odds of the right
    answer (content beyond any position bias: its CI above 0), or, without log-odds, its mean P(correct)'s CI above
    ½; False: it is not; None: no placebo measured."""
    if flag(cell.get("pl_enabled")) is not True:
        return None
    low, chance = number(cell.get("pl_accuracy_logodds_ci_low")), 0.0
    if not math.isfinite(low):
        low, chance = number(cell.get("pl_accuracy_ci_low")), 0.5
    return bool(low > chance) if math.isfinite(low) else False


def asked_individually(cell: pd.Series) -> bool:
    """Whether the cell asked the placebo one summary at a time (its own format in an individual cell)."""
    return cell.get("pl_asked") == "individual"


def reading(cell: pd.Series) -> tuple[str | None, str]:
    """The cell's placebo reading (placebo_rule: apart, alike, undetermined, no link; None: none) and its test's
    figures in words."""
    outcome = cell.get("pl_reading")
    return (outcome if isinstance(outcome, str) else None), str(cell.get("pl_reading_evidence") or "")


def control_texts(cell: pd.Series, not_run: str) -> tuple[str, str]:
    """The judge-controls table's columns: the placebo's right answers, and its agreement with recognition next
    to preference's."""
    if cell.get("pl_enabled") is not True:
        return not_run, not_run
    accuracy = (f"log-odds {fmt(cell.get('pl_accuracy_logodds_mean'))} "
                f"{fmt_ci(cell.get('pl_accuracy_logodds_ci_low'), cell.get('pl_accuracy_logodds_ci_high'))}; "
                f"P(correct) {fmt(cell.get('pl_accuracy_mean'))}")
    outcome, evidence = reading(cell)
    agreement = (f"placebo {fmt(cell.get('pl_agree_recognition'))} vs preference "
                 f"{fmt(cell.get('pl_pref_agree_recognition'))}")
    return accuracy, f"{outcome or DASH} ({agreement}; {evidence})" if evidence else f"{outcome or DASH} ({agreement})"


def control_reading(cell: pd.Series, not_run: str) -> ControlReading:
    """The placebo's reading of a cell for its verdict. Not answered (in the cell's own format), or answered alike
    with recognition and preference: uninformative. A placebo asked pairwise in an individual cell (older cells; a
    question without an individual prompt) speaks to the pairwise format, not to the cell's own questions, so there
    it qualifies the verdict instead of deciding it. Asked one summary at a time, it decides as in a pairwise
    cell."""
    placebo = read(cell)
    outcome, evidence = reading(cell)
    other_format = cell.get("setting") == "individual" and not asked_individually(cell)
    uninformative = ""
    if placebo is False and not other_format:
        uninformative = ("the judge does not answer the placebo question (does not read the question; "
                         f"{control_texts(cell, not_run)[0]})")
    elif outcome == placebo_rule.ALIKE:
        uninformative = f"the judge answers recognition, preference and the placebo alike ({evidence})"
    unknown = (f"the placebo shows the questions neither apart nor alike ({evidence})"
               if outcome == placebo_rule.UNDETERMINED else "")
    caveat = ("the judge passes the individual competence control and does not answer alike "
              f"({evidence}), but the placebo, asked pairwise, was not answered above chance"
              if placebo is False else "")
    passed = {placebo_rule.APART: "placebo told apart: ", placebo_rule.NO_LINK: "no link for the placebo to "
              "explain: "}.get(outcome, "")
    return ControlReading("placebo", uninformative=uninformative, missing=placebo is None, unknown=unknown,
                          caveat=caveat, evidence=f"{passed}{evidence}" if evidence else "")


ITEMS = (ReportItem(NAME, SECTION, sensitivity_text, lambda r: sensitivity_table(r.data)),)
