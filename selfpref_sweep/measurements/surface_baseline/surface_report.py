"""The surface-feature baseline, the report side: per cell, authorship told without asking a model (a
cross-validated logistic regression on surface features), beside the judge's own recognition accuracy, from the
cell frame's sb_* columns.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...reporting.formatting import DASH, fmt, fmt_int
from ...reporting.items import ReportItem
from ...reporting.method_texts import method_text
from ..recognition_classifier.classifier_report import (
    CELL_COLUMNS,
    CELL_HEADS,
    enabled_cells,
    recognition_accuracy,
    with_ci,
)

PACKAGE = __package__  # its texts/ folder holds its method prose

NAME = "surface_baseline"
# (mean, CI low, CI high) of the baseline's held-out accuracy, for the tables that set it beside others
SURFACE_COLUMNS = ("sb_accuracy", "sb_accuracy_ci_low", "sb_accuracy_ci_high")


def surface_table(cells: pd.DataFrame) -> pd.DataFrame | None:
    """Per cell that recorded the surface baseline (on or off): its held-out accuracy with the Wilson 95% CI,
    AUROC, items, folds and leading features beside the judge's verbal recognition accuracy; a cell where it
    did not run says why. None where no cell recorded it."""
    recorded = cells[cells["sb_enabled"].map(lambda v: isinstance(v, (bool, np.bool_)))] if "sb_enabled" in cells \
        else cells.iloc[0:0]
    if recorded.empty:
        return None
    return pd.DataFrame([{
        **{CELL_HEADS[k]: getattr(c, k) for k in CELL_COLUMNS},
        "judge's recognition accuracy": fmt(recognition_accuracy(c)),
        "surface baseline accuracy [95% CI]": with_ci(c.sb_accuracy, c.sb_accuracy_ci_low, c.sb_accuracy_ci_high),
        "AUROC": fmt(c.sb_auroc), "items": fmt_int(c.sb_n), "folds": fmt_int(c.sb_folds),
        "leading features (standardized coefficient)": c.sb_top_features or DASH,
        "note": "" if not math.isnan(c.sb_accuracy) else c.sb_reason,
    } for c in recorded.itertuples()])


SURFACE_TEXT = method_text("surface_baseline", PACKAGE)


def surface_note(cells: pd.DataFrame) -> str:
    ran = int((enabled_cells(cells, "sb_enabled") & cells.get("sb_accuracy", pd.Series(dtype=float)).notna()).sum()) \
        if not cells.empty else 0
    return SURFACE_TEXT + (f" It ran in {ran} cell(s)." if ran else " It ran in no cell (the table says why).")


ITEMS = (
    ReportItem(NAME, "Authorship without asking a model", lambda r: surface_note(r.data.cells),
               lambda r: surface_table(r.data.cells), applies=lambda d: NAME in d.measured),
)
