"""Run the whole analysis: load cells, fit, tabulate, plot, write the report, log to W&B."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import pandas as pd

from . import familiarity as F
from . import tables as T
from .fit import (
    GROUPINGS,
    LEVEL_ITEM,
    LEVEL_SOURCE,
    LEVEL_UNIT,
    RECOGNITION_TASKS,
    SPECIFICITY_MARGIN,
    FitResult,
    InteractionResult,
    SpecificityResult,
)
from .estimates import estimate
from .load import STATUS_FAILED, STATUS_INCOMPLETE, STATUS_WARNING, SweepData, load_sweeps
from .calibration import calibration_label, pooled_over_datasets
from .paired import TrendResult
from .plots import PlotFile, make_plots
from .report import Section, write_report
from .items_view import ITEMS_HTML, write_items_html
from .wandb_log import log_to_wandb, resolve_wandb_cfg
from .wandb_panels import SPEC_FILE, spec_for_sweep, write_spec

log = logging.getLogger(__name__)

ANALYSIS_SUBDIR = "analysis"  # PNGs, CSVs and regressions.json; report.* sit beside it
ERROR_FILE = "error.txt"  # written by the callback when the analysis itself fails
WANDB_ERROR_FILE = "wandb_error.txt"
TITLE = "Self-recognition and self-preference: sweep analysis"


class NoCellsError(ValueError):
    """None of the given directories holds a cell directory."""


@dataclass
class AnalysisResult:
    out_dir: Path
    report_md: Path
    report_html: Path
    data: SweepData
    units: pd.DataFrame  # the paper's unit: evaluator variant × dataset × setting × label
    diffs: pd.DataFrame  # fine-tuned minus base model on the same items, per fine-tuned paper unit
    points: pd.DataFrame  # the source level: one row per cell, means over the items kept in both questions
    unit_fits: list[FitResult]  # the headline
    robustness_fits: list[FitResult]
    interactions: list[InteractionResult]
    familiarity_fits: list[F.FamiliarityFit]  # empty when no item records familiarity
    tables: dict[str, pd.DataFrame]  # display tables, keyed by short name
    plots: list[PlotFile]
    recognition_tasks: tuple[str, ...] = RECOGNITION_TASKS
    wandb_status: str = ""
    files: list[Path] = field(default_factory=list)
    specificity: list[SpecificityResult] = field(default_factory=list)  # the shift at matched recognition
    trends: list[TrendResult] = field(default_factory=list)  # the recognition arms' Δ over log10 N
    specificity_margin: dict[str, float] = field(default_factory=lambda: dict(SPECIFICITY_MARGIN))
    fam_units: pd.DataFrame = field(default_factory=pd.DataFrame)  # the likelihood recognizer per paper unit

    def headline_fits(self, scale: str = "paper") -> list[FitResult]:
        """The paper-unit fits per setting × label (all datasets) on one scale."""
        return [f for f in self.unit_fits if f.group_by == GROUPINGS[0][0] and f.scale == scale]

    def summary_text(self) -> str:
        """What the command prints: where the report is, counts, the headline fits, failed judges."""
        counts = _problem_counts(self.data)
        lines = [
            f"Report: {self.report_html}",
            f"        {self.report_md}",
            f"Plots:  {self.out_dir / ANALYSIS_SUBDIR}/",
            f"Cells:  {_count_line(self.data, counts)}",
        ]
        if self.wandb_status:
            lines.append(self.wandb_status)
        lines += ["", "Headline: the paper's unit (evaluator variant × dataset), OLS preference ~ recognition, 95% CIs:"]
        lines.append(
            T.to_text(
                self.tables["regression_units"],
                ["grouping", "group", "scale", "n paper units", "slope", "slope 95% CI", "r", "r 95% CI", "note",
                 T.CALIBRATION_COL],
            )
        )
        failed = T.failed_judges(self.data.cells)
        if not failed.empty:
            lines += ["", f"{len(failed)} cell(s) whose judge failed the competence control ({T.JUDGE_FAILED}):"]
            lines += [f"  {c.cell_id}: {c.evaluator_variant} vs {c.source} on {c.dataset}" for c in failed.itertuples()]
        problems = [p for p in self.data.problems if p.status != STATUS_WARNING]
        if problems:
            lines += ["", f"{len(problems)} failed/incomplete cell(s) (listed in the report):"]
            lines += [f"  {p.cell}: {p.reason}" + (f" [{p.overrides}]" if p.overrides else "") for p in problems]
        incomplete = _incomplete_text(self)
        if incomplete:
            lines += ["", incomplete]
        return "\n".join(lines)


def _incomplete_text(result: AnalysisResult) -> str:
    """The warning naming every unit whose cells do not all carry a field ("" when there is none)."""
    return T.incomplete_units_text({"paper unit": result.units, "fine-tuned vs base": result.diffs,
                                    "likelihood recognizer, paper unit": result.fam_units})


def _problem_counts(data: SweepData) -> dict[str, int]:
    counts = {STATUS_FAILED: 0, STATUS_INCOMPLETE: 0, STATUS_WARNING: 0}
    for p in data.problems:
        counts[p.status] = counts.get(p.status, 0) + 1
    return counts


def _count_line(data: SweepData, counts: Mapping[str, int]) -> str:
    return (
        f"{data.n_cell_dirs} cell directories: {len(data.cells)} complete, {counts[STATUS_FAILED]} failed, "
        f"{counts[STATUS_INCOMPLETE]} incomplete; {counts[STATUS_WARNING]} warning(s)"
    )


def _fit_sentences(result: AnalysisResult) -> list[str]:
    fits = result.headline_fits()
    if not fits:
        return ["Headline (paper unit) fit: no paper units"]
    out = []
    for f in fits:
        if not f.ok:
            out.append(f"Headline fit, {f.group}: {f.note}")
            continue
        if f.no_interval:
            out.append(f"Headline fit, {f.group}: slope {T.fmt(f.slope)}, r {T.fmt(f.r)}, n={f.n} paper units "
                       f"({f.no_interval})")
            continue
        label = calibration_label("fit", f.level, f.method,
                                  pooled_over_datasets(f.group_by, {g.group_by for g in result.unit_fits}))
        out.append(
            f"Headline fit, {f.group}: slope {T.fmt(f.slope)} (95% CI {T.fmt_ci(f.slope_ci_low, f.slope_ci_high)}), "
            f"r {T.fmt(f.r)} (95% CI {T.fmt_ci(f.r_ci_low, f.r_ci_high)}), n={f.n} paper units"
            + (f"; the slope CI {label}" if label else "")
        )
    return out


def _judge_text(cells: pd.DataFrame) -> str:
    failed = T.failed_judges(cells)
    if failed.empty:
        recorded = int(cells["jc_enabled"].map(lambda v: v is True).sum()) if not cells.empty else 0
        return (f"No cell's judge failed the competence control ({recorded} cell(s) ran it)." if recorded
                else "No cell recorded the judge-competence control.")
    names = "; ".join(f"{c.cell_id} ({c.evaluator_variant} vs {c.source} on {c.dataset}, {c.setting}, "
                      f"label {c.label})" for c in failed.itertuples())
    return (f"{len(failed)} cell(s) whose judge failed the competence control: {T.JUDGE_FAILED}. "
            f"Their results say nothing either way: {names}.")


def _sections(result: AnalysisResult) -> list[Section]:
    t, data = result.tables, result.data
    counts = _problem_counts(data)
    plots = {p.path.stem: p for p in result.plots}
    n_bad = counts[STATUS_FAILED] + counts[STATUS_INCOMPLETE]
    problems_text = (
        f"{n_bad} cell(s) failed or did not finish and are not in any fit or table below; "
        f"{counts[STATUS_WARNING]} complete cell(s) have warnings (what was left out and why)."
        if data.problems
        else "None: every cell directory has a complete summary.json and a readable results.jsonl."
    )
    if _incomplete_text(result):
        problems_text += "\n\n" + _incomplete_text(result)
    n_left_out = int(result.units["n_items_excluded"].sum()) if not result.units.empty else 0
    has_logodds = bool(result.units["rec_logodds_mean"].notna().any()) if not result.units.empty else False
    logodds_note = (
        "Each fit is given on the paper's scale (mean renormalized P(own), 0.5 = no bias; the headline) and on "
        "the log-odds scale (½·[logit P(own) forward + logit P(own) backward], 0 = no bias), which cancels an "
        "additive position bias that the paper's scale squashes toward 0.5."
        if has_logodds else
        "These cells record no log-odds scores (an older sweep), so only the paper's scale is fitted."
    )
    return [
        Section("Failed, incomplete and partial cells", problems_text, t["problems"]),
        Section("Judges that failed the competence control", _judge_text(data.cells), T.failed_judges_table(data.cells)),
        Section(
            "Headline: self-preference on self-recognition at the paper's unit",
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
            "spread in recognition are not fitted and say so. " + logodds_note,
            t["regression_units"],
            [plots["preference_vs_recognition"]],
        ),
        Section(
            "The paper-unit points",
            "One row per evaluator variant × dataset × setting × label: means over sources with 95% "
            "CIs over articles (an article's items stay together across sources: t with the CR2 sandwich clustered "
            "by article and Bell–McCaffrey df, on the logit of the mean on the paper's scale; they cover about "
            "95% at 10 articles, where the percentile bootstrap gave about 89%); 'n items left out' counts the items excluded in either question; 'judge competence' is "
            "'failed' when any of the unit's cells failed the control.",
            t["units"], level=3,
        ),
        Section(
            "Robustness: source-level and item-level fits",
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
            "variants its rows are marked descriptive only.",
            t["regression_robustness"],
        ),
        _specificity_section(result),
        _interaction_section(result),
        *([Section(
            "Fine-tuned vs base model on the same items",
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
            "(dataset.offset); rows without shared items say so.\n\n" + _DIFF_TESTS_TEXT,
            t["finetune_vs_base"], [plots["finetune_vs_base"]] if "finetune_vs_base" in plots else []),
           *([_trend_section(result)] if result.trends else [])]
          if not result.diffs.empty else []),
        Section("Familiarity: a rival explanation", F.familiarity_note(data.cells, result.familiarity_fits),
                t["familiarity"]),
        *([Section("The likelihood recognizer next to verbal recognition, per paper unit",
                   "Means over the unit's sources of the cell means, on the items scored in both questions that "
                   "carry familiarity (paper scale).", t["familiarity_units"], level=3),
           Section("The likelihood recognizer next to verbal recognition, per cell",
                   "From summary.json: means with 95% article-level bootstrap CIs (verbal recognition over the "
                   "cell's scored items; the own − other difference over the items with both summaries scored). "
                   "The likelihood recognizer's accuracy is a proportion of those items (a tie counts ½), so it "
                   "gets a Wilson interval, which is honest at 10 of 10 where a bootstrap gives [1, 1].",
                   t["familiarity_cells"], level=3)]
          if F.has_familiarity(data.cells) else []),
        Section(
            "Per cell: the smallest detectable effect and the judge-competence control",
            "What it means: a null result is informative only if the cell could have seen an effect. The smallest "
            "detectable effect is the distance from 0.5 that the cell would detect with 80% power at α = 0.05, "
            "given its article count and item spread; smaller true effects could not be seen. The judge-competence "
            "control asks the judge a question it must answer right if it can compare two summaries at all "
            "(which summary is of this article); mean P(correct) with its CI. A judge that fails it could not "
            "do this task, and a null from it is uninformative.",
            t["quality"],
        ),
        Section("Evaluator × source heatmaps", "", None, [plots["heatmap_recognition"], plots["heatmap_preference"]]),
        Section(
            "Self-recognition by evaluator × source",
            "Cell mean with its 95% bootstrap CI from summary.json; the evaluator includes its fine-tune.",
            t["recognition_matrix"],
        ),
        Section("Self-preference by evaluator × source", "Cell mean with its 95% bootstrap CI.", t["preference_matrix"]),
        *([Section("Self-recognition, log-odds scale, by evaluator × source",
                   "The position-debiased log-odds score (0 = no bias): cell mean with its 95% bootstrap CI from "
                   "summary.json.", t["recognition_logodds_matrix"]),
           Section("Self-preference, log-odds scale, by evaluator × source", "", t["preference_logodds_matrix"])]
          if bool(data.cells["rec_logodds_mean"].notna().any()) else []),
        Section(
            "Position consistency",
            "Share of items whose answer agrees between the two presentation orders.",
            t["position_consistency"],
        ),
        Section("Exclusions", "Items excluded per cell, by reason.", t["exclusions"]),
        Section(
            "Per fine-tune task",
            "Means across cells (95% t interval over cells when there are at least 2).",
            t["finetune"],
        ),
    ]


def _specificity_section(result: AnalysisResult) -> Section:
    m = result.specificity_margin
    return Section(
        "Specificity: does preference follow recognition, whatever moved it?",
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
        "says little: compare it with the Δs below.",
        result.tables["specificity"],
    )


def _interaction_section(result: AnalysisResult) -> Section:
    return Section(
        "Recognition vs control fine-tunes: the interaction test",
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
        "p-value.",
        result.tables["interaction"],
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


def _trend_section(result: AnalysisResult) -> Section:
    return Section(
        "Dose-response: the recognition arms' change over N",
        "What it means: whether training on more articles moves recognition (and preference) further. The "
        "slope of each recognition arm's Δ (fine-tuned − base) on log10 N, the number of training articles: "
        "the change per tenfold N. log N, not N: the doses are geometric (2, 10, 50), so each weighs alike, "
        "where on N the largest dose would decide the slope alone. The base model is not a point (its Δ is 0 "
        "by definition; log 0 is undefined): whether any arm moved at all is the per-arm test above.\n\n"
        "How: OLS slope of the arms' Δ on log10 N; its 95% CI and p from the same t test over articles "
        "as the Δs (the slope is a weighted sum of the arms' Δs; they judged the same items, so their Δs are "
        "correlated, and an article's items stay together). "
        "With one fine-tune per N the interval covers the evaluation articles only, not the randomness of "
        "training itself; with 2 doses the line passes through both.",
        result.tables["dose_trend"], level=3,
    )


# The sections whose tables go into the W&B report (headline, robustness, specificity, interaction).
_WANDB_SECTIONS = ("Headline", "Robustness", "Specificity", "Recognition vs control")


# The level of every row of a data file (or regressions.json section) whose rows do not say it themselves.
_FIXED_KEYS: dict[str, dict[str, str]] = {
    "paper_units.csv": {"level": LEVEL_UNIT}, "finetune_vs_base.csv": {"level": LEVEL_UNIT},
    "dose_trend.csv": {"level": LEVEL_UNIT}, "dose_trend": {"level": LEVEL_UNIT},
    "cells.csv": {"level": LEVEL_SOURCE}, "familiarity.csv": {"level": LEVEL_ITEM}, "familiarity": {"level": LEVEL_ITEM},
}


def _write_data_files(result: AnalysisResult, analysis_dir: Path) -> list[Path]:
    """Machine-readable copies (CSV + JSON) next to the PNGs."""
    files = []
    frames = {
        "regression_units.csv": T.fits_frame(result.unit_fits),
        "regression_robustness.csv": T.fits_frame(result.robustness_fits),
        "interaction.csv": T.interactions_frame(result.interactions),
        "specificity.csv": T.specificity_frame(result.specificity),
        "dose_trend.csv": T.trends_frame(result.trends),
        "familiarity.csv": F.fits_frame(result.familiarity_fits),
        "paper_units.csv": result.units,
        "finetune_vs_base.csv": result.diffs,
        "cells.csv": T.cells_frame(result.data.cells),
        "problems.csv": result.data.problems_df,
    }
    # Machine keys beside the display labels (tables.MACHINE_KEYS); a row's level where its file fixes it.
    groups = T.group_keys(result.units, result.points, result.data.items)
    for name, df in frames.items():
        path = analysis_dir / name
        T.with_machine_keys(df, groups, **_FIXED_KEYS.get(name, {})).to_csv(path, index=False)
        files.append(path)
    payload = {
        "paper_unit": [f.to_dict() for f in result.unit_fits],
        "robustness": [f.to_dict() for f in result.robustness_fits],
        "interaction": [r.to_dict() for r in result.interactions],
        "specificity": [r.to_dict() for r in result.specificity],
        "dose_trend": [t.to_dict() for t in result.trends],
        "familiarity": [f.to_dict() for f in result.familiarity_fits],
        "problems": result.data.problems_df.to_dict(orient="records"),
    }
    payload = {section: [T.keyed_record(r, groups, **_FIXED_KEYS.get(section, {})) for r in records]
               for section, records in payload.items()}
    path = analysis_dir / "regressions.json"
    # NaN is not JSON: write null.
    path.write_text(json.dumps(_nan_to_none(payload), indent=2), encoding="utf-8")
    files.append(path)
    return files


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj


def _wandb_summary(result: AnalysisResult) -> dict[str, Any]:
    counts = _problem_counts(result.data)
    out: dict[str, Any] = {
        "n_cell_dirs": result.data.n_cell_dirs,
        "n_cells_complete": len(result.data.cells),
        "n_cells_failed": counts[STATUS_FAILED],
        "n_cells_incomplete": counts[STATUS_INCOMPLETE],
    }
    out["n_cells_judge_failed"] = len(T.failed_judges(result.data.cells))
    for f in result.unit_fits:
        if not f.ok:
            continue
        key = f"headline/{f.scale}/{f.group}".replace(" / ", "/").replace(" ", "_")
        for attr in ("slope", "slope_ci_low", "slope_ci_high", "slope_p", "intercept", "r", "r2", "n"):
            value = getattr(f, attr)
            if not (isinstance(value, float) and math.isnan(value)):
                out[f"fit/{key}/{attr}"] = value
    return out


def run_analysis(
    sweep_dirs: Iterable[str | Path],
    out_dir: Optional[str | Path] = None,
    wandb_cfg: Optional[Mapping[str, Any]] = None,
    recognition_tasks: Sequence[str] = RECOGNITION_TASKS,
    specificity_margin: Optional[Mapping[str, float]] = None,
) -> AnalysisResult:
    """Analyse the cells of ``sweep_dirs`` (pooled) and write the report.

    The report goes to ``out_dir`` (default: the first sweep dir): report.md and report.html there,
    PNGs, CSVs and regressions.json in its ``analysis/`` subfolder. W&B failures do not lose the
    report: they are recorded in ``analysis/wandb_error.txt`` and in ``wandb_status``.
    ``specificity_margin``: the specificity test's equivalence margin per scale (config
    analysis.specificity_margin; default fit.SPECIFICITY_MARGIN).
    """
    dirs = [Path(d) for d in sweep_dirs]
    if not dirs:
        raise ValueError("no sweep directory given")
    data = load_sweeps(dirs)
    if data.n_cell_dirs == 0:
        raise NoCellsError(
            "no cell directories (sub-directories with .hydra/ or summary.json) under: " + ", ".join(map(str, dirs))
        )
    out = Path(out_dir) if out_dir is not None else dirs[0]
    analysis_dir = out / ANALYSIS_SUBDIR
    analysis_dir.mkdir(parents=True, exist_ok=True)
    (analysis_dir / ERROR_FILE).unlink(missing_ok=True)  # stale failure from an earlier run

    est = estimate(data.items, data.cells, recognition_tasks, specificity_margin)
    units, points, diffs, unit_fits = est.units, est.points, est.diffs, est.unit_fits
    robustness_fits, interactions, specificity, trends = est.robustness_fits, est.interactions, est.specificity, \
        est.trends
    margins = est.specificity_margin
    familiarity_fits = F.fit_familiarity(data.items)
    fam_units = F.likelihood_units(data.items)
    tables = {
        "problems": T.problems_table(data.problems_df),
        "regression_units": T.regression_table(unit_fits),
        "units": T.units_table(units),
        "finetune_vs_base": T.finetune_vs_base_table(diffs),
        "regression_robustness": T.regression_table(robustness_fits),
        "interaction": T.interaction_table(interactions),
        "specificity": T.specificity_table(specificity),
        "dose_trend": T.trend_table(trends),
        "familiarity": F.fits_table(familiarity_fits),
        "familiarity_units": F.likelihood_units_table(fam_units),
        "familiarity_cells": F.likelihood_cells_table(data.cells),
        "quality": T.quality_table(data.cells),
        "recognition_matrix": T.evaluator_source_table(data.cells, "rec"),
        "preference_matrix": T.evaluator_source_table(data.cells, "pref"),
        "recognition_logodds_matrix": T.evaluator_source_table(data.cells, "rec_logodds"),
        "preference_logodds_matrix": T.evaluator_source_table(data.cells, "pref_logodds"),
        "position_consistency": T.position_consistency_table(data.cells),
        "exclusions": T.exclusions_table(data.cells),
        "finetune": T.finetune_table(data.cells),
    }
    plots = make_plots(data.cells, units, unit_fits, analysis_dir, diffs)
    result = AnalysisResult(
        out_dir=out, report_md=out / "report.md", report_html=out / "report.html", data=data, units=units,
        diffs=diffs,
        points=points, unit_fits=unit_fits, robustness_fits=robustness_fits, interactions=interactions,
        familiarity_fits=familiarity_fits, tables=tables, plots=plots, recognition_tasks=tuple(recognition_tasks),
        specificity=specificity, trends=trends, specificity_margin=margins, fam_units=fam_units,
    )
    result.files = _write_data_files(result, analysis_dir)

    counts = _problem_counts(data)
    meta = [
        "Sweep directories: " + ", ".join(str(d) for d in dirs),
        f"Generated: {_dt.datetime.now().isoformat(timespec='seconds')}",
        "Cells: " + _count_line(data, counts),
        *_fit_sentences(result),
    ]
    if not T.failed_judges(data.cells).empty:
        meta.append(_judge_text(data.cells))
    if _incomplete_text(result):
        meta.append(_incomplete_text(result))
    # The item viewer and the W&B panel specification (published later when offline).
    items_html = write_items_html(dirs, out)
    meta.append(f"Items behind every number: {ITEMS_HTML}")
    panels_spec, panels_file = None, out / SPEC_FILE
    try:
        panels_spec = spec_for_sweep(
            resolve_wandb_cfg(wandb_cfg, Path(dirs[0])), cell_paths=list(data.cells["path"]) if not data.cells.empty else [],
            regression_markdown={s.title: T.to_markdown(s.table) for s in _sections(result)
                                 if s.title.startswith(_WANDB_SECTIONS) and s.table is not None},
            analysis_tables=["tables/regression_units", "tables/regression_robustness", "tables/specificity",
                             "tables/interaction"],
            plots=[f"plots/{p.path.stem}" for p in plots])
        write_spec(out, panels_spec)
        meta.append(f"W&B comparison panels (publish with `publish-wandb`): {SPEC_FILE}")
    except Exception as exc:  # noqa: BLE001 - a bad W&B setting must not lose the report; logged below too
        log.error("W&B panel specification not written: %s", exc)
    write_report(out, TITLE, meta, _sections(result))
    result.files += [result.report_md, result.report_html, items_html] + [p.path for p in plots]

    wandb_error = analysis_dir / WANDB_ERROR_FILE
    try:
        result.wandb_status = log_to_wandb(
            dirs[0], wandb_cfg, run_dir=out,
            tables={**tables, "fits_units": T.fits_frame(unit_fits),
                    "fits_robustness": T.fits_frame(robustness_fits), "cells": T.cells_frame(data.cells)},
            plots=plots,
            summary=_wandb_summary(result),
            config={"sweep_dirs": [str(d) for d in dirs], "out_dir": str(out),
                    "recognition_tasks": list(recognition_tasks), "specificity_margin": margins},
            report_files=[panels_file, *result.files],
            panels_spec=panels_spec,
        )
        wandb_error.unlink(missing_ok=True)
    except Exception as exc:  # noqa: BLE001 - W&B trouble must not lose the report
        wandb_error.write_text(traceback.format_exc(), encoding="utf-8")
        result.wandb_status = f"W&B logging failed ({type(exc).__name__}: {exc}); details in {wandb_error}"
        log.error(result.wandb_status)
    return result
