"""Replicated fine-tunes: an arm's adapters pooled, with training randomness in the interval.

An arm is one fine-tune recipe (evaluator, task, fine-tune dataset, N, hyperparameters); its adapters are the
recipe trained with different seeds (``finetune_task.seed=0,1,2``). One adapter's Δ (fine-tuned − base, paired.py)
has an interval over articles: it describes that adapter. Training the recipe again gives another adapter
with another Δ, and the project's own runs show how far apart two can be (vowel N = 10: +0.011 in one run,
−0.113 in another). What a reader wants to know is what the recipe does, so the arm's Δ is the mean of its
adapters' Δs and its variance has two parts:

- the articles': the mean's own t interval over articles (every adapter judged the same articles, so their Δs
  move together; CR2 clustered by article, Bell–McCaffrey df, as every Δ is);
- training's: τ²/k, τ² the between-adapter variance of Δ beyond what the articles explain, estimated by
  moments from the adapters' spread: τ̂² = max(0, s²_adapters − mean article variance of an adapter's Δ around
  the arm's mean), on k − 1 degrees of freedom.

The interval is the mean ± t × √(sum), t on the Welch–Satterthwaite combination of the two parts' df. An arm
with one adapter cannot estimate τ²: its row keeps the article interval, says that training randomness is
not covered, and speaks for that training run only; unless the user states a training SD (``analysis.training_sd``
with its source, StatedTrainingSD): then τ² = SD² enters as known (infinite df) and the row speaks for the
recipe, at the stated SD. The SD is stated on the log-odds scale, where an adapter's deviation shifts every
item alike; on the paper scale (a probability) it is scaled by the slope of p in log-odds, mean p(1 − p) over the
arm's items, the larger of the fine-tuned judge's and the base judge's (at the fine-tuned judge's alone, an
adapter far out on the flat of the curve gave too narrow an interval: docs/results/stated_training_sd.md).
Replicated arms estimate τ² from their adapters and ignore the stated SD.
p-values get Holm's adjustment across the arms of a family, as the per-adapter Δs do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.grouping import SCALES
from ...stats.replicates import pooled_delta
from ..sweep.load import arm_name
from .paired import _pairs, with_holm
from .units import QUESTION_PREFIXES

ARM_KEYS = ("setting", "label", "dataset", "arm")
_CARRIED = ("evaluator", "finetune_task", "finetune_dataset", "finetune_n_articles", "transfer")
ARM_COLUMNS = [*ARM_KEYS, *_CARRIED, "adapters", "n_articles", "speaks_for", "note"] + [
    f"d{q}_{s}_{k}" for s in SCALES for q in QUESTION_PREFIXES
    for k in ("mean", "ci_low", "ci_high", "p", "p_holm", "training_sd", "df")]
ONE_ADAPTER = "one adapter: the CI covers the articles, not training randomness"


@dataclass(frozen=True)
class StatedTrainingSD:
    """A training SD the user states for one-adapter arms: the SD of an adapter's Δ (log-odds) about its
    recipe's, from ``source`` (replicates run elsewhere, a published seed spread). Printed with every row it
    enters."""

    logodds: float
    source: str

    def __post_init__(self) -> None:
        if not (isinstance(self.logodds, (int, float)) and math.isfinite(self.logodds) and self.logodds >= 0):
            raise ValueError(f"analysis.training_sd must be a finite number >= 0 (log-odds), not {self.logodds!r}")
        if not str(self.source or "").strip():
            raise ValueError("analysis.training_sd needs analysis.training_sd_source: where the SD comes from "
                             "(e.g. '3 seeds of this recipe, 2026-11 sweep'); a verdict about the recipe rests on it")

    @classmethod
    def of(cls, sd: float | None, source: str | None) -> StatedTrainingSD | None:
        """None where no SD is stated; a source without an SD is an error (it would be silently unused)."""
        if sd is None:
            if str(source or "").strip():
                raise ValueError("analysis.training_sd_source is set but analysis.training_sd is not")
            return None
        return cls(float(sd), str(source))

    def text(self) -> str:
        return f"stated training SD {self.logodds:g} log-odds ({self.source})"


RECIPE_AT_STATED_SD = "the recipe (one adapter; "  # how a row on a stated training SD starts its "speaks for"


def speaks_for(adapters: int, stated: StatedTrainingSD | None) -> str:
    """Whose effect an arm's row estimates: the recipe (replicates, or a stated SD) or the one training run."""
    if adapters >= 2:
        return f"the recipe ({adapters} adapters; training SD from their spread)"
    if stated is not None:
        return f"{RECIPE_AT_STATED_SD}{stated.text()})"
    return "this training run only (one adapter, no stated training SD)"


def stated_variance(stated: StatedTrainingSD | None, adapters: int, scale: str, frame: pd.DataFrame) -> float | None:
    """τ² on ``scale`` for a one-adapter arm with a stated SD (module doc); None where none applies."""
    if stated is None or adapters != 1 or not len(frame):
        return None
    if scale == "logodds":
        return stated.logodds ** 2
    slopes = [float(np.mean(p * (1 - p))) for p in (np.clip(frame[c].to_numpy(float), 0.0, 1.0)
                                                    for c in ("tuned", "base"))]
    return (max(slopes) * stated.logodds) ** 2


def arm_deltas(items: pd.DataFrame, stated: StatedTrainingSD | None = None) -> pd.DataFrame:
    """One row per arm × dataset × setting × label: its adapters' Δs pooled (module doc), per question and
    scale, with Holm's adjustment across a family's arms; ``stated``: the training SD for one-adapter arms."""
    if items.empty or not items["is_finetuned"].astype(bool).any():
        return pd.DataFrame(columns=ARM_COLUMNS)
    arms: dict[tuple, list] = {}
    for row, frames in _pairs(items):
        if frames is None or row["n_items"] == 0:
            continue
        key = (*(row[k] for k in ARM_KEYS[:-1]), arm_name(str(row["evaluator_variant"])))
        arms.setdefault(key, []).append((row, frames))
    rows = []
    for key, adapters in arms.items():
        first = adapters[0][0]
        row: dict[str, Any] = {**dict(zip(ARM_KEYS, key, strict=True)), **{c: first.get(c) for c in _CARRIED},
                               "adapters": len(adapters),
                               "n_articles": max(int(r["n_articles"]) for r, _ in adapters),
                               "speaks_for": speaks_for(len(adapters), stated),
                               "note": ONE_ADAPTER if len(adapters) == 1 and stated is None else ""}
        short = []
        for scale in SCALES:
            for q in QUESTION_PREFIXES:
                frames = [f[(q, scale)] for _, f in adapters]
                fields = pooled_delta(frames, stated_variance(stated, len(adapters), scale, frames[0]))
                row.update({f"d{q}_{scale}_{k}": v for k, v in fields.items()})
                present = sum(1 for f in frames if len(f))
                if 0 < present < len(frames):  # pooled over fewer adapters than the arm has: say so
                    short.append(f"Δ{q} {scale} from {present} of {len(frames)} adapters")
        row["note"] = "; ".join([n for n in (row["note"], *short) if n])
        rows.append(row)
    out = with_holm(pd.DataFrame(rows, columns=ARM_COLUMNS))
    return out.sort_values([*ARM_KEYS[:-1], "finetune_task", "finetune_n_articles", "arm"],
                           kind="stable").reset_index(drop=True)
