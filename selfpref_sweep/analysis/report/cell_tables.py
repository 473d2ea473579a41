"""The per-cell display tables (the evaluator × source matrices, position consistency, exclusions, per fine-tune
task, the failed and incomplete cells) and the cell frame as the CSV and W&B hold it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from ...reporting.formatting import DASH, FLAT_ARTICLES, est_ci, fmt, fmt_int
from ...reporting.regression import ALPHA


def _mean_ci(values: pd.Series) -> str:
    """Mean across cells with a t interval (cells as the unit); '—' interval below 2 cells. Cells without a
    value are never skipped: the mean over the others would describe other cells than the row names."""
    v = values.to_numpy(dtype=float)
    n_missing = int(np.isnan(v).sum())
    if n_missing == v.size:
        return DASH
    if n_missing:
        return f"{DASH} (missing in {n_missing} of {v.size} cells)"
    if v.size < 2:
        return f"{v.mean():.3f}"
    half = stats.t.ppf(1 - ALPHA / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return est_ci(v.mean(), v.mean() - half, v.mean() + half, "no interval: every cell has the same value")


_ROW_KEYS = ["dataset", "setting", "label", "evaluator_variant"]


def evaluator_source_table(cells: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Evaluator × source matrix of one metric ("rec" or "pref"), each entry "mean [CI low, high]".

    Rows are (dataset, setting, label, evaluator incl. fine-tune), columns are sources. Two cells
    with the same key (e.g. the same cell in two pooled sweeps) are shown side by side, not averaged.
    """
    if cells.empty:
        return pd.DataFrame(columns=[*_ROW_KEYS, "(no complete cells)"])
    df = cells.copy()
    df["_entry"] = [
        est_ci(m, lo, hi, FLAT_ARTICLES)
        for m, lo, hi in zip(df[f"{prefix}_mean"], df[f"{prefix}_ci_low"], df[f"{prefix}_ci_high"], strict=True)
    ]
    keys = [*_ROW_KEYS, "source"]
    # A null key would vanish from a pivot; show it as "null" instead.
    df[keys] = df[keys].astype(object).where(df[keys].notna(), "null").astype(str)
    table = df.groupby(keys, sort=True)["_entry"].agg("; ".join).unstack("source").fillna("").reset_index()
    table.columns.name = None
    return table.rename(columns={"evaluator_variant": "evaluator"})


def position_consistency_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Share of items whose answer is the same in both presentation orders, per cell."""
    cols = ["cell_id", *_ROW_KEYS, "source", "pc_recognition", "pc_preference"]
    if cells.empty:
        return pd.DataFrame(columns=["cell", "dataset", "setting", "label", "evaluator", "source", "recognition",
                                     "preference"])
    df = cells[cols].copy()
    df["pc_recognition"] = df["pc_recognition"].map(fmt)
    df["pc_preference"] = df["pc_preference"].map(fmt)
    return df.rename(
        columns={
            "cell_id": "cell",
            "evaluator_variant": "evaluator",
            "pc_recognition": "recognition",
            "pc_preference": "preference",
        }
    )


def exclusions_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Items excluded per cell, with one column per exclusion reason, and a total row."""
    if cells.empty:
        return pd.DataFrame(columns=["cell", "evaluator", "source", "dataset", "n items", "n excluded"])
    reasons = sorted({r for ex in cells["exclusions"] for r in (ex or {})})
    rows = []
    for _, c in cells.iterrows():
        row = {
            "cell": c["cell_id"],
            "evaluator": c["evaluator_variant"],
            "source": c["source"],
            "dataset": c["dataset"],
            "n items": c["n_items"],
            "n excluded": c["n_excluded"],
            "excluded (recognition)": c["rec_n_excluded"],
            "excluded (preference)": c["pref_n_excluded"],
        }
        for reason in reasons:
            row[reason] = (c["exclusions"] or {}).get(reason, 0.0)
        rows.append(row)
    df = pd.DataFrame(rows)
    numeric = [c for c in df.columns if c not in ("cell", "evaluator", "source", "dataset")]
    total = {"cell": "total", "evaluator": "", "source": "", "dataset": ""}
    # min_count=1: a column of nulls totals to null ("—"), not to a misleading 0.
    total.update({c: df[c].astype(float).sum(min_count=1) for c in numeric})
    df = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    for c in numeric:
        df[c] = df[c].map(fmt_int)
    return df


def finetune_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tune task (and fine-tune dataset, size, evaluation dataset): means across cells."""
    keys = ["finetune_task", "finetune_dataset", "finetune_n_articles", "dataset", "transfer", "setting", "label"]
    if cells.empty:
        return pd.DataFrame(columns=[*keys, "n cells"])
    rows = []
    for key, sub in cells.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, key, strict=True))
        row["finetune_dataset"] = row["finetune_dataset"] if isinstance(row["finetune_dataset"], str) else DASH
        row["finetune_n_articles"] = fmt_int(row["finetune_n_articles"])
        row.update(
            {
                "n cells": len(sub),
                "evaluators": ", ".join(sorted(sub["evaluator"].astype(str).unique())),
                "recognition (mean of cells [95% CI])": _mean_ci(sub["rec_mean"]),
                "preference (mean of cells [95% CI])": _mean_ci(sub["pref_mean"]),
                # skipna=False: a cell without the value makes the mean "—", not the mean of the others.
                "position consistency (rec / pref)": f"{fmt(sub['pc_recognition'].mean(skipna=False))} / "
                                                     f"{fmt(sub['pc_preference'].mean(skipna=False))}",
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def problems_table(problems_df: pd.DataFrame, max_error_chars: int = 400) -> pd.DataFrame:
    """Failed / incomplete cells and warnings, with overrides and the (shortened) error message."""
    if problems_df.empty:
        return pd.DataFrame(columns=["cell", "status", "reason", "overrides", "error"])
    df = problems_df[["cell", "status", "reason", "overrides", "error"]].copy()
    df["error"] = df["error"].map(lambda e: _shorten(" ".join(str(e).split()), max_error_chars))
    return df


def _shorten(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def cells_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """The per-cell numbers for CSV / W&B (exclusions flattened to text)."""
    if cells.empty:
        return cells
    df = cells.copy()
    df["exclusions"] = df["exclusions"].map(
        lambda d: "; ".join(f"{k}={fmt_int(v)}" for k, v in sorted((d or {}).items())))
    if "finetune_hyperparameters" in df:
        df["finetune_hyperparameters"] = df["finetune_hyperparameters"].map(
            lambda d: "; ".join(f"{k}={v}" for k, v in sorted((d or {}).items())))
    return df.replace({np.nan: None})
