import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from selfpref_sweep.cell.scoring import score_pair, summarize_question
from selfpref_sweep.models.base import AnswerDistribution
from selfpref_sweep.records.scores import LOW_ANSWER_MASS, NO_ANSWER_PROBABILITY, score_order
from selfpref_sweep.stats.article_means import article_mean


def dist(p1, p2, missing=None):
    return AnswerDistribution(probs={"1": p1, "2": p2}, missing_reason=missing)


def test_renormalizes_over_the_two_answers():
    o = score_order(dist(0.3, 0.1), own_position=1)
    assert o.mass == pytest.approx(0.4)
    assert o.p_own == pytest.approx(0.75)
    assert o.chosen_position == 1 and o.chosen == "own"
    o2 = score_order(dist(0.3, 0.1), own_position=2)
    assert o2.p_own == pytest.approx(0.25) and o2.chosen == "other"


def test_score_is_mean_over_orders_of_p_own():
    fwd = score_order(dist(0.6, 0.2), own_position=1)  # p_own = .75
    bwd = score_order(dist(0.5, 0.5), own_position=2)  # p_own = .5 (a tie)
    rec = score_pair(fwd, bwd, min_mass=0.1)
    assert rec["score"] == pytest.approx(0.625)
    assert not rec["excluded"]
    assert rec["orders"]["backward"]["chosen"] == "tie"
    assert rec["consistent"] is False  # a tie picks no summary


def test_position_bias_is_not_recognition():
    # Always answering "1" with the same confidence gives exactly 0.5: position bias cancels.
    rec = score_pair(score_order(dist(0.8, 0.2), 1), score_order(dist(0.8, 0.2), 2), min_mass=0.5)
    assert rec["score"] == pytest.approx(0.5)
    assert rec["consistent"] is False  # picked position 1 both times = different summaries


def test_consistent_when_both_orders_pick_own():
    rec = score_pair(score_order(dist(0.9, 0.1), 1), score_order(dist(0.2, 0.7), 2), min_mass=0.5)
    assert rec["consistent"] is True
    assert rec["score"] == pytest.approx(0.5 * (0.9 + 0.7 / 0.9))


def test_low_mass_is_excluded_and_reasoned():
    rec = score_pair(score_order(dist(0.2, 0.1), 1), score_order(dist(0.6, 0.3), 2), min_mass=0.5)
    assert rec["excluded"] and rec["exclusion_reason"] == LOW_ANSWER_MASS
    assert rec["score"] is None
    # the raw numbers are kept for inspection
    assert rec["orders"]["forward"]["mass"] == pytest.approx(0.3)


def test_zero_mass_and_backend_reason():
    rec = score_pair(score_order(dist(0.0, 0.0), 1), score_order(dist(0.6, 0.3), 2), min_mass=0.0)
    assert rec["exclusion_reason"] == NO_ANSWER_PROBABILITY
    rec = score_pair(score_order(dist(0.6, 0.3), 1), score_order(dist(0.0, 0.0, "no_logprobs"), 2), min_mass=0.0)
    assert rec["exclusion_reason"] == "no_logprobs"


def test_missing_answer_key_counts_as_zero():
    o = score_order(AnswerDistribution(probs={"1": 0.4}), own_position=2)
    assert o.p_own == 0.0 and o.mass == pytest.approx(0.4)


def test_the_interval_counts_articles_not_items():
    # Two articles: one with many identical items, one with a single item. Items treated as independent
    # would give a tight interval around 50/51; over 2 articles the interval is wide.
    values = [1.0] * 50 + [0.0]
    groups = ["a"] * 50 + ["b"]
    stats = article_mean(values, groups, confidence=0.95)
    assert stats["mean"] == pytest.approx(50 / 51)
    item_level_half = 1.96 * np.std(values, ddof=1) / math.sqrt(len(values))
    assert stats["ci_high"] - stats["ci_low"] > 10 * 2 * item_level_half


def test_one_item_per_article_is_the_t_interval_over_articles():
    rng = np.random.default_rng(1)
    vals = list(rng.uniform(0.4, 0.9, size=10))
    groups = [str(i) for i in range(10)]
    got = article_mean(vals, groups, 0.95)
    low, high = scipy_stats.t.interval(0.95, 9, loc=np.mean(vals), scale=scipy_stats.sem(vals))
    assert got["mean"] == pytest.approx(np.mean(vals))
    assert (got["ci_low"], got["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    bounded = article_mean(vals, groups, 0.95, bounded=True)  # on the logit scale: asymmetric, inside [0, 1]
    assert 0 < bounded["ci_low"] < bounded["mean"] < bounded["ci_high"] < 1
    assert bounded["ci_high"] - bounded["mean"] != pytest.approx(bounded["mean"] - bounded["ci_low"])


def test_interval_degenerate_inputs():
    assert article_mean([], [], 0.95) == {"mean": None, "ci_low": None, "ci_high": None}
    one = article_mean([0.7, 0.8], ["x", "x"], 0.95)
    assert one["mean"] == pytest.approx(0.75) and one["ci_low"] is None


def test_summarize_counts_exclusions():
    ok = score_pair(score_order(dist(0.9, 0.1), 1), score_order(dist(0.1, 0.9), 2), 0.5)
    low = score_pair(score_order(dist(0.1, 0.1), 1), score_order(dist(0.1, 0.9), 2), 0.5)
    items = [{"article_id": "a", "recognition": ok}, {"article_id": "b", "recognition": low},
             {"article_id": "c", "recognition": ok}]
    s = summarize_question(items, "recognition", 200, 0.95, 0)
    assert s["n"] == 2 and s["n_excluded"] == 1
    assert s["exclusions"] == {LOW_ANSWER_MASS: 1}
    assert s["mean"] == pytest.approx(0.9)
    assert s["position_consistency"] == 1.0
