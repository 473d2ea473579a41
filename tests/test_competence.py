"""The judge-competence control: its requests, its scoring, when it runs, and what plan mode counts."""

import json
import math

import pytest

from selfpref_sweep.cell.judging import BACKWARD, FORWARD, OTHER, OWN
from selfpref_sweep.cell.pairs import Pair
from selfpref_sweep.cell.results import table_row
from selfpref_sweep.cell.summaries import SummarySet
from selfpref_sweep.config import JudgeConfig, ModelConfig, SettingName
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.config.validation import validate_config
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.measurements.competence.competence_cell import (
    IDENTICAL_SUMMARIES,
    NO_DISTRACTOR,
    competence_enabled,
    competence_requests,
    derangement,
    format_competence,
    score_competence,
    summarize_competence,
)
from selfpref_sweep.models.base import AnswerDistribution
from selfpref_sweep.run.plan import plan_cell
from selfpref_sweep.run.runner import run_cell
from selfpref_sweep.tracking import summary_metrics
from tests.conftest import FAKE_BACKEND, FAKE_EVALUATOR
from tests.fakes import FakeModel

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


from tests.fakes import RequestBuilder as _Judge  # noqa: E402  (requests without a model)


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
    assert block["calls_sampled"] == 16 and block["summaries"] == "human" and block["threshold"] == 0.405
    assert block["setting"] == "pairwise" and block["scale"] == "logodds" and block["excluded_share"] == 0.0
    assert block["logodds"]["mean"] == pytest.approx(math.log(0.97 / 0.01)) and "failed_because" not in block
    assert summary["model_calls"] == 8 + 8 * 2 * 2 + 16  # summaries, the two questions, the control
    item = read_items(tmp_path / "cell")[0]
    verdict = item["competence"]
    assert set(verdict["orders"]) == {"forward", "backward"} and verdict["distractor_article_id"] != item["article_id"]
    assert verdict["orders"]["forward"]["own_position"] == 1 and verdict["orders"]["backward"]["own_position"] == 2
    assert "judge competence  log-odds 4.575" in capsys.readouterr().out
    metrics = summary_metrics(summary)
    assert metrics["judge_competence/passed"] == 1 and metrics["judge_competence/mean"] == block["mean"]
    assert table_row(item, ("recognition", "preference"))["competence_score"] == verdict["score"]


@pytest.mark.parametrize("backend", ["coin", "first"])
def test_a_judge_that_cannot_tell_fails(compose_cfg, tmp_path, capsys, backend):
    cfg = compose_cfg(judged_by(backend, "dataset.n_articles=6"))
    block = run_cell(resolve_cell(cfg), tmp_path / "cell")["judge_competence"]
    # 50/50, or "1" whatever the order (P(correct) 0.9 forward, 0.1 backward): chance either way
    assert block["mean"] == pytest.approx(0.5) and block["passed"] is False
    assert block["logodds"]["mean"] == pytest.approx(0.0) and any("log-odds" in w for w in block["failed_because"])
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
    local = plan_cell(resolve_cell(compose_cfg(["evaluator=qwen05", "dataset.n_articles=3", "judge.placebo=off"])),
                      tmp_path / "local")  # the placebo question (its own calls) off: counted in its own tests
    assert local["judge_competence"]["enabled"] is True and local["familiarity"]["enabled"] is True
    assert local["uncached_calls"] == 3 + 12 + 6 + 6  # ... + the control + familiarity (two per article)
    assert api["familiarity"]["enabled"] is False  # an API judge cannot score given text


def test_config_ranges_and_the_prompt(compose_cfg):
    for bad in ("judge.competence_threshold=-0.5", "judge.competence_sample=-1", "judge.competence_max_excluded=1.5"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            validate_config(compose_cfg([bad]))
    with pytest.raises(ConfigError, match="prompts.pairwise.competence"):
        validate_config(compose_cfg(["judge.competence=on", "~prompts.pairwise.competence"]))
    validate_config(compose_cfg(["judge.competence=off", "~prompts.pairwise.competence"]))


def test_a_finetuned_evaluator_is_the_judge_of_the_control(compose_cfg, tmp_path, monkeypatch):
    from selfpref_sweep.measurements.competence import competence_cell as competence
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


# --- the pass rule on the log-odds scale, and the individual control -----------------------------------------

def _paper_prompts():
    import yaml

    from tests.conftest import CONF

    return yaml.safe_load((CONF / "prompts" / "paper.yaml").read_text())


def _control(setting, n=10):
    pairs = [Pair(f"a{i}", f"ARTICLE {i}", f"own {i}", f"other {i}") for i in range(n)]
    texts = {f"a{i}": f"S{i}" for i in range(n)}
    return competence_requests(_Judge(), JudgeConfig(competence="on"), FAKE_JUDGE, _paper_prompts(), pairs,
                               SummarySet("human", texts), seed=0, setting=SettingName(setting))


def _sigmoid(x):
    return 1 / (1 + math.exp(-x))


def _pairwise_dists(control, bias, content, low_mass=()):
    """logit P("1") = bias + content_i with the true summary first, bias - content_i with it second; content_i
    = content ± 0.2 by turns over the articles (so the CI has a spread), mass 0.1 for the articles in `low_mass`."""
    dists = {}
    for k, item in enumerate(control.items):
        d, mass = content + 0.2 * (-1) ** k, 0.1 if item.article_id in low_mass else 1.0
        for slot, sign in ((FORWARD, 1), (BACKWARD, -1)):
            p1 = _sigmoid(bias + sign * d)
            dists[item.by_question["competence"][slot]] = AnswerDistribution({"1": mass * p1, "2": mass * (1 - p1)})
    return dists


def _block(control, dists, **cfg):
    verdicts = score_competence(control, dists, min_mass=0.5)
    return summarize_competence(control, verdicts, JudgeConfig(competence="on", **cfg), 0, 0.95, 0)


def test_a_position_biased_judge_with_a_content_signal_passes_on_the_logodds_scale():
    """Position bias 3, content 1: 0.55 on the paper's scale (under the old 0.6 rule a fail), log-odds 1 >= 0.405."""
    control = _control("pairwise")
    block = _block(control, _pairwise_dists(control, bias=3.0, content=1.0))
    assert block["mean"] == pytest.approx(0.55, abs=0.005) and block["mean"] < 0.6
    assert block["logodds"]["mean"] == pytest.approx(1.0) and block["logodds"]["ci_low"] > 0
    assert block["passed"] is True and block["threshold"] == 0.405 and block["max_excluded"] == 0.2
    assert block["setting"] == "pairwise" and block["scale"] == "logodds" and block["calls_sampled"] == 20
    assert "judge can tell (which summary is of this article?)" in format_competence(block)


def test_a_position_only_judge_fails():
    control = _control("pairwise")
    block = _block(control, _pairwise_dists(control, bias=3.0, content=0.0))
    assert block["logodds"]["mean"] == pytest.approx(0.0, abs=1e-9) and block["passed"] is False
    assert any(w.startswith("mean log-odds") for w in block["failed_because"])
    assert any(w.startswith("CI lower bound") for w in block["failed_because"])
    assert "a null here is uninformative" in format_competence(block)


def test_too_many_excluded_articles_fail_the_judge():
    control = _control("pairwise")
    dists = _pairwise_dists(control, bias=0.0, content=2.0, low_mass={"a0", "a1", "a2"})  # 3 of 10 excluded
    block = _block(control, dists)
    assert block["excluded_share"] == pytest.approx(0.3) and block["logodds"]["mean"] == pytest.approx(2.0, abs=0.2)
    assert block["passed"] is False and block["failed_because"] == ["excluded share 0.300 > max_excluded 0.2"]
    assert _block(control, dists, competence_max_excluded=0.5)["passed"] is True


def _individual_dists(control, yes_true, yes_other):
    """P(Yes) of the article's own summary and of the other article's, both ± 0.05 by turns over the articles."""
    dists = {}
    for k, item in enumerate(control.items):
        wiggle = 0.05 * (-1) ** k
        for slot, p in ((OWN, yes_true + wiggle), (OTHER, yes_other + wiggle)):
            dists[item.by_question["competence"][slot]] = AnswerDistribution({"Yes": p, "No": 1 - p})
    return dists


def test_the_individual_control_asks_each_summary_alone():
    control = _control("individual", n=4)
    assert control.setting == SettingName.individual and control.n_requests == 2 * 4
    for item in control.items:
        reqs = item.by_question["competence"]
        assert set(reqs) == {OWN, OTHER} and reqs[OWN].answers == ("Yes", "No")
        own, other = (reqs[slot].messages[1].content for slot in (OWN, OTHER))
        aid = item.article_id
        assert f"ARTICLE {aid[1:]}\n\nSummary:\nS{aid[1:]}\n" in own
        assert f"Summary:\nS{control.distractors[aid][1:]}\n" in other
        assert "whether this is a summary of this article?" in own


def test_an_individual_judge_that_says_yes_more_to_the_true_summary_passes():
    control = _control("individual")
    block = _block(control, _individual_dists(control, yes_true=0.8, yes_other=0.3))
    assert block["setting"] == "individual" and block["passed"] is True
    assert block["logodds"]["mean"] == pytest.approx(math.log(0.8 / 0.3), abs=0.02)
    assert block["mean"] == pytest.approx(0.8 / 1.1, abs=0.01) and block["calls_sampled"] == 20
    assert "is this a summary of this article?" in format_competence(block)
    verdict = score_competence(control, _individual_dists(control, 0.8, 0.3), 0.5)["a0"]
    assert set(verdict["summaries"]) == {"own", "other"} and verdict["summary_source"] == "human"


def test_an_individual_judge_that_says_yes_to_everything_fails():
    control = _control("individual")
    block = _block(control, _individual_dists(control, yes_true=0.7, yes_other=0.7))
    assert block["logodds"]["mean"] == pytest.approx(0.0, abs=1e-9) and block["passed"] is False
    assert "is this a summary of this article?" in format_competence(block)


def test_too_few_articles_to_tell():
    control = _control("pairwise", n=1)  # one article: no distractor
    block = _block(control, {})
    assert block["passed"] is None and "failed_because" not in block and block["excluded_share"] == 1.0
    assert "too few articles" in format_competence(block) or "n/a" in format_competence(block)


def test_older_blocks_still_read():
    from selfpref_sweep.measurements.competence.competence_cell import CompetenceMeasurement

    old = {"enabled": True, "mean": 0.58, "ci_low": 0.52, "ci_high": 0.64, "n": 14, "n_excluded": 0,
           "exclusions": {}, "threshold": 0.6, "passed": False, "calls_sampled": 28}
    cols = CompetenceMeasurement().cell_columns(old)
    assert cols["jc_passed"] is False and cols["jc_mean"] == 0.58 and cols["jc_threshold"] == 0.6  # as recorded
    assert all(math.isnan(cols[c]) for c in ("jc_logodds_mean", "jc_logodds_ci_low", "jc_logodds_ci_high",
                                             "jc_excluded_share"))
    assert cols["jc_setting"] is None and set(cols) == set(CompetenceMeasurement.cell_column_names)
    assert "P(correct) 0.580 [0.520, 0.640]" in format_competence(old)
    new = CompetenceMeasurement().cell_columns(_block(_control("individual"), _individual_dists(
        _control("individual"), 0.8, 0.3)))
    assert new["jc_setting"] == "individual" and new["jc_logodds_mean"] > 0.9 and new["jc_excluded_share"] == 0.0


class ContentYesJudge(FakeModel):
    """Individual control: P(Yes) = 0.9 where the summary's words are mostly in the article, else 0.2."""

    def answer_distributions(self, requests):
        from tests.fakes import _overlap

        for req in requests:
            prompt = "\n".join(m.content for m in req.messages)
            if "whether this is a summary of this article" not in prompt:
                yield next(iter(super().answer_distributions([req])))
                continue
            article = prompt.split("Article:\n", 1)[1].split("\n\nSummary:\n", 1)[0]
            summary = prompt.split("\n\nSummary:\n", 1)[1].split("\n\nCan you tell me", 1)[0]
            yes = 0.9 if _overlap(summary, article) >= 0.5 else 0.2
            yield req, AnswerDistribution({"Yes": yes, "No": 0.98 - yes}, method="full_distribution")


class AlwaysYesJudge(FakeModel):
    def answer_distributions(self, requests):
        for req in requests:
            yield req, AnswerDistribution({a: (0.7 if i == 0 else 0.28) for i, a in enumerate(req.answers)})


@pytest.mark.parametrize("backend,passed", [("content_yes", True), ("always_yes", False)])
def test_individual_cells_run_the_individual_control(compose_cfg, tmp_path, monkeypatch, backend, passed):
    monkeypatch.setenv("SELFPREF_BACKENDS", FAKE_BACKEND + JUDGES + ",content_yes=tests.test_competence:ContentYesJudge"
                       ",always_yes=tests.test_competence:AlwaysYesJudge")
    cfg = compose_cfg(judged_by(backend, "setting=individual", "dataset.n_articles=6", "judge.placebo=off"))
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    block = summary["judge_competence"]
    assert block["setting"] == "individual" and block["n"] == 6 and block["calls_sampled"] == 12
    assert block["passed"] is passed
    verdict = read_items(tmp_path / "cell")[0]["competence"]
    assert set(verdict["summaries"]) == {"own", "other"} and verdict["summary_source"] == "human"


def test_plan_counts_the_individual_control(compose_cfg, tmp_path):
    cfg = compose_cfg(judged_by("fake", "setting=individual", "dataset.n_articles=3", "judge.placebo=off"))
    plan = plan_cell(resolve_cell(cfg), tmp_path / "plan")
    assert plan["judge_competence"]["requests"] == 2 * 3  # two per article: its own summary, another's
    assert plan["uncached_calls"] == 3 + 12 + 6
    assert run_cell(resolve_cell(cfg), tmp_path / "cell")["model_calls"] == 3 + 12 + 6


def test_an_individual_cell_needs_the_individual_prompt(compose_cfg):
    with pytest.raises(ConfigError, match="prompts.individual.competence"):
        validate_config(compose_cfg(["setting=individual", "judge.competence=on", "~prompts.individual.competence"]))
    validate_config(compose_cfg(["setting=individual", "judge.competence=on", "~prompts.pairwise.competence"]))
