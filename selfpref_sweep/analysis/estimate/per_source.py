"""Per source: each other source on its own, Holm-adjusted.

The paper units average over the sources an evaluator was judged against, which can hide an evaluator that
recognizes (or prefers its summaries over) one source's summaries and not another's. Here each cell is a row per
question: its means with their CIs on both scales as its summary.json gives them (the cell frame of load.py), and a
test of "differs from chance": a one-sample t test over the cell's articles (each article's mean over its scored
items) of the log-odds score against 0, or, where the items carry no log-odds (an older sweep), of the paper's
score against 0.5 (`test_scale` says which). The cells of one group (evaluator variant × setting × dataset × label
× transfer) are tested together, so beside each raw p-value stands its Holm-adjusted one across the group's
sources for that question (the `family` names it); a group with one source has nothing to adjust across.

Its section in the report and its table: report/per_source_section.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ...records.schema import QUESTION_PREFIX
from .paired import holm

GROUP_KEYS = ("evaluator_variant", "setting", "dataset", "label", "transfer")  # a family: these and the question
NULL = {"logodds": 0.0, "paper": 0.5}  # chance on each scale
_ITEM_COLUMN = {"logodds": "logodds", "paper": "score"}
FRAME_COLUMNS = [*GROUP_KEYS, "source", "question", "test_scale", "cell_id",
                 "paper_mean", "paper_ci_low", "paper_ci_high", "logodds_mean", "logodds_ci_low", "logodds_ci_high",
                 "n_articles", "t", "df", "p", "p_holm", "family", "family_size"]


def has_sources(cells: pd.DataFrame) -> bool:
    """Whether some group (GROUP_KEYS) was judged against two or more other sources: a family to adjust."""
    if cells.empty:
        return False
    return bool((cells.groupby(list(GROUP_KEYS), dropna=False)["source"].nunique() >= 2).any())


def article_test(values: Sequence[float], null: float = 0.0) -> dict[str, float]:
    """One-sample t test of per-article values against `null` (articles are the independent units): t, df and
    the two-sided p; NaN with fewer than two articles or where every article gives the same value."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    out = {"t": math.nan, "df": float(max(v.size - 1, 0)), "p": math.nan}
    if v.size < 2 or np.ptp(v) <= 1e-12 * max(1.0, float(np.abs(v).max())):
        return out
    res = stats.ttest_1samp(v, null)
    return {**out, "t": float(res.statistic), "p": float(res.pvalue)}


def _cell_test(items: pd.DataFrame, prefix: str) -> dict[str, Any]:
    """The test of one cell and question: on the log-odds scale where its scored items carry log-odds, else on
    the paper's score; over the per-article means of the items scored in that question."""
    scored = items[~items[f"{prefix}_excluded"].astype(bool)]
    for scale in ("logodds", "paper"):
        values = pd.to_numeric(scored[f"{prefix}_{_ITEM_COLUMN[scale]}"], errors="coerce")
        if values.notna().any():
            per_article = values.groupby(scored["article_id"]).mean().dropna()
            return {"test_scale": scale, "n_articles": float(per_article.size),
                    **article_test(per_article.to_numpy(), NULL[scale])}
    return {"test_scale": None, "n_articles": 0.0, "t": math.nan, "df": math.nan, "p": math.nan}


def _cell_rows(cell: pd.Series, items: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for question, prefix in QUESTION_PREFIX.items():
        row = {k: cell.get(k) for k in (*GROUP_KEYS, "source", "cell_id")}
        row["question"] = question
        for scale, infix in (("paper", ""), ("logodds", "_logodds")):
            for stat in ("mean", "ci_low", "ci_high"):
                row[f"{scale}_{stat}"] = float(cell.get(f"{prefix}{infix}_{stat}", math.nan))
        rows.append({**row, **_cell_test(items, prefix)})
    return rows


def _with_holm(frame: pd.DataFrame) -> pd.DataFrame:
    """p_holm: Holm's adjustment within each family (GROUP_KEYS and question) of two or more tested sources;
    NaN in a family of one (nothing to adjust across) and for a row without a p-value."""
    frame["p_holm"], frame["family_size"] = math.nan, 0
    for _, sub in frame.groupby([*GROUP_KEYS, "question"], sort=False, dropna=False):
        tested = sub[np.isfinite(sub["p"].astype(float))]
        frame.loc[sub.index, "family_size"] = len(tested)
        if len(tested) >= 2:
            frame.loc[tested.index, "p_holm"] = holm(tested["p"].to_numpy(dtype=float))
    frame["family"] = frame[[*GROUP_KEYS, "question"]].astype(str).agg(" / ".join, axis=1)
    return frame


def per_source_frame(cells: pd.DataFrame, items: pd.DataFrame) -> pd.DataFrame:
    """One row per cell and question (FRAME_COLUMNS): the cell's means and CIs on both scales, its test against
    chance and the Holm-adjusted p across the sources of its group; plain values only (machine keys)."""
    if cells.empty:
        return pd.DataFrame(columns=FRAME_COLUMNS)
    by_cell = dict(tuple(items.groupby("cell_id", sort=False))) if not items.empty else {}
    empty = items.iloc[0:0] if not items.empty else pd.DataFrame(
        columns=["article_id",
                 *(f"{p}_{c}" for p in QUESTION_PREFIX.values() for c in ("excluded", "score", "logodds"))])
    rows = [r for _, cell in cells.iterrows() for r in _cell_rows(cell, by_cell.get(cell["cell_id"], empty))]
    return _with_holm(pd.DataFrame(rows))[FRAME_COLUMNS]
