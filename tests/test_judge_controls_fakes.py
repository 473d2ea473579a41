"""The judge controls on real cells, with three fake judges whose behaviour is known (issue #24's acceptance):

1. a judge that answers by position only ("1", strongly, whatever it is shown): it fails the competence control
   and its placebo accuracy is chance;
2. a judge that reads the text (answers the competence question and the length question right): it passes both;
3. a judge that answers every question alike (always the shorter summary, whatever it is asked): its placebo
   agrees with recognition exactly as often as its preference does, and the printed result says so.

The judges answer confidently (P = 0.97 or 0.9 on one answer), so the competence pass/fail does not depend on
whether the pass rule reads P(correct) or its log-odds.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.run.runner import run_cell
from tests.conftest import FAKE_BACKEND
from tests.fakes import FakeModel, _answers_at, _overlap
from tests.fakes import pairwise_parts as _pair

JUDGES = (",position=tests.test_judge_controls_fakes:PositionJudge,reader=tests.test_judge_controls_fakes:ReaderJudge"
          ",alike=tests.test_judge_controls_fakes:AlikeJudge")


def _prompt(req) -> str:
    return "\n".join(m.content for m in req.messages)


def _words(text: str) -> int:
    return len(text.split())


def _even(req):
    return _answers_at(req, 1, 0.49)  # 0.49 on each answer: no choice


class PositionJudge(FakeModel):
    """Says "1", strongly, to every pairwise question, ignoring the texts."""

    def answer_distributions(self, requests):
        for req in requests:
            yield req, _answers_at(req, 1, 0.97)


class ReaderJudge(FakeModel):
    """Reads the texts: names the summary of the article (the one whose words the article holds) and the longer
    summary, confidently; any other question gets the fake's hash-based answer."""

    def answer_distributions(self, requests):
        for req in requests:
            prompt = _prompt(req)
            parts = _pair(prompt)
            if parts is not None and "which summary is a summary of this article" in prompt:
                article, s1, s2 = parts
                yield req, _answers_at(req, 1 if _overlap(s1, article) >= _overlap(s2, article) else 2, 0.97)
            elif parts is not None and "longer in terms of word count" in prompt:
                _, s1, s2 = parts
                yield req, (_even(req) if _words(s1) == _words(s2)
                            else _answers_at(req, 1 if _words(s1) > _words(s2) else 2, 0.97))
            else:
                yield req, next(iter(super().answer_distributions([req])))[1]


class AlikeJudge(FakeModel):
    """Answers every question alike: picks the shorter summary whatever it is asked (pairwise), and says "Yes"
    and scores higher the shorter a summary is (individual)."""

    def answer_distributions(self, requests):
        from selfpref_sweep.models.base import AnswerDistribution

        for req in requests:
            parts = _pair(_prompt(req))
            if parts is not None:
                _, s1, s2 = parts
                yield req, (_even(req) if _words(s1) == _words(s2)
                            else _answers_at(req, 1 if _words(s1) < _words(s2) else 2, 0.9))
                continue
            summary = _prompt(req).split("\n\nSummary:\n", 1)[1].split("\n\n", 1)[0]
            short = 1.0 / (1.0 + _words(summary) / 10.0)  # in (0, 1), higher for a shorter summary
            first, last = req.answers[0], req.answers[-1]  # "Yes" / "No", or "1" / "5"
            high, low = (first, last) if first == "Yes" else (last, first)
            yield req, AnswerDistribution(probs={high: 0.9 * short, low: 0.9 * (1 - short)},
                                          method="full_distribution")


@pytest.fixture(autouse=True)
def _judges_registered(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", FAKE_BACKEND + JUDGES)


def run(compose_cfg, tmp_path, backend, *overrides):
    cfg = compose_cfg([f"evaluator.backend={backend}", f"evaluator.name={backend}_eval", "judge.competence=on",
                       "judge.placebo=on", "dataset.n_articles=8", "verbose=true", *overrides])
    return run_cell(resolve_cell(cfg), tmp_path / "cell")


def test_a_judge_that_answers_by_position_fails_competence_and_guesses_the_placebo(compose_cfg, tmp_path):
    summary = run(compose_cfg, tmp_path, "position")
    assert summary["judge_competence"]["passed"] is False
    accuracy = summary["placebo"]["accuracy"]
    assert summary["placebo"]["n"] > 0 and accuracy["mean"] == pytest.approx(0.5)
    assert accuracy["ci_low"] <= 0.5 <= accuracy["ci_high"]
    assert summary["placebo"]["accuracy_logodds"]["mean"] == pytest.approx(0.0, abs=1e-9)


def test_a_judge_that_reads_the_text_passes_both(compose_cfg, tmp_path, capsys):
    summary = run(compose_cfg, tmp_path, "reader")
    assert summary["judge_competence"]["passed"] is True
    block = summary["placebo"]
    assert block["n"] >= 4 and block["accuracy"]["mean"] > 0.95 and block["accuracy"]["ci_low"] > 0.5
    assert block["accuracy_logodds"]["ci_low"] > 0
    items = [json.loads(line) for line in (tmp_path / "cell" / "results.jsonl").read_text().splitlines()]
    for item in items:  # the right answer is the longer summary, by word count, in the "own" orientation
        record = item["placebo"]
        own, other = _words(item["own_summary"]), _words(item["other_summary"])
        assert record["values"] == {"own": own, "other": other}
        assert record["truth"] == ("tie" if own == other else "own" if own > other else "other")
        if record["truth"] != "tie":
            assert (record["score"] > 0.5) == (record["truth"] == "own") and record["correct"] > 0.95
    assert "placebo question  length: accuracy 0.99" in capsys.readouterr().out


@pytest.mark.parametrize("setting", ["pairwise", "individual"])
def test_a_judge_that_answers_every_question_alike_agrees_alike(compose_cfg, tmp_path, capsys, setting):
    summary = run(compose_cfg, tmp_path, "alike", f"setting={setting}")
    agree = summary["placebo"]["agreement"]
    assert agree["n_agreement"] >= 4
    assert agree["placebo_recognition"]["rate"] == agree["preference_recognition"]["rate"] == 1.0
    assert agree["placebo_recognition"]["ci_low"] == pytest.approx(agree["preference_recognition"]["ci_low"])
    # no discordant item on few articles: undetermined (alike needs 36 such items to bound the difference)
    assert summary["placebo"]["reading"]["outcome"] == "undetermined" and summary["placebo"]["setting"] == setting
    assert summary["placebo"]["accuracy"]["mean"] < 0.5  # it picks the shorter when asked for the longer
    assert "undetermined, the data tell neither apart nor alike (McNemar: no discordant item; 97.5% upper bound" in \
        capsys.readouterr().out


def test_the_report_says_which_cells_mean_something(compose_cfg, tmp_path):
    """The three judges' cells in one analysis: the verdict column names why each is or is not informative."""
    from selfpref_sweep.analysis.report import judge_controls as J
    from selfpref_sweep.analysis.sweep.load import load_sweeps

    sweep = tmp_path / "sweep"
    for backend in ("position", "reader", "alike"):
        cfg = compose_cfg([f"evaluator.backend={backend}", f"evaluator.name={backend}_eval", "judge.competence=on",
                           "judge.placebo=on", "dataset.n_articles=8"])
        run_cell(resolve_cell(cfg), sweep / backend)
    table = J.judge_controls_table(load_sweeps([sweep]).cells).set_index("evaluator")
    assert table.loc["position_eval", "verdict"].startswith("uninformative: the judge failed the competence")
    assert table.loc["reader_eval", "verdict"] == "informative: the judge passes every control (no link for the " \
        "placebo to explain: preference agrees with recognition on 2 of 8 items)"
    # The alike judge reads the text for competence? It picks the shorter summary whatever is asked, so the
    # placebo ("which is longer?") is answered wrong: it does not read the question, or answers alike.
    assert table.loc["alike_eval", "verdict"].startswith("uninformative")
    assert J.verdict(pd.Series({"jc_passed": True})) == "unknown: placebo not run or too few articles"
    # An individual cell whose judge passes its (individual) competence control but not the pairwise placebo.
    cell = {"jc_passed": True, "pl_enabled": True, "pl_accuracy_logodds_ci_low": -0.1, "pl_reading": "apart",
            "pl_reading_evidence": "McNemar p = 0.001 on 12 discordant items"}
    assert J.verdict(pd.Series({**cell, "setting": "pairwise"})).startswith("uninformative: the judge does not")
    assert J.verdict(pd.Series({**cell, "setting": "individual"})).startswith("informative, with a caveat")
    assert J.verdict(pd.Series({**cell, "setting": "individual", "pl_asked": "pairwise"})).startswith(
        "informative, with a caveat")
    # Asked in the individual format, the placebo speaks to the cell's own format: not answered, it decides.
    assert J.verdict(pd.Series({**cell, "setting": "individual", "pl_asked": "individual"})).startswith(
        "uninformative: the judge does not")
