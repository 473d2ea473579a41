"""The end of a sweep with failed cells: one paragraph, a non-zero exit (see test_bad_inputs for the
whole sweep), and a W&B run per failed cell, marked failed."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from selfpref_sweep.records.schema import ERROR_FILE
from selfpref_sweep.sweep_outcome import sweep_outcome
from selfpref_sweep.tracking import track_failed_cell


def _cell(sweep: Path, name: str, error: str = "") -> Path:
    cell = sweep / name
    (cell / ".hydra").mkdir(parents=True)
    if error:
        (cell / ERROR_FILE).write_text(error)
    return cell


def test_the_paragraph_counts_failures_by_kind_and_says_where_they_are(tmp_path):
    sweep = tmp_path / "sweep"
    _cell(sweep, "0")
    _cell(sweep, "1", "ModelUnavailableError: OPENAI_API_KEY is not set\nmore")
    _cell(sweep, "2", "ModelUnavailableError: OPENAI_API_KEY is not set")
    _cell(sweep, "10", "DataError: empty article")
    outcome = sweep_outcome(sweep)
    assert outcome.n_cells == 4 and [p.name for p in outcome.failed] == ["1", "2", "10"]
    text = outcome.paragraph()
    assert text.startswith("3 of 4 cells failed (2 x ModelUnavailableError; 1 x DataError).")
    assert "First error: ModelUnavailableError: OPENAI_API_KEY is not set" in text
    assert f"1/{ERROR_FILE}, 2/{ERROR_FILE}, 10/{ERROR_FILE}" in text and "\n" not in text
    assert sweep_outcome(tmp_path / "missing").failed == []


def test_a_failed_cell_gets_a_wandb_run_marked_failed(tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    secret = "sk-test-abcdefghijklmnopqrstuvwxyz012345"
    cell = tmp_path / "cell"
    cell.mkdir()
    track_failed_cell(OmegaConf.create({"mode": "offline", "project": "p", "entity": None, "tags": []}), cell,
                      "gpt35-vs-human", "group", {"evaluator": {"name": "gpt35", "api_key": secret}},
                      "ModelUnavailableError: the environment variable OPENAI_API_KEY is not set\n")
    # finish() only informs W&B's service that the run ended; the service closes (flushes) the run's .wandb log
    # later. Its teardown waits for every run's log to close, so the file is complete to read.
    import wandb

    wandb.teardown()
    runs = list(cell.glob("wandb/offline-run-*"))
    assert len(runs) == 1
    log = runs[0].glob("*.wandb").__next__().read_bytes()
    assert b'"failed"' in log and b"ModelUnavailableError" in log  # summary: status and error
    assert "got exitcode: 1" in (runs[0] / "logs" / "debug.log").read_text()  # finish(exit_code=1): failed
    assert not any(secret.encode() in p.read_bytes() for p in cell.rglob("*") if p.is_file())


def test_wandb_disabled_logs_nothing_and_never_raises(tmp_path):
    track_failed_cell(OmegaConf.create({"mode": "disabled"}), tmp_path, "c", "g", {}, "DataError: x")
    assert not (tmp_path / "wandb").exists()
