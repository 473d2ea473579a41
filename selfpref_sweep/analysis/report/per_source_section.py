"""The per-source breakdown in the report (estimate/per_source.py makes it): its section, its text and its display
table, each cell's test against chance beside its Holm-adjusted p across the sources of its group."""

from __future__ import annotations

import pandas as pd

from ...reporting.formatting import DASH, FLAT_ARTICLES, est_ci, fmt_int, fmt_p
from ...reporting.method_texts import method_text
from ..estimate.per_source import has_sources, per_source_frame

NAME = "per_source"  # the table's key, and analysis/per_source.csv
SECTION = "Per source: each other source on its own, Holm-adjusted"
NOTHING_TO_ADJUST = f"{DASH} (one source: nothing to adjust)"


def _holm_text(row: pd.Series) -> str:
    if row["family_size"] < 2:
        return NOTHING_TO_ADJUST
    return fmt_p(row["p_holm"])


def per_source_table(cells: pd.DataFrame, items: pd.DataFrame) -> pd.DataFrame:
    """The display table of per_source_frame."""
    cols = ["evaluator / setting / dataset", "question", "other source", "paper scale [95% CI]",
            "log-odds [95% CI]", "articles", "p (raw)", "p (Holm, across sources)", "family"]
    rows = []
    for _, r in per_source_frame(cells, items).iterrows():
        rows.append(dict(zip(cols, [
            f"{r['evaluator_variant']} / {r['setting']} / {r['dataset']}", r["question"], r["source"],
            est_ci(r["paper_mean"], r["paper_ci_low"], r["paper_ci_high"], FLAT_ARTICLES),
            est_ci(r["logodds_mean"], r["logodds_ci_low"], r["logodds_ci_high"], FLAT_ARTICLES),
            fmt_int(r["n_articles"]), fmt_p(r["p"]), _holm_text(r), r["family"]], strict=True)))
    return pd.DataFrame(rows, columns=cols)


PER_SOURCE_TEXT = method_text("per_source", __package__)
NEEDS_TWO = ("The per-source breakdown needs two or more other sources judged by one evaluator variant on one "
             "dataset, setting and label: with one source there is no family to adjust across.")


def per_source_text(cells: pd.DataFrame) -> str:
    return PER_SOURCE_TEXT if has_sources(cells) else NEEDS_TWO
