"""The report as a declarative list of items: what each section shows, from what, and where it goes.

Every section of report.md / report.html is one ``ReportItem`` (report.py): its name, heading, prose, the builder
of its table, its plots, when it applies and where its table goes in W&B. ``CORE_ITEMS`` lists the sections of
the cell's own two questions and the analysis across cells, in report order; each measurement adds its own from
its report module (``Measurement.report_module``, e.g. measurements/familiarity/familiarity_report.py), after the
core item it names or else together before the per-cell matrices. ``report_items()`` is the whole list, which
pipeline.run_analysis renders where the items apply.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any, Optional, Sequence

import pandas as pd

from ..measurements import Measurement, registered
from . import judge_controls as J
from . import sources as S
from . import tables as T
from .fit import BY_CONDITION
from .load import STATUS_FAILED, STATUS_INCOMPLETE, STATUS_WARNING, SweepData
from .paired import LABEL_REFERENCE, has_label_pairs
from .report import NOT_LOGGED, REPORT_TABLE, RUN_TABLE, AnalysisResult, Design, ReportItem, Section

__all__ = ["AnalysisResult", "Design", "ReportItem", "NOT_LOGGED", "REPORT_TABLE", "RUN_TABLE", "report_items"]

# Where the measurements' items go when they name no core item to follow: after the last of these present.
MEASUREMENTS_AFTER = "per_source"


def report_module(m: Measurement) -> Optional[ModuleType]:
    """A measurement's report side, imported when the analysis first asks (the cell never loads it)."""
    if not m.report_module:
        return None
    return importlib.import_module(m.report_module, sys.modules[type(m).__module__].__package__)


def measurement_reports() -> list[tuple[Measurement, ModuleType]]:
    return [(m, mod) for m in registered() if (mod := report_module(m)) is not None]


def measurement_plots() -> dict[str, Any]:
    """Every measurement's figures: stem -> draw(cells, path)."""
    return {stem: draw for _, mod in measurement_reports() for stem, draw in getattr(mod, "PLOTS", {}).items()}


def recorded(m: Measurement, mod: Optional[ModuleType], cells: pd.DataFrame) -> bool:
    """Some cell recorded the measurement: the report module's own test, else its `<prefix>_enabled` column."""
    if mod is not None and hasattr(mod, "recorded"):
        return bool(mod.recorded(cells))
    column = f"{m.prefix}_enabled"
    return bool(not cells.empty and column in cells and cells[column].map(lambda v: v is True).any())


def design_of(data: SweepData, units: pd.DataFrame, diffs: pd.DataFrame, trends: Sequence[Any]) -> Design:
    cells = data.cells
    per_condition = units.groupby(list(BY_CONDITION)).size() if not units.empty else pd.Series(dtype=int)
    return Design(
        label_pairs=has_label_pairs(data.items),
        max_condition_units=int(per_condition.max()) if len(per_condition) else 0,
        finetuned=bool(not units.empty and units["is_finetuned"].astype(bool).any()),
        diffs=not diffs.empty, trends=bool(trends),
        logodds_cells=bool(not cells.empty and cells["rec_logodds_mean"].notna().any()),
        per_source=S.has_sources(cells),
        measured=frozenset(m.name for m in registered() if recorded(m, report_module(m), cells)),
    )


# --- prose that depends on the result -------------------------------------------------------------------------


def problem_counts(data: SweepData) -> dict[str, int]:
    counts = {STATUS_FAILED: 0, STATUS_INCOMPLETE: 0, STATUS_WARNING: 0}
    for p in data.problems:
        counts[p.status] = counts.get(p.status, 0) + 1
    return counts


def incomplete_text(result: AnalysisResult) -> str:
    """The warning naming every unit whose cells do not all carry a field ("" when there is none)."""
    frames = {"paper unit": result.units, "fine-tuned vs base": result.diffs}
    for _, mod in measurement_reports():  # a measurement's own per-unit frames
        frames.update(mod.incomplete_frames(result) if hasattr(mod, "incomplete_frames") else {})
    return T.incomplete_units_text(frames)


def _problems_text(result: AnalysisResult) -> str:
    data, counts = result.data, problem_counts(result.data)
    n_bad = counts[STATUS_FAILED] + counts[STATUS_INCOMPLETE]
    text = (
        f"{n_bad} cell(s) failed or did not finish and are not in any fit or table below; "
        f"{counts[STATUS_WARNING]} complete cell(s) have warnings (what was left out and why)."
        if data.problems
        else "None: every cell directory has a complete summary.json and a readable results.jsonl."
    )
    return text + ("\n\n" + incomplete_text(result) if incomplete_text(result) else "")


def _headline_text(result: AnalysisResult) -> str:
    n_left_out = int(result.units["n_items_excluded"].sum()) if not result.units.empty else 0
    has_logodds = bool(result.units["rec_logodds_mean"].notna().any()) if not result.units.empty else False
    logodds_note = (
        "Each fit is given on the paper's scale (mean renormalized P(own), 0.5 = no bias; the headline) and on "
        "the log-odds scale (½·[logit P(own) forward + logit P(own) backward], 0 = no bias), which cancels an "
        "additive position bias that the paper's scale squashes toward 0.5."
        if has_logodds else
        "These cells record no log-odds scores (an older sweep), so only the paper's scale is fitted."
    )
    return (
            "This is the paper's statistic, labelled so: plain OLS over the evaluator variant × dataset points, as "
            "in its Figure 4, so that a replication can be set against the paper's number. Its intervals treat "
            "the points as independent and their recognition as known; the corrected fit in the next section "
            "does not.\n\n"
            "What it means: each point is one evaluator variant (base model, or base model + fine-tune task + N + "
            "fine-tune dataset) on one dataset, with its recognition and its preference averaged over the sources "
            "it was judged against, as in the paper's figures. A positive slope says: evaluators that recognize "
            "their own summaries better also prefer them more. Fitted separately for every setting × label "
            "condition, never across them; within one, all datasets together and, where there are several, "
            "each dataset alone.\n\n"
            "How: OLS (statsmodels formula preference ~ recognition), slope and intercept with 95% t intervals, "
            "r with a Fisher-z interval; where every point lies on one line there is no interval, and the row "
            "says so instead of printing a zero-width one. Both means of a point come from the same items: an item excluded in "
            f"either question is left out of both ({n_left_out} item(s) left out in all, counted per unit below). "
            "The points' CIs are t intervals over articles (CR2 sandwich clustered by article, Bell–McCaffrey df; on the paper's scale taken on the logit of the mean). Groups with fewer than 3 points or no "
            "spread in recognition are not fitted and say so. " + logodds_note
    )


_UNITS_TEXT = (
            "One row per evaluator variant × dataset × setting × label: means over sources with 95% "
            "CIs over articles (an article's items stay together across sources: t with the CR2 sandwich clustered "
            "by article and Bell–McCaffrey df, on the logit of the mean on the paper's scale; they cover about "
            "95% at 10 articles, where the percentile bootstrap gave about 89%); 'n items left out' counts the items excluded in either question; 'judge competence' is "
            "'failed' when any of the unit's cells failed the control."
)

_RESAMPLED_TEXT = (
    "What it means: the headline slope and intercept, the specificity shift and the interaction, refitted so "
    "that their intervals hold. Every unit and cell is judged on the same articles, and a point's recognition "
    "and preference come from the same items, so the points are not independent; a point's recognition is a "
    "mean over a few articles, so it carries sampling error, which pulls a plain slope toward 0 (at 10 articles "
    "by about 15-20% in the simulator). A variant judged on two datasets is two points that share the variant, "
    "so where a group pools datasets the fit has a dataset term (effects-coded: the intercept is the mean of "
    "the datasets' intercepts) and a dataset's level is not read as slope.\n\n"
    "How: one joint article resample, drawn once per dataset (n − 1 of its n articles with replacement, the "
    "same draw for every unit, cell, source and question), recomputes every point and refits every row on "
    "each draw; each interval is the estimate ± t(articles − datasets) × the draws' SD. Method per "
    "coefficient (chosen by the coverage study, docs/coverage.md): slope, intercept and shift by OLS corrected "
    "for recognition's measurement error (method of moments, its error (co)variances from the same draws); "
    "the interaction by OLS with the dataset term, uncorrected. A corrected row gives its estimate without an "
    "interval where recognition is too noisy to correct (its reliability given the other terms, shown, under "
    "0.5). Every row, and the other method's, is in analysis/regression_resampled.csv."
)

_ROBUSTNESS_TEXT = (
            "What it means: the same question asked of finer points, with the dependence between them taken into "
            "account. If the headline slope is real, these slopes should have the same sign; wide intervals here "
            "mean the data cannot tell.\n\n"
            "Source level: one point per cell (evaluator variant × source), means over the items kept in both "
            "questions. The cells of one evaluator variant share the model and the articles, so they are not "
            "independent: fitted by OLS with CIs clustered by evaluator variant, and by a mixed model with a "
            "random intercept per evaluator variant (statsmodels MixedLM, REML). Item level: one point per judged "
            "item, OLS with evaluator-variant fixed effects (the slope within variants) and CIs clustered by "
            "article (dataset, article_id), because one article is judged in many cells. Base and fine-tuned "
            "evaluators meet only through the evaluator-variant factor; settings and label conditions are never "
            "pooled.\n\n"
            "Clustered CIs and p-values use the bias-reduced CR2 sandwich with Bell–McCaffrey degrees of freedom, "
            "which keeps a 5% test near 5% with a handful of clusters (the usual CR1 with clusters − 1 degrees "
            "of freedom rejects far more often then). With fewer than 4 clusters a row gives its estimate but "
            "says 'too few clusters for a clustered test' instead of a CI and p-value. The mixed model's "
            "intervals are normal approximations that treat the variants' variance as known: with fewer than 6 "
            "variants its rows are marked descriptive only."
)

def _specificity_text(result: AnalysisResult) -> str:
    m = result.specificity_margin
    return (
        "What it means: the paper's causal claim is that recognition drives preference, so that a fine-tune "
        "which raises recognition raises preference with it. If recognition is all that moves preference, "
        "every fine-tuned evaluator, whatever its task, lies on one common line of preference against "
        "recognition. This test fits that line and asks whether the recognition fine-tunes sit off it: the "
        "shift in preference at matched recognition (recognition fine-tunes minus control fine-tunes, at the "
        "same recognition). What each outcome would mean:\n\n"
        "A shift of about 0, shown equivalent to 0 within the margin: one common line. Preference follows "
        "recognition whatever moved it. That is what recognition driving preference predicts, and it is "
        "equally what one cause behind both predicts (e.g. a feature of the text a fine-tune taught the judge "
        "to pick, which both questions then follow); this test cannot tell those apart.\n\n"
        "A positive shift (CI above 0): recognition fine-tunes raise preference beyond what their recognition "
        "predicts; training on recognition moves preference by some route other than recognition itself. A "
        "negative shift (CI below 0): recognition fine-tunes raise preference less than their recognition "
        "predicts. A CI around 0 that is not shown equivalent is inconclusive: these points cannot tell a "
        "shift of the margin's size from none.\n\n"
        "How: OLS preference ~ recognition + recognition_finetune (one common slope) over fine-tuned points, "
        f"recognition_finetune = 1 for finetune_task in {{{', '.join(result.recognition_tasks)}}}; at the paper "
        "unit (plain OLS, t intervals) and at the source level (CIs clustered by evaluator variant: CR2 with "
        "Bell–McCaffrey degrees of freedom; with fewer than 3 variants of either kind the row gives the "
        "estimates and says 'too few clusters for a clustered test'); per setting × label and per transfer "
        "condition. Base models are left out: they are not fine-tuned, so an effect of fine-tuning as such "
        "(any task) would otherwise be read as the recognition fine-tunes' own shift. The equivalence test is "
        "TOST (two one-sided t tests with the fit's degrees of freedom) of |shift| < margin; its p below 0.05 "
        f"means the shift's 90% CI lies inside ±margin. Margins (analysis.specificity_margin): "
        f"{m.get('paper', float('nan')):g} on the paper's scale (preference 0.50 → 0.55), "
        f"{m.get('logodds', float('nan')):g} on the log-odds scale (logit 0.55 ≈ 0.2, the same shift for a judge "
        "without position bias). A margin wider than the fine-tunes' own effects makes equivalence easy and "
        "says little: compare it with the Δs below.\n\n"
        "The same shift, refitted on one joint article resample with a dataset term and recognition's "
        "measurement error corrected, is in 'Headline, corrected' above: the plain fits here treat recognition "
        "as known, so its noise flattens the common line, and the recognition fine-tunes, whose recognition is "
        "higher, then sit above it as a shift."
    )


def _interaction_text(result: AnalysisResult) -> str:
    return (
        "What it means: whether recognition fine-tunes and control fine-tunes share one slope of preference on "
        "recognition. It is not the causal test: if recognition drives preference, whatever moved it, every "
        "fine-tune lies on one common line and the interaction is 0. A non-zero interaction says the two kinds "
        "do not lie on one line (their slopes differ), which the specificity test above asks at matched "
        "recognition. A CI around 0 alone does not show the slopes equal; only an equivalence test could.\n\n"
        "How: OLS preference ~ recognition * recognition_finetune over fine-tuned points only, where "
        f"recognition_finetune = 1 for finetune_task in {{{', '.join(result.recognition_tasks)}}} and 0 for "
        "every other fine-tune task (a control). At the paper unit (plain OLS) and at the source level (CIs "
        "clustered by evaluator variant: CR2 with Bell–McCaffrey degrees of freedom); per setting × label, and "
        "per transfer condition (in-domain / cross-dataset) where both occur. recognition_finetune is the same "
        "for every cell of a variant, so a clustered test needs at least 3 variants of each kind; with fewer "
        "the row gives the estimates and says 'too few clusters for a clustered test' instead of a CI and "
        "p-value."
    )


_DIFF_TESTS_TEXT = (
    "p-values: the same t test as the CI (the CI excludes 0 exactly when p < 0.05). Holm p: Holm's adjustment within a family, "
    "which keeps the chance of any false 'this fine-tune changed it' in the family at 5%. A family is every "
    "arm of one base evaluator on one dataset, setting and label (so one transfer condition per fine-tune "
    "dataset), for one question on one scale: the Δ recognition family and the Δ preference family are "
    "adjusted separately. Read an arm's change one by one against the Holm p, not the raw one. Δ preference / "
    "Δ recognition: how much preference moved per unit of recognition, with a percentile CI from an article "
    "bootstrap (a ratio is not a mean, so no t interval; at 10 articles it is likely too narrow); 1 on the log-odds scale is the same change in both. It is given only where Δ recognition's CI "
    "excludes 0: over a denominator that may be 0 a ratio means nothing."
)

_FINETUNE_TEXT = (
            "What it means: what each fine-tune changed. Every fine-tuned evaluator is compared with its own base "
            "model on the items both judged (same article, same other source), so the articles' difficulty and "
            "the other summaries are held fixed; a CI that excludes 0 is a change the fine-tune made. Read the "
            "recognition arms down by N for a dose-response; a control fine-tune (another task on the same "
            "prompt) that moves recognition or preference as much says the change is not specific to learning "
            "recognition.\n\n"
            "How: per source the mean of the item differences (fine-tuned − base, items kept in both questions by "
            "both models), then the mean over sources; 95% t CIs over articles, as the paper units' (CR2 "
            "clustered by article, Bell–McCaffrey df). A fine-tune evaluated in-domain starts after its training "
            "articles, so it shares items with "
            "the base model only when the evaluation articles lie past every fine-tune's training articles "
            "(dataset.offset); rows without shared items say so.\n\n" + _DIFF_TESTS_TEXT
)

_TREND_TEXT = (
        "What it means: whether training on more articles moves recognition (and preference) further. The "
        "slope of each recognition arm's Δ (fine-tuned − base) on log10 N, the number of training articles: "
        "the change per tenfold N. log N, not N: the doses are geometric (2, 10, 50), so each weighs alike, "
        "where on N the largest dose would decide the slope alone. The base model is not a point (its Δ is 0 "
        "by definition; log 0 is undefined): whether any arm moved at all is the per-arm test above.\n\n"
        "How: OLS slope of the arms' Δ on log10 N; its 95% CI and p from the same t test over articles "
        "as the Δs (the slope is a weighted sum of the arms' Δs; they judged the same items, so their Δs are "
        "correlated, and an article's items stay together). "
        "With one fine-tune per N the interval covers the evaluation articles only, not the randomness of "
        "training itself; with 2 doses the line passes through both."
)

_LABELS_TEXT = (
    "What it means: the source-label experiment changes only the preference prompt: the same evaluator judges "
    "the same items with each summary tagged by a source name (correctly, swapped or at random). Each label "
    f"condition is compared with the unlabelled prompt (label={LABEL_REFERENCE}) on the items both judged (same "
    "article, same other source), so the articles and the summaries are held fixed; a CI of Δ preference that "
    "excludes 0 is a change the label made.\n\n"
    "How: preference per condition is the paper unit's (mean over sources of the item means, items kept in "
    "both questions in both conditions) with its 95% t CI over articles; Δ preference is the mean over sources "
    "of the item differences (label − no label) with the 95% t CI and p of the same test over articles as the "
    "fine-tuned-vs-base Δs (CR2 clustered by article, Bell–McCaffrey df); Holm p adjusts across the labels of "
    "one evaluator, dataset and setting, on one scale."
)


def _labels_table(result: AnalysisResult) -> Optional[pd.DataFrame]:
    # None outside a label comparison, so that other designs log no empty table to W&B.
    return T.label_comparison_table(result.labels) if result.design.label_pairs else None


CORE_ITEMS: tuple[ReportItem, ...] = (
    ReportItem("problems", "Failed, incomplete and partial cells", _problems_text,
               lambda r: T.problems_table(r.data.problems_df)),
    # The source-label experiment's own comparison leads; the paper-unit points (level 3) follow either.
    ReportItem("label_comparison", "Label conditions on the same items", _LABELS_TEXT, _labels_table,
               applies=lambda d: d.label_pairs, to_wandb=REPORT_TABLE),
    ReportItem("regression_units", "Headline: self-preference on self-recognition at the paper's unit",
               _headline_text, lambda r: T.paper_statistic_table(r.unit_fits), plots=("preference_vs_recognition",),
               applies=lambda d: d.headline, to_wandb=REPORT_TABLE, fitted=lambda r: r.unit_fits),
    ReportItem("units", "The paper-unit points", _UNITS_TEXT, lambda r: T.units_table(r.units), level=3),
    ReportItem("regression_resampled", "Headline, corrected: one joint article resample",
               _RESAMPLED_TEXT, lambda r: T.resampled_table(r.resampled), applies=lambda d: d.headline,
               to_wandb=REPORT_TABLE, fitted=lambda r: r.resampled),
    ReportItem("regression_robustness", "Robustness: source-level and item-level fits", _ROBUSTNESS_TEXT,
               lambda r: T.regression_table(r.robustness_fits), to_wandb=REPORT_TABLE,
               fitted=lambda r: r.robustness_fits),
    ReportItem("specificity", "Specificity: does preference follow recognition, whatever moved it?",
               _specificity_text, lambda r: T.specificity_table(r.specificity),
               applies=lambda d: d.finetune_tests, to_wandb=REPORT_TABLE, fitted=lambda r: r.specificity),
    ReportItem("interaction", "Recognition vs control fine-tunes: the interaction test", _interaction_text,
               lambda r: T.interaction_table(r.interactions), applies=lambda d: d.finetune_tests,
               to_wandb=REPORT_TABLE, fitted=lambda r: r.interactions),
    ReportItem("finetune_vs_base", "Fine-tuned vs base model on the same items", _FINETUNE_TEXT,
               lambda r: T.finetune_vs_base_table(r.diffs), plots=("finetune_vs_base",),
               applies=lambda d: d.diffs),
    ReportItem("dose_trend", "Dose-response: the recognition arms' change over N", _TREND_TEXT,
               lambda r: T.trend_table(r.trends), applies=lambda d: d.diffs and d.trends, level=3,
               fitted=lambda r: r.trends),
    ReportItem(J.NAME, J.SECTION, J.TEXT, lambda r: J.judge_controls_table(r.data.cells),
               applies=J.applies, to_wandb=REPORT_TABLE),
    ReportItem(S.NAME, S.SECTION, lambda r: S.per_source_text(r.data.cells),
               lambda r: S.per_source_table(r.data.cells, r.data.items), applies=lambda d: d.per_source),
    ReportItem("heatmaps", "Evaluator × source heatmaps", plots=("heatmap_recognition", "heatmap_preference"),
               to_wandb=NOT_LOGGED),
    ReportItem("recognition_matrix", "Self-recognition by evaluator × source",
               "Cell mean with its 95% bootstrap CI from summary.json; the evaluator includes its fine-tune.",
               lambda r: T.evaluator_source_table(r.data.cells, "rec")),
    ReportItem("preference_matrix", "Self-preference by evaluator × source", "Cell mean with its 95% bootstrap CI.",
               lambda r: T.evaluator_source_table(r.data.cells, "pref")),
    ReportItem("recognition_logodds_matrix", "Self-recognition, log-odds scale, by evaluator × source",
               "The position-debiased log-odds score (0 = no bias): cell mean with its 95% bootstrap CI from "
               "summary.json.", lambda r: T.evaluator_source_table(r.data.cells, "rec_logodds"),
               applies=lambda d: d.logodds_cells),
    ReportItem("preference_logodds_matrix", "Self-preference, log-odds scale, by evaluator × source", "",
               lambda r: T.evaluator_source_table(r.data.cells, "pref_logodds"), applies=lambda d: d.logodds_cells),
    ReportItem("position_consistency", "Position consistency",
               "Share of items whose answer agrees between the two presentation orders.",
               lambda r: T.position_consistency_table(r.data.cells)),
    ReportItem("exclusions", "Exclusions", "Items excluded per cell, by reason.",
               lambda r: T.exclusions_table(r.data.cells)),
    ReportItem("finetune", "Per fine-tune task",
               "Means across cells (95% t interval over cells when there are at least 2).",
               lambda r: T.finetune_table(r.data.cells)),
)


def report_items() -> tuple[ReportItem, ...]:
    """Every item in report order: the core items, each measurement's after the core item it names, the rest of
    the measurements' (in registry order) after MEASUREMENTS_AFTER."""
    items = list(CORE_ITEMS)
    loose = []
    for _, mod in measurement_reports():
        for item in getattr(mod, "ITEMS", ()):
            if item.after:
                anchor = next(k for k, core in enumerate(items) if core.name == item.after)
                items.insert(anchor + 1, item)
            else:
                loose.append(item)
    anchor = next(k for k, core in enumerate(items) if core.name == MEASUREMENTS_AFTER)
    items[anchor + 1:anchor + 1] = loose
    names = [item.name for item in items]
    if len(set(names)) != len(names):
        raise ValueError(f"two report items share a name: {sorted(n for n in set(names) if names.count(n) > 1)}")
    return tuple(items)


def build_tables(result: AnalysisResult, items: Optional[Sequence[ReportItem]] = None) -> dict[str, pd.DataFrame]:
    """Every item's table, whether or not its section applies (the W&B run logs them as before); an item whose
    builder gives None (a comparison the design lacks) has none."""
    items = report_items() if items is None else items
    built = {item.name: item.builder(result) for item in items if item.builder is not None}
    return {name: table for name, table in built.items() if table is not None}


def applicable(result: AnalysisResult, items: Optional[Sequence[ReportItem]] = None) -> list[ReportItem]:
    items = report_items() if items is None else items
    return [item for item in items if item.applies(result.design)]


def sections(result: AnalysisResult) -> list[Section]:
    return [item.render(result) for item in applicable(result)]


def wandb_tables(result: AnalysisResult) -> dict[str, pd.DataFrame]:
    """The tables the W&B run logs: those of the items marked for W&B."""
    logged = {item.name for item in report_items() if item.to_wandb != NOT_LOGGED}
    return {name: table for name, table in result.tables.items() if name in logged}


def wandb_report_items(result: AnalysisResult) -> list[ReportItem]:
    """The items whose tables go into the W&B report: those marked so whose section the design supports."""
    return [item for item in applicable(result) if item.to_wandb == REPORT_TABLE and item.name in result.tables]


def plot_stems(design: Design) -> set[str]:
    """The figures the applicable items show: the only ones plots.make_plots needs to draw."""
    return {stem for item in report_items() if item.applies(design) for stem in item.plots}
