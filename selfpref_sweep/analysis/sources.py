"""Per source: each other source on its own, Holm-adjusted.

The paper units average over the sources an evaluator was judged against, which can hide an evaluator that
recognizes (or prefers its summaries over) one source's summaries and not another's. Here each cell is a row per
question: its means with their CIs on both scales as its summary.json gives them (the cell frame of load.py), and a
test of "differs from chance": a one-sample t test over the cell's articles (each article's mean over its scored
items) of the log-odds score against 0, or, where the items carry no log-odds (an older sweep), of the paper's
score against 0.5 (`test_scale` says which). The cells of one group (evaluator variant × setting × dataset × label
× transfer) are tested together, so beside each raw p-value stands its Holm-adjusted one across the group's
sources for that question (the `family` names it); a group with one source has nothing to adjust across.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from .method_texts import method_text
from .paired import holm
from .tables import DASH, FLAT_ARTICLES, est_ci, fmt_int, fmt_p

NAME = "per_source"  # the table's key, and analysis/per_source.csv
SECTION = "Per source: each other source on its own, Holm-adjusted"
GROUP_KEYS = ("evaluator_variant", "setting", "dataset", "label", "transfer")  # a family: these and the question
QUESTIONS = {"recognition": "rec", "preference": "pref"}
NULL = {"logodds": 0.0, "paper": 0.5}  # chance on each scale
_ITEM_COLUMN = {"logodds": "logodds", "paper": "score"}
FRAME_COLUMNS = [*GROUP_KEYS, "source", "question", "test_scale", "cell_id",
                 "paper_mean", "paper_ci_low", "paper_ci_high", "logodds_mean", "logodds_ci_low", "logodds_ci_high",
                 "n_articles", "t", "df", "p", "p_holm", "family", "family_size"]
NOTHING_TO_ADJUST = f"{DASH} (one source: nothing to adjust)"


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
    for question, prefix in QUESTIONS.items():
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
        columns=["article_id", *(f"{p}_{c}" for p in QUESTIONS.values() for c in ("excluded", "score", "logodds"))])
    rows = [r for _, cell in cells.iterrows() for r in _cell_rows(cell, by_cell.get(cell["cell_id"], empty))]
    return _with_holm(pd.DataFrame(rows))[FRAME_COLUMNS]


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
            fmt_int(r["n_articles"]), fmt_p(r["p"]), _holm_text(r), r["family"]])))
    return pd.DataFrame(rows, columns=cols)


PER_SOURCE_TEXT = method_text("per_source")
NEEDS_TWO = ("The per-source breakdown needs two or more other sources judged by one evaluator variant on one "
             "dataset, setting and label: with one source there is no family to adjust across.")


def per_source_text(cells: pd.DataFrame) -> str:
    return PER_SOURCE_TEXT if has_sources(cells) else NEEDS_TWO
