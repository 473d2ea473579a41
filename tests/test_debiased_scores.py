"""The position-debiased log-odds score and the smallest detectable effect (MDE)."""

import json
import math

import numpy as np
import pytest
from statsmodels.stats.power import TTestPower

from selfpref_sweep.cell.results import format_result, table_row
from selfpref_sweep.cell.scoring import (
    individual_logodds,
    individual_value,
    score_individual,
    score_pair,
    summarize_question,
    unjudged,
)
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models.base import AnswerDistribution
from selfpref_sweep.records.scores import LOGODDS_CLIP, pair_logodds, score_order
from selfpref_sweep.run.runner import run_cell
from selfpref_sweep.stats.article_means import detectable_effect
from selfpref_sweep.tracking import summary_metrics
from tests.conftest import FAKE_EVALUATOR


def dist(p1, p2):
    return AnswerDistribution(probs={"1": p1, "2": p2})


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# ------------------------------------------------------------------------------ per item, pairwise
def test_pairwise_logodds_hand_computed():
    # forward: P(own) = .6/.8 = .75 -> logit = ln 3; backward (own second): P(own) = .5 -> logit 0
    rec = score_pair(score_order(dist(0.6, 0.2), 1), score_order(dist(0.5, 0.5), 2), min_mass=0.1)
    assert rec["logodds"] == pytest.approx(0.5 * math.log(3))
    assert rec["score"] == pytest.approx(0.625)  # the paper's score is untouched
    # own preferred in both orders: P(own) = .8 forward and .9 backward
    rec = score_pair(score_order(dist(0.8, 0.2), 1), score_order(dist(0.1, 0.9), 2), min_mass=0.1)
    assert rec["logodds"] == pytest.approx(0.5 * (math.log(4) + math.log(9)))


def test_pure_position_bias_gives_zero_logodds():
    rec = score_pair(score_order(dist(0.8, 0.2), 1), score_order(dist(0.8, 0.2), 2), min_mass=0.5)
    assert rec["logodds"] == pytest.approx(0.0, abs=1e-12)


def test_certain_answers_are_clipped_not_infinite():
    clipped = math.log((1 - LOGODDS_CLIP) / LOGODDS_CLIP)  # ln(999999) = 13.8155
    assert pair_logodds(1.0, 1.0) == pytest.approx(clipped)
    assert pair_logodds(0.0, 0.0) == pytest.approx(-clipped)
    assert pair_logodds(1.0, 0.0) == pytest.approx(0.0, abs=1e-9)
    rec = score_pair(score_order(dist(0.9, 0.0), 1), score_order(dist(0.0, 0.9), 2), min_mass=0.5)
    assert rec["score"] == 1.0 and rec["logodds"] == pytest.approx(clipped)


def test_excluded_items_have_no_logodds():
    low = score_pair(score_order(dist(0.1, 0.1), 1), score_order(dist(0.6, 0.3), 2), min_mass=0.5)
    assert low["excluded"] and low["logodds"] is None
    assert unjudged("empty_article")["logodds"] is None


# ---------------------------------------------------------------------------- per item, individual
def test_individual_logodds_is_log_of_own_over_other():
    # recognition: P(Yes) renormalized, .75 (own) and .25 (other) -> ln 3; the paper's .75 / (.75 + .25) = .75
    own = individual_value(AnswerDistribution({"Yes": 0.3, "No": 0.1}), "recognition", ["Yes", "No"])
    other = individual_value(AnswerDistribution({"Yes": 0.2, "No": 0.6}), "recognition", ["Yes", "No"])
    rec = score_individual(own, other, min_mass=0.1)
    assert rec["logodds"] == pytest.approx(math.log(3))
    assert rec["score"] == pytest.approx(sigmoid(rec["logodds"]))  # own/(own+other) = sigmoid(log(own/other))
    # preference: expected scores 4 and 2 -> ln 2
    scores = ["1", "2", "3", "4", "5"]
    own = individual_value(AnswerDistribution({"4": 0.9}), "preference", scores)
    other = individual_value(AnswerDistribution({"2": 0.9}), "preference", scores)
    assert score_individual(own, other, min_mass=0.5)["logodds"] == pytest.approx(math.log(2))


def test_individual_zero_value_is_clipped_and_exclusions_are_null():
    assert individual_logodds(0.0, 0.5) == pytest.approx(math.log(LOGODDS_CLIP / 0.5))
    no_yes = individual_value(AnswerDistribution({"Yes": 0.0, "No": 0.9}), "recognition", ["Yes", "No"])
    fine = individual_value(AnswerDistribution({"Yes": 0.6, "No": 0.3}), "recognition", ["Yes", "No"])
    rec = score_individual(no_yes, fine, 0.5)
    assert rec["score"] == 0.0 and rec["logodds"] == pytest.approx(math.log(LOGODDS_CLIP / (2 / 3)))
    both_zero = score_individual(no_yes, no_yes, 0.5)  # excluded (zero_denominator): no log-odds either
    assert both_zero["excluded"] and both_zero["logodds"] is None


# ------------------------------------------------------------------- a judge with a position bias
def biased_judge_items(planted, bias, n_items, seed=0):
    """A judge whose log-odds of answering "1" are the content signal of the summary shown first plus a
    position bias: forward (own first) d_i + bias, backward (own second) -d_i + bias; d_i ~ N(planted, 0.5)."""
    rng = np.random.default_rng(seed)
    signal = rng.normal(planted, 0.5, size=n_items)
    items = []
    for i, d in enumerate(signal):
        p1_forward, p1_backward = sigmoid(d + bias), sigmoid(-d + bias)
        fwd = score_order(dist(0.9 * p1_forward, 0.9 * (1 - p1_forward)), own_position=1)
        bwd = score_order(dist(0.9 * p1_backward, 0.9 * (1 - p1_backward)), own_position=2)
        items.append({"article_id": f"a{i}", "recognition": score_pair(fwd, bwd, min_mass=0.5)})
    return items, signal


def test_logodds_recovers_a_planted_signal_under_a_large_position_bias():
    planted = 1.0
    items, signal = biased_judge_items(planted, bias=3.0, n_items=400)
    biased = summarize_question(items, "recognition", 500, 0.95, seed=0)
    unbiased = summarize_question(biased_judge_items(planted, bias=0.0, n_items=400)[0], "recognition", 500, 0.95, 0)
    # The log-odds mean is the planted signal's, exactly: the additive bias cancels item by item.
    assert biased["logodds"]["mean"] == pytest.approx(signal.mean(), abs=1e-9)
    assert biased["logodds"]["mean"] == pytest.approx(planted, abs=0.1)
    assert biased["logodds"]["ci_low"] < planted < biased["logodds"]["ci_high"]
    assert biased["logodds"]["mean"] == pytest.approx(unbiased["logodds"]["mean"], abs=1e-9)
    # The probability average sees about a third of the effect it sees without the bias: squashed toward 0.5.
    assert unbiased["mean"] - 0.5 > 0.2
    assert biased["mean"] - 0.5 < 0.4 * (unbiased["mean"] - 0.5)
    # ... and read back on the logit scale it is far from the planted signal.
    assert math.log(biased["mean"] / (1 - biased["mean"])) < 0.5 * planted


# ------------------------------------------------------------------------- smallest detectable effect
def test_mde_hand_computed_from_article_means():
    # Article a has two items (.4, .6: mean .5); b, c, d one each: cluster means .5 .6 .7 .8.
    # sd = sqrt((.15^2 + .05^2 + .05^2 + .15^2) / 3) = sqrt(.05 / 3) = .129099
    # t(.975, 3) = 3.182446, t(.80, 3) = 0.978472 (tables) -> MDE = 4.160918 * .129099 / 2 = .268585
    values = [0.4, 0.6, 0.6, 0.7, 0.8]
    mde = detectable_effect(values, ["a", "a", "b", "c", "d"], scale="score")
    assert mde["n_articles"] == 4
    assert mde["sd"] == pytest.approx(math.sqrt(0.05 / 3))
    assert mde["value"] == pytest.approx(4.160918 * math.sqrt(0.05 / 3) / 2, rel=1e-5)
    assert (mde["alpha"], mde["power"], mde["scale"]) == (0.05, 0.8, "score")


def test_mde_has_the_power_it_claims():
    # statsmodels' exact (noncentral t) power at the MDE, in SD units over k articles, is 80% (14 articles).
    rng = np.random.default_rng(2)
    values = rng.normal(0.5, 0.1, size=14)
    mde = detectable_effect(values, [str(i) for i in range(14)], scale="score")
    assert TTestPower().power(mde["value"] / mde["sd"], 14, 0.05) == pytest.approx(0.8, abs=0.005)


def test_mde_shrinks_like_one_over_root_k():
    pattern = [0.45, 0.5, 0.55, 0.6]
    small = detectable_effect(pattern * 25, [str(i) for i in range(100)], "score")
    large = detectable_effect(pattern * 100, [str(i) for i in range(400)], "score")
    assert large["value"] / small["value"] == pytest.approx(0.5, rel=0.02)


def test_mde_needs_two_articles():
    one = detectable_effect([0.6, 0.7], ["a", "a"], "score")
    assert one["value"] is None and one["sd"] is None and one["n_articles"] == 1
    assert detectable_effect([], [], "logodds") == {"value": None, "n_articles": 0, "sd": None, "alpha": 0.05,
                                                    "power": 0.8, "scale": "logodds"}


def test_summary_blocks_follow_the_shared_schema():
    ok = score_pair(score_order(dist(0.6, 0.2), 1), score_order(dist(0.5, 0.5), 2), 0.1)  # logodds ln3 / 2
    strong = score_pair(score_order(dist(0.8, 0.2), 1), score_order(dist(0.1, 0.9), 2), 0.1)  # ln 6
    low = score_pair(score_order(dist(0.1, 0.1), 1), score_order(dist(0.1, 0.9), 2), 0.5)  # excluded
    items = [{"article_id": "a", "recognition": ok}, {"article_id": "b", "recognition": strong},
             {"article_id": "c", "recognition": low}]
    s = summarize_question(items, "recognition", 200, 0.95, seed=0)
    assert set(s["logodds"]) == {"mean", "ci_low", "ci_high", "mde"}
    assert s["logodds"]["mean"] == pytest.approx(0.5 * (0.5 * math.log(3) + math.log(6)))
    assert s["logodds"]["mde"]["scale"] == "logodds" and s["logodds"]["mde"]["n_articles"] == 2
    assert set(s["mde"]) == {"value", "n_articles", "sd", "alpha", "power", "scale"}
    assert s["mde"]["n_articles"] == 2 and s["mde"]["scale"] == "score"  # the excluded item's article is not one
    assert s["mde"]["sd"] == pytest.approx(abs(ok["score"] - strong["score"]) / math.sqrt(2))


# ---------------------------------------------------------------------- the cell: files, print, W&B
def test_cell_records_prints_and_logs_both_scales(compose_cfg, tmp_path, capsys):
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=5", "verbose=true"])
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    items = [json.loads(line) for line in (tmp_path / "cell" / "results.jsonl").read_text().splitlines()]
    for it in items:
        fwd, bwd = it["recognition"]["orders"]["forward"], it["recognition"]["orders"]["backward"]
        assert it["recognition"]["logodds"] == pytest.approx(pair_logodds(fwd["p_own"], bwd["p_own"]))
    on_disk = json.loads((tmp_path / "cell" / "summary.json").read_text())
    for q in ("recognition", "preference"):
        lo = on_disk[q]["logodds"]
        assert lo["mean"] == pytest.approx(np.mean([it[q]["logodds"] for it in items]))
        assert lo["ci_low"] <= lo["mean"] <= lo["ci_high"]
        assert on_disk[q]["mde"]["n_articles"] == 5 and on_disk[q]["mde"]["value"] > 0
    out = capsys.readouterr().out
    mde = on_disk["recognition"]["mde"]["value"]
    assert f"log-odds {on_disk['recognition']['logodds']['mean']:.3f}" in out
    lo_mde = on_disk["recognition"]["logodds"]["mde"]["value"]
    assert (f"with n=5 articles, effects smaller than ±{mde:.3f} (log-odds ±{lo_mde:.3f}) could not be seen "
            "(80% power, α=0.05)") in out
    # W&B: every new number is a metric (each one declared by the tracker), and the item table has the log-odds.
    metrics = summary_metrics(summary)
    assert {"recognition/logodds/mean", "recognition/logodds/ci_low", "recognition/logodds/mde/value",
            "recognition/mde/value", "recognition/mde/sd", "recognition/mde/n_articles",
            "preference/logodds/mean", "preference/mde/value"} <= set(metrics)
    row = table_row(items[0], ("recognition", "preference"))
    assert row["recognition_logodds"] == items[0]["recognition"]["logodds"]


def test_print_says_when_no_effect_size_can_be_given():
    block = {"mean": 0.6, "ci_low": None, "ci_high": None, "n": 1, "n_excluded": 0,
             "logodds": {"mean": 0.4, "ci_low": None, "ci_high": None,
                         "mde": detectable_effect([0.4], ["a"], "logodds")},
             "mde": detectable_effect([0.6], ["a"], "score")}
    summary = {"cell": {"evaluator": "e", "source": "s", "dataset": "d", "setting": "pairwise"},
               "recognition": block, "position_consistency": {"recognition": 1.0}, "n_excluded": 0,
               "model_calls": 2, "cache_hits": 0, "elapsed_s": 0.1}
    out = format_result(summary, "here", verbose=True)
    assert "with n=1 article, no detectable effect can be given (it needs at least 2 articles)" in out
    assert "log-odds 0.400" in out


def test_a_cell_prints_a_few_lines_by_default():
    """By default the two scores, the judge-competence control, warnings and the calls; verbose adds the rest."""
    block = {"mean": 0.6, "ci_low": 0.55, "ci_high": 0.65, "n": 5, "n_excluded": 0,
             "logodds": {"mean": 0.4, "ci_low": 0.2, "ci_high": 0.6}}
    summary = {"cell": {"evaluator": "e", "source": "s", "dataset": "d", "setting": "pairwise"},
               "recognition": block, "preference": block, "position_consistency": {"recognition": 1.0},
               "n_excluded": 0, "model_calls": 2, "cache_hits": 0, "elapsed_s": 0.1,
               "judge_competence": {"enabled": False, "reason": "off"}, "placebo": {"enabled": False, "reason": "off"}}
    short, full = format_result(summary, "here").strip().splitlines(), format_result(summary, "here", True)
    assert len(short) <= 6 and "judge competence  off" in short[3] and "log-odds" not in "\n".join(short)
    assert "also measured: placebo" in short[4] and "placebo question  off" in full and "log-odds 0.400" in full
