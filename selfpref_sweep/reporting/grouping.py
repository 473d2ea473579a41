"""How the frames are grouped, in words both the analysis and the measurements' report sides use: the paper's
unit (its keys), the two scales, the levels the fits are made at, and the setting × label conditions nothing is
pooled across (condition_groups); the items kept in both questions, and a unit's cells that lack a field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

# The unit's coordinates; setting and label come first because nothing is ever pooled across them.
UNIT_KEYS: tuple[str, ...] = ("setting", "label", "dataset", "evaluator_variant")
# The two scales: the paper's (the headline) and the position-debiased log-odds score.
SCALES: dict[str, str] = {"paper": "score", "logodds": "logodds"}

# Nothing is pooled across settings or label conditions: every grouping starts with both.
BY_CONDITION = ("setting", "label")
GROUPINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("setting × label", BY_CONDITION),
    ("setting × label × dataset", (*BY_CONDITION, "dataset")),
)

# The levels the fits are made at, as the tables name them.
LEVEL_UNIT, LEVEL_SOURCE, LEVEL_ITEM = "paper unit", "source", "item"


def kept_items(items: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """The items scored in both questions, and per cell how many were left out (excluded in either)."""
    if items.empty:
        return items.copy(), pd.Series(dtype=int)
    both = (
        ~items["rec_excluded"].astype(bool) & ~items["pref_excluded"].astype(bool)
        & items["rec_score"].notna() & items["pref_score"].notna()
    )
    dropped = (~both).groupby(items["cell_id"]).sum().astype(int)
    return items[both].copy(), dropped


def key_frame(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    # A null coordinate is its own group ("null"), never dropped by groupby.
    out = df.copy()
    out[list(keys)] = out[list(keys)].astype(object).where(out[list(keys)].notna(), "null").astype(str)
    return out


def missing_in(all_sub: pd.DataFrame, has_value: pd.Series) -> list[str]:
    """The cells of ``all_sub`` (all items of one unit) with no row where ``has_value`` holds, as
    "source=X (cell Y)"; [] when every cell has one, or when none has (a field the sweep never recorded, as the
    log-odds of an older sweep, is absent, not incomplete)."""
    cells = all_sub.drop_duplicates("cell_id")
    present = set(all_sub.loc[has_value.reindex(all_sub.index, fill_value=False), "cell_id"])
    if not present:
        return []
    return [f"source={c.source} (cell {c.cell_id})" for c in cells.itertuples() if c.cell_id not in present]


def incomplete_note(missing: dict[str, list[str]]) -> tuple[str, str]:
    """(``incomplete``, ``incomplete_fields``) of a row: "logodds: missing in source=X (cell Y)" per field
    (joined by "; "), and the fields' names (joined by ", "); both "" when nothing is missing."""
    fields = [f for f, where in missing.items() if where]
    return "; ".join(f"{f}: missing in {', '.join(missing[f])}" for f in fields), ", ".join(fields)

def _label(key: Any) -> str:
    key = key if isinstance(key, tuple) else (key,)
    return " / ".join("null" if k is None or k != k else str(k) for k in key)


# Per base evaluator, where several base models have fine-tunes in one condition (the paper's GPT-3.5 and Llama
# fine-tunes): their lines are fitted apart too, as the paper fits them, beside the condition's pooled fit.
BY_EVALUATOR = "setting × label × evaluator"


def _evaluator_groups(cond: Any, sub: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    if "evaluator" not in sub or "finetune_task" not in sub:
        return []
    tuned = sub[sub["finetune_task"].notna() & (sub["finetune_task"].astype(str) != "none")]
    bases = sorted(tuned["evaluator"].astype(str).unique())
    if len(bases) < 2:
        return []
    return [(BY_EVALUATOR, _label((*cond, e)), sub[sub["evaluator"].astype(str) == e]) for e in bases]


def condition_groups(df: pd.DataFrame, within: str = "dataset") -> list[tuple[str, str, pd.DataFrame]]:
    """(grouping name, group label, rows): each setting × label condition, then within it each value of
    ``within`` (dataset, or transfer: in-domain / cross-dataset), only where there are several (one would
    repeat the condition's group), then each base evaluator where several have fine-tunes (BY_EVALUATOR)."""
    if df.empty:
        return []
    df = key_frame(df, [*BY_CONDITION, within])
    out = []
    for cond, sub in df.groupby(list(BY_CONDITION), sort=True):
        out.append((GROUPINGS[0][0], _label(cond), sub))
        values = sorted(v for v in sub[within].unique() if not (within == "transfer" and v == "none"))
        if len(values) > 1:
            out += [(f"setting × label × {within}", _label((*cond, v)), sub[sub[within] == v]) for v in values]
        out += _evaluator_groups(cond, sub)
    return out
