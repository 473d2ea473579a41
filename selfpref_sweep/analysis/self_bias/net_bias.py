"""Self-preference net of quality, every estimator the design allows, in one frame (``self_bias.csv``): one row per
(setting, label, dataset, question, judge, estimator, scale, term, reference).

- ``cross_judge`` (cross_judge.py): two or more judges over a shared set of authors; term ``self``; reference
  ``pooled``, a common reference author, or ``judges only``; with the additive model's fit test.
- ``human_anchored`` (anchored.py): outputs with a third-party score; terms ``self`` and ``family``.
- ``verifiable`` (verifiable.py): outputs marked correct or not; terms ``legitimate``, ``harmful`` and
  ``harmful_excess`` (reference: the judge compared with), preference only.

Numbers on each scale: ``estimate`` is the term as fitted, except that a pairwise self term on the paper's scale is
reported as 0.5 + κ, the share of verdicts for its own output between two outputs of equal quality; ``null`` is the
value of no bias. ``p_holm``: Holm across the judges of one (group, estimator, scale, term, reference). The verdict
word comes from ``p_holm`` (and, for the cross-judge pooled row, only where the fit test does not reject);
per-reference rows carry none: they are what the pooled row is read against."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.regression import ALPHA
from ..estimate.paired import holm
from . import anchored, cross_judge, verifiable
from .observations import GROUP_KEYS, INDIVIDUAL, SELF_BIAS_SCALES, Group, groups

CROSS_JUDGE, HUMAN_ANCHORED, VERIFIABLE = "cross_judge", "human_anchored", "verifiable"
COLUMNS = [*GROUP_KEYS[:3], "judge", "estimator", "question", "scale", "term", "reference", "estimate", "ci_low",
           "ci_high", "p", "p_holm", "null", "n_items", "n_own", "n_articles", "fit_F", "fit_df1", "fit_df2", "fit_p",
           "fit_note", "verdict", "note"]
# Probabilities are not additive: with qualities apart, the additive fit's κ on the paper's scale is not 0 for a judge
# with no self-preference, and its test fired far above 5% in the calibration study (docs/coverage.md). Its number
# is a description; the word comes from the log-odds scale only.
PAPER_SCALE_NO_WORD = "no verdict on the paper's scale (not additive: read the log-odds row)"
# A term's verdict words: (above no bias, below it).
_WORDS = {"self": ("favours its own", "disfavours its own"), "family": ("favours its family", "disfavours its family"),
          "harmful_excess": ("picks its own wrong output more often than the other judge does",
                             "picks its own wrong output less often than the other judge does")}
_FAMILY_KEYS = [*GROUP_KEYS, "estimator", "scale", "term", "reference"]


def empty_frame() -> pd.DataFrame:
    return pd.DataFrame(columns=COLUMNS)


def _shifted(row: dict[str, Any], setting: str, scale: str) -> dict[str, Any]:
    """A pairwise self term on the paper's scale as 0.5 + κ; every row's no-bias value in ``null``."""
    shift = 0.5 if (scale == "paper" and setting != INDIVIDUAL and row["term"] == "self") else 0.0
    if row["term"] in (verifiable.LEGITIMATE, verifiable.HARMFUL):
        row["null"] = 0.5 if scale == "paper" else 0.0
        return row
    for k in ("estimate", "ci_low", "ci_high"):
        row[k] = row[k] + shift
    row["null"] = shift
    return row


def _group_rows(g: Group) -> list[dict[str, Any]]:
    rows = []
    for scale in SELF_BIAS_SCALES:
        made = [(CROSS_JUDGE, r) for r in cross_judge.cross_judge_rows(g, scale)]
        made += [(HUMAN_ANCHORED, r) for r in anchored.anchored_rows(g, scale)]
        if g.key["question"] == "preference":
            made += [(VERIFIABLE, r) for r in verifiable.verifiable_rows(g.items, scale)]
        for estimator, r in made:
            if estimator != VERIFIABLE and r["n_own"] == 0:
                # A judge that rated no output of its own: its ratings count for the others, it has no self row.
                g.notes.append(f"judge {r['judge']} rated no output of its own: its ratings count for the other "
                               f"judges' fit, and it has no self row")
                continue
            rows.append(_shifted({**g.key, **r, "estimator": estimator, "scale": scale}, g.setting, scale))
    g.notes[:] = list(dict.fromkeys(g.notes))
    return rows


def verdict(row: pd.Series) -> str:
    """The row's word, from the test the report names (p_holm; the fit test for the pooled cross-judge row)."""
    if row["estimator"] == CROSS_JUDGE and row["reference"] != cross_judge.POOLED_REFERENCE:
        return ""  # a per-reference reading: what the pooled row is read against
    if row["term"] in (verifiable.LEGITIMATE, verifiable.HARMFUL):
        return ""  # a rate; its yardstick is the harmful_excess row
    if row["estimator"] == CROSS_JUDGE and _finite(row["fit_p"]) and row["fit_p"] < ALPHA:
        return f"no single verdict: the additive model does not fit (fit test p {_p(row['fit_p'])}); read per reference"
    if row["estimator"] == CROSS_JUDGE and row["scale"] == "paper" and _finite(row["p_holm"]):
        return PAPER_SCALE_NO_WORD
    p = row["p_holm"]
    if not _finite(p):
        return ""
    if p >= ALPHA:
        return "not shown to differ from no bias"
    words = _WORDS.get(row["term"], ("differs", "differs"))
    return f"{words[0] if row['estimate'] > row['null'] else words[1]} (Holm p {_p(p)})"


def _finite(x: Any) -> bool:
    return isinstance(x, float | int) and math.isfinite(float(x))


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _holm(frame: pd.DataFrame) -> pd.Series:
    out = pd.Series(np.nan, index=frame.index)
    for _, sub in frame.groupby(_FAMILY_KEYS, sort=False, dropna=False):
        ok = sub["p"].map(_finite)
        if ok.any():
            out.loc[sub.index[ok]] = holm(sub.loc[ok, "p"].to_numpy(float))
    return out


def self_bias_frame(items: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Every estimator's rows for every group of the sweep, and the groups' notes (left out, merged)."""
    rows, notes = [], []
    for g in groups(items):
        rows += _group_rows(g)
        notes += [f"{g.key['dataset']} / {g.key['question']}: {n}" for n in g.notes]
    if not rows:
        return empty_frame(), notes
    frame = pd.DataFrame(rows).reindex(columns=COLUMNS)
    frame["p_holm"] = _holm(frame)
    frame["verdict"] = frame.apply(verdict, axis=1)
    frame["note"] = frame["note"].fillna("")
    frame["fit_note"] = frame["fit_note"].fillna("")
    return frame, list(dict.fromkeys(notes))


def applies(items: pd.DataFrame) -> bool:
    """Whether some group has two or more base judges, or anchored or checkable outputs: a design these estimators
    can read (one judge alone gets its rows, each saying why κ is not identified)."""
    if items.empty or "own_author" not in items:
        return False
    base = items[~items["is_finetuned"].astype(bool)]
    several = base.groupby(["setting", "label", "dataset"])["evaluator_variant"].nunique().max() >= 2 \
        if not base.empty else False
    facts = any(c in base and base[c].notna().any() for c in ("own_anchor", "other_anchor"))
    checkable = "own_correct" in base and base["own_correct"].map(lambda v: isinstance(v, bool)).any()
    return bool(several or facts or checkable)
