"""The judge-competence control: its requests, its scoring, when it runs, and what plan mode counts."""

import json

import pytest

from selfpref_sweep.cell import run_cell
from selfpref_sweep.competence import (IDENTICAL_SUMMARIES, NO_DISTRACTOR, competence_enabled, competence_requests,
                                       derangement)
from selfpref_sweep.config import JudgeConfig, ModelConfig
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.judging import BACKWARD, FORWARD
from selfpref_sweep.pairs import Pair
from selfpref_sweep.plan import plan_cell
from selfpref_sweep.results import table_row
from selfpref_sweep.spec import resolve_cell
from selfpref_sweep.summaries import SummarySet
from selfpref_sweep.tracking import summary_metrics
from selfpref_sweep.validation import validate_config
from tests.conftest import FAKE_BACKEND, FAKE_EVALUATOR

JUDGES = ",oracle=tests.fakes:OracleJudge,coin=tests.fakes:CoinJudge,first=tests.fakes:FirstJudge"


@pytest.fixture(autouse=True)
def _judges_registered(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", FAKE_BACKEND + JUDGES)


def judged_by(backend, *overrides):
    return [f"evaluator.backend={backend}", f"evaluator.name={backend}_eval", "judge.competence=on", *overrides]


def read_items(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_derangement_moves_every_article_and_is_seeded():
    ids = [f"a{i}" for i in range(9)]
    d = derangement(ids, 0)
    assert sorted(d) == ids and sorted(d.values()) == ids  # a permutation
    assert all(d[i] != i for i in ids)  # no article paired with itself
    assert d == derangement(ids, 0) and d != derangement(ids, 1)
    assert derangement(["only"], 0) == {}


@pytest.mark.parametrize("mode,backend,on", [("auto", "local", True), ("auto", "openai", False),
                                             ("auto", "fake", False), ("on", "openai", True), ("off", "local", False)])
def test_auto_is_on_for_local_judges_only(mode, backend, on):
    enabled, why = competence_enabled(JudgeConfig(competence=mode), ModelConfig(name=backend, backend=backend))
    assert enabled is on and mode in why


FAKE_JUDGE = ModelConfig(name="fake", backend="fake")


class _Judge:
    identity = "judge"

    @staticmethod
    def judge_decoding(answers):
        from selfpref_sweep.models.base import JudgeDecoding
        return JudgeDecoding(tuple(answers))


def test_requests_put_the_true_summary_in_the_own_slot_in_both_orders():
    import yaml
    from tests.conftest import CONF

    prompts = yaml.safe_load((CONF / "prompts" / "paper.yaml").read_text())
    pairs = [Pair(f"a{i}", f"ARTICLE {i}", f"own {i}", f"other {i}") for i in range(4)]
    texts = {"a0": "S0", "a1": "S1", "a2": "S2", "a3": "S2"}  # a2 and a3 have the same summary text
    control = competence_requests(_Judge(), JudgeConfig(competence="on"), FAKE_JUDGE, prompts, pairs,
                                  SummarySet("human", texts), seed=0)
    assert control.enabled and control.summaries == "human"
    for item in control.items:
        aid, reqs = item.article_id, item.by_question["competence"]
        distractor = texts[control.distractors[aid]]
        forward, backward = (r.messages[1].content for r in (reqs[FORWARD], reqs[BACKWARD]))
        assert f"ARTICLE {aid[1:]}\n\nSummary1:\n{texts[aid]}\n\nSummary2:\n{distractor}\n" in forward
        assert f"Summary1:\n{distractor}\n\nSummary2:\n{texts[aid]}\n" in backward
        assert "which summary is a summary of this article?" in forward
    # identical texts are no question: counted, not asked
    same = {aid for aid, d in derangement([p.article_id for p in pairs], 0).items() if texts[aid] == texts[d]}
    assert {a: r for a, r in control.excluded.items()} == dict.fromkeys(same, IDENTICAL_SUMMARIES)
    assert control.n_requests == 2 * (4 - len(same))
    lone = competence_requests(_Judge(), JudgeConfig(competence="on"), FAKE_JUDGE, prompts, pairs[:1],
                               SummarySet("human", texts), seed=0)
    assert lone.excluded == {"a0": NO_DISTRACTOR} and not lone.items


def test_a_judge_that_can_tell_passes(compose_cfg, tmp_path, capsys):
    cfg = compose_cfg(judged_by("oracle", "dataset.n_articles=8"))
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    block = summary["judge_competence"]
    assert block["enabled"] and block["n"] == 8 and block["n_excluded"] == 0
    assert block["mean"] == pytest.approx(0.97 / 0.98) and block["passed"] is True
    assert block["calls_sampled"] == 16 and block["summaries"] == "human" and block["threshold"] == 0.6
    assert summary["model_calls"] == 8 + 8 * 2 * 2 + 16  # summaries, the two questions, the control
    item = read_items(tmp_path / "cell")[0]
    verdict = item["competence"]
    assert set(verdict["orders"]) == {"forward", "backward"} and verdict["distractor_article_id"] != item["article_id"]
    assert verdict["orders"]["forward"]["own_position"] == 1 and verdict["orders"]["backward"]["own_position"] == 2
    assert "judge competence  0.990" in capsys.readouterr().out
    metrics = summary_metrics(summary)
    assert metrics["judge_competence/passed"] == 1 and metrics["judge_competence/mean"] == block["mean"]
    assert table_row(item, ("recognition", "preference"))["competence_score"] == verdict["score"]


@pytest.mark.parametrize("backend", ["coin", "first"])
def test_a_judge_that_cannot_tell_fails(compose_cfg, tmp_path, capsys, backend):
    cfg = compose_cfg(judged_by(backend, "dataset.n_articles=6"))
    block = run_cell(resolve_cell(cfg), tmp_path / "cell")["judge_competence"]
    # 50/50, or "1" whatever the order (P(correct) 0.9 forward, 0.1 backward): chance either way
    assert block["mean"] == pytest.approx(0.5) and block["passed"] is False
    out = capsys.readouterr().out
    assert "the judge could not do this task" in out and "a null here is uninformative" in out


def test_sample_caps_the_articles_and_calls(compose_cfg, tmp_path):
    cfg = compose_cfg(judged_by("oracle", "dataset.n_articles=5", "judge.competence_sample=2"))
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    with_control = [it for it in read_items(tmp_path / "cell") if "competence" in it]
    assert len(with_control) == 2 and summary["judge_competence"]["calls_sampled"] == 4
    assert summary["model_calls"] == 5 + 20 + 4


def test_off_leaves_no_trace_in_items(compose_cfg, tmp_path, capsys):
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=2"])  # auto: off for a non-local judge
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert summary["judge_competence"]["enabled"] is False and "auto" in summary["judge_competence"]["reason"]
    assert all("competence" not in it for it in read_items(tmp_path / "cell"))
    assert summary["model_calls"] == 2 + 8
    assert "judge competence  off" in capsys.readouterr().out


def test_own_summaries_as_the_control_set(compose_cfg, tmp_path):
    cfg = compose_cfg(judged_by("oracle", "dataset.n_articles=4", "judge.competence_summaries=own"))
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert summary["judge_competence"]["summaries"] == "oracle_eval" and summary["judge_competence"]["passed"]


def test_plan_counts_the_control(compose_cfg, tmp_path):
    plan = plan_cell(resolve_cell(compose_cfg(judged_by("fake", "dataset.n_articles=3"))), tmp_path / "p1")
    assert plan["uncached_calls"] == 3 + 12 + 6 and plan["judge_competence"]["requests"] == 6
    plan = plan_cell(resolve_cell(compose_cfg(judged_by("fake", "dataset.n_articles=3", "judge.competence_sample=2"))),
                     tmp_path / "p2")
    assert plan["uncached_calls"] == 3 + 12 + 4
    # a model source: its summaries are placeholders too, and each of them is its own call
    plan = plan_cell(resolve_cell(compose_cfg(judged_by("fake", "dataset.n_articles=3", "source=smollm135",
                                                        "source.model.backend=fake"))), tmp_path / "p3")
    assert plan["uncached_calls"] == 3 + 3 + 12 + 6
    # the plan is what the run spends
    cfg = compose_cfg(judged_by("fake", "dataset.n_articles=3"))
    assert run_cell(resolve_cell(cfg), tmp_path / "cell")["model_calls"] == 3 + 12 + 6


def test_plan_auto_per_backend(compose_cfg, tmp_path):
    api = plan_cell(resolve_cell(compose_cfg(["evaluator=gpt35", "dataset.n_articles=3"])), tmp_path / "api")
    assert api["judge_competence"]["enabled"] is False and api["uncached_calls"] == 3 + 12
    api_on = plan_cell(resolve_cell(compose_cfg(["evaluator=gpt35", "dataset.n_articles=3", "judge.competence=on",
                                                 "judge.competence_sample=2"])), tmp_path / "api_on")
    assert api_on["uncached_calls"] == 3 + 12 + 4
    local = plan_cell(resolve_cell(compose_cfg(["evaluator=qwen05", "dataset.n_articles=3"])), tmp_path / "local")
    assert local["judge_competence"]["enabled"] is True and local["familiarity"]["enabled"] is True
    assert local["uncached_calls"] == 3 + 12 + 6 + 6  # ... + the control + familiarity (two per article)
    assert api["familiarity"]["enabled"] is False  # an API judge cannot score given text


def test_config_ranges_and_the_prompt(compose_cfg):
    for bad in ("judge.competence_threshold=1.5", "judge.competence_sample=-1"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            validate_config(compose_cfg([bad]))
    with pytest.raises(ConfigError, match="prompts.pairwise.competence"):
        validate_config(compose_cfg(["judge.competence=on", "~prompts.pairwise.competence"]))
    validate_config(compose_cfg(["judge.competence=off", "~prompts.pairwise.competence"]))


def test_a_finetuned_evaluator_is_the_judge_of_the_control(compose_cfg, tmp_path, monkeypatch):
    from selfpref_sweep import competence
    from tests.finetune_fakes import FAKE_TRAINER

    monkeypatch.setenv("SELFPREF_TRAINERS", FAKE_TRAINER)
    seen = []
    real = competence.competence_requests

    def spy(judge, *args, **kwargs):
        control = real(judge, *args, **kwargs)
        seen.append({r.model for item in control.items for r in item.by_question["competence"].values()})
        return control

    monkeypatch.setattr(competence, "competence_requests", spy)
    cfg = compose_cfg(judged_by("fake", "finetune_task=recognition", "finetune_task.n_articles=2",
                                "dataset.n_articles=3", f"paths.model_cache={tmp_path / 'models'}"))
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    (identities,) = seen
    assert len(identities) == 1 and next(iter(identities)).adapter == summary["finetune"]["fingerprint"]
    assert summary["judge_competence"]["n"] == 3
