"""The display tables of the paper units and the fine-tune comparisons: the paper-unit points, fine-tuned vs base
on the same items, the arms' pooled Δs, the positive control, the label conditions, and the warning that names
the units whose cells do not all carry a field."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ...reporting.formatting import DASH, FLAT_ARTICLES, ci_cell, est_ci, fmt, fmt_int, fmt_p, holm_cell, rows_table
from ...reporting.grouping import UNIT_KEYS
from ..estimate.arms import RECIPE_AT_STATED_SD
from ..estimate.paired import ONE_ORDER
from ..estimate.units import DEGENERATE_BAND, DEGENERATE_MIN_ITEMS
from ..study.calibration import ARM_PREFERENCE, ARM_RECOGNITION, ARM_TEST, calibration_label
from .fit_tables import CALIBRATION_COL, drop_empty_calibration


def units_table(units: pd.DataFrame, degenerate: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper-unit points: per setting × label × dataset × evaluator variant, both scales with CIs; where some
    unit is degenerate (units.degenerate_units), a column saying which are left out of the fits and why."""
    cols = ["setting", "label", "dataset", "evaluator", "transfer", "sources", "n articles", "n items",
            "n items left out", "recognition [95% CI]", "preference [95% CI]", "recognition, log-odds [95% CI]",
            "preference, log-odds [95% CI]", "judge competence"]
    reasons = _degenerate_reasons(degenerate)
    return rows_table(units, cols + [DEGENERATE_COL] * bool(reasons), lambda u: [
        u["setting"], u["label"], u["dataset"], u["evaluator_variant"], u["transfer"], u["sources"],
        fmt_int(u["n_articles"]), fmt_int(u["n_items"]), fmt_int(u["n_items_excluded"]),
        *(est_ci(u[f"{q}_{s}_mean"], u[f"{q}_{s}_ci_low"], u[f"{q}_{s}_ci_high"], FLAT_ARTICLES)
          for s in ("paper", "logodds") for q in ("rec", "pref")),
        u["judge_competence"] or DASH,
    ] + [reasons.get(tuple(str(u[k]) for k in UNIT_KEYS), "")] * bool(reasons))


DEGENERATE_COL = "left out of the fits (degenerate)"


def _degenerate_reasons(degenerate: pd.DataFrame | None) -> dict[tuple[str, ...], str]:
    if degenerate is None or degenerate.empty:
        return {}
    return {tuple(str(r[k]) for k in UNIT_KEYS): str(r["reason"]) for _, r in degenerate.iterrows()}


def degenerate_text(degenerate: pd.DataFrame, full: bool = False) -> str:
    """The line that says how many degenerate fine-tuned units the fits leave out ("" when none); ``full`` names
    each with its two score ranges (the paper units' section)."""
    if degenerate.empty:
        return ""
    text = (f"**Degenerate arms left out:** {len(degenerate)} fine-tuned unit(s) gave one constant answer (every "
            f"kept item's score within {DEGENERATE_BAND:g} on both questions, paper scale, over at least "
            f"{DEGENERATE_MIN_ITEMS} items) and are left out of every fit of preference on recognition: such a "
            "point sits where its training put it and carries no slope information. Each fit's note counts those "
            "of its group")
    if not full:
        return text + "; the paper-unit points name them (also analysis/degenerate_units.csv)."
    names = "; ".join(f"{r.evaluator_variant} on {r.dataset} ({r.setting}, label {r.label}; {fmt_int(r.n_items)} "
                      f"items, recognition range {r.rec_range:.4f}, preference range {r.pref_range:.4f})"
                      for r in degenerate.itertuples())
    return f"{text}. They are: {names} (also analysis/degenerate_units.csv)."


def finetune_vs_base_table(diffs: pd.DataFrame) -> pd.DataFrame:
    """Fine-tuned minus base on the same items, both scales: each Δ with its CI, its t test's p and Holm's p
    (analysis/paired.py), and Δ preference / Δ recognition where Δ recognition is distinguishable from 0."""
    cols = ["setting", "label", "dataset", "fine-tuned evaluator", "transfer", "sources", "n articles", "n items"]
    for s in ("paper", "logodds"):
        scale = "" if s == "paper" else ", log-odds"
        cols += [f"Δ recognition{scale} [95% CI]", f"Δ recognition{scale}: p (Holm p)",
                 f"Δ preference{scale} [95% CI]", f"Δ preference{scale}: p (Holm p)",
                 f"Δ preference / Δ recognition{scale} [95% CI]"]
    cols.append("note")

    def scale_cells(d: pd.Series, s: str) -> list[str]:
        out = []
        for q in ("rec", "pref"):
            out += [ci_cell(d, f"d{q}_{s}"), holm_cell(d, f"d{q}_{s}")]
        ratio = est_ci(d.get(f"ratio_{s}"), d.get(f"ratio_{s}_ci_low"), d.get(f"ratio_{s}_ci_high"))
        note = d.get(f"ratio_{s}_note")
        return out + [ratio if ratio != DASH else (note if isinstance(note, str) and note else DASH)]

    return rows_table(diffs, cols, lambda d: [
        d["setting"], d["label"], d["dataset"], d["evaluator_variant"], d["transfer"], d["sources"] or DASH,
        fmt_int(d["n_articles"]), fmt_int(d["n_items"]), *scale_cells(d, "paper"), *scale_cells(d, "logodds"),
        d["note"] or "",
    ])


def arm_deltas_table(arms: pd.DataFrame) -> pd.DataFrame:
    """Per arm, its adapters' Δs pooled with training randomness (arms.py), both scales: Δ [95% CI], p (Holm
    p) and the training SD (the adapters' spread, or the one the user stated), and whom the row speaks for."""
    cols = ["setting", "label", "dataset", "arm", "transfer", "adapters", "n articles", "speaks for"]
    for s in ("paper", "logodds"):
        scale = "" if s == "paper" else ", log-odds"
        for q in ("recognition", "preference"):
            cols += [f"Δ {q}{scale} [95% CI]", f"Δ {q}{scale}: p (Holm p)", f"Δ {q}{scale}: training SD"]
    cols.append("note")

    def scale_cells(d: pd.Series, s: str) -> list[str]:
        out = []
        for q in ("rec", "pref"):
            out += [ci_cell(d, f"d{q}_{s}"), holm_cell(d, f"d{q}_{s}"), fmt(d.get(f"d{q}_{s}_training_sd"))]
        return out

    table = rows_table(arms, cols + [CALIBRATION_COL], lambda d: [
        d["setting"], d["label"], d["dataset"], d["arm"], d["transfer"], fmt_int(d["adapters"]),
        fmt_int(d["n_articles"]), d.get("speaks_for") or DASH, *scale_cells(d, "paper"), *scale_cells(d, "logodds"),
        d["note"] or "",
        STATED_SD_LABEL if str(d.get("speaks_for", "")).startswith(RECIPE_AT_STATED_SD) else
        arm_label(int(d["adapters"]))])
    return drop_empty_calibration(table)


# The simulated calibration of a one-adapter arm's row with a stated training SD (bench/stated_training_sd.py,
# docs/results/stated_training_sd.md): it rests on the SD being right.
STATED_SD_LABEL = ("with the true SD stated: coverage 94-97% (log-odds), 94-100% (paper scale, conservative where "
                   "the SD is large) for a nominal 95%; with half the true SD stated: 65-93% (simulated one-adapter "
                   "arms at 10-50 articles, training SD 0.1-1.6, docs/results/stated_training_sd.md)")


def arm_label(adapters: int) -> str:
    """The simulated calibration of an arm's pooled Δ rows with this many adapters (calibration.py; "" where the
    coverage study found them at their stated rates)."""
    labels = ((what, calibration_label(kind, "", "", False, adapters=adapters))
              for what, kind in (("Δ recognition CI", ARM_RECOGNITION), ("Δ preference CI", ARM_PREFERENCE),
                                 ("Δ p", ARM_TEST)))
    return "; ".join(f"{what}: {label}" for what, label in labels if label)


HOLM_ALPHA = 0.05  # the familywise level of the positive control's reading


def positive_control_table(arms: pd.DataFrame, tasks: Sequence[str], toward: pd.DataFrame | None = None
                           ) -> pd.DataFrame:
    """The positive-control arms: Δ preference toward the direction each was trained (positive_control.py), which
    says whether preference moved; Δ recognition toward it (whether the judge now picks that summary whatever it
    is asked); and their Δ self-preference (arms.py), which need not move."""
    sub = arms[arms["finetune_task"].astype(str).isin(list(tasks))] if not arms.empty else arms
    toward = toward if toward is not None else pd.DataFrame()
    keys = ["setting", "label", "dataset", "arm"]
    turned = {tuple(str(d[k]) for k in keys): d for _, d in toward.iterrows()}
    cols = ["setting", "label", "dataset", "arm", "adapters", "trained toward", "items without a direction",
            "Δ preference toward it [95% CI]", "Δ preference toward it, log-odds [95% CI]", "p (Holm p)",
            "Δ recognition toward it, log-odds [95% CI]", "Δ self-preference [95% CI]",
            "Δ self-preference, log-odds [95% CI]", "reading"]

    def reading(d: pd.Series | None) -> str:
        """From the test the table prints, Holm-adjusted across the family's arms at 5%; a non-rejection is
        "not shown to move", never "did not move"."""
        if d is None:
            return "no trained direction (the summaries' texts are not in the results): cannot say"
        p, estimate = d.get("dpref_paper_p_holm"), d.get("dpref_paper_mean")
        if not (pd.notna(p) and pd.notna(estimate)):
            return "no test: cannot say whether preference moved"
        test = f"Holm p {fmt_p(p)}"
        if p < HOLM_ALPHA and estimate > 0:
            return f"preference moved the trained way ({test}): a preference null in this setting is informative"
        if p < HOLM_ALPHA and estimate < 0:
            return f"preference moved against the trained way ({test}): the readout moves, but not as trained"
        return f"preference not shown to move ({test}): a preference null in this setting is uninformative"

    def cells(d: pd.Series) -> list[str]:
        t = turned.get(tuple(str(d[k]) for k in keys))
        toward_cells = ([str(t["toward"]), fmt_int(t["n_items_tied"]), ci_cell(t, "dpref_paper"),
                         ci_cell(t, "dpref_logodds"),
                         f"{fmt_p(t.get('dpref_paper_p'))} ({fmt_p(t.get('dpref_paper_p_holm'))})",
                         ci_cell(t, "drec_logodds")]
                        if t is not None else [DASH] * 6)
        return [d["setting"], d["label"], d["dataset"], d["arm"], fmt_int(d["adapters"]), *toward_cells,
                ci_cell(d, "dpref_paper"), ci_cell(d, "dpref_logodds"), reading(t)]

    return rows_table(sub, cols, cells)


def label_comparison_table(labels: pd.DataFrame) -> pd.DataFrame:
    """Label conditions on the same items (paired.label_vs_reference), both scales: preference under the label
    and under the reference with their CIs, and the paired Δ with its CI, p and Holm's p."""
    cols = ["setting", "dataset", "evaluator", "label", "vs", "compared on", "sources", "n articles", "n items"]
    for s in ("paper", "logodds"):
        scale = "" if s == "paper" else ", log-odds"
        cols += [f"preference{scale} [95% CI]", f"preference{scale}, vs [95% CI]",
                 f"Δ preference{scale} [95% CI]", f"Δ preference{scale}: p (Holm p)"]
    cols.append("note")

    def scale_cells(d: pd.Series, s: str) -> list[str]:
        return [*(ci_cell(d, f"{side}_{s}") for side in ("pref", "pref_ref", "dpref")), holm_cell(d, f"dpref_{s}")]

    return rows_table(labels, cols, lambda d: [
        d["setting"], d["dataset"], d["evaluator_variant"], d["label"], d["reference"], _compared_on(d.get("orders")),
        d["sources"] or DASH,
        fmt_int(d["n_articles"]), fmt_int(d["n_items"]), *scale_cells(d, "paper"), *scale_cells(d, "logodds"),
        d["note"] or "",
    ])


def _compared_on(orders: object) -> str:
    """Which comparison a label row made (paired.orders_asked)."""
    if orders in ONE_ORDER:
        return f"one order ({ONE_ORDER[orders]}) vs the same order"
    return "both orders' mean vs both orders' mean"


def incomplete_units_text(frames: dict[str, pd.DataFrame]) -> str:
    """The warning that lists every unit (of each named frame: paper units, fine-tuned-vs-base rows, ...)
    whose cells do not all carry a field: its value there is left out (—), never averaged over the other
    sources. "" if none."""
    lines = []
    for what, frame in frames.items():
        if frame.empty or "incomplete" not in frame:
            continue
        for r in frame[frame["incomplete"].fillna("").astype(str) != ""].itertuples():
            lines.append(f"{what} {r.evaluator_variant} on {r.dataset} ({r.setting}, label {r.label}): "
                         f"{r.incomplete}")
    if not lines:
        return ""
    return (f"{len(lines)} unit(s) whose cells do not all carry a field: that field is left out (—) for the unit, "
            "not averaged over the other sources: " + "; ".join(lines) + ".")


def question_collapse_table(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Per base model and fine-tuned arm (pairwise): how often its two questions get the same top answer in both
    orders, beside its base model's, the paired difference, the two scores' correlation, and the reading
    (estimate/collapse.py); None where the sweep has no such arm."""
    if frame.empty:
        return None
    cols = ["setting / label", "dataset", "evaluator", "items", "same answer in both orders [95% CI]",
            "its base model's [95% CI]", "Δ [95% CI]", "p", "correlation of the scores (base)", "reading"]
    rows = []
    for _, r in frame.iterrows():
        rows.append([f"{r['setting']} / {r['label']}", r["dataset"], r["evaluator_variant"], fmt_int(r["n_items"]),
                     est_ci(r["same_share"], r["same_ci_low"], r["same_ci_high"]),
                     est_ci(r["base_same_share"], r["base_ci_low"], r["base_ci_high"]),
                     est_ci(r["delta"], r["delta_ci_low"], r["delta_ci_high"]), fmt_p(r["delta_p"]),
                     f"{fmt(r['corr'])} ({fmt(r['base_corr'])})", r["reading"]])
    return pd.DataFrame(rows, columns=cols)
