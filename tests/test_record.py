"""The record schema (records/schema.py): every record type reads back what it wrote, the golden cells' files
included, and read_cell names what it could not read instead of raising."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selfpref_sweep.cell.scoring import summarize_question, unjudged
from selfpref_sweep.models.base import AnswerDistribution
from selfpref_sweep.records.schema import (
    ERROR_FILE,
    RESULTS_FILE,
    STATUS_COMPLETE,
    STATUS_PLAN,
    SUMMARY_FILE,
    CellPlan,
    CellSummary,
    Item,
    OrderReading,
    QuestionStats,
    Verdict,
    read_cell,
    verdict_of,
)
from selfpref_sweep.records.scores import pair_verdict, question_stats, score_order

GOLDEN = Path(__file__).resolve().parent / "golden"
GOLDEN_CELLS = sorted(p for p in GOLDEN.iterdir() if (p / SUMMARY_FILE).is_file())


def _lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("cell", GOLDEN_CELLS, ids=lambda p: p.name)
def test_the_golden_cells_files_read_back_exactly(cell: Path):
    """Every field of a real cell's files survives from_json -> to_json: nothing dropped, added or changed."""
    assert GOLDEN_CELLS, "no golden cells found"
    summary = json.loads((cell / SUMMARY_FILE).read_text(encoding="utf-8"))
    assert CellSummary.from_json(summary).to_json() == summary
    for line in _lines(cell / RESULTS_FILE):
        assert Item.from_json(line).to_json() == line


def test_a_verdict_is_typed_and_its_readings_too():
    forward = score_order(AnswerDistribution({"1": 0.6, "2": 0.2}), 1)
    backward = score_order(AnswerDistribution({"1": 0.5, "2": 0.5}), 2)
    verdict = pair_verdict(forward, backward, min_mass=0.1)
    assert isinstance(verdict.orders["forward"], OrderReading) and verdict.orders["forward"].chosen == "own"
    back = Verdict.from_json(json.loads(json.dumps(verdict.to_json())))
    assert back == verdict and back.score == pytest.approx(0.625)
    assert Verdict.from_json(unjudged("empty_article")).readings() == []
    assert Verdict.from_json("not a verdict") is None


def test_a_measurements_own_fields_ride_along():
    """The competence control's verdict carries its distractor and the name of the summaries it showed."""
    raw = {**unjudged("no_distractor"), "distractor_article_id": "a2", "summaries": "human"}
    verdict = Verdict.from_json(raw)
    assert verdict.summaries is None and verdict.extra == {"distractor_article_id": "a2", "summaries": "human"}
    assert verdict.to_json() == raw


def test_an_item_keeps_each_measurements_record_by_key():
    line = {"article_id": "a1", "evaluator": "e", "source": "s", "dataset": "d", "article": "text",
            "article_truncated": False, "own_summary": "o", "other_summary": "x",
            "recognition": unjudged("empty_article"), "familiarity": {"own": -1.5}, "competence": None}
    item = Item.from_json(line)
    assert set(item.verdicts) == {"recognition"} and item.measured == {"familiarity": {"own": -1.5}, "competence": None}
    assert item.to_json() == line
    assert verdict_of(item, "recognition") == verdict_of(line, "recognition")


def test_question_statistics_are_the_same_from_items_and_from_dicts():
    items = []
    for i, (p1, p2) in enumerate([(0.9, 0.3), (0.6, 0.6), (0.2, 0.7), (0.8, 0.1)]):
        v = pair_verdict(score_order(AnswerDistribution({"1": p1, "2": 1 - p1}), 1),
                         score_order(AnswerDistribution({"1": p2, "2": 1 - p2}), 2), 0.5)
        items.append(Item(f"a{i % 2}", verdicts={"recognition": v}))
    typed = question_stats(items, "recognition", 0.95)
    as_dicts = summarize_question([it.to_json() for it in items], "recognition", 0, 0.95, 0)
    assert isinstance(typed, QuestionStats) and typed.to_json() == as_dicts
    assert typed.n == 4 and QuestionStats.from_json(as_dicts) == typed


def test_a_summary_leaves_out_what_it_did_not_record():
    skipped = CellSummary("skipped", {"evaluator": "e"}, extra={"reason": "outside the design"})
    assert skipped.to_json() == {"status": "skipped", "cell": {"evaluator": "e"}, "reason": "outside the design"}
    complete = CellSummary(STATUS_COMPLETE, {"evaluator": "e"}, n_items=0)
    assert complete.to_json()["elapsed_s"] is None  # a complete cell always records its time (null until set)
    assert CellSummary.from_json({"status": "complete"}).questions == {}


def test_a_plan_reads_back_and_a_skipped_one_needs_nothing():
    skipped = CellPlan({"evaluator": "e"}, skipped="outside the design").to_json()
    assert skipped == {"status": STATUS_PLAN, "cell": {"evaluator": "e"}, "uncached_calls": 0, "prompt_tokens_est": 0,
                       "completion_tokens_est": 0, "cost_usd_est": 0.0, "finetune": None, "preflight": [],
                       "warnings": [], "skipped": "outside the design"}
    full = CellPlan({"evaluator": "e"}, uncached_calls=3, n_articles=2, n_empty_articles=0, batch_price=[],
                    by_model={}, extra={"judge_competence": {"enabled": False, "requests": 0, "reason": "off"}})
    assert CellPlan.from_json(full.to_json()) == full


def _cell(tmp_path: Path, summary=None, results=None, error=None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    if summary is not None:
        (tmp_path / SUMMARY_FILE).write_text(summary if isinstance(summary, str) else json.dumps(summary))
    if results is not None:
        (tmp_path / RESULTS_FILE).write_text(results)
    if error is not None:
        (tmp_path / ERROR_FILE).write_text(error)
    return tmp_path


def test_read_cell_names_what_it_could_not_read(tmp_path: Path):
    empty = read_cell(_cell(tmp_path / "a"))
    assert empty.summary is None and not empty.summary_found and not empty.has_results and empty.error == ""
    broken = read_cell(_cell(tmp_path / "b", summary="{not json", error="ValueError: boom\n"))
    assert broken.summary is None and broken.summary_found and "unreadable summary.json" in broken.summary_problem
    assert broken.error == "ValueError: boom"
    listed = read_cell(_cell(tmp_path / "c", summary="[1, 2]"))
    assert listed.summary is None and listed.summary_problem == "summary.json is not a JSON object"
    good_line = json.dumps({"article_id": "a1", "recognition": unjudged("empty_article")})
    lines = "\n".join([good_line, "{broken", "[1]", json.dumps({"no_id": 1}), ""])
    cell = read_cell(_cell(tmp_path / "d", summary={"status": "complete", "cell": {}}, results=lines))
    assert cell.summary.complete and cell.bad_lines == 3 and [it.article_id for it in cell.items] == ["a1"]
    assert read_cell(tmp_path / "d", items=False).items == []
