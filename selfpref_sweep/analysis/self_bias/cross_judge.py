"""Self-preference net of quality with no third party: two or more judges judging a shared set of authors' outputs
on the same articles (the paper's three judges, each against the others' and two common references'; or
``-m evaluator=a,b`` with each other's summaries among the sources).

The model, per (setting, label, dataset, question) and scale, on the cell means ȳ_c (one cell per judge × other
author; individual: per judge × author):

- pairwise: ȳ(J; own vs X) = q[own(J)] − q[X] + κ_J  (each author's quality q common to all judges; the verdict
  averages both orders, so a position bias cancels);
- individual: ȳ(J; A) = α_J + q[A] + κ_J·[A = own(J)]  (α_J: the judge's leniency).

κ_J, the judge's self term, is what its verdicts on its own outputs hold beyond the quality every judge sees in
them. Least squares on the cell means (each cell weighted alike, as the paper unit weights its sources), so every
estimate is a fixed contrast w of the cell means; its interval is the paper units' machinery (stats/clustered: the
CR2 sandwich clustered by article with Bell–McCaffrey df; CR1 with G − 1 df past 200 articles). κ_J is reported
only where it is estimable (w exists); else the row says why and carries no number.

Per reference: the same fit on the judges' own outputs plus one other author R (a "common reference": human,
Claude), and on the judges' outputs alone where that identifies κ. Where the additive model holds, every reference
estimates the same κ_J; the fit test asks whether the cell means lie on the model at all (over-identification: the
m = cells − rank contrasts of the cell means the model says are 0, tested jointly with a clustered Wald statistic
read as Hotelling's F(m, G − m)). A rejection means the references disagree: the report then prints the
per-reference rows and no single verdict. A just-identified design (m = 0) cannot test its model, and says so."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import linalg, stats

from ...reporting.regression import ALPHA
from ...stats.clustered import ClusteredOLS, too_few_clusters
from .observations import INDIVIDUAL, Group

POOLED_REFERENCE, JUDGES_ONLY = "pooled", "judges only"
ONE_JUDGE = ("one judge: its self term and its own outputs' quality are one number (κ not identified); a second "
             "judge judging the same authors identifies it")
NOT_IDENTIFIED = ("κ not identified from these cells: it needs a common reference (an author every judge judged) "
                  "or a third judge")


@dataclass
class Design:
    """The cells of one fit: their keys, the model's design matrix over them, and each observation's cell."""

    cells: list[tuple[str, str]]
    D: np.ndarray
    params: list[str]
    codes: np.ndarray
    y: np.ndarray
    articles: np.ndarray
    judges: list[str]


def _author_col(setting: str) -> str:
    return "author" if setting == INDIVIDUAL else "other_author"


def design(obs: pd.DataFrame, own: dict[str, str], setting: str, authors: set[str] | None = None) -> Design | None:
    """The design of the observations whose (other) author is in ``authors`` (None: all); None when empty."""
    col = _author_col(setting)
    if authors is not None:
        obs = obs[obs[col].isin(authors)]
    if obs.empty:
        return None
    judges = sorted(obs["judge"].unique())
    all_authors = sorted(set(obs[col]) | {own[j] for j in judges})
    params = [f"q[{a}]" for a in all_authors] + [f"κ[{j}]" for j in judges]
    if setting == INDIVIDUAL:
        params += [f"α[{j}]" for j in judges]
    index = {p: k for k, p in enumerate(params)}
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(obs[["judge", col]]))
    cells = [tuple(c) for c in uniques]
    D = np.zeros((len(cells), len(params)))
    for r, (judge, author) in enumerate(cells):
        if setting == INDIVIDUAL:
            D[r, index[f"α[{judge}]"]] = 1.0
            D[r, index[f"q[{author}]"]] += 1.0
            D[r, index[f"κ[{judge}]"]] = float(author == own[judge])
        else:
            D[r, index[f"q[{own[judge]}]"]] += 1.0
            D[r, index[f"q[{author}]"]] -= 1.0
            D[r, index[f"κ[{judge}]"]] = 1.0
    return Design(cells, D, params, np.asarray(codes), obs["y"].to_numpy(float), obs["article_id"].to_numpy(str),
                  judges)


def contrast_weights(d: Design, param: str) -> np.ndarray | None:
    """The cell weights w with κ̂ = w·ȳ, or None where the parameter is not estimable from these cells."""
    e = np.zeros(len(d.params))
    e[d.params.index(param)] = 1.0
    if np.linalg.matrix_rank(np.vstack([d.D, e])) > np.linalg.matrix_rank(d.D):
        return None
    return e @ np.linalg.pinv(d.D)


def _cell_fit(d: Design) -> ClusteredOLS:
    return ClusteredOLS(np.eye(len(d.cells))[d.codes], d.y, d.articles)


def fit_test(d: Design) -> dict[str, Any]:
    """The additive model's over-identification test: (fit_F, fit_df1, fit_df2, fit_p, fit_note)."""
    m = len(d.cells) - int(np.linalg.matrix_rank(d.D))
    out: dict[str, Any] = {"fit_F": math.nan, "fit_df1": m, "fit_df2": math.nan, "fit_p": math.nan, "fit_note": ""}
    if m == 0:
        out["fit_note"] = "just identified: one reading of κ per judge, so the additive model cannot be tested here"
        return out
    n_art = len(set(d.articles))
    why = too_few_clusters(d.articles)
    if why or n_art - m < 1:
        out["fit_note"] = why or f"{m} restrictions on {n_art} articles: too few articles to test them jointly"
        return out
    fit = _cell_fit(d)
    N = linalg.null_space(d.D.T)  # cells × m: contrasts of the cell means the model sets to 0
    b = N.T @ fit.params
    V = N.T @ fit.cov @ N
    wald = float(b @ np.linalg.pinv(V) @ b)
    F = wald * (n_art - m) / (m * (n_art - 1))
    out.update(fit_F=F, fit_df2=n_art - m, fit_p=float(stats.f.sf(F, m, n_art - m)))
    return out


def _n_own(d: Design, judge: str, own: str | None) -> int:
    """The observations of the judge on its own outputs: its comparisons (pairwise), its ratings of its own."""
    mine = [k for k, (j, author) in enumerate(d.cells) if j == judge and (own is None or author == own)]
    return int(np.isin(d.codes, mine).sum())


def _judge_row(d: Design, fit: ClusteredOLS | None, judge: str, why: str, own: str | None) -> dict[str, Any]:
    n_own = _n_own(d, judge, own)
    row = {"judge": judge, "n_items": int(d.y.size), "n_own": n_own, "n_articles": int(len(set(d.articles))),
           "estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p": math.nan, "note": why}
    w = contrast_weights(d, f"κ[{judge}]")
    if w is None:
        row["note"] = why or (ONE_JUDGE if len(d.judges) < 2 else NOT_IDENTIFIED)
        return row
    est = fit.contrast(w, ALPHA) if fit is not None else None
    row["estimate"] = float(w @ (np.bincount(d.codes, d.y) / np.bincount(d.codes))) if est is None else est.estimate
    if est is not None and not why:
        row.update(ci_low=est.ci_low, ci_high=est.ci_high, p=est.p)
    return row


def _rows_of(d: Design | None, reference: str, g: Group) -> list[dict[str, Any]]:
    if d is None:
        return []
    why = too_few_clusters(d.articles)
    why = f"{why}, the clusters being articles: no interval" if why else ""
    fit = None if why else _cell_fit(d)
    own = g.own_author if g.setting == INDIVIDUAL else {}
    return [{**_judge_row(d, fit, j, why, own.get(j)), "reference": reference} for j in sorted(g.own_author)
            if j in d.judges]


def references(g: Group, scale: str) -> list[str]:
    """The group's common references: authors no judge wrote that every judge judged."""
    obs, col = g.obs[scale], _author_col(g.setting)
    own = set(g.own_author.values())
    # Judges with no observation on this scale (e.g. stored scores without log-odds) are in no fit: they do not
    # empty the intersection.
    judged = [set(obs.loc[obs["judge"] == j, col]) for j in g.own_author if (obs["judge"] == j).any()]
    common = set.intersection(*judged) if judged else set()
    return sorted(common - own)


def cross_judge_rows(g: Group, scale: str) -> list[dict[str, Any]]:
    """Per judge: κ pooled over every author, per common reference, and from the judges' own outputs alone; each
    row carries the pooled design's fit test."""
    obs, own_authors = g.obs[scale], set(g.own_author.values())
    pooled = design(obs, g.own_author, g.setting)
    test = fit_test(pooled) if pooled is not None else {}
    rows = _rows_of(pooled, POOLED_REFERENCE, g)
    for ref in references(g, scale):
        rows += _rows_of(design(obs, g.own_author, g.setting, own_authors | {ref}), ref, g)
    alone = design(obs, g.own_author, g.setting, own_authors)
    if alone is not None and any(contrast_weights(alone, f"κ[{j}]") is not None for j in alone.judges):
        rows += [r for r in _rows_of(alone, JUDGES_ONLY, g) if math.isfinite(r["estimate"])]
    return [{**r, **test, "term": "self"} for r in rows]
