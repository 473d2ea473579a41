"""Self-preference net of a third party's view of quality: where outputs carry a third-party score (human
ratings, or a referee judge's), each judge's verdicts are regressed on it, and what its own outputs get beyond the
anchor is its self term (Spiliopoulou et al. 2025's design; Wataoka et al. 2024's bias given what humans prefer).

Per judge J, on the items where every output J judged has an anchor (an item with an anchor on some outputs only is
left out and counted: its comparison would rest on the outputs that happen to have one):

- individual (one rating per output): rating = α_J + β_J·anchor + κ_J·[author = own(J)]
  (+ φ_J·[same family as J, author ≠ own(J)] where families are given);
- pairwise (J's verdict on its own output against another's): verdict = κ_J + β_J·(anchor_own − anchor_other)
  (+ φ_J·[the other author of J's family]): κ_J is J's preference for its own output where the anchor rates the
  two alike.

OLS with the CR2 sandwich clustered by article and Bell–McCaffrey df (stats/clustered.ClusteredOLS). A term the
data cannot separate (no own output, no variation in the anchor, no output of J's family) has no number and says
why."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.regression import ALPHA
from ...stats.clustered import ClusteredOLS, too_few_clusters
from .observations import INDIVIDUAL, Group

PARTIAL_ANCHORS = "item(s) with an anchor on some outputs only left out"


def _complete_items(obs: pd.DataFrame, anchor_cols: list[str]) -> tuple[pd.DataFrame, int]:
    """The rows of the items (articles) whose every output has an anchor, and how many items were left out."""
    has = np.isfinite(obs[anchor_cols].to_numpy(float)).all(axis=1)
    full = pd.Series(has, index=obs.index).groupby(obs["article_id"]).all()
    keep = obs["article_id"].map(full).astype(bool)
    return obs[keep], int((~full).sum())


def _columns(sub: pd.DataFrame, g: Group, judge: str) -> tuple[np.ndarray, list[str]]:
    family = g.judge_family.get(judge)
    if g.setting == INDIVIDUAL:
        own = (sub["author"] == g.own_author[judge]).to_numpy(float)
        cols, names = [np.ones(len(sub)), sub["anchor"].to_numpy(float), own], ["α", "β", "self"]
        kin = (sub["family"].astype(object) == family).to_numpy(float) * (1 - own) if family else None
    else:
        diff = (sub["own_anchor"] - sub["other_anchor"]).to_numpy(float)
        cols, names = [np.ones(len(sub)), diff], ["self", "β"]
        kin = (sub["other_family"].astype(object) == family).to_numpy(float) if family else None
    if kin is not None and kin.any():
        cols.append(kin)
        names.append("family")
    return np.column_stack(cols), names


def _term_row(fit: ClusteredOLS | None, X: np.ndarray, names: list[str], term: str, why: str) -> dict[str, Any]:
    row = {"term": term, "estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p": math.nan, "note": why}
    if term not in names:
        row["note"] = ("no output of the judge's family among the others'" if term == "family"
                       else "no output of the judge's own among its ratings")
        return row
    c = np.zeros(len(names))
    c[names.index(term)] = 1.0
    if np.linalg.matrix_rank(np.vstack([X, c])) > np.linalg.matrix_rank(X):
        row["note"] = f"{term} term not separable from the others here (e.g. the anchor does not vary)"
        return row
    if fit is None:
        return row
    est = fit.contrast(c, ALPHA)
    row.update(estimate=est.estimate, ci_low=est.ci_low, ci_high=est.ci_high, p=est.p)
    return row


def anchored_rows(g: Group, scale: str) -> list[dict[str, Any]]:
    """Per judge with anchored outputs: its self term (and family term where families are given)."""
    obs = g.obs[scale]
    anchor_cols = ["anchor"] if g.setting == INDIVIDUAL else ["own_anchor", "other_anchor"]
    if obs.empty or not np.isfinite(obs[anchor_cols].to_numpy(float)).any():
        return []
    rows = []
    for judge in sorted(g.own_author):
        sub, left_out = _complete_items(obs[obs["judge"] == judge], anchor_cols)
        if sub.empty:
            continue
        X, names = _columns(sub, g, judge)
        why = too_few_clusters(sub["article_id"])
        why = f"{why}, the clusters being articles: no interval" if why else ""
        fit = None if why else ClusteredOLS(X, sub["y"].to_numpy(float), sub["article_id"].to_numpy(str), names)
        own = (sub["author"] == g.own_author[judge]) if g.setting == INDIVIDUAL else pd.Series(True, index=sub.index)
        base = {"judge": judge, "reference": "", "n_items": len(sub), "n_own": int(own.sum()),
                "n_articles": int(sub["article_id"].nunique()), "n_left_out": left_out}
        terms = ["self", "family"] if g.judge_family.get(judge) else ["self"]
        for term in terms:
            row = {**base, **_term_row(fit, X, names, term, why)}
            if left_out:
                row["note"] = "; ".join(n for n in (row["note"], f"{left_out} {PARTIAL_ANCHORS}") if n)
            rows.append(row)
    return rows
