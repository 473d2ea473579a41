"""API readings bounded, not clipped: an answer absent from an API judge's top logprobs is valued at the
smallest listed probability, flagged as a bound, and no reported figure depends on the log-odds clip."""

import json
import math

import pytest

from selfpref_sweep.cell import scoring
from selfpref_sweep.cell.scoring import individual_value, score_individual, score_pair, summarize_question
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models.base import AnswerDistribution
from selfpref_sweep.models.openai.openai_api import distribution_from_top_logprobs
from selfpref_sweep.records.scores import LOGODDS_CLIP, score_order
from selfpref_sweep.run.runner import run_cell
from tests.conftest import FAKE_BACKEND

API_JUDGE = ["evaluator.backend=toplist", "evaluator.name=api_eval", "judge.competence=on", "dataset.n_articles=6"]
# summary.json fields that count calls and time, not figures: the second run is served from the cache.
CALL_KEYS = {"elapsed_s", "model_calls", "cache_hits", "tokens"}


@pytest.fixture(autouse=True)
def _api_judge_registered(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", FAKE_BACKEND + ",toplist=tests.fakes:TopListJudge")


def read_items(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def readings(verdict):
    return list((verdict.get("orders") or verdict.get("summaries") or {}).values())


def test_a_bound_is_the_smallest_listed_probability_and_flagged():
    top = [("1", math.log(0.8)), (" The", math.log(0.1)), ("\n", -25.0)]
    d = distribution_from_top_logprobs(top, ("1", "2"))
    assert d.bounded == ["2"] and d.probs["2"] == pytest.approx(math.exp(-25.0), rel=1e-12)
    order = score_order(d, own_position=2)
    assert order.bounded == ["2"] and order.to_json()["bounded"] == ["2"]
    assert order.p_own == pytest.approx(math.exp(-25.0) / (0.8 + math.exp(-25.0)))


@pytest.mark.parametrize("clip", [1e-6, 1e-9, 1e-3])
def test_a_bounded_reading_is_read_without_the_clip(monkeypatch, clip):
    monkeypatch.setattr(scoring, "LOGODDS_CLIP", clip)
    bounded = AnswerDistribution({"1": 0.9, "2": 1e-12}, "logprobs", bounded=["2"])
    plain = AnswerDistribution({"1": 0.6, "2": 0.3}, "logprobs")
    rec = score_pair(score_order(bounded, 1), score_order(plain, 2), min_mass=0.5)
    assert rec["logodds"] == pytest.approx(0.5 * (math.log(0.9 / 1e-12) + math.log(0.3 / 0.6)))
    yes = individual_value(AnswerDistribution({"Yes": 1e-12, "No": 0.9}, bounded=["Yes"]), "recognition",
                           ["Yes", "No"])
    fine = individual_value(AnswerDistribution({"Yes": 0.6, "No": 0.3}), "recognition", ["Yes", "No"])
    assert yes["bounded"] == ["Yes"]
    assert score_individual(yes, fine, 0.5)["logodds"] == pytest.approx(math.log(yes["value"] / fine["value"]))


def test_a_full_distribution_keeps_the_clip():
    """A local model's exact 0 still meets the clip: its figures are what they were."""
    rec = score_pair(score_order(AnswerDistribution({"1": 0.9, "2": 0.0}), 1),
                     score_order(AnswerDistribution({"1": 0.0, "2": 0.9}), 2), min_mass=0.5)
    assert rec["logodds"] == pytest.approx(math.log((1 - LOGODDS_CLIP) / LOGODDS_CLIP))
    assert rec["orders"]["forward"]["bounded"] == []
    s = summarize_question([{"article_id": "a", "q": rec}], "q", 50, 0.95, seed=0)
    assert s["bounded_readings"] == {"n": 0, "of": 2, "share": 0.0}


@pytest.mark.parametrize("setting", ["pairwise", "individual"])
def test_api_figures_do_not_change_with_the_clip(compose_cfg, tmp_path, monkeypatch, setting):
    runs = {}
    for clip in (1e-6, 1e-9):
        monkeypatch.setattr(scoring, "LOGODDS_CLIP", clip)
        cfg = compose_cfg([*API_JUDGE, f"setting={setting}"])
        run_cell(resolve_cell(cfg), tmp_path / f"clip{clip:g}")  # the second is served from the cache
        summary = json.loads((tmp_path / f"clip{clip:g}" / "summary.json").read_text())
        runs[clip] = (read_items(tmp_path / f"clip{clip:g}"), summary)
    (items, summary), (items_b, summary_b) = runs[1e-6], runs[1e-9]
    assert items == items_b  # every verdict: scores, log-odds, readings, flags
    assert {k: v for k, v in summary.items() if k not in CALL_KEYS} == \
        {k: v for k, v in summary_b.items() if k not in CALL_KEYS}

    # The test has teeth: bounds lie below both clips, so a clipped reading would differ between the runs.
    questions = ["recognition", "preference"] + (["competence"] if setting == "pairwise" else [])
    bounded = [r for it in items for q in questions if q in it for r in readings(it[q]) if r["bounded"]]
    assert bounded and min(r["probs"][a] for r in bounded for a in r["bounded"]) < 1e-9
    assert all(r["probs"][a] > 0 for r in bounded for a in r["bounded"])
    assert summary["recognition"]["n"] > 0 and summary["recognition"]["logodds"]["mean"] is not None

    # summary.json: the share of bounded readings of the scored items, per question.
    for q in questions:
        block = summary["judge_competence"] if q == "competence" else summary[q]
        scored = [it[q] for it in items if q in it and not it[q]["excluded"]]
        n = sum(1 for v in scored for r in readings(v) if r["bounded"])
        assert block["bounded_readings"] == {"n": n, "of": 2 * len(scored), "share": n / (2 * len(scored))}
