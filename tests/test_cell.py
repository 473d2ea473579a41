"""A whole cell, and a whole sweep, on the deterministic test backend (no weights needed)."""

import json
import os
import subprocess
import sys

import pytest

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.run.runner import run_cell
from tests import fakes
from tests.conftest import FAKE_BACKEND, FAKE_EVALUATOR, REPO


def read_items(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_cell_writes_results_and_summary(compose_cfg, tmp_path):
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=5"])
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    on_disk = json.loads((tmp_path / "cell" / "summary.json").read_text())
    assert on_disk["status"] == "complete" and on_disk["n_items"] == 5 and on_disk["n_excluded"] == 0
    for q in ("recognition", "preference"):
        s = on_disk[q]
        assert 0 <= s["ci_low"] <= s["mean"] <= s["ci_high"] <= 1
        assert s["n"] == 5
        assert 0 <= on_disk["position_consistency"][q] <= 1
    # 5 generations + 5 articles x 2 questions x 2 orders
    assert summary["model_calls"] == 5 + 20
    items = read_items(tmp_path / "cell")
    assert [it["article_id"] for it in items] == [f"demo-{i:02d}" for i in range(1, 6)]
    first = items[0]["recognition"]
    assert set(first["orders"]) == {"forward", "backward"}
    fwd, bwd = first["orders"]["forward"], first["orders"]["backward"]
    assert fwd["own_position"] == 1 and bwd["own_position"] == 2
    assert first["score"] == pytest.approx(0.5 * (fwd["p_own"] + bwd["p_own"]))
    assert fwd["mass"] == pytest.approx(0.95)
    assert fwd["chosen_position"] in (1, 2)
    # the own summary is the evaluator's, standardized like every source
    assert items[0]["own_summary"].startswith("Fake_eval says:")


def test_rerun_makes_no_model_calls_and_builds_no_model(compose_cfg, tmp_path):
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=3"])
    first = run_cell(resolve_cell(cfg), tmp_path / "a")
    fakes.CONSTRUCTED.clear()
    again = run_cell(resolve_cell(cfg), tmp_path / "b")
    assert first["model_calls"] > 0 and again["model_calls"] == 0
    assert fakes.CONSTRUCTED == []  # a fully cached cell never loads the model
    assert read_items(tmp_path / "a") == read_items(tmp_path / "b")


def test_exclusions_are_counted_not_dropped(compose_cfg, tmp_path, monkeypatch):
    from selfpref_sweep.cell import dataset_loaders as data

    real = data.load_demo

    def doctored(cfg):
        ds = real(cfg)
        arts = ds.articles
        arts[0] = data.Article(arts[0].id, arts[0].text + " LOW-ANSWER-MASS", arts[0].reference)
        arts[1] = data.Article(arts[1].id, "   ", arts[1].reference)
        arts[2] = data.Article(arts[2].id, arts[2].text, None)  # no reference summary
        arts[3] = data.Article(arts[3].id, arts[3].text + " NO-ANSWER-MASS", arts[3].reference)
        return ds

    monkeypatch.setitem(data.LOADERS, "demo", doctored)
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=6"])
    s = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert s["n_items"] == 6 and s["n_excluded"] == 4
    assert s["exclusions"] == {"low_answer_mass": 1, "empty_article": 1, "missing_summary:human": 1,
                               "no_answer_probability": 1}
    assert s["recognition"]["n"] == 2 and s["recognition"]["n_excluded"] == 4
    items = {it["article_id"]: it for it in read_items(tmp_path / "cell")}
    assert len(items) == 6
    assert items["demo-02"]["preference"]["exclusion_reason"] == "empty_article"
    low = items["demo-01"]["recognition"]
    assert low["excluded"] and low["orders"]["forward"]["mass"] == pytest.approx(0.1)


def test_imported_source_needs_a_paper_dataset(compose_cfg, tmp_path):
    cfg = compose_cfg([*FAKE_EVALUATOR, "source=paper_gpt4"])
    with pytest.raises(ConfigError, match="paper_xsum"):
        run_cell(resolve_cell(cfg), tmp_path / "cell")


def test_paper_cell_on_real_paper_data(compose_cfg, tmp_path, paper_data):
    cfg = compose_cfg([*FAKE_EVALUATOR, "source=paper_gpt4", "dataset=paper_xsum", f"dataset.root={paper_data}",
                       "dataset.n_articles=3"])
    run_cell(resolve_cell(cfg), tmp_path / "cell")
    items = read_items(tmp_path / "cell")
    assert items[0]["article_id"] == "35232142"
    assert items[0]["other_summary"].startswith("Severe flooding in Newton Stewart")


def test_sweep_runs_every_cell_and_the_analysis(tmp_path):
    """A real Hydra multirun (4 cells) through run.py: each cell has its files and W&B offline run,
    a failing cell is recorded without stopping the sweep, and the report is written at the end."""
    sweep = tmp_path / "sweep"
    env = {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "SELFPREF_STORE": str(tmp_path / "calls.sqlite")}
    cmd = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake,fake2",
           "source=human,fake_other", "dataset.n_articles=3", "show_progress=false", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert len(cells) == 4
    seen = set()
    for cell in cells:
        s = json.loads((cell / "summary.json").read_text())
        seen.add((s["cell"]["evaluator"], s["cell"]["source"]))
        assert s["recognition"]["mean"] is not None
        assert list((cell / "wandb").glob("offline-run-*")), "no W&B offline run"
    assert seen == {("fake_eval", "human"), ("fake_eval", "fake_other"), ("fake_eval2", "human"),
                    ("fake_eval2", "fake_other")}
    assert (sweep / "report.html").exists() and (sweep / "report.md").exists()
    assert "slope" in (sweep / "report.md").read_text().lower()

    # A cell that fails (an imported source on the demo data) is recorded; the others still run.
    sweep2 = tmp_path / "sweep2"
    cmd2 = [c if not c.startswith("hydra.sweep.dir=") else f"hydra.sweep.dir={sweep2}" for c in cmd]
    cmd2 = [c if c != "source=human,fake_other" else "source=paper_gpt4,human" for c in cmd2]
    cmd2 = [c if c != "evaluator=fake,fake2" else "evaluator=fake" for c in cmd2]
    proc = subprocess.run(cmd2, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]  # a sweep with a failed cell says so in its exit status
    assert "1 of 2 cells failed" in proc.stderr
    failed, done = sweep2 / "0", sweep2 / "1"
    assert "paper_xsum" in (failed / "cell.error.txt").read_text()
    assert not (failed / "summary.json").exists()
    assert (done / "summary.json").exists()


def test_parallel_cells_share_the_store(tmp_path):
    """Hydra's joblib launcher runs cells in parallel processes over one store; a re-run is all hits."""
    env = {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "disabled",
           "SELFPREF_STORE": str(tmp_path / "calls.sqlite")}

    def sweep(name):
        cmd = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
               "source=human,fake_other", "dataset.n_articles=4", "show_progress=false", "hydra/launcher=joblib",
               "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={tmp_path / name}",
               "hydra.callbacks.analysis.enabled=false"]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return [json.loads((tmp_path / name / str(i) / "summary.json").read_text()) for i in range(2)]

    first = sweep("a")
    assert all(s["model_calls"] > 0 for s in first)
    again = sweep("b")
    assert [s["model_calls"] for s in again] == [0, 0]
    assert [s["recognition"]["mean"] for s in again] == [s["recognition"]["mean"] for s in first]


def test_disk_full_keeps_nothing_half_written(compose_cfg, tmp_path, monkeypatch):
    import errno

    from selfpref_sweep.errors import StorageError
    from selfpref_sweep.records import atomic as cell_module  # where results are written

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=2"])
    with monkeypatch.context() as m:
        m.setattr(cell_module.os, "fsync", full)
        with pytest.raises(StorageError, match="No space left"):
            run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert list((tmp_path / "cell").iterdir()) == []  # no results.jsonl, no summary.json, no temp file
    assert run_cell(resolve_cell(cfg), tmp_path / "cell")["model_calls"] == 0  # the re-run only reads the cache


@pytest.mark.parametrize("policy", ["truncate", "refuse"])
def test_article_longer_than_the_context(compose_cfg, tmp_path, monkeypatch, policy):
    from selfpref_sweep.cell import dataset_loaders as data

    real = data.load_demo

    def long_first(cfg):
        ds = real(cfg)
        a = ds.articles[0]
        ds.articles[0] = data.Article(a.id, a.text + " filler" * 3000, a.reference)
        return ds

    monkeypatch.setitem(data.LOADERS, "demo", long_first)
    # a 2000-token context leaves (2000 - 400 - 300) x 3 = 3900 characters of article
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=2", "evaluator.context_tokens=2000",
                       f"articles.too_long={policy}"])
    s = run_cell(resolve_cell(cfg), tmp_path / "cell")
    items = read_items(tmp_path / "cell")
    if policy == "truncate":
        assert s["n_truncated_articles"] == 1 and s["n_excluded"] == 0
        assert items[0]["article_truncated"] is True and items[1]["article_truncated"] is False
    else:
        assert s["n_excluded"] == 1 and s["exclusions"] == {"article_too_long": 1}
        assert items[0]["recognition"]["exclusion_reason"] == "article_too_long"
