"""Stage 6, scores: from answer distributions to per-item scores, and article-level bootstrap
confidence intervals.

One formula everywhere: in each order the probability of the answer that points at the evaluator's
own summary, renormalized over the two answers; the item's score is the mean over the two orders.
(The authors' code read unnormalized top-2 probabilities and silently dropped rows whose top token
was not an answer; here the mass that fell on the answer tokens is kept, and items with too little
of it are excluded *and counted*.)

Next to the paper's score, every item has a `logodds` score, the same comparison on the logit scale
(see pair_logodds), and each question's summary has the smallest effect its articles could detect
(see detectable_effect).

An API answer absent from the top logprobs is valued at its bound, the smallest listed probability (see
openai_api.distribution_from_top_logprobs); the reading names it in `bounded`, its log-odds is read without
the clip (see order_logit), and each question's summary gives the share of such readings.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy import stats as scipy_stats

from ..config import SettingName
from ..models.base import AnswerDistribution, AnswerRequest
from ..records.schema import OrderReading, QuestionStats, SummaryReading, Verdict, article_of, verdict_of
from ..stats.clustered import article_mean_ci
from .judging import BACKWARD, FORWARD, OTHER, OWN, ItemRequests

# Why an item has no score; every reason is counted in summary.json.
NO_ANSWER_PROBABILITY = "no_answer_probability"  # the model put zero probability on the answers
LOW_ANSWER_MASS = "low_answer_mass"  # below judge.min_answer_mass in at least one order

# The log-odds score clips probabilities to [LOGODDS_CLIP, 1 - LOGODDS_CLIP] (individual values from below),
# so an answer given with certainty scores a large finite value (|logit| <= 13.8), not an infinity.
LOGODDS_CLIP = 1e-6
# The smallest detectable effect: a two-sided test at level MDE_ALPHA that detects it with probability MDE_POWER.
MDE_ALPHA = 0.05
MDE_POWER = 0.8


# The reading of one order is a record type (record.OrderReading); the old name stays for callers.
OrderScore = OrderReading


def score_order(dist: AnswerDistribution, own_position: int, answers: Sequence[str] = ("1", "2")) -> OrderReading:
    """`answers[i]` names the summary in position i+1."""
    p = [max(0.0, float(dist.probs.get(a, 0.0))) for a in answers]
    mass = p[0] + p[1]
    p_own = p[own_position - 1] / mass if mass > 0 else None
    chosen = None if p[0] == p[1] else (1 if p[0] > p[1] else 2)
    return OrderReading(dict(zip(answers, p)), mass, p_own, own_position, chosen, dist.method, dist.missing_reason,
                      [a for a in answers if a in dist.bounded])


def logit(p: float) -> float:
    """log(p / (1 - p)), p clipped to [LOGODDS_CLIP, 1 - LOGODDS_CLIP]."""
    p = min(max(p, LOGODDS_CLIP), 1.0 - LOGODDS_CLIP)
    return math.log(p / (1.0 - p))


def pair_logodds(p_own_forward: float, p_own_backward: float) -> float:
    """The position-debiased score of a pair: 1/2 [logit p_own(forward) + logit p_own(backward)], each p
    clipped to [LOGODDS_CLIP, 1 - LOGODDS_CLIP]; 0 = no bias, > 0 = own preferred.

    Why: say the judge's log-odds of answering "1" are its content preference for the summary shown first
    (d for own first, -d for own second) plus a position bias b. Then logit p_own is d + b forward and d - b
    backward, and their mean is exactly d, whatever b is. The paper's score averages probabilities,
    1/2 [sigmoid(d + b) + sigmoid(d - b)]: still 0.5 when d = 0, but squashed toward 0.5 as |b| grows
    (b = 3, d = 1: 0.55 rather than sigmoid(1) = 0.73), so a position-biased judge hides a real signal."""
    return 0.5 * (logit(p_own_forward) + logit(p_own_backward))


def order_logit(order: OrderReading) -> float:
    """logit p_own of one order. A bounded reading's comes from its two probabilities, unclipped: both are
    positive (a listed value and a bound), so it is finite, and a clip would put back the constant the bound
    replaces. Any other reading's is logit(p_own), clipped, as a full distribution can hold an exact 0."""
    p = list(order.probs.values())
    own, other = p[order.own_position - 1], p[2 - order.own_position]
    if order.bounded and own > 0 and other > 0:
        return math.log(own) - math.log(other)
    return logit(order.p_own)


def pair_verdict(forward: OrderReading, backward: OrderReading, min_mass: float) -> Verdict:
    """forward = (own, other), backward = (other, own). `score` is the paper's (mean P(own)), `logodds` the
    position-debiased one (pair_logodds); both None when the item is excluded."""
    reason = None
    if forward.p_own is None or backward.p_own is None:
        missing = forward if forward.p_own is None else backward
        reason = missing.missing_reason or NO_ANSWER_PROBABILITY
    elif min(forward.mass, backward.mass) < min_mass:
        reason = LOW_ANSWER_MASS
    score = None if reason else 0.5 * (forward.p_own + backward.p_own)
    consistent = (forward.chosen in ("own", "other") and forward.chosen == backward.chosen) if not reason else None
    # logodds: pair_logodds, with each bounded order read by order_logit
    return Verdict(score, None if reason else 0.5 * (order_logit(forward) + order_logit(backward)),
                   reason is not None, reason, consistent, orders={"forward": forward, "backward": backward})


def score_pair(forward: OrderReading, backward: OrderReading, min_mass: float) -> dict:
    """pair_verdict in its record form (what a measurement's own record holds)."""
    return pair_verdict(forward, backward, min_mass).to_json()


def _article_sums(values: np.ndarray, groups: Sequence[str]):
    """Per article (group): the sum of its items' values and their count."""
    _, index = np.unique(np.asarray(groups), return_inverse=True)
    return np.bincount(index, weights=values), np.bincount(index).astype(float)


def article_mean(values: Sequence[float], groups: Sequence[str], confidence: float,
                 bounded: bool = False) -> Dict[str, Optional[float]]:
    """Mean with a CI over articles (groups): the CR2 sandwich clustered by article and a t with
    Bell–McCaffrey df (clustered.article_mean_ci), so items that share an article are not treated as
    independent; ``bounded`` (a value in [0, 1]) takes the interval on the logit scale. The article-clustered
    percentile bootstrap used before covered about 88-90% for a nominal 95% at 10 articles
    (bench/coverage_means.py); this is the interval the analysis gives its paper units."""
    vals = np.asarray(values, dtype=float)
    if vals.size == 0:
        return {"mean": None, "ci_low": None, "ci_high": None}
    mean, low, high = article_mean_ci(vals, [str(g) for g in groups], confidence, bounded)
    if math.isnan(low):  # one article: no spread over articles to go on
        return {"mean": float(vals.mean()), "ci_low": None, "ci_high": None}
    return {"mean": float(vals.mean()), "ci_low": float(low), "ci_high": float(high)}


def detectable_effect(values: Sequence[float], groups: Sequence[str], scale: str, alpha: float = MDE_ALPHA,
                      power: float = MDE_POWER) -> Dict[str, Any]:
    """The smallest detectable effect (MDE): the distance from no bias (|mean - 0.5| on the paper's score,
    |mean| on the log-odds) that a two-sided one-sample t-test at level `alpha` would detect with
    probability `power`, given how much the scores vary.

    Articles are the independent units (as in the bootstrap): with k articles whose mean scores (the
    cluster means) have standard deviation s,

        MDE = (t_{1 - alpha/2, k-1} + t_{power, k-1}) * s / sqrt(k),

    the usual shift approximation of the noncentral t (near exact from about 5 articles, a little
    optimistic below). value and sd are None with fewer than 2 articles."""
    vals = np.asarray(values, dtype=float)
    sums, counts = _article_sums(vals, groups)
    k = len(sums)
    out: Dict[str, Any] = {"value": None, "n_articles": k, "sd": None, "alpha": alpha, "power": power,
                           "scale": scale}
    if k < 2:
        return out
    sd = float(np.std(sums / counts, ddof=1))
    t = scipy_stats.t
    out.update(value=float((t.ppf(1 - alpha / 2, k - 1) + t.ppf(power, k - 1)) * sd / math.sqrt(k)), sd=sd)
    return out


def bounded_share(verdicts: Sequence[Verdict]) -> Dict[str, Any]:
    """How many of the verdicts' readings hold a bounded answer (an API answer absent from the top logprobs,
    valued at the smallest listed probability): n of `of`, and their share (None without readings)."""
    readings = [r for v in verdicts for r in v.readings()]
    n = sum(1 for r in readings if r.bounded)
    return {"n": n, "of": len(readings), "share": n / len(readings) if readings else None}


def question_stats(items: Iterable[Any], question: str, confidence: float) -> QuestionStats:
    """Mean score of one question over a cell's items (record.Item, or dicts holding the question's verdict),
    with its CI, exclusions and smallest detectable effect; the same on the log-odds scale under `logodds`;
    how many of the scored items' readings are bounds (`bounded_readings`). The CIs are t intervals over
    articles (article_mean)."""
    judged = [(article_of(it), verdict_of(it, question)) for it in items]
    scored = [(a, v) for a, v in judged if not v.excluded]
    scores = [v.score for _, v in scored]
    logodds = [v.logodds for _, v in scored]
    articles = [a for a, _ in scored]
    reasons: Dict[str, int] = {}
    for _, v in judged:
        if v.excluded:
            reasons[v.exclusion_reason] = reasons.get(v.exclusion_reason, 0) + 1
    consistent = [v.consistent for _, v in scored if v.consistent is not None]
    return QuestionStats(
        **article_mean(scores, articles, confidence, bounded=True),
        n=len(scored), n_excluded=len(judged) - len(scored), exclusions=reasons,
        position_consistency=(sum(consistent) / len(consistent)) if consistent else None,
        logodds={**article_mean(logodds, articles, confidence), "mde": detectable_effect(logodds, articles, "logodds")},
        mde=detectable_effect(scores, articles, scale="score"),
        bounded_readings=bounded_share([v for _, v in scored]),
    )


def summarize_question(items: Iterable[Any], question: str, n_resamples: int, confidence: float,
                       seed: int) -> Dict:
    """question_stats in its record form. ``n_resamples`` and ``seed`` no longer change the CIs (t intervals
    over articles) and are kept for the callers' signature."""
    return question_stats(items, question, confidence).to_json()


def excluded_share(stats: Mapping[str, Any]) -> Optional[float]:
    """The share of the control's sampled articles that were excluded (None when none was sampled)."""
    n, excluded = int(stats.get("n") or 0), int(stats.get("n_excluded") or 0)
    return excluded / (n + excluded) if n + excluded else None


def competence_passed(stats: Mapping[str, Any], threshold: float, max_excluded: float
                      ) -> Tuple[Optional[bool], List[str]]:
    """(passed, why it failed): passed when the mean log-odds of the right answer is >= threshold, its CI's lower
    bound > 0 and the excluded share <= max_excluded; None (too few articles to tell: fewer than two sampled, or
    no interval, and nothing failed)."""
    logodds = stats.get("logodds") or {}
    mean, low, share = logodds.get("mean"), logodds.get("ci_low"), excluded_share(stats)
    if int(stats.get("n") or 0) + int(stats.get("n_excluded") or 0) < 2:
        return None, []
    failed = []
    if share is not None and share > max_excluded:
        failed.append(f"excluded share {share:.3f} > max_excluded {max_excluded:g}")
    if mean is not None and mean < threshold:
        failed.append(f"mean log-odds {mean:.3f} < threshold {threshold:g}")
    if low is not None and low <= 0:
        failed.append(f"CI lower bound {low:.3f} not above 0")
    if failed:
        return False, failed
    return (None, []) if mean is None or low is None else (True, [])


def competence_block(rows: Sequence[Mapping[str, Any]], question: str, setting: Any, threshold: float, max_excluded: float,
                     confidence: float) -> Dict[str, Any]:
    """summary.json's judge_competence from the control's verdicts (rows: {"article_id", QUESTION: verdict}):
    both scales' means with their article-level CIs (the paper's as mean/ci_low/ci_high, the log-odds under
    `logodds`), the excluded share, the pass rule's settings, `passed` and, when it failed, `failed_because`."""
    stats = question_stats(rows, question, confidence).to_json()
    passed, failed = competence_passed(stats, float(threshold), float(max_excluded))
    block = {"enabled": True, "setting": str(getattr(setting, "value", setting)), "scale": "logodds", **stats,
             "excluded_share": excluded_share(stats), "threshold": float(threshold),
             "max_excluded": float(max_excluded), "passed": passed}
    if passed is False:
        block["failed_because"] = failed
    return block


# ------------------------------------------------------------------------- individual setting
ZERO_DENOMINATOR = "zero_denominator"  # own and other both scored 0: own/(own+other) is 0/0


def individual_reading(dist: AnswerDistribution, question: str, answers: Sequence[str]) -> SummaryReading:
    """A yes/no question (recognition, a placebo): P(first answer, "Yes") renormalized over the answers;
    preference: the expected score under the renormalized distribution over "1".."5" (answers are the score
    values)."""
    p = [max(0.0, float(dist.probs.get(a, 0.0))) for a in answers]
    mass = sum(p)
    if mass <= 0:
        value = None
    elif question == "recognition" or not all(_is_number(a) for a in answers):
        value = p[0] / mass
    else:
        value = sum(float(a) * pa for a, pa in zip(answers, p)) / mass
    return SummaryReading(dict(zip(answers, p)), mass, value, dist.method, dist.missing_reason,
                          [a for a in answers if a in dist.bounded])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def individual_value(dist: AnswerDistribution, question: str, answers: Sequence[str]) -> Dict:
    """individual_reading in its record form."""
    return individual_reading(dist, question, answers).to_json()


def individual_logodds(own_value: float, other_value: float) -> float:
    """log(own / other) of the two summaries' values: the paper's own / (own + other) is its sigmoid, so this
    is the same score on the logit scale (0 = no bias). A value of 0 (P(Yes) = 0) is raised to LOGODDS_CLIP,
    as pairwise probabilities are, so the log-odds exists wherever the paper's score does; the expected
    1-5 score is never below 1."""
    return math.log(max(own_value, LOGODDS_CLIP) / max(other_value, LOGODDS_CLIP))


def summaries_logodds(own: SummaryReading, other: SummaryReading) -> float:
    """individual_logodds of two readings; unclipped where one is bounded and both values are positive (as
    order_logit, so a bound never meets the clip)."""
    if (own.bounded or other.bounded) and own.value > 0 and other.value > 0:
        return math.log(own.value) - math.log(other.value)
    return individual_logodds(own.value, other.value)


def _reading(r: Any) -> SummaryReading:
    return r if isinstance(r, SummaryReading) else SummaryReading.from_json(r)


def individual_verdict(own: SummaryReading, other: SummaryReading, min_mass: float) -> Verdict:
    """The paper's per-article normalization: own / (own + other); 0.5 = no bias. `logodds`:
    summaries_logodds."""
    reason = None
    if own.value is None or other.value is None:
        missing = own if own.value is None else other
        reason = missing.missing_reason or NO_ANSWER_PROBABILITY
    elif min(own.mass, other.mass) < min_mass:
        reason = LOW_ANSWER_MASS
    elif own.value + other.value <= 0:
        reason = ZERO_DENOMINATOR
    score = None if reason else own.value / (own.value + other.value)
    return Verdict(score, None if reason else summaries_logodds(own, other), reason is not None, reason, None,
                   summaries={"own": own, "other": other})


def score_individual(own: Any, other: Any, min_mass: float) -> dict:
    """individual_verdict of two readings (or their record forms), in its record form."""
    return individual_verdict(_reading(own), _reading(other), min_mass).to_json()


# ------------------------------------------------------------------------------------ the stage
def item_verdicts(items: Sequence[ItemRequests], dists: Mapping[AnswerRequest, AnswerDistribution],
                  setting: SettingName, min_mass: float) -> List[Dict[str, Verdict]]:
    """One verdict per item and question (see pair_verdict / individual_verdict)."""
    out = []
    for item in items:
        verdicts = {}
        for q, reqs in item.by_question.items():
            if setting == SettingName.individual:
                verdicts[q] = individual_verdict(individual_reading(dists[reqs[OWN]], q, reqs[OWN].answers),
                                                 individual_reading(dists[reqs[OTHER]], q, reqs[OTHER].answers),
                                                 min_mass)
                continue
            verdicts[q] = pair_verdict(score_order(dists[reqs[FORWARD]], 1, reqs[FORWARD].answers),
                                       score_order(dists[reqs[BACKWARD]], 2, reqs[BACKWARD].answers), min_mass)
            if q == "preference" and item.labels is not None:
                verdicts[q].labels = {"own": item.labels[0], "other": item.labels[1]}
        out.append(verdicts)
    return out


def score_items(items: Sequence[ItemRequests], dists: Mapping[AnswerRequest, AnswerDistribution],
                setting: SettingName, min_mass: float) -> List[Dict[str, dict]]:
    """item_verdicts in their record form (what a measurement's own records hold)."""
    return [{q: v.to_json() for q, v in verdicts.items()}
            for verdicts in item_verdicts(items, dists, setting, min_mass)]


def unjudged_verdict(reason: str) -> Verdict:
    """The verdict of an item that could not be judged (counted under `reason`)."""
    return Verdict(None, None, True, reason, None)


def unjudged(reason: str) -> dict:
    return unjudged_verdict(reason).to_json()
