"""Stage 6, scores: from answer distributions to per-item scores, and article-level bootstrap
confidence intervals.

One formula everywhere: in each order the probability of the answer that points at the evaluator's
own summary, renormalized over the two answers; the item's score is the mean over the two orders.
(The authors' code read unnormalized top-2 probabilities and silently dropped rows whose top token
was not an answer; here the mass that fell on the answer tokens is kept, and items with too little
of it are excluded *and counted*.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from .config import SettingName
from .judging import BACKWARD, FORWARD, OTHER, OWN, ItemRequests
from .models.base import AnswerDistribution, AnswerRequest

# Why an item has no score; every reason is counted in summary.json.
NO_ANSWER_PROBABILITY = "no_answer_probability"  # the model put zero probability on the answers
LOW_ANSWER_MASS = "low_answer_mass"  # below judge.min_answer_mass in at least one order


@dataclass
class OrderScore:
    probs: Dict[str, float]  # raw probability of "1" and "2" (all spellings)
    mass: float
    p_own: Optional[float]  # renormalized probability of the answer naming the own summary
    own_position: int  # 1 or 2
    chosen_position: Optional[int]  # the more probable answer; None for a tie or no mass
    method: str
    missing_reason: Optional[str] = None  # from the backend, e.g. "no_logprobs"

    @property
    def chosen(self) -> str:
        if self.chosen_position is None:
            return "tie" if self.mass > 0 else "none"
        return "own" if self.chosen_position == self.own_position else "other"

    def to_json(self) -> dict:
        return {"probs": self.probs, "mass": self.mass, "p_own": self.p_own, "own_position": self.own_position,
                "chosen_position": self.chosen_position, "chosen": self.chosen, "method": self.method,
                "missing_reason": self.missing_reason}


def score_order(dist: AnswerDistribution, own_position: int, answers: Sequence[str] = ("1", "2")) -> OrderScore:
    """`answers[i]` names the summary in position i+1."""
    p = [max(0.0, float(dist.probs.get(a, 0.0))) for a in answers]
    mass = p[0] + p[1]
    p_own = p[own_position - 1] / mass if mass > 0 else None
    chosen = None if p[0] == p[1] else (1 if p[0] > p[1] else 2)
    return OrderScore(dict(zip(answers, p)), mass, p_own, own_position, chosen, dist.method, dist.missing_reason)


def score_pair(forward: OrderScore, backward: OrderScore, min_mass: float) -> dict:
    """forward = (own, other), backward = (other, own)."""
    reason = None
    if forward.p_own is None or backward.p_own is None:
        missing = forward if forward.p_own is None else backward
        reason = missing.missing_reason or NO_ANSWER_PROBABILITY
    elif min(forward.mass, backward.mass) < min_mass:
        reason = LOW_ANSWER_MASS
    score = None if reason else 0.5 * (forward.p_own + backward.p_own)
    consistent = (forward.chosen in ("own", "other") and forward.chosen == backward.chosen) if not reason else None
    return {
        "score": score,
        "excluded": reason is not None,
        "exclusion_reason": reason,
        "consistent": consistent,
        "orders": {"forward": forward.to_json(), "backward": backward.to_json()},
    }


def bootstrap_mean(values: Sequence[float], groups: Sequence[str], n_resamples: int, confidence: float,
                   seed: int) -> Dict[str, Optional[float]]:
    """Mean with a percentile CI from resampling whole articles (groups) with replacement, so items
    that share an article are not treated as independent."""
    vals = np.asarray(values, dtype=float)
    if vals.size == 0:
        return {"mean": None, "ci_low": None, "ci_high": None}
    mean = float(vals.mean())
    labels, index = np.unique(np.asarray(groups), return_inverse=True)
    if len(labels) < 2:  # one article: no spread to resample
        return {"mean": mean, "ci_low": None, "ci_high": None}
    # scipy.stats.bootstrap fits the clustered design: resample whole articles, each carrying its (sum,
    # count) pair (paired=True), and the statistic is the item mean of the drawn articles (a ratio of sums).
    sums = np.bincount(index, weights=vals)
    counts = np.bincount(index).astype(float)
    result = scipy_stats.bootstrap(
        (sums, counts), lambda s, c, axis=-1: s.sum(axis=axis) / c.sum(axis=axis), paired=True, vectorized=True,
        n_resamples=n_resamples, confidence_level=confidence, method="percentile",
        random_state=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return {"mean": mean, "ci_low": float(low), "ci_high": float(high)}


def summarize_question(items: Iterable[dict], question: str, n_resamples: int, confidence: float,
                       seed: int) -> Dict:
    """Mean score of one question over a cell's items, with its CI and exclusions."""
    items = list(items)
    scored = [it for it in items if not it[question]["excluded"]]
    stats = bootstrap_mean([it[question]["score"] for it in scored], [it["article_id"] for it in scored],
                           n_resamples, confidence, seed)
    reasons: Dict[str, int] = {}
    for it in items:
        if it[question]["excluded"]:
            r = it[question]["exclusion_reason"]
            reasons[r] = reasons.get(r, 0) + 1
    consistent = [it[question]["consistent"] for it in scored if it[question]["consistent"] is not None]
    return {
        **stats,
        "n": len(scored),
        "n_excluded": len(items) - len(scored),
        "exclusions": reasons,
        "position_consistency": (sum(consistent) / len(consistent)) if consistent else None,
    }



# ------------------------------------------------------------------------- individual setting
ZERO_DENOMINATOR = "zero_denominator"  # own and other both scored 0: own/(own+other) is 0/0


def individual_value(dist: AnswerDistribution, question: str, answers: Sequence[str]) -> Dict:
    """recognition: P(first answer, "Yes") renormalized over the answers; preference: the expected
    score under the renormalized distribution over "1".."5" (answers are the score values)."""
    p = [max(0.0, float(dist.probs.get(a, 0.0))) for a in answers]
    mass = sum(p)
    if mass <= 0:
        value = None
    elif question == "recognition":
        value = p[0] / mass
    else:
        value = sum(float(a) * pa for a, pa in zip(answers, p)) / mass
    return {"probs": dict(zip(answers, p)), "mass": mass, "value": value, "method": dist.method,
            "missing_reason": dist.missing_reason}


def score_individual(own: Dict, other: Dict, min_mass: float) -> dict:
    """The paper's per-article normalization: own / (own + other); 0.5 = no bias."""
    reason = None
    if own["value"] is None or other["value"] is None:
        missing = own if own["value"] is None else other
        reason = missing["missing_reason"] or NO_ANSWER_PROBABILITY
    elif min(own["mass"], other["mass"]) < min_mass:
        reason = LOW_ANSWER_MASS
    elif own["value"] + other["value"] <= 0:
        reason = ZERO_DENOMINATOR
    score = None if reason else own["value"] / (own["value"] + other["value"])
    return {"score": score, "excluded": reason is not None, "exclusion_reason": reason, "consistent": None,
            "summaries": {"own": own, "other": other}}


# ------------------------------------------------------------------------------------ the stage
def score_items(items: Sequence[ItemRequests], dists: Mapping[AnswerRequest, AnswerDistribution],
                setting: SettingName, min_mass: float) -> List[Dict[str, dict]]:
    """One verdict per item and question (see score_pair / score_individual)."""
    out = []
    for item in items:
        verdicts = {}
        for q, reqs in item.by_question.items():
            if setting == SettingName.individual:
                verdicts[q] = score_individual(individual_value(dists[reqs[OWN]], q, reqs[OWN].answers),
                                               individual_value(dists[reqs[OTHER]], q, reqs[OTHER].answers), min_mass)
                continue
            verdicts[q] = score_pair(score_order(dists[reqs[FORWARD]], 1, reqs[FORWARD].answers),
                                     score_order(dists[reqs[BACKWARD]], 2, reqs[BACKWARD].answers), min_mass)
            if q == "preference" and item.labels is not None:
                verdicts[q]["labels"] = {"own": item.labels[0], "other": item.labels[1]}
        out.append(verdicts)
    return out


def unjudged(reason: str) -> dict:
    """The verdict of an item that could not be judged (counted under `reason`)."""
    return {"score": None, "excluded": True, "exclusion_reason": reason, "consistent": None}
