"""Fine-tuned evaluators against their own base model, on the same items.

The paper compares a fine-tuned model's recognition and preference with its base model's. When both judged
the same (article, source) items, the difference can be taken item by item: what the fine-tune changed,
with the articles' own difficulty and the source's summaries held fixed. That is a much tighter comparison
than two unit means with their separate CIs, and it is what a dose-response (recognition at several N,
controls at one) needs.

Per fine-tuned paper unit (evaluator variant × dataset × setting × label) the base unit is the same evaluator,
not fine-tuned, on the same dataset, setting and label. Only items kept in both questions by both models
enter; per source the mean of the item differences, then the mean over sources (as the paper unit averages
sources); the 95% CI from the same article-clustered bootstrap as the paper units. A fine-tune evaluated
in-domain starts after its training articles, so it shares items with the base model only when the
evaluation articles were placed past every fine-tune's training articles (`dataset.offset`); without shared
items the row says so instead of comparing different articles.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .units import QUESTION_PREFIXES, SCALES, UNIT_KEYS, kept_items, key_frame, unit_mean_ci

_JOIN = ("source", "article_id")
_GROUP = ("setting", "label", "dataset")
_CARRIED = ("evaluator", "finetune_task", "finetune_dataset", "finetune_n_articles", "transfer")
COLUMNS = [*UNIT_KEYS, *_CARRIED, "base_variant", "sources", "n_articles", "n_items", "note"] + [
    f"d{q}_{s}_{k}" for s in SCALES for q in QUESTION_PREFIXES for k in ("mean", "ci_low", "ci_high")]


def finetune_vs_base(items: pd.DataFrame, *, n_resamples: int = 2000, confidence: float = 0.95,
                     seed: int = 0) -> pd.DataFrame:
    """One row per fine-tuned paper unit: fine-tuned minus base on the items both judged (columns
    ``d{rec,pref}_{paper,logodds}_{mean,ci_low,ci_high}``), or a note on why there is no comparison."""
    if items.empty or not items["is_finetuned"].astype(bool).any():
        return pd.DataFrame(columns=COLUMNS)
    kept, _ = kept_items(items)
    kept = key_frame(kept, UNIT_KEYS)
    tuned = kept[kept["is_finetuned"].astype(bool)]
    base = kept[~kept["is_finetuned"].astype(bool)]
    # The base model's variant name is its evaluator's (no fine-tune, own summaries generated).
    base = base[base["evaluator_variant"] == base["evaluator"].astype(str)]
    values = [f"{q}_{col}" for col in SCALES.values() for q in QUESTION_PREFIXES]
    rows: list[dict[str, Any]] = []
    for key, sub in tuned.groupby(list(UNIT_KEYS), sort=True):
        first = sub.iloc[0]
        row: dict[str, Any] = {**dict(zip(UNIT_KEYS, key)), **{k: first[k] for k in _CARRIED}}
        row["base_variant"] = str(first["evaluator"])
        ref = base[(base["evaluator"] == first["evaluator"])
                   & np.logical_and.reduce([base[k] == first[k] for k in _GROUP])]
        row["note"] = ""
        if ref.empty:
            rows.append({**row, "sources": "", "n_articles": 0, "n_items": 0,
                         "note": f"no base-model cells of {first['evaluator']} on this dataset, setting and label"})
            continue
        # One base value per (source, article); duplicates (pooled sweeps) are averaged first.
        ref_means = ref.groupby(list(_JOIN))[values].mean()
        both = sub.join(ref_means, on=list(_JOIN), how="inner", rsuffix="_base")
        row["sources"] = ", ".join(sorted(both["source"].astype(str).unique()))
        row["n_articles"] = int(both["article_id"].nunique())
        row["n_items"] = int(len(both))
        if both.empty:
            row["note"] = ("no items in common with the base model (different evaluation articles: set "
                           "dataset.offset past every fine-tune's training articles to pair them)")
        for scale, col in SCALES.items():
            for q in QUESTION_PREFIXES:
                name = f"d{q}_{scale}"
                diff = both[f"{q}_{col}"].astype(float) - both[f"{q}_{col}_base"].astype(float)
                frame = pd.DataFrame({"source": both["source"], "article_id": both["article_id"], "v": diff})
                frame = frame[np.isfinite(frame["v"])]
                row[f"{name}_mean"] = (float(frame.groupby("source")["v"].mean().mean()) if len(frame)
                                       else math.nan)
                row[f"{name}_ci_low"], row[f"{name}_ci_high"] = unit_mean_ci(
                    frame, "v", n_resamples=n_resamples, confidence=confidence, seed=seed)
        rows.append(row)
    out = pd.DataFrame(rows, columns=COLUMNS)
    # Readable order: per condition, the recognition arms by N (a dose-response reads down the rows), then each
    # control task's.
    out["_n"] = pd.to_numeric(out["finetune_n_articles"], errors="coerce")
    out["_control"] = out["finetune_task"] != "recognition"
    out = out.sort_values([*_GROUP, "transfer", "_control", "finetune_task", "_n", "evaluator_variant"],
                          kind="stable")
    return out.drop(columns=["_n", "_control"]).reset_index(drop=True)
