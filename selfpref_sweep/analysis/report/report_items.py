"""The report as a declarative list of items: what each section shows, from what, and where it goes.

Every section of report.md / report.html is one ``ReportItem`` (the report kit's reporting/items.py): its name,
heading, prose, the builder of its table, its plots, when it applies and where its table goes in W&B.
``CORE_ITEMS`` lists the sections of the cell's own two questions and the analysis across cells, in report order;
each measurement adds its own from its report module (``Measurement.report_module``, e.g.
measurements/familiarity/familiarity_report.py, found by sweep/report_modules.py), after the core item it names or
else together before the per-cell matrices. ``report_items()`` is the whole list, which job/pipeline.run_analysis
renders where the items apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pandas as pd

from ...measurements import registered
from ...reporting.grouping import BY_CONDITION
from ...reporting.items import NOT_LOGGED, REPORT_TABLE, Design, ReportItem, Section
from ...reporting.method_texts import method_text
from ..estimate.estimates import POSITIVE_CONTROLS
from ..estimate.length_control import has_word_counts
from ..estimate.paired import LABEL_REFERENCE, has_label_pairs
from ..estimate.per_source import has_sources
from ..estimate.resample import MIN_RELIABILITY
from ..self_bias.net_bias import applies as self_bias_applies
from ..study.calibration import HOLM_FWER, calibration_label
from ..sweep.load import STATUS_FAILED, STATUS_INCOMPLETE, STATUS_WARNING, SweepData
from ..sweep.report_modules import measurement_reports, recorded, report_module
from . import cell_tables as C
from . import fit_tables as F
from . import judge_controls as J
from . import length_control_section as LC
from . import per_source_section as S
from . import self_bias_section as SB
from . import unit_tables as U
from .result import AnalysisResult

__all__ = ["CORE_ITEMS", "AnalysisItem", "report_items", "design_of", "build_tables", "applicable", "shows", "sections",
           "wandb_tables", "wandb_report_items", "plot_stems", "data_modules", "measurement_plots", "problem_counts",
           "incomplete_text"]

# The core's method prose: texts/<name>.md beside this module.
TEXTS = __package__
# An item of this report: its prose, builder and fits read an AnalysisResult.
AnalysisItem = ReportItem[AnalysisResult]

# Where the measurements' items go when they name no item to follow: after this core item.
MEASUREMENTS_AFTER = "per_source"


def data_modules() -> list[ModuleType]:
    """The modules whose own data files and regressions.json sections the analysis writes (``data_files`` and
    ``json_sections`` of the result): each measurement's report module, and the core's length control."""
    return [mod for _, mod in measurement_reports()] + [LC, SB]


def measurement_plots() -> dict[str, Any]:
    """Every measurement's figures: stem -> draw(cells, path)."""
    return {stem: draw for _, mod in measurement_reports() for stem, draw in getattr(mod, "PLOTS", {}).items()}


def design_of(data: SweepData, units: pd.DataFrame, diffs: pd.DataFrame, trends: Sequence[Any],
              arms: pd.DataFrame | None = None, paper_trends: pd.DataFrame | None = None,
              training_sd_stated: bool = False) -> Design:
    cells = data.cells
    several = (arms.loc[arms["adapters"] > 1, "adapters"] if arms is not None and not arms.empty
               else pd.Series(dtype=int))  # the adapter counts of the replicated arms
    per_condition = units.groupby(list(BY_CONDITION)).size() if not units.empty else pd.Series(dtype=int)
    return Design(
        label_pairs=has_label_pairs(data.items),
        max_condition_units=int(per_condition.max()) if len(per_condition) else 0,
        finetuned=bool(not units.empty and units["is_finetuned"].astype(bool).any()),
        diffs=not diffs.empty, trends=bool(trends),
        adapters_per_arm=int(several.min()) if len(several) else 1,
        positive_control=bool(arms is not None and not arms.empty
                              and arms["finetune_task"].astype(str).isin(POSITIVE_CONTROLS).any()),
        logodds_cells=bool(not cells.empty and cells["rec_logodds_mean"].notna().any()),
        per_source=has_sources(cells),
        length_control=has_word_counts(data.items),
        self_bias=self_bias_applies(data.items),
        paper_trend=bool(paper_trends is not None and not paper_trends.empty),
        measured=frozenset(m.name for m in registered() if recorded(m, report_module(m), cells)),
        training_sd_stated=training_sd_stated,
    )


# --- prose that depends on the result -------------------------------------------------------------------------


def problem_counts(data: SweepData) -> dict[str, int]:
    counts = {STATUS_FAILED: 0, STATUS_INCOMPLETE: 0, STATUS_WARNING: 0}
    for p in data.problems:
        counts[p.status] = counts.get(p.status, 0) + 1
    return counts


def incomplete_text(result: AnalysisResult) -> str:
    """The warning naming every unit whose cells do not all carry a field ("" when there is none)."""
    frames = {"paper unit": result.est.units, "fine-tuned vs base": result.est.diffs}
    for _, mod in measurement_reports():  # a measurement's own per-unit frames
        frames.update(mod.incomplete_frames(result) if hasattr(mod, "incomplete_frames") else {})
    return U.incomplete_units_text(frames)


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
    units = result.est.units
    n_left_out = int(units["n_items_excluded"].sum()) if not units.empty else 0
    has_logodds = bool(units["rec_logodds_mean"].notna().any()) if not units.empty else False
    return method_text("headline_logodds" if has_logodds else "headline_paper_only", TEXTS, n_left_out=n_left_out)


def _specificity_text(result: AnalysisResult) -> str:
    m = result.est.specificity_margin
    return method_text("specificity", TEXTS, recognition_tasks=", ".join(result.recognition_tasks),
                       margin_paper=f"{m.get('paper', float('nan')):g}",
                       margin_logodds=f"{m.get('logodds', float('nan')):g}")


def _interaction_text(result: AnalysisResult) -> str:
    return method_text("interaction", TEXTS, recognition_tasks=", ".join(result.recognition_tasks))


ONE_ADAPTER_PER_ARM = (
    "Training randomness is not covered: every fine-tuned arm here is one adapter (one training run), so these "
    "intervals describe the adapters that were trained, over the evaluation articles; another run of the same "
    "fine-tune can land outside them. Train each arm with several seeds (finetune_task.seed=0,1,2) and the "
    "report pools them per arm with the between-adapter variance in the interval.")


STATED_SD_PER_ARM = (
    "Every fine-tuned arm here is one adapter (one training run). The intervals in this table describe those "
    "adapters, over the evaluation articles; the per-arm table below adds the {stated} to speak for the recipe, "
    "and holds its rate only as far as that SD is right.")


def _finetune_vs_base_text(result: AnalysisResult) -> str:
    text = method_text("finetune_vs_base", TEXTS)
    holm = calibration_label(HOLM_FWER, "", "", False, adapters=result.adapters)
    if holm:  # Holm's family-wise error off its 5% in the coverage study: said once, above the table
        text += f"\n\nHolm p, simulated calibration: {holm}."
    if result.replicated:
        return text
    stated = result.est.training_sd
    if stated is None:
        return f"{ONE_ADAPTER_PER_ARM}\n\n{text}"
    return f"{STATED_SD_PER_ARM.format(stated=stated.text())}\n\n{text}"


def _left_out(prose: Any, full: bool = False) -> Any:
    """The item's prose with, first, the line on the degenerate arms its fits leave out (none: the prose as it
    is)."""
    def text(result: AnalysisResult) -> str:
        base = prose(result) if callable(prose) else prose
        note = U.degenerate_text(result.est.degenerate, full)
        return f"{note}\n\n{base}" if note and base else (note or base)
    return text


def _labels_table(result: AnalysisResult) -> pd.DataFrame | None:
    # None outside a label comparison, so that other designs log no empty table to W&B.
    return U.label_comparison_table(result.labels) if result.design.label_pairs else None


CORE_ITEMS: tuple[AnalysisItem, ...] = (
    ReportItem("problems", "Failed, incomplete and partial cells", _problems_text,
               lambda r: C.problems_table(r.data.problems_df)),
    # The source-label experiment's own comparison leads; the paper-unit points (level 3) follow either.
    ReportItem("label_comparison", "Label conditions on the same items",
               method_text("label_comparison", TEXTS, label_reference=LABEL_REFERENCE), _labels_table,
               applies=lambda d: d.label_pairs, to_wandb=REPORT_TABLE),
    ReportItem("regression_units", "Headline: self-preference on self-recognition at the paper's unit",
               _left_out(_headline_text), lambda r: F.paper_statistic_table(r.est.unit_fits, r.adapters),
               plots=("preference_vs_recognition",),
               applies=lambda d: d.headline, to_wandb=REPORT_TABLE, fitted=lambda r: r.est.unit_fits),
    ReportItem("units", "The paper-unit points", _left_out(method_text("units", TEXTS), full=True),
               lambda r: U.units_table(r.est.units, r.est.degenerate), level=3),
    ReportItem("regression_resampled", "Headline, corrected: one joint article resample",
               _left_out(method_text("resampled", TEXTS, min_reliability=f"{MIN_RELIABILITY:g}")),
               lambda r: F.resampled_table(r.est.resampled, r.adapters, r.est.specificity_margin),
               applies=lambda d: d.headline,
               to_wandb=REPORT_TABLE, fitted=lambda r: r.est.resampled),
    ReportItem("paper_trend", "The paper's fine-tune trend, per base evaluator",
               _left_out(method_text("paper_trend", TEXTS)),
               lambda r: F.paper_trend_table(r.est.paper_trends), applies=lambda d: d.paper_trend,
               to_wandb=REPORT_TABLE),
    ReportItem("regression_robustness", "Robustness: source-level and item-level fits",
               _left_out(method_text("robustness", TEXTS)),
               lambda r: F.regression_table(r.est.robustness_fits, r.adapters), to_wandb=REPORT_TABLE,
               fitted=lambda r: r.est.robustness_fits),
    ReportItem("specificity", "Specificity: does preference follow recognition, whatever moved it?",
               _left_out(_specificity_text), lambda r: F.specificity_table(r.est.specificity, r.adapters),
               applies=lambda d: d.finetune_tests, to_wandb=REPORT_TABLE, fitted=lambda r: r.est.specificity),
    ReportItem("interaction", "Recognition vs control fine-tunes: the interaction test", _left_out(_interaction_text),
               lambda r: F.interaction_table(r.est.interactions, r.adapters, r.est.resampled),
               applies=lambda d: d.finetune_tests,
               to_wandb=REPORT_TABLE, fitted=lambda r: r.est.interactions),
    ReportItem("interaction_robustness", "The interaction's robustness: one cluster per model, one task left out",
               method_text("interaction_robustness", TEXTS),
               lambda r: F.interaction_robustness_table(r.est.interaction_robustness),
               applies=lambda d: d.finetune_tests),
    ReportItem("finetune_vs_base", "Fine-tuned vs base model on the same items", _finetune_vs_base_text,
               lambda r: U.finetune_vs_base_table(r.est.diffs), plots=("finetune_vs_base",),
               applies=lambda d: d.diffs),
    ReportItem("question_collapse", "Do the two questions collapse into one? Fine-tuned arms and their base models",
               method_text("question_collapse", TEXTS), lambda r: U.question_collapse_table(r.collapse),
               applies=lambda d: d.diffs),
    ReportItem("finetune_arms", "Fine-tuned vs base, per arm: its adapters pooled",
               method_text("finetune_arms", TEXTS),
               lambda r: U.arm_deltas_table(r.est.arms),
               applies=lambda d: d.diffs and (d.replicated or d.training_sd_stated)),
    ReportItem("positive_control", "Positive control: can this judge's preference move?",
               method_text("positive_control", TEXTS),
               lambda r: U.positive_control_table(r.est.arms, POSITIVE_CONTROLS, r.est.positive_controls),
               applies=lambda d: d.diffs and d.positive_control),
    ReportItem("dose_trend", "Dose-response: the recognition arms' change over N",
               method_text("dose_trend", TEXTS),
               lambda r: F.trend_table(r.est.trends), applies=lambda d: d.diffs and d.trends, level=3,
               fitted=lambda r: r.est.trends),
    ReportItem(J.NAME, J.SECTION, J.text, lambda r: J.judge_controls_table(r.data.cells, r.collapse),
               applies=J.applies, to_wandb=REPORT_TABLE),
    ReportItem(LC.NAME, LC.SECTION, LC.text, LC.table, applies=lambda d: d.length_control),
    ReportItem(LC.BY_SOURCE_NAME, LC.BY_SOURCE_SECTION, LC.by_source_text, LC.by_source,
               applies=lambda d: d.length_control, level=3),
    ReportItem(SB.NAME, SB.SECTION, SB.text, SB.table, applies=lambda d: d.self_bias),
    ReportItem(S.NAME, S.SECTION, lambda r: S.per_source_text(r.data.cells),
               lambda r: S.per_source_table(r.data.cells, r.data.items), applies=lambda d: d.per_source),
    ReportItem("heatmaps", "Evaluator × source heatmaps", plots=("heatmap_recognition", "heatmap_preference"),
               to_wandb=NOT_LOGGED),
    ReportItem("recognition_matrix", "Self-recognition by evaluator × source",
               "Cell mean with its 95% bootstrap CI from summary.json; the evaluator includes its fine-tune.",
               lambda r: C.evaluator_source_table(r.data.cells, "rec")),
    ReportItem("preference_matrix", "Self-preference by evaluator × source", "Cell mean with its 95% bootstrap CI.",
               lambda r: C.evaluator_source_table(r.data.cells, "pref")),
    ReportItem("recognition_logodds_matrix", "Self-recognition, log-odds scale, by evaluator × source",
               "The position-debiased log-odds score (0 = no bias): cell mean with its 95% bootstrap CI from "
               "summary.json.", lambda r: C.evaluator_source_table(r.data.cells, "rec_logodds"),
               applies=lambda d: d.logodds_cells),
    ReportItem("preference_logodds_matrix", "Self-preference, log-odds scale, by evaluator × source", "",
               lambda r: C.evaluator_source_table(r.data.cells, "pref_logodds"), applies=lambda d: d.logodds_cells),
    ReportItem("position_consistency", "Position consistency",
               "Share of items whose answer agrees between the two presentation orders.",
               lambda r: C.position_consistency_table(r.data.cells)),
    ReportItem("exclusions", "Exclusions", "Items excluded per cell, by reason.",
               lambda r: C.exclusions_table(r.data.cells)),
    ReportItem("finetune", "Per fine-tune task",
               "Means across cells (95% t interval over cells when there are at least 2).",
               lambda r: C.finetune_table(r.data.cells)),
)


def _position(items: Sequence[AnalysisItem], name: str, wanted_by: str) -> int:
    for k, item in enumerate(items):
        if item.name == name:
            return k
    raise ValueError(f"report item {wanted_by!r} is to follow {name!r}, but no report item has that name "
                     f"(there are: {', '.join(i.name for i in items)})")


def report_items() -> tuple[AnalysisItem, ...]:
    """Every item in report order: the core items, each measurement's after the item it names (a core item, or
    one of its own listed before), the rest of the measurements' (in registry order) after MEASUREMENTS_AFTER."""
    items = list(CORE_ITEMS)
    loose = []
    for _, mod in measurement_reports():
        for item in getattr(mod, "ITEMS", ()):
            if item.after:
                items.insert(_position(items, item.after, item.name) + 1, item)
            else:
                loose.append(item)
    anchor = _position(items, MEASUREMENTS_AFTER, "the measurements' items")
    items[anchor + 1:anchor + 1] = loose
    names = [item.name for item in items]
    if len(set(names)) != len(names):
        raise ValueError(f"two report items share a name: {sorted(n for n in set(names) if names.count(n) > 1)}")
    return tuple(items)


def build_tables(result: AnalysisResult, items: Sequence[AnalysisItem] | None = None) -> dict[str, pd.DataFrame]:
    """Every item's table, whether or not its section applies (the W&B run logs them as before); an item whose
    builder gives None (a comparison the design lacks) has none."""
    items = report_items() if items is None else items
    built = {item.name: item.builder(result) for item in items if item.builder is not None}
    return {name: table for name, table in built.items() if table is not None}


def applicable(result: AnalysisResult, items: Sequence[AnalysisItem] | None = None) -> list[AnalysisItem]:
    items = report_items() if items is None else items
    return [item for item in items if item.applies(result.design)]


def shows(result: AnalysisResult, name: str) -> bool:
    """Whether the report has the item ``name`` for this sweep's design."""
    return any(item.name == name for item in applicable(result))


def sections(result: AnalysisResult) -> list[Section]:
    return [item.render(result) for item in applicable(result)]


def wandb_tables(result: AnalysisResult) -> dict[str, pd.DataFrame]:
    """The tables the W&B run logs: those of the items marked for W&B."""
    logged = {item.name for item in report_items() if item.to_wandb != NOT_LOGGED}
    return {name: table for name, table in result.tables.items() if name in logged}


def wandb_report_items(result: AnalysisResult) -> list[AnalysisItem]:
    """The items whose tables go into the W&B report: those marked so whose section the design supports."""
    return [item for item in applicable(result) if item.to_wandb == REPORT_TABLE and item.name in result.tables]


def plot_stems(design: Design) -> set[str]:
    """The figures the applicable items show: the only ones plots.make_plots needs to draw."""
    return {stem for item in report_items() if item.applies(design) for stem in item.plots}
