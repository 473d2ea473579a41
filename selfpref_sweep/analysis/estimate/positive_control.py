"""The positive control read in the direction it was trained.

A positive control (config.POSITIVE_CONTROL_TASKS) is trained on the preference question with answers that are
not about authorship: prefer_longer calls the summary with more words the better one (pairwise prompt), and
score_longer gives a summary a higher 1-5 score the more words it has (individual prompt). Whether it moved this
judge's preference is a question about that direction, not about self-preference. Its change in self-preference
(fine-tuned − base on the same items) mixes two kinds of item: where the judge's own summary is the longer one
it should rise, where the other source's is, fall; over a set of items where each is longer about half the
time the two cancel, and a control that moved preference on every item reads as "did not move".

So each item's preference score is turned toward the trained direction before the Δ: the paper's score (P(own),
or own / (own + other) individually) becomes the score of the longer summary (s where own is longer, 1 − s where
the other is), the log-odds score its signed value (ℓ or −ℓ). Swapping own and other maps each score so, in
both formats. Items whose two summaries have the same word count have no trained direction and are left out,
and counted. Recognition is turned the same way (``drec_*``): a control that moved recognition toward the longer
summary as much as preference taught the judge to pick the longer summary whatever it is asked. The Δs are then pooled
per arm as every arm's are (arms.py: adapters pooled, training randomness in the interval where the arm has several;
Holm across a family's arms).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...reporting.grouping import key_frame
from ..sweep.load import arm_name
from .arms import ARM_COLUMNS, ARM_KEYS, StatedTrainingSD, arm_deltas
from .units import QUESTION_PREFIXES


@dataclass(frozen=True)
class TrainedDirection:
    """Which summary of a pair a positive control was trained to prefer: the one whose feature is larger."""

    toward: str  # in words: "the longer summary"
    own: str  # the item column of the own summary's feature
    other: str  # and of the other summary's


# Every positive control (config.POSITIVE_CONTROL_TASKS) has its direction here (tests/test_replicates.py checks).
TRAINED_TOWARD: Mapping[str, TrainedDirection] = {
    "prefer_longer": TrainedDirection("the longer summary", "own_words", "other_words"),
    "score_longer": TrainedDirection("the longer summary", "own_words", "other_words"),
}

TIES_COLUMN = "n_items_tied"  # the arm's fine-tuned items with no trained direction (equal features)


def toward_trained(items: pd.DataFrame, direction: TrainedDirection) -> tuple[pd.DataFrame, pd.Series]:
    """The items with their preference and recognition scores turned toward ``direction`` (module doc), and which
    items have no direction (a tie, or a summary text missing): their scores are NaN, so every paired comparison
    leaves them out."""
    own = items[direction.own].astype(float).to_numpy()
    other = items[direction.other].astype(float).to_numpy()
    sign = np.sign(own - other)  # NaN where a count is missing
    usable = np.isfinite(sign) & (sign != 0)
    out = items.copy()
    for q in QUESTION_PREFIXES:  # preference, the readout; recognition, to see whether it moved alike
        score = out[f"{q}_score"].astype(float).to_numpy()
        out[f"{q}_score"] = np.where(usable, np.where(sign > 0, score, 1.0 - score), np.nan)
        out[f"{q}_logodds"] = np.where(usable, sign * out[f"{q}_logodds"].astype(float).to_numpy(), np.nan)
    return out, pd.Series(~usable, index=items.index)


def positive_control_arms(items: pd.DataFrame, stated: StatedTrainingSD | None = None) -> pd.DataFrame:
    """One row per positive-control arm × dataset × setting × label: its Δ preference toward the trained
    direction (the ``dpref_*`` columns, as arms.arm_deltas writes them, ``stated`` as there), ``toward`` in
    words, and how many of the arm's fine-tuned items were left out for having no direction."""
    empty = pd.DataFrame(columns=[*ARM_COLUMNS, "toward", TIES_COLUMN])
    if items.empty or "finetune_task" not in items:
        return empty
    task = items["finetune_task"].astype(str)
    rows = []
    for name, direction in TRAINED_TOWARD.items():
        if not (task == name).any() or direction.own not in items:
            continue
        turned, tied = toward_trained(items[~items["is_finetuned"].astype(bool) | (task == name)], direction)
        arms = arm_deltas(turned, stated)
        arms = arms[arms["finetune_task"].astype(str) == name]
        if arms.empty:
            continue
        tuned = key_frame(turned[turned["is_finetuned"].astype(bool)], ARM_KEYS[:-1])
        tuned = tuned.assign(arm=tuned["evaluator_variant"].astype(str).map(arm_name), tied=tied[tuned.index])
        ties = tuned.groupby(list(ARM_KEYS))["tied"].sum()
        rows.append(arms.assign(toward=direction.toward, **{TIES_COLUMN: [
            int(ties.get(tuple(row[k] for k in ARM_KEYS), 0)) for _, row in arms.iterrows()]}))
    return pd.concat(rows, ignore_index=True) if rows else empty
