"""Do the two questions collapse into one? After some fine-tunes a judge answers "which did you write?" and "which
is better?" alike: the paper's readability and vowel-count GPT-3.5 fine-tunes give the same top answer to both, in
both orders, on about three items in four, against fewer than half for the base model. Such an arm's recognition
and preference are one readout, and a line of preference on recognition through it says nothing about whether
recognition drives preference.

Per fine-tuned paper unit in the pairwise setting, on its items kept in both questions whose top answers are known
in both orders:

- ``same_share``: the share of items whose two questions get the same top answer in both orders (0.25 if the two
  questions' answers were independent coin flips), with its 95% interval clustered by article (on the logit
  scale);
- the base evaluator's share on the same (source, article) items, and the paired difference, fine-tuned minus
  base, with its clustered interval and p;
- ``corr`` and ``base_corr``: the per-item Pearson correlation of the two questions' paper-scale scores
  (descriptive: no interval, as items of one article are not independent).

The reading "collapsed" needs two tests: the share's interval lies above 0.5 (the two questions agree on most
items), and the paired difference's interval lies above 0 (more than the base model's agreement); an arm whose base
model's share is above 0.5 too collapses "as its base model's". "Apart" needs the share's interval below 0.5. A base
model is read on its share alone. Otherwise "not shown either way"."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.grouping import UNIT_KEYS, kept_items, key_frame
from ...stats.clustered import article_mean_ci, cell_means_t, too_few_clusters

COLUMNS = [*UNIT_KEYS, "evaluator", "finetune_task", "n_items", "n_articles", "same_share", "same_ci_low",
           "same_ci_high", "base_same_share", "base_ci_low", "base_ci_high", "delta", "delta_ci_low", "delta_ci_high",
           "delta_p", "corr", "base_corr", "reading", "note"]
COLLAPSED = "collapsed: its recognition and preference are one readout"
NOT_SHOWN = "not shown either way"
APART = "apart: the two questions get different answers on most items"
AS_BASE = "collapsed, as its base model's two questions already are"
_CONFIDENCE = 0.95
_JOIN = ["source", "article_id"]


def empty_frame() -> pd.DataFrame:
    return pd.DataFrame(columns=COLUMNS)


def _answered(items: pd.DataFrame) -> pd.DataFrame:
    kept, _ = kept_items(items[items["setting"].astype(str) == "pairwise"])
    kept = kept[kept["rec_answers"].notna() & kept["pref_answers"].notna()]
    return key_frame(kept, UNIT_KEYS).assign(same=lambda f: (f["rec_answers"] == f["pref_answers"]).astype(float))


def _corr(sub: pd.DataFrame) -> float:
    x, y = sub["rec_score"].to_numpy(float), sub["pref_score"].to_numpy(float)
    return float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and x.std() > 0 and y.std() > 0 else math.nan


def _share(sub: pd.DataFrame) -> tuple[float, float, float]:
    if too_few_clusters(sub["article_id"]):
        return float(sub["same"].mean()), math.nan, math.nan
    return article_mean_ci(sub["same"].to_numpy(float), sub["article_id"].to_numpy(str), _CONFIDENCE, bounded=True)


def _own_row(sub: pd.DataFrame, task: str, note: str) -> dict[str, Any]:
    """A unit's own figures: its coordinates, counts, share with its interval, and correlation."""
    first = sub.iloc[0]
    row: dict[str, Any] = {**{k: first[k] for k in UNIT_KEYS}, "evaluator": first["evaluator"], "finetune_task": task,
                           "n_items": len(sub), "n_articles": int(sub["article_id"].nunique()), "corr": _corr(sub),
                           "note": note}
    row["same_share"], row["same_ci_low"], row["same_ci_high"] = _share(sub)
    return row


def _base_row(sub: pd.DataFrame) -> dict[str, Any]:
    """A base evaluator's own row, read on the share's test alone."""
    row = _own_row(sub, "none", "the base model")
    row["reading"] = _reading(row)
    return row


def _unit_row(sub: pd.DataFrame, base: pd.DataFrame) -> dict[str, Any]:
    first = sub.iloc[0]
    row = _own_row(sub, first["finetune_task"], "")
    ref = base[(base["evaluator_variant"] == str(first["evaluator"])) & (base["dataset"] == first["dataset"])
               & (base["label"] == first["label"])]
    both = sub.merge(ref[[*_JOIN, "same", "rec_score", "pref_score"]], on=_JOIN, suffixes=("", "_base"))
    base_scores = both[["rec_score_base", "pref_score_base"]].set_axis(["rec_score", "pref_score"], axis=1)
    row["base_corr"] = _corr(base_scores) if len(both) else math.nan
    if both.empty:
        row["note"] = "no items in common with the base model: no paired comparison"
        row.update({k: math.nan for k in ("base_same_share", "base_ci_low", "base_ci_high", "delta", "delta_ci_low",
                                          "delta_ci_high", "delta_p")})
    else:
        base_side = both.assign(same=both["same_base"])
        row["base_same_share"], row["base_ci_low"], row["base_ci_high"] = _share(base_side)
        d = (both["same"] - both["same_base"]).to_numpy(float)
        est, low, high, p = cell_means_t(d, np.zeros(d.size, dtype=int), both["article_id"].to_numpy(str),
                                         np.ones(1), _CONFIDENCE)
        row.update(delta=est, delta_ci_low=low, delta_ci_high=high, delta_p=p)
    row["reading"] = _reading(row)
    return row


def _reading(row: dict[str, Any]) -> str:
    """From the tests only: the share's interval above 0.5; for a fine-tuned arm also the paired difference's above 0
    (where it is not, but its base model's share is above 0.5 too, the arm collapses as its base does)."""
    if row["same_ci_high"] < 0.5:
        return APART
    if not row["same_ci_low"] > 0.5:
        return NOT_SHOWN
    if str(row["finetune_task"]) in ("none", "nan") or row.get("delta_ci_low", math.nan) > 0:
        return COLLAPSED
    return AS_BASE if row.get("base_ci_low", math.nan) > 0.5 else NOT_SHOWN


def question_collapse(items: pd.DataFrame) -> pd.DataFrame:
    """One row per fine-tuned pairwise paper unit whose answers are known (COLUMNS)."""
    if items.empty or "rec_answers" not in items or not items["is_finetuned"].astype(bool).any():
        return empty_frame()
    answered = _answered(items)
    tuned = answered[answered["is_finetuned"].astype(bool)]
    base = answered[~answered["is_finetuned"].astype(bool)]
    with_tunes = set(tuned["evaluator"].astype(str))
    rows = [_base_row(sub) for _, sub in base.groupby(list(UNIT_KEYS), sort=True)
            if str(sub["evaluator_variant"].iloc[0]) in with_tunes]
    rows += [_unit_row(sub, base) for _, sub in tuned.groupby(list(UNIT_KEYS), sort=True)]
    return pd.DataFrame(rows, columns=COLUMNS) if rows else empty_frame()
