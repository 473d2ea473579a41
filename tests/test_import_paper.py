"""The paper importer on a tiny tree in the authors' layout (tests/paper_fixture.py), offline; and, where
../shared/paper-data is present, on the authors' real files against numbers computed from the raw JSON."""

from __future__ import annotations

import csv
import json
import lzma
import shutil
import statistics
from pathlib import Path

import pytest

from selfpref_sweep.errors import DataError
from selfpref_sweep.imports.__main__ import main as imports_main
from selfpref_sweep.imports.imported import ImportInputError
from selfpref_sweep.imports.paper_import import import_paper
from selfpref_sweep.records.schema import read_cell
from selfpref_sweep.records.sweep_dirs import find_cell_dirs
from tests import paper_fixture as PF

REAL = Path(__file__).resolve().parents[2] / "shared" / "paper-data"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    rows = PF.build(root)
    out = tmp_path_factory.mktemp("sweeps") / "paper"
    manifest = import_paper(root, out)
    return root, rows, out, manifest


def _table(out: Path) -> list[dict]:
    with open(out / "paper_table.csv", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _row(table, **keys) -> dict:
    hits = [r for r in table if all(r[k] == str(v) for k, v in keys.items())]
    assert len(hits) == 1, (keys, len(hits))
    return hits[0]


def _cells(out: Path) -> dict:
    return {tuple(sorted(s.cell.items())): r for d in find_cell_dirs(out) for r in [read_cell(d)] for s in [r.summary]}


def test_one_cell_per_evaluator_source_dataset_setting_label(imported):
    _, _, out, manifest = imported
    # pairwise: 2 datasets x (gpt35 + 3 fine-tunes + llama) x 4 sources; individual: 2 x 4; label: 2 x 4
    assert manifest["n_cells"] == 2 * 5 * 4 + 2 * 4 + 2 * 4
    cells = [read_cell(d).summary for d in find_cell_dirs(out)]
    ft = [c for c in cells if c.block("imported")["evaluator_name"] == "cnn_2_ft_gpt35" and c.cell["source"] == "human"]
    coords = {(c.cell["dataset"], c.cell["transfer"]) for c in ft}
    assert coords == {("paper_cnn", "in_domain"), ("paper_xsum", "cross_dataset")}
    assert {c.cell["finetune_task"] for c in ft} == {"recognition"}
    assert {c.cell["finetune_n_articles"] for c in ft} == {2}
    assert all(c.extra["model_calls"] == 0 for c in cells)
    llama = [c for c in cells if c.cell["evaluator"] == "llama2"]
    assert llama and all(c.cell["source"] != "paper_llama" for c in llama)


def test_items_say_where_they_came_from(imported):
    _, _, out, _ = imported
    cell = next(d for d in find_cell_dirs(out) if "gpt35" in d.parts and "paper_claude" in d.parts
                and "pairwise" in d.parts and "label_none" in d.parts and "paper_xsum" in d.parts)
    item = read_cell(cell).items[0]
    origin = item.measured["origin"]
    assert origin["kind"] == "imported" and origin["file"] == ["results/xsum/gpt35_results.json"]
    assert isinstance(origin["row"]["pairwise"], int)
    assert item.verdicts["recognition"].extra["imported_score"] is not None
    assert item.own_summary and item.other_summary  # the summaries' texts, for their word counts


def test_authors_mean_is_their_stored_mean_and_llama_is_recomputed(imported):
    _, rows, out, _ = imported
    table = _table(out)
    data = rows["pairwise"][("cnn", "gpt35")]
    r = _row(table, evaluator="gpt35", dataset="cnn", setting="pairwise", label="none", question="preference",
             source="all")
    assert float(r["authors_mean"]) == pytest.approx(statistics.fmean(x["self_preference"] for x in data), abs=1e-12)
    llama = rows["pairwise"][("xsum", "llama")]
    r = _row(table, evaluator="llama", dataset="xsum", setting="pairwise", label="none", question="recognition",
             source="human")
    human = [x for x in llama if x["model"] == "human"]
    assert float(r["authors_mean"]) == pytest.approx(statistics.fmean(x["detection_score"] for x in human))
    assert float(r["mean"]) == pytest.approx(statistics.fmean(PF.renormalised(x, "detection") for x in human))
    assert r["reading"] == "renormalised"


def test_dropped_and_unscorable_rows_are_counted_not_dropped(imported):
    _, _, out, manifest = imported
    table = _table(out)
    human = _row(table, evaluator="gpt35", dataset="xsum", setting="pairwise", label="none", question="recognition",
                 source="human")
    assert int(human["n"]) + int(human["excluded"]) == 14 and int(human["excluded"]) == 1  # x3 has no row
    pref = _row(table, evaluator="gpt35", dataset="xsum", setting="pairwise", label="none", question="preference",
                source="paper_claude")
    assert int(pref["excluded"]) == 1 and int(pref["authors_n"]) == 14  # "I" was stored as 0: they averaged it
    assert manifest["excluded_items"]["authors_no_row"] >= 2
    assert manifest["excluded_items"]["authors_top_token_not_an_answer"] == 1


def test_fine_tunes_are_evaluated_on_held_out_articles(imported):
    _, _, out, _ = imported
    r = _row(_table(out), evaluator="xsum_10_ft_gpt35", dataset="cnn", setting="pairwise", label="none",
             question="recognition", source="human")
    assert int(r["n"]) == 4  # keys[10:] of 14


def test_individual_ratio_per_article(imported):
    _, rows, out, _ = imported
    rec = {(x["key"], x["target_model"]): x["recognition_score"] for x in rows["individual"][("xsum", "recognition")]}
    ratios = [rec[(a, "gpt35")] / (rec[(a, "gpt35")] + rec[(a, "claude")]) for a in PF.ARTICLES["xsum"]]
    r = _row(_table(out), evaluator="gpt35", dataset="xsum", setting="individual", label="none",
             question="recognition", source="paper_claude")
    assert float(r["authors_mean"]) == pytest.approx(statistics.fmean(ratios))
    assert float(r["mean"]) == pytest.approx(statistics.fmean(ratios))


def test_label_sign_convention_is_unified(imported):
    _, rows, out, _ = imported
    table = _table(out)
    wrong = [x["self_preference"] for x in rows["label"]["wrong"]]
    r = _row(table, evaluator="gpt35", dataset="xsum", setting="pairwise", label="wrong", question="preference",
             source="all")
    assert float(r["authors_mean"]) == pytest.approx(statistics.fmean(wrong))  # as they stored it: 1 - P(own)
    assert float(r["mean"]) == pytest.approx(1 - statistics.fmean(wrong))  # P(own)
    correct = [x["self_preference"] for x in rows["label"]["correct"]]
    r = _row(table, evaluator="gpt35", dataset="xsum", setting="pairwise", label="correct", question="preference",
             source="all")
    assert float(r["mean"]) == pytest.approx(statistics.fmean(correct))


def test_defects_are_flagged_in_the_cells(imported):
    _, _, out, manifest = imported
    warnings = [w for d in find_cell_dirs(out) for w in read_cell(d, items=False).summary.warnings]
    assert any("position bias" in w for w in warnings)  # Llama's mixed formulas
    assert any("cannot be renormalised" in w for w in warnings)  # GPT's top-1 rows
    assert len(manifest["defects"]) >= 5


def test_the_analysis_reads_the_imported_sweep(imported, tmp_path):
    from selfpref_sweep.analysis.job.pipeline import run_analysis

    _, _, out, _ = imported
    copy = tmp_path / "sweep"
    shutil.copytree(out, copy)
    result = run_analysis([copy], wandb_cfg={"mode": "disabled"})
    trend = result.est.paper_trends
    row = trend[(trend["evaluator"] == "gpt35") & (trend["transfer"] == "all") & (trend["setting"] == "pairwise")]
    assert len(row) == 1 and int(row["n_points"].iloc[0]) == 6
    payload = json.loads((copy / "analysis" / "regressions.json").read_text())
    assert payload["paper_trend"] and "The paper's fine-tune trend" in (copy / "report.md").read_text()


@pytest.mark.parametrize("damage", ["truncated_xz", "bad_json", "unknown_model", "missing_field"])
def test_a_bad_file_is_a_clear_error_and_writes_nothing(tmp_path, damage, capsys):
    root = tmp_path / "paper"
    PF.build(root)
    target = root / "results/xsum/llama_results.json.xz"
    if damage == "truncated_xz":
        target.write_bytes(target.read_bytes()[:40])
        named = "results/xsum/llama_results.json"
    elif damage == "bad_json":
        (root / "results/xsum/gpt35_results.json").write_text('[{"key": "x0", ', encoding="utf-8")
        named = "results/xsum/gpt35_results.json"
    elif damage == "unknown_model":
        PF.write(root, "results/xsum/gpt5_results.json", [])
        named = "gpt5"
    else:
        PF.write(root, "results/xsum/gpt35_results.json", [{"model": "human", "detection_score": 0.5}])
        named = "row 0: missing field(s) key"
    out = tmp_path / "out"
    with pytest.raises(ImportInputError, match=named.replace("(", r"\(").replace(")", r"\)")):
        import_paper(root, out)
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())
    assert imports_main(["paper", str(root), "--out", str(out)]) == 2
    assert named in capsys.readouterr().err and not out.exists()


def test_an_existing_sweep_is_refused_or_replaced_whole(tmp_path):
    root = tmp_path / "paper"
    PF.build(root)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(ImportInputError, match="already exists"):
        import_paper(root, out)
    assert (out / "mine.txt").read_text() == "keep"
    import_paper(root, out, replace=True)
    assert not (out / "mine.txt").exists() and (out / "paper_table.csv").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# ------------------------------------------------------------------ the authors' real files (skipped without them)
def _load(path: Path):
    return json.loads(lzma.open(path).read())


@pytest.mark.skipif(not (REAL / "results").is_dir(), reason="../shared/paper-data is not here")
def test_the_papers_numbers_from_the_real_files(tmp_path):
    """A subset of the real files (every kind): authors_mean against the means computed here from the raw JSON,
    and the paper's own pooled numbers to 3 decimals."""
    root = tmp_path / "paper"
    rels = ["articles/xsum_train_articles.json", "results/xsum/gpt4_results.json.xz",
            "results/xsum/llama_results.json.xz", "results/xsum/xsum_10_ft_gpt35_results.json.xz",
            "individual_setting_results/recognition_results/xsum/gpt4_results.json.xz",
            "individual_setting_results/score_results/xsum/gpt4_results.json.xz"]
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REAL / rel, root / rel)
    out = tmp_path / "out"
    import_paper(root, out)
    table = _table(out)
    pooled = {(r["evaluator"], r["setting"], r["question"]): r for r in table if r["source"] == "all"}
    gpt4 = _load(root / rels[1])
    for q, field in (("recognition", "detection_score"), ("preference", "self_preference")):
        mine = float(pooled[("gpt4", "pairwise", q)]["authors_mean"])
        assert mine == pytest.approx(statistics.fmean(r[field] for r in gpt4), abs=1e-9)
    assert round(float(pooled[("gpt4", "pairwise", "recognition")]["authors_mean"]), 3) == 0.672  # paper: .6717
    assert round(float(pooled[("gpt4", "pairwise", "preference")]["authors_mean"]), 3) == 0.705
    # notebook: .6745
    assert round(float(pooled[("xsum_10_ft_gpt35", "pairwise", "recognition")]["authors_mean"]), 3) == 0.674
    assert round(float(pooled[("gpt4", "individual", "recognition")]["authors_mean"]), 3) == 0.609
    llama = _load(root / rels[2])
    mine = float(pooled[("llama", "pairwise", "recognition")]["mean"])
    own = [0.5 * (r["forward_detection_output"]["1"] / sum(r["forward_detection_output"].values())
                  + r["backward_detection_output"]["2"] / sum(r["backward_detection_output"].values())) for r in llama]
    by_source = {}
    for r, v in zip(llama, own, strict=True):
        by_source.setdefault(r["model"], []).append(v)
    assert mine == pytest.approx(statistics.fmean(statistics.fmean(v) for v in by_source.values()), abs=1e-9)


def test_the_item_viewer_of_a_large_sweep_shows_each_cells_first_items(imported):
    from selfpref_sweep.analysis.report.items_view import collect_items, render_items_html

    _, _, out, manifest = imported
    data = collect_items([out], max_items=100)
    n_cells = manifest["n_cells"]
    assert data["capped"] == {"per_cell": 100 // n_cells, "shown": n_cells * (100 // n_cells),
                              "total": manifest["n_items"]}
    assert len(data["cells"]) == n_cells and f"Showing {len(data['items'])} of" in render_items_html(data)
    assert "capped" not in collect_items([out], max_items=10**6)


def test_rows_on_training_articles_are_left_out_and_counted_once(tmp_path):
    root = tmp_path / "paper"
    PF.build(root)
    for kind, field in (("recognition", "recognition_score"), ("score", "score")):
        rows = [{"key": a, "model": "xsum_2_ft_gpt35", "target_model": t, field: 0.5 + 0.01 * i,
                 **({"scores": {"3": 1.0}} if kind == "score" else {})}
                for i, a in enumerate(PF.ARTICLES["xsum"]) for t in PF.SOURCES]
        PF.write(root, f"individual_setting_results/{kind}_results/xsum/xsum_2_ft_gpt35_results.json", rows)
    manifest = import_paper(root, tmp_path / "out")
    # keys[:2] of xsum, 5 targets each, in each of the two files: counted once, not once per file of the group
    assert manifest["rows_left_out"] == {"preference:training_article": 10, "recognition:training_article": 10}
    group = [g for g in manifest["file_groups"] if g["evaluator"] == "xsum_2_ft_gpt35" and g["setting"] == "individual"]
    assert len(group) == 1 and len(group[0]["files"]) == 2


def test_a_sources_interval_is_its_cells_own(imported):
    _, _, out, _ = imported
    cell = next(d for d in find_cell_dirs(out) if d.parts[-5:] == ("pairwise", "label_none", "paper_cnn", "gpt35",
                                                                    "paper_claude"))
    stats = read_cell(cell, items=False).summary.questions["preference"]
    r = _row(_table(out), evaluator="gpt35", dataset="cnn", setting="pairwise", label="none", question="preference",
             source="paper_claude")
    assert (float(r["mean"]), float(r["ci_low"]), float(r["ci_high"])) == pytest.approx(
        (stats.mean, stats.ci_low, stats.ci_high), rel=1e-12)


def test_a_malformed_summaries_file_is_an_error_not_skipped(tmp_path):
    root = tmp_path / "paper"
    PF.build(root)
    PF.write(root, "summaries/xsum/xsum_train_claude_responses.json", {"x0": 3})
    with pytest.raises(DataError, match="claude summaries file has a number for id 'x0'"):
        import_paper(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_raw_llama_label_files_are_recognised_and_said_not_read(tmp_path):
    root = tmp_path / "paper"
    PF.build(root)
    PF.write(root, "label_results/raw_llama_label_results/xsum_label_llama_raw.json", [], xz=True)
    manifest = import_paper(root, tmp_path / "out")
    assert list(manifest["files_not_read"]) == ["label_results/raw_llama_label_results/xsum_label_llama_raw.json.xz"]
    assert manifest["files_not_recognised"] == []
