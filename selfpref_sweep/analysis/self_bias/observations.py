"""The net-of-quality estimators' inputs, read off the items frame: per (setting, label, dataset, question) group,
the judges (base evaluators: a fine-tune is another experiment, kept out and counted) and, per scale, one row per
observation the model explains.

- Pairwise: a comparison, judge J's order-averaged verdict on (J's own summary, author X's summary) of one article.
  Both orders are averaged in the item's score, so a position bias cancels by design and has no term.
- Individual: a rating, judge J's value of one author's summary of one article, judged alone (P(Yes), or the
  expected 1-5 score, or an imported rating). An own rating appears in every cell of its judge: it is one rating,
  averaged once (duplicates counted).

Scales, as the rest of the report: ``logodds`` (the pair's position-debiased log-odds; a rating's log) and
``paper`` (the pair's P(own) centred on 0.5; a rating as it is)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...records.schema import QUESTION_PREFIX

GROUP_KEYS = ("setting", "label", "dataset", "question")
SELF_BIAS_SCALES = ("logodds", "paper")
INDIVIDUAL = "individual"
# Exclusions that concern only the pair's share own / (own + other), not either reading: an individual item
# excluded for one of these still gives its two ratings (a judge that rated no output of its own, a rating at or
# below 0, both ratings 0).
PAIR_ONLY_REASONS = frozenset({"no_own_rating", "rating_not_positive", "zero_denominator"})
FINETUNED_LEFT_OUT = ("fine-tuned judges left out: a fine-tune's self term would be read against the base "
                      "judges' quality terms (another experiment)")


@dataclass
class Group:
    """One (setting, label, dataset, question): its judges' own authors and its observations per scale."""

    key: dict[str, str]
    setting: str
    own_author: dict[str, str]  # judge -> the author of its own summaries
    judge_family: dict[str, str] = field(default_factory=dict)  # judge -> its family, where given
    obs: dict[str, pd.DataFrame] = field(default_factory=dict)  # scale -> judge, author(s), article_id, y (+ facts)
    notes: list[str] = field(default_factory=list)

    # The group's base-judge items (both questions), which the verifiable-answer estimator reads as they are.
    items: pd.DataFrame = field(default_factory=pd.DataFrame)


def _base_judges(items: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    tuned = items["is_finetuned"].astype(bool) if "is_finetuned" in items else pd.Series(False, index=items.index)
    return items[~tuned], int(items.loc[tuned, "evaluator_variant"].nunique()) if tuned.any() else 0


def _pairwise_obs(sub: pd.DataFrame, p: str, scale: str) -> pd.DataFrame:
    kept = sub[~sub[f"{p}_excluded"].astype(bool)]
    y = kept[f"{p}_logodds"] if scale == "logodds" else kept[f"{p}_score"] - 0.5
    out = pd.DataFrame({"judge": kept["evaluator_variant"].astype(str), "own_author": kept["own_author"].astype(str),
                        "other_author": kept["other_author"].astype(str), "article_id": kept["article_id"].astype(str),
                        "y": pd.to_numeric(y, errors="coerce"),
                        "own_anchor": pd.to_numeric(kept["own_anchor"], errors="coerce"),
                        "other_anchor": pd.to_numeric(kept["other_anchor"], errors="coerce"),
                        "other_family": kept["other_family"].astype(object)})
    return out[np.isfinite(out["y"].to_numpy(float))].reset_index(drop=True)


def _usable_readings(sub: pd.DataFrame, p: str) -> pd.DataFrame:
    reason = sub[f"{p}_exclusion_reason"].astype(object)
    ok = ~sub[f"{p}_excluded"].astype(bool) | reason.isin(PAIR_ONLY_REASONS)
    return sub[ok]


def _individual_obs(sub: pd.DataFrame, p: str, scale: str) -> tuple[pd.DataFrame, int]:
    """One row per (judge, author, article): the rating, averaged where a judge's own rating sits in several cells;
    returns the rows and the number of duplicate own ratings merged."""
    kept = _usable_readings(sub, p)
    parts = []
    for side in ("own", "other"):
        parts.append(pd.DataFrame({"judge": kept["evaluator_variant"].astype(str),
                                   "author": kept[f"{side}_author"].astype(str),
                                   "article_id": kept["article_id"].astype(str),
                                   "value": pd.to_numeric(kept[f"{p}_{side}_value"], errors="coerce"),
                                   "anchor": pd.to_numeric(kept[f"{side}_anchor"], errors="coerce"),
                                   "family": kept[f"{side}_family"].astype(object)}))
    long = pd.concat(parts, ignore_index=True)
    long = long[np.isfinite(long["value"].to_numpy(float))]
    if scale == "logodds":
        long = long[long["value"] > 0].assign(y=lambda f: np.log(f["value"]))
    else:
        long = long.assign(y=long["value"])
    keys = ["judge", "author", "article_id"]
    merged = long.groupby(keys, sort=False, as_index=False).agg(y=("y", "mean"), anchor=("anchor", "first"),
                                                                family=("family", "first"))
    return merged, len(long) - len(merged)


def groups(items: pd.DataFrame) -> list[Group]:
    """Every (setting, label, dataset, question) group with its base judges' observations on both scales."""
    if items.empty or "own_author" not in items:
        return []
    base, n_tuned = _base_judges(items)
    out = []
    for (setting, label, dataset), sub in base.groupby(["setting", "label", "dataset"], sort=True, dropna=False):
        first = sub.drop_duplicates("evaluator_variant").set_index("evaluator_variant")
        own = first["own_author"].astype(str).to_dict()
        family = {str(j): str(f) for j, f in sub.groupby("evaluator_variant")["judge_family"].first().items()
                  if isinstance(f, str) and f}
        for question, p in QUESTION_PREFIX.items():
            if f"{p}_excluded" not in sub:
                continue
            g = Group({"setting": str(setting), "label": str(label), "dataset": str(dataset), "question": question},
                      str(setting), {str(k): v for k, v in own.items()}, family, items=sub)
            for scale in SELF_BIAS_SCALES:
                if setting == INDIVIDUAL:
                    g.obs[scale], dup = _individual_obs(sub, p, scale)
                    if dup and scale == SELF_BIAS_SCALES[0]:
                        g.notes.append(f"a judge's rating of one output, repeated in each of its cells, counted once "
                                       f"({dup} repeats; differing repeats averaged)")
                else:
                    g.obs[scale] = _pairwise_obs(sub, p, scale)
            silent = [j for j in g.own_author if not (g.obs[SELF_BIAS_SCALES[1]]["judge"] == j).any()]
            if silent:  # e.g. every verdict below the answer-mass threshold: the judge is in no fit
                g.notes.append(f"{', '.join(sorted(silent))}: no kept verdict on {question}, so in no fit")
            if n_tuned:
                g.notes.append(f"{n_tuned} {FINETUNED_LEFT_OUT}")
            out.append(g)
    return out

