"""Per-item JSONL (selfpref_sweep/imports/jsonl_format.py): a file becomes a sweep of ordinary cells the analysis
reads, an export of it imports back to the same cells, and a bad file is one error naming the file and the line,
with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selfpref_sweep.analysis.sweep.load import load_sweeps
from selfpref_sweep.imports.__main__ import main as imports_main
from selfpref_sweep.imports.imported import MANIFEST_FILE, ImportInputError
from selfpref_sweep.imports.jsonl_format import NOT_IN_FILE, export_jsonl, import_jsonl

BASE = {"evaluator": "gpt4", "source": "human", "dataset": "xsum"}
FT = {"task": "recognition", "dataset": "cnn", "n_articles": 10, "seed": 1}


def _line(article: str, question: str, **fields) -> dict:
    return {**BASE, "article_id": article, "question": question, **fields}


def _lines() -> list:
    """Pairwise (probabilities, score only, excluded, a question missing), individual, a label cell and a
    fine-tuned cell."""
    texts = {"own_summary": "one two three four", "other_summary": "one two"}
    return [
        _line("a1", "recognition", forward={"1": 0.6, "2": 0.2}, backward={"1": 0.3, "2": 0.5}, score=0.9, **texts),
        _line("a1", "preference", forward={"1": 0.5, "2": 0.5}, backward={"1": 0.2, "2": 0.6}, **texts,
              origin={"run": "r7"}),
        _line("a2", "recognition", score=0.4),
        _line("a2", "preference", excluded="api_error", score=0.1),
        _line("a3", "recognition", forward={"1": 0.0, "2": 0.0}, backward={"1": 0.5, "2": 0.5}),
        _line("a4", "preference", forward={"1": 1.0}, backward={"2": 1.0}),  # no recognition line: not_in_file
        _line("a5", "recognition", forward={"1": 0.01, "2": 0.0}, backward={"1": 0.0, "2": 0.01},
              excluded="low_answer_mass"),
        _line("a5", "preference", score=0.6),
        _line("a1", "recognition", setting="individual", own={"Yes": 0.8, "No": 0.2}, other={"Yes": 0.4, "No": 0.4}),
        _line("a1", "preference", setting="individual", own={"4": 0.5, "5": 0.5}, other={"2": 1.0}),
        _line("a1", "preference", label="correct", forward={"1": 0.7, "2": 0.3}, backward={"1": 0.4, "2": 0.6}),
        _line("a1", "recognition", finetune=FT, forward={"1": 0.9, "2": 0.1}, backward={"1": 0.2, "2": 0.8}),
        _line("a1", "recognition", finetune={**FT, "seed": 2}, score=0.55),
    ]


def _write(path: Path, lines) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def _cell_files(sweep: Path) -> dict:
    return {p.relative_to(sweep).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(sweep.rglob("*")) if p.name in ("summary.json", "results.jsonl")}


@pytest.fixture
def imported(tmp_path):
    src = _write(tmp_path / "in" / "judged.jsonl", _lines())
    out = tmp_path / "sweep"
    return src, out, import_jsonl(src, out)


def test_import_writes_one_cell_per_coordinates_and_counts_exclusions(imported):
    _src, out, done = imported
    assert done["n_cells"] == 5 and done["n_lines"] == 13 and done["n_items"] == 9
    # a3 has no preference line, a4 no recognition line
    excluded = {"api_error": 1, "low_answer_mass": 1, "no_answer_probability": 1, NOT_IN_FILE: 2}
    assert done["exclusions"] == excluded
    summary = json.loads((out / "pairwise/label_none/xsum/gpt4/human/summary.json").read_text())
    assert summary["exclusions"] == excluded  # items per reason (a3 under two)
    assert summary["n_excluded"] == 4 and summary["preference"]["n"] == 3
    assert summary["recognition"]["exclusions"] == {"low_answer_mass": 1, "no_answer_probability": 1, NOT_IN_FILE: 1}
    assert summary["imported"] == {"format": "jsonl", "file": "judged.jsonl", "evaluator_name": "gpt4"}
    assert summary["own_summaries"] == {"kind": "generated", "name": "gpt4"}
    items = [json.loads(x) for x in (out / "pairwise/label_none/xsum/gpt4/human/results.jsonl").open()]
    assert [it["article_id"] for it in items] == ["a1", "a2", "a3", "a4", "a5"]
    assert items[0]["origin"] == {"kind": "imported", "format": "jsonl", "file": "judged.jsonl",
                                  "line": {"recognition": 1, "preference": 2}, "given": {"preference": {"run": "r7"}}}
    assert items[0]["recognition"]["imported_score"] == 0.9 and items[0]["recognition"]["reading"] == "renormalised"
    assert items[1]["recognition"]["reading"] == "stored score" and items[1]["recognition"]["score"] == 0.4
    assert items[3]["recognition"]["exclusion_reason"] == NOT_IN_FILE
    low = items[4]["recognition"]  # excluded by the other tool, its readings kept
    assert low["excluded"] and low["score"] is None and low["orders"]["forward"]["p_own"] == 1.0
    ft = json.loads((out / "pairwise/label_none/xsum/gpt4+ft-recognition-on_cnn-n10-seed1/human/summary.json")
                    .read_text())
    assert ft["cell"]["finetune_task"] == "recognition" and ft["cell"]["transfer"] == "cross_dataset"
    assert "recognition" in ft and "preference" not in ft  # a recognition-only cell
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["n_lines"] == 13 and manifest["n_cells"] == 5 and manifest["exclusions"] == done["exclusions"]


def test_round_trip_gives_identical_cells(imported, tmp_path):
    _src, out, _done = imported
    exported = tmp_path / "again" / "judged.jsonl"  # the same file name: the cells' import block names it
    assert export_jsonl(out, exported) == 13  # as many as were read: a not_in_file verdict has no line
    again = tmp_path / "sweep2"
    import_jsonl(exported, again)
    assert _cell_files(again) == _cell_files(out)
    export_jsonl(again, tmp_path / "third.jsonl")
    assert (tmp_path / "third.jsonl").read_text() == exported.read_text()


def test_the_analysis_reads_the_imported_sweep(imported):
    _src, out, _done = imported
    data = load_sweeps([out])
    assert len(data.cells) == 5 and len(data.items) == 9
    # the cells that judged one question only are read with a warning that the other's mean is null
    assert sorted(p.reason for p in data.problems if p.status == "warning") == [
        "preference mean is null in summary.json"] * 2 + ["recognition mean is null in summary.json"]
    assert len(data.problems) == 3
    items = data.items.set_index(["setting", "label", "finetune_n_articles", "evaluator_variant", "article_id"],
                                 drop=False)
    plain = items[(items.setting == "pairwise") & (items.label == "none") & ~items.is_finetuned]
    a1 = plain[plain.article_id == "a1"].iloc[0]
    assert a1.rec_score == pytest.approx(0.5 * (0.75 + 0.625))
    assert a1.pref_score == pytest.approx(0.5 * (0.5 + 0.75))
    assert a1.own_words == 4 and a1.other_words == 2
    assert plain[plain.article_id == "a2"].iloc[0].rec_score == pytest.approx(0.4)
    assert bool(plain[plain.article_id == "a2"].iloc[0].pref_excluded)
    ind = items[items.setting == "individual"].iloc[0]
    assert ind.rec_score == pytest.approx(0.8 / (0.8 + 0.5))
    assert ind.pref_score == pytest.approx(4.5 / (4.5 + 2.0))
    assert items[items.label == "correct"].iloc[0].pref_score == pytest.approx(0.5 * (0.7 + 0.6))
    ft = data.cells[data.cells.is_finetuned].sort_values("evaluator_variant")
    assert list(ft.transfer) == ["cross_dataset"] * 2
    assert list(ft.evaluator_variant) == ["gpt4 [ft recognition on cnn, n=10] [seed=1]",
                                          "gpt4 [ft recognition on cnn, n=10] [seed=2]"]
    assert list(ft.rec_mean) == pytest.approx([0.5 * (0.9 + 0.8), 0.55])


def _bad_cases():
    ok = _line("a1", "recognition", score=0.5)
    return {
        "not_json": ([ok, "{not json"], "line 2"),
        "not_an_object": ([ok, "[1, 2]"], "line 2"),
        "missing_field": ([ok, {k: v for k, v in _line("a2", "recognition", score=0.5).items() if k != "source"}],
                          "line 2"),
        "unknown_setting": ([_line("a1", "recognition", setting="solo", score=0.5)], "line 1"),
        "unknown_label": ([ok, _line("a2", "recognition", label="maybe", score=0.5)], "line 2"),
        "unknown_question": ([ok, ok, _line("a2", "familiarity", score=0.5)], "line 3"),
        "prob_not_a_number": ([_line("a1", "recognition", forward={"1": "x", "2": 0.1}, backward={"1": 0.5})],
                              "line 1"),
        "prob_above_one": ([ok, _line("a2", "recognition", forward={"1": 1.5}, backward={"1": 0.5})], "line 2"),
        "duplicate": ([ok, _line("a2", "recognition", score=0.5), ok], "lines 1 and 3"),
        "truncated_last_line": ([ok, _line("a2", "recognition", score=0.5), '{"evaluator": "gpt4", "sour'],
                                "line 3"),
    }


@pytest.mark.parametrize("case", sorted(_bad_cases()))
def test_a_bad_line_is_an_error_naming_the_file_and_line_and_writes_nothing(tmp_path, case):
    lines, where = _bad_cases()[case]
    src = _write(tmp_path / "bad.jsonl", lines)
    if case == "truncated_last_line":
        src.write_text(src.read_text().rstrip("\n"))
    out = tmp_path / "sweep"
    with pytest.raises(ImportInputError) as err:
        import_jsonl(src, out)
    assert "bad.jsonl" in str(err.value) and where in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # no sweep, no staging folder beside it


def test_an_empty_file_is_an_error(tmp_path):
    src = _write(tmp_path / "empty.jsonl", [])
    with pytest.raises(ImportInputError, match="empty.jsonl is empty"):
        import_jsonl(src, tmp_path / "sweep")
    assert not (tmp_path / "sweep").exists()


def test_an_existing_destination_is_refused_unless_replace(tmp_path):
    src = _write(tmp_path / "one.jsonl", [_line("a1", "recognition", score=0.5)])
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ImportInputError, match="already exists"):
        import_jsonl(src, out)
    assert (out / "keep.txt").read_text() == "mine"
    assert import_jsonl(src, out, replace=True)["n_cells"] == 1
    assert not (out / "keep.txt").exists() and (out / MANIFEST_FILE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.jsonl", "sweep"]


def test_the_command_exits_2_with_one_paragraph(tmp_path, capsys):
    src = _write(tmp_path / "cli.jsonl", [_line("a1", "recognition", label="maybe", score=0.5)])
    assert imports_main(["jsonl", str(src), "--out", str(tmp_path / "sweep")]) == 2
    err = capsys.readouterr().err
    assert "cli.jsonl, line 1" in err and "Traceback" not in err
    good = _write(tmp_path / "good.jsonl", [_line("a1", "recognition", score=0.5)])
    assert imports_main(["jsonl", str(good), "--out", str(tmp_path / "sweep")]) == 0
    assert imports_main(["export", str(tmp_path / "sweep"), "--out", str(tmp_path / "back.jsonl")]) == 0
    assert json.loads((tmp_path / "back.jsonl").read_text())["score"] == 0.5


FACTS = {"own_anchor": 4.5, "other_anchor": 3, "own_correct": True, "other_correct": False, "own_author": "gpt4",
         "other_author": "human", "own_family": "openai", "other_family": "people", "judge_family": "openai"}


def test_output_facts_go_into_the_outputs_block_and_round_trip(tmp_path):
    lines = [_line("a1", "recognition", score=0.7, **FACTS),
             _line("a1", "preference", score=0.6, own_anchor=4.5, other_correct=False, own_author="gpt4"),
             _line("a2", "recognition", score=0.4, other_anchor=None, own_correct=None, judge_family="openai"),
             _line("a3", "recognition", score=0.5)]
    src = _write(tmp_path / "in" / "facts.jsonl", lines)
    out = tmp_path / "sweep"
    import_jsonl(src, out)
    items = [json.loads(x) for x in (out / "pairwise/label_none/xsum/gpt4/human/results.jsonl").open()]
    assert items[0]["outputs"] == {
        "own": {"author": "gpt4", "anchor": 4.5, "correct": True, "family": "openai"},
        "other": {"author": "human", "anchor": 3.0, "correct": False, "family": "people"},
        "judge": {"family": "openai"}}
    assert items[1]["outputs"] == {"judge": {"family": "openai"}}  # nulls are not given
    assert "outputs" not in items[2]
    exported = tmp_path / "again" / "facts.jsonl"
    export_jsonl(out, exported)
    back = [json.loads(x) for x in exported.open()]
    assert {k: back[0][k] for k in FACTS} == {**FACTS, "other_anchor": 3.0}
    assert not any(k in back[-1] for k in FACTS)
    again = tmp_path / "sweep2"
    import_jsonl(exported, again)
    assert _cell_files(again) == _cell_files(out)


@pytest.mark.parametrize("field, value", [("own_anchor", "high"), ("other_anchor", True), ("own_correct", 1),
                                          ("other_correct", "yes"), ("own_author", 3), ("judge_family", "")])
def test_a_fact_of_the_wrong_type_is_an_error(tmp_path, field, value):
    src = _write(tmp_path / "bad.jsonl", [_line("a1", "recognition", score=0.5),
                                          _line("a2", "recognition", score=0.5, **{field: value})])
    with pytest.raises(ImportInputError, match=f"bad.jsonl, line 2: '{field}'"):
        import_jsonl(src, tmp_path / "sweep")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_two_lines_of_one_item_giving_a_fact_two_values_is_an_error(tmp_path):
    src = _write(tmp_path / "bad.jsonl", [_line("a1", "recognition", score=0.5, own_anchor=4),
                                          _line("a2", "recognition", score=0.5),
                                          _line("a1", "preference", score=0.5, own_anchor=3.5)])
    with pytest.raises(ImportInputError, match="bad.jsonl, lines 1 and 3: two different own_anchor"):
        import_jsonl(src, tmp_path / "sweep")
    assert not (tmp_path / "sweep").exists()
