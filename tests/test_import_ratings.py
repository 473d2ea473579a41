"""Judge ratings in long form (selfpref_sweep/imports/ratings_format.py): one row per (judge, output) becomes
individual-setting preference cells, one per (dataset, judge, other author), whose items carry the outputs' facts;
every row lands in a cell or is counted; a bad file is one error naming the file, the row and the column, with
nothing written."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from selfpref_sweep.imports.__main__ import main as imports_main
from selfpref_sweep.imports.imported import MANIFEST_FILE, ImportInputError
from selfpref_sweep.imports.ratings_format import import_ratings

JUDGES = ("A", "B", "C")
AUTHORS = ("A", "B", "C", "human")
ITEMS = tuple(f"i{k}" for k in range(1, 6))
COLUMNS = "judge=judge,author=author,item=item,score=rating,human=human,correct=correct,text=text,length=length"
HEADER = ("judge", "author", "item", "rating", "human", "correct", "text", "length")
YES = {"A": "yes", "B": "TRUE", "C": "1"}  # each judge's file spells correct its own way
NO = {"A": "no", "B": "False", "C": "0"}


def score(judge: str, author: str, k: int) -> float:
    if (judge, author, k) == ("C", "human", 5):
        return 0.0  # rating_not_positive
    return 1.0 + (ord(judge) + 2 * ord(author[0]) + k) % 5 + (1.5 if judge == author else 0.0)


def anchor(author: str, k: int) -> float | None:
    return None if author == "human" else 2.0 + k * 0.5 + AUTHORS.index(author)


def correct(author: str, k: int) -> bool:
    return (AUTHORS.index(author) + k) % 2 == 0


def text(author: str, k: int) -> str:
    return " ".join([f"{author}{k}"] * (AUTHORS.index(author) + 2))


def _records() -> list[dict]:
    """A, B, C each rate the outputs of A, B, C and human on i1..i5; judge A also rates its own output on i6 (and no
    other's there); judge B's row of A's output on i3 gives a correct that is not a boolean."""
    rows = []
    for j in JUDGES:
        for k, item in enumerate(ITEMS, 1):
            for a in AUTHORS:
                c = correct(a, k)
                rows.append({"judge": j, "author": a, "item": item, "rating": score(j, a, k), "human": anchor(a, k),
                             "correct": "maybe" if (j, a, k) == ("B", "A", 3) else (YES[j] if c else NO[j]),
                             "text": text(a, k), "length": len(text(a, k).split())})
    rows.append({"judge": "A", "author": "A", "item": "i6", "rating": 4.0, "human": 3.0, "correct": "yes",
                 "text": "A6 A6", "length": 2})
    return rows


def _write_csv(path: Path, records: list[dict], header=HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for r in records:
            writer.writerow(["" if r.get(h) is None else r.get(h) for h in header])
    return path


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    """Typed values where the CSV has text: numbers, booleans (the odd spellings as the CSV's strings)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for r in records:
        obj = dict(r)
        if "correct" in r:
            obj["correct"] = {"yes": True, "TRUE": True, "1": True, "no": False, "False": False, "0": False}.get(
                r["correct"], r["correct"])
        lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _cell_files(sweep: Path, file_name: str) -> dict:
    return {p.relative_to(sweep).as_posix(): p.read_text(encoding="utf-8").replace(file_name, "FILE")
            for p in sorted(sweep.rglob("*")) if p.name in ("summary.json", "results.jsonl")}


def _items(out: Path, judge: str, other: str, dataset: str = "ratings") -> list[dict]:
    return [json.loads(x) for x in (out / f"individual/label_none/{dataset}/{judge}/{other}/results.jsonl").open()]


@pytest.fixture
def imported(tmp_path):
    src = _write_csv(tmp_path / "in" / "ratings.csv", _records())
    out = tmp_path / "sweep"
    return src, out, import_ratings(src, out, COLUMNS)


def test_one_cell_per_judge_and_other_author_every_row_counted(imported):
    _src, out, done = imported
    assert done["n_rows"] == 61 and done["n_cells"] == 9 and done["n_items"] == 45
    assert done["rows"] == {"other_output_in_cell": 45, "own_output_in_cells": 15, "own_output_only": 1}
    assert sum(done["rows"].values()) == done["n_rows"]
    # 15 rows of human's outputs carry no anchor; B's row of A on i3 no boolean; C rated human's i5 output 0
    assert done["exclusions"] == {"anchor_missing": 15, "correct_not_boolean": 1, "rating_not_positive": 1}
    cells = sorted(p.parent.relative_to(out).as_posix() for p in out.rglob("summary.json"))
    assert cells == [f"individual/label_none/ratings/{j}/{x}" for j in JUDGES for x in sorted(AUTHORS) if x != j]
    summary = json.loads((out / "individual/label_none/ratings/A/B/summary.json").read_text())
    assert summary["cell"] == {"evaluator": "A", "source": "B", "dataset": "ratings", "setting": "individual",
                               "label": "none", "finetune_task": "none", "finetune_dataset": None,
                               "finetune_n_articles": None, "transfer": "none"}
    assert summary["imported"] == {"format": "ratings", "file": "ratings.csv", "evaluator_name": "A"}
    assert "recognition" not in summary and summary["preference"]["n"] == 5
    expected = [score("A", "A", k) / (score("A", "A", k) + score("A", "B", k)) for k in range(1, 6)]
    assert summary["preference"]["mean"] == pytest.approx(sum(expected) / 5)
    human = json.loads((out / "individual/label_none/ratings/C/human/summary.json").read_text())
    assert human["exclusions"] == {"rating_not_positive": 1} and human["preference"]["n"] == 4
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["format"] == "ratings" and manifest["file"] == "ratings.csv"
    assert manifest["columns"]["score"] == "rating" and manifest["n_rows"] == 61 and manifest["n_cells"] == 9
    assert manifest["judges"] == list(JUDGES) and manifest["authors"] == list(AUTHORS)
    assert manifest["rows"] == done["rows"] and manifest["exclusions"] == done["exclusions"]
    assert manifest["families"] == {}


def test_items_hold_both_ratings_and_the_outputs_facts(imported):
    _src, out, _done = imported
    items = _items(out, "A", "B")
    assert [it["article_id"] for it in items] == list(ITEMS)
    first = items[0]
    own, other = score("A", "A", 1), score("A", "B", 1)
    pref = first["preference"]
    assert pref["score"] == pytest.approx(own / (own + other))
    assert pref["logodds"] == pytest.approx(math.log(own / other))
    assert pref["summaries"]["own"]["value"] == own and pref["summaries"]["other"]["value"] == other
    assert pref["summaries"]["own"]["probs"] == {} and pref["summaries"]["own"]["mass"] == 1.0
    assert first["evaluator"] == "A" and first["source"] == "B" and first["dataset"] == "ratings"
    assert first["own_summary"] == text("A", 1) and first["other_summary"] == text("B", 1)
    assert first["outputs"] == {
        "own": {"author": "A", "anchor": anchor("A", 1), "correct": correct("A", 1), "words": 2},
        "other": {"author": "B", "anchor": anchor("B", 1), "correct": correct("B", 1), "words": 3}}
    assert first["origin"] == {"kind": "imported", "format": "ratings", "file": "ratings.csv",
                               "row": {"own": 1, "other": 2}}
    # B's row of A's output on i3 is not a boolean; A's and C's rows give that output's correct
    assert _items(out, "B", "A")[2]["outputs"]["other"]["correct"] is correct("A", 3)
    human = _items(out, "C", "human")
    assert human[0]["outputs"]["other"] == {"author": "human", "correct": correct("human", 1), "words": 5}
    zero = human[4]["preference"]
    assert zero["excluded"] and zero["exclusion_reason"] == "rating_not_positive" and zero["score"] is None
    assert zero["summaries"]["other"]["value"] == 0.0  # the readings are kept


def test_a_judge_without_its_own_outputs_gets_cells_of_excluded_verdicts(tmp_path):
    # judge D rates A's and B's outputs on i1 and i2 (rows 62-65), none of its own
    extra = [{**r, "judge": "D", "rating": 3.0} for r in _records()
             if r["judge"] == "A" and r["author"] in ("A", "B") and r["item"] in ("i1", "i2")]
    src = _write_csv(tmp_path / "r.csv", _records() + extra)
    done = import_ratings(src, tmp_path / "sweep", COLUMNS)
    assert done["n_cells"] == 11 and done["exclusions"]["no_own_rating"] == 4
    summary = json.loads((tmp_path / "sweep/individual/label_none/ratings/D/A/summary.json").read_text())
    assert summary["exclusions"] == {"no_own_rating": 2} and summary["preference"]["n"] == 0
    assert any("no_own_rating" in w for w in summary["warnings"])
    item = _items(tmp_path / "sweep", "D", "A")[0]
    assert item["preference"]["summaries"] == {"other": {"probs": {}, "mass": 1.0, "value": 3.0, "method": "rating",
                                                         "missing_reason": None, "bounded": []}}
    assert item["outputs"]["own"] == {"author": "D"} and item["origin"]["row"] == {"other": 62}


def test_csv_and_jsonl_give_identical_cells(tmp_path, imported):
    _src, out, _done = imported
    src = _write_jsonl(tmp_path / "in" / "ratings.jsonl", _records())
    again = tmp_path / "sweep_jsonl"
    done = import_ratings(src, again, COLUMNS)
    assert done["n_rows"] == 61 and done["exclusions"]["correct_not_boolean"] == 1
    assert _cell_files(again, "ratings.jsonl") == _cell_files(out, "ratings.csv")


def test_datasets_and_families(tmp_path):
    rows = [{"model": j, "writer": a, "q": 7, "s": s, "ds": ds}
            for ds in ("math", "code") for j, a, s in (("gpt", "gpt", 8), ("gpt", "claude", 6), ("claude", "gpt", 5))]
    src = _write_jsonl(tmp_path / "r.jsonl", rows)
    fam = tmp_path / "families.csv"
    fam.write_text("name,family\ngpt,openai\nclaude,anthropic\nllama,meta\n")
    cols = "judge=model,author=writer,item=q,score=s,dataset=ds"
    done = import_ratings(src, tmp_path / "sweep", cols, families=fam)
    assert done["n_cells"] == 4 and done["rows"] == {"other_output_in_cell": 4, "own_output_in_cells": 2}
    item = _items(tmp_path / "sweep", "gpt", "claude", "math")[0]
    assert item["article_id"] == "7" and item["preference"]["score"] == pytest.approx(8 / 14)
    assert item["outputs"] == {"own": {"author": "gpt", "family": "openai"},
                               "other": {"author": "claude", "family": "anthropic"}, "judge": {"family": "openai"}}
    manifest = json.loads((tmp_path / "sweep" / MANIFEST_FILE).read_text())
    assert manifest["families"] == {"gpt": "openai", "claude": "anthropic"}  # llama is in no row
    as_json = tmp_path / "families.json"
    as_json.write_text(json.dumps({"gpt": "openai"}))
    import_ratings(src, tmp_path / "sweep2", cols, families=as_json)
    assert _items(tmp_path / "sweep2", "claude", "gpt", "code")[0]["outputs"] == {
        "own": {"author": "claude"}, "other": {"author": "gpt", "family": "openai"}}


def test_an_existing_destination_is_refused_unless_replace(tmp_path):
    src = _write_csv(tmp_path / "r.csv", _records())
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert imports_main(["ratings", str(src), "--out", str(out), "--columns", COLUMNS]) == 2
    assert (out / "keep.txt").read_text() == "mine"
    assert imports_main(["ratings", str(src), "--out", str(out), "--columns", COLUMNS, "--replace"]) == 0
    assert not (out / "keep.txt").exists() and (out / MANIFEST_FILE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "sweep"]


def _edit(k: int, **changes) -> list[dict]:
    """The fixture's records with row k (1-based) changed."""
    records = _records()
    records[k - 1] = {**records[k - 1], **changes}
    return records


def _bad_cases() -> dict:
    """name -> (records, columns, file name, what the message must name)."""
    first = _records()[0]
    return {
        "unknown_key": (_records(), COLUMNS + ",colour=x", "r.csv", ["r.csv", "unknown key 'colour'"]),
        "missing_key": (_records(), "judge=judge,author=author,item=item", "r.csv", ["r.csv", "score=COL"]),
        "column_not_in_header": (_records(), COLUMNS.replace("score=rating", "score=stars"), "r.csv",
                                 ["r.csv, line 1 (the header), column 'stars'"]),
        "score_not_numeric": (_edit(3, rating="high"), COLUMNS, "r.csv", ["r.csv, row 3 (line 4), column 'rating'"]),
        "score_not_finite": (_edit(4, rating="nan"), COLUMNS, "r.csv", ["row 4 (line 5), column 'rating'"]),
        "empty_judge": (_edit(5, judge=""), COLUMNS, "r.csv", ["row 5 (line 6), column 'judge'"]),
        "empty_author": (_edit(2, author=" "), COLUMNS, "r.csv", ["row 2 (line 3), column 'author'"]),
        "empty_item": (_edit(7, item=""), COLUMNS, "r.csv", ["row 7 (line 8), column 'item'"]),
        "anchor_not_numeric": (_edit(2, human="good"), COLUMNS, "r.csv", ["row 2 (line 3), column 'human'"]),
        "length_not_numeric": (_edit(2, length="long"), COLUMNS, "r.csv", ["row 2 (line 3), column 'length'"]),
        "rated_twice": (_records() + [first], COLUMNS, "r.csv", ["row 1 (line 2) and row 62 (line 63)"]),
        "two_anchors": (_edit(21, human=99.0), COLUMNS, "r.csv",  # row 21 is B's of A on i1, row 1 A's own
                        ["row 1 (line 2) and row 21 (line 22), column 'human'"]),
        "bad_extension": (_records(), COLUMNS, "r.txt", ["r.txt", "extension"]),
        "jsonl_score_not_numeric": (_edit(3, rating=[1]), COLUMNS, "r.jsonl", ["r.jsonl, row 3 (line 3), column "
                                                                              "'rating'"]),
        "jsonl_column_in_no_object": (_records(), COLUMNS + ",dataset=ds", "r.jsonl", ["r.jsonl, column 'ds'"]),
    }


@pytest.mark.parametrize("case", sorted(_bad_cases()))
def test_a_bad_input_exits_2_naming_file_row_and_column_and_writes_nothing(tmp_path, capsys, case):
    records, columns, name, wanted = _bad_cases()[case]
    src = (_write_jsonl if name.endswith(".jsonl") else _write_csv)(tmp_path / name, records)
    assert imports_main(["ratings", str(src), "--out", str(tmp_path / "sweep"), "--columns", columns]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(w in err for w in wanted), err
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no sweep, no staging folder beside it


@pytest.mark.parametrize("content", ["", "judge,author,item,rating\n", "\n\n"])
def test_an_empty_file_is_an_error(tmp_path, content):
    src = tmp_path / "empty.csv"
    src.write_text(content)
    with pytest.raises(ImportInputError, match="empty.csv is empty"):
        import_ratings(src, tmp_path / "sweep", "judge=judge,author=author,item=item,score=rating")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("name, content, wanted", [
    ("f.json", "[1, 2]", "expected a JSON object"),
    ("f.json", '{"gpt": 3}', "key 'gpt'"),
    ("f.csv", "gpt,openai,extra\n", "line 1"),
    ("f.csv", "gpt,openai\ngpt,meta\n", "two families"),
    ("f.yaml", "gpt: openai\n", "families file"),
])
def test_a_malformed_families_file_is_an_error(tmp_path, name, content, wanted):
    src = _write_csv(tmp_path / "r.csv", _records())
    fam = tmp_path / name
    fam.write_text(content)
    with pytest.raises(ImportInputError, match=wanted) as err:
        import_ratings(src, tmp_path / "sweep", COLUMNS, families=fam)
    assert name in str(err.value)
    assert not (tmp_path / "sweep").exists()


def test_the_bench_writes_a_file_the_import_reads(tmp_path):
    """bench/ratings_import.py's synthetic file, small: whole items, the judges among the authors."""
    import runpy

    bench = runpy.run_path(str(Path(__file__).resolve().parents[1] / "bench" / "ratings_import.py"))
    src = tmp_path / "ratings.csv"
    assert bench["write_ratings"](src, 120, 2, 3) == 120
    done = import_ratings(src, tmp_path / "sweep", bench["COLUMNS"])
    assert done["n_rows"] == 120 and done["n_cells"] == 4 and done["n_items"] == 80
    assert done["rows"] == {"other_output_in_cell": 80, "own_output_in_cells": 40}
