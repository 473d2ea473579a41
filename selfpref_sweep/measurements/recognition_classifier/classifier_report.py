"""Recognition read as a classifier, the report side: per cell, the judge's recognition answers as a classifier
(accuracy per presentation order, AUROC, calibration) from summary.json through the cell frame's rc_* columns, its
reliability figure, and its line in the judge-controls table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ...reporting.figures import DPI, PlotFile, empty_figure, grid
from ...reporting.formatting import DASH, fmt, fmt_ci, fmt_int
from ...reporting.items import ReportItem
from ...reporting.method_texts import method_text
from .. import number

PACKAGE = __package__  # its texts/ folder holds its method prose

NAME = "recognition_classifier"
# (mean, CI low, CI high) of recognition accuracy read as a classifier, for the tables that set it beside others
ACCURACY_COLUMNS = ("rc_accuracy", "rc_accuracy_ci_low", "rc_accuracy_ci_high")
RELIABILITY_STEM = "recognition_reliability"

CELL_COLUMNS = ("evaluator_variant", "source", "dataset", "setting", "label")
CELL_HEADS = {"evaluator_variant": "evaluator variant", "source": "source", "dataset": "dataset",
              "setting": "setting", "label": "label"}


def enabled_cells(cells: pd.DataFrame, column: str) -> pd.Series:
    """Which cells recorded the measurement on (a NaN/None of an older cell, or an off one, is False)."""
    if cells.empty or column not in cells:
        return pd.Series(False, index=cells.index, dtype=bool)
    return cells[column].map(lambda v: isinstance(v, (bool, np.bool_)) and bool(v)).astype(bool)


def has_reliability(cells: pd.DataFrame) -> bool:
    return bool(not cells.empty and "rc_reliability" in cells
                and cells["rc_reliability"].map(lambda b: bool(reliability_points(b)[2].sum())).any())


def reliability_points(bins: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean predicted, observed frequency, count) of a cell's non-empty reliability bins (empty arrays when
    the cell recorded none)."""
    rows = [b for b in bins if isinstance(b, dict) and b.get("count")] if isinstance(bins, list) else []
    return (np.array([float(b["mean_predicted"]) for b in rows]), np.array([float(b["observed"]) for b in rows]),
            np.array([int(b["count"]) for b in rows], dtype=int))


def with_ci(value: Any, low: Any, high: Any) -> str:
    text = fmt(value)
    return text if text == DASH else f"{text} {fmt_ci(low, high)}"


def _split(c: Any, pairwise_key: str, individual_key: str) -> str:
    key = pairwise_key if c.setting == "pairwise" else individual_key
    return with_ci(getattr(c, key), getattr(c, f"{key}_ci_low"), getattr(c, f"{key}_ci_high"))


def classifier_table(cells: pd.DataFrame) -> pd.DataFrame | None:
    """Per cell that read recognition as a classifier: accuracy per order (pairwise: own shown first, own
    shown second; individual: own at 1/2, other at 1/2) and overall, each with its Wilson 95% CI, AUROC, ECE
    and the items used. None where no cell recorded it."""
    on = cells[enabled_cells(cells, "rc_enabled")]
    if on.empty:
        return None
    return pd.DataFrame([{
        **{CELL_HEADS[k]: getattr(c, k) for k in CELL_COLUMNS},
        "accuracy: forward · own": _split(c, "rc_accuracy_forward", "rc_accuracy_own"),
        "accuracy: backward · other": _split(c, "rc_accuracy_backward", "rc_accuracy_other"),
        "accuracy overall [95% CI]": with_ci(c.rc_accuracy, c.rc_accuracy_ci_low, c.rc_accuracy_ci_high),
        "AUROC": fmt(c.rc_auroc) if not math.isnan(c.rc_auroc) else (c.rc_auroc_reason or DASH),
        "ECE": fmt(c.rc_ece), "items": fmt_int(c.rc_n), "excluded": fmt_int(c.rc_n_excluded),
    } for c in on.itertuples()])


# The coverage study's finding for the pairwise overall accuracy (docs/coverage.md): an item's mean of two hits
# (0, ½ or 1) varies less than the binomial trial Wilson assumes, so its interval is too wide, never too narrow.
OVERALL_CONSERVATIVE = method_text("overall_conservative", PACKAGE)
CLASSIFIER_TEXT = method_text("recognition_classifier", PACKAGE, overall_conservative=OVERALL_CONSERVATIVE)


def classifier_note(cells: pd.DataFrame) -> str:
    n = int(enabled_cells(cells, "rc_enabled").sum())
    return CLASSIFIER_TEXT if n else "No cell recorded recognition as a classifier."


def reliability_plot(cells: pd.DataFrame, path: Path) -> PlotFile:
    """Reliability of the judge's recognition probabilities (recognition read as a classifier): one panel per
    evaluator variant × setting, one line per cell (source · dataset · label) through its non-empty bins, each
    point sized by its readings; the diagonal is perfect calibration. Pairwise cells read P(answer "1") against
    "own is in position 1", individual cells P(Yes) against "the summary is own"."""
    title = "Recognition as a classifier: reliability of its probabilities (per cell)"
    usable = cells[cells["rc_reliability"].map(lambda b: bool(reliability_points(b)[2].sum()))] \
        if not cells.empty and "rc_reliability" in cells else cells.iloc[0:0]
    if usable.empty:
        empty_figure(path, "No cell recorded reliability bins for recognition: nothing to plot.")
        return PlotFile(title, path)
    facets = sorted(usable.groupby(["evaluator_variant", "setting"]).groups.keys())
    rows, cols = grid(len(facets), max_cols=3)
    fig = Figure(figsize=(4.2 * cols, 4.0 * rows + 0.8), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.ravel()[len(facets):]:
        ax.axis("off")
    for ax, (variant, setting) in zip(axes.ravel(), facets, strict=False):
        sub = usable[(usable["evaluator_variant"] == variant) & (usable["setting"] == setting)]
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--", zorder=0)
        for i, c in enumerate(sub.itertuples()):
            x, y, n = reliability_points(c.rc_reliability)
            colour = matplotlib.colormaps["tab10"](i % 10)
            ax.plot(x, y, color=colour, lw=1.0, label=f"{c.source} · {c.dataset} · {c.label} (ECE {fmt(c.rc_ece, 2)})")
            ax.scatter(x, y, s=12 + 60 * n / max(1, n.max()), color=colour, zorder=3)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.02, 1.02)
        predicted = "P(answer '1')" if setting == "pairwise" else "P(Yes)"
        ax.set_xlabel(f"mean predicted {predicted}", fontsize=8)
        ax.set_ylabel("observed frequency" + (" (own first)" if setting == "pairwise" else " (own)"), fontsize=8)
        ax.set_title(f"{variant} · {setting}", fontsize=9)
        ax.legend(fontsize=6, loc="upper left", frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=DPI)
    return PlotFile(title, path)


def recognition_accuracy(cell: Any) -> float:
    """A cell's recognition accuracy read as a classifier (NaN where not recorded)."""
    return number(getattr(cell, ACCURACY_COLUMNS[0], math.nan))


# --- in the judge-controls table -------------------------------------------------------------------------------
CONTROL_COLUMNS = ("recognition accuracy [95% CI]", "recognition AUROC")
OPENS_CONTROLS_TABLE = True  # a newer control: where some cell ran it, the report shows the judge-controls table
CONTROLS_TEXT_VALUES = {"overall_conservative": OVERALL_CONSERVATIVE}  # the table's text, on its overall interval


def control_texts(cell: pd.Series, not_run: str) -> tuple[str, str]:
    """The judge-controls table's columns: recognition accuracy [95% CI] and AUROC."""
    if cell.get("rc_enabled") is not True:
        return not_run, not_run
    accuracy = f"{fmt(cell['rc_accuracy'])} {fmt_ci(cell['rc_accuracy_ci_low'], cell['rc_accuracy_ci_high'])}"
    return accuracy, fmt(cell.get("rc_auroc")) if math.isfinite(number(cell.get("rc_auroc"))) else DASH


ITEMS = (
    ReportItem(NAME, "Recognition as a classifier: accuracy per order, AUROC, calibration",
               lambda r: classifier_note(r.data.cells), lambda r: classifier_table(r.data.cells),
               plots=(RELIABILITY_STEM,), applies=lambda d: NAME in d.measured),
)
PLOTS = {RELIABILITY_STEM: reliability_plot}
