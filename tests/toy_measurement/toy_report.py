"""The toy measurement's report side: one section with its per-cell table, shown where some cell recorded it."""

from __future__ import annotations

import pandas as pd

from selfpref_sweep.reporting.formatting import est_ci, rows_table
from selfpref_sweep.reporting.items import ReportItem

SECTION = "Toy: does the judge pick the longer summary?"


def toy_table(cells: pd.DataFrame) -> pd.DataFrame:
    on = cells[cells["toy_mean"].notna()] if "toy_mean" in cells else cells.iloc[0:0]
    return rows_table(on, ["cell", "evaluator", "P(longer) [95% CI]"], lambda c: [
        c["cell_id"], c["evaluator_variant"], est_ci(c["toy_mean"], c["toy_ci_low"], c["toy_ci_high"])])


def recorded(cells: pd.DataFrame) -> bool:
    return bool("toy_mean" in cells and cells["toy_mean"].notna().any())


ITEMS = (ReportItem("toy", SECTION, "P(longer), the judge's mean probability of naming the longer summary.",
                    lambda r: toy_table(r.data.cells), applies=lambda d: "toy" in d.measured),)
