"""Sweeps on other launchers, and a sweep killed mid-cell then re-run."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from tests.conftest import FAKE_BACKEND, REPO

BASE = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
        "source=human,fake_other", "show_progress=false", "hydra.callbacks.analysis.enabled=false"]


def env_for(tmp_path, **extra):
    return {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "disabled",
            "SELFPREF_STORE": str(tmp_path / "calls.sqlite"), **extra}


def hydra_cfg(*overrides):
    proc = subprocess.run([sys.executable, "run.py", *overrides, "--cfg", "hydra"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_launcher_presets_compose():
    assert "JoblibLauncher" in hydra_cfg("hydra/launcher=parallel")
    slurm = hydra_cfg("hydra/launcher=slurm", "hydra.launcher.partition=cpu")
    assert "SlurmLauncher" in slurm and "partition: cpu" in slurm and "timeout_min: 240" in slurm


def test_ray_presets_compose():
    assert "RayLauncher" in hydra_cfg("hydra/launcher=ray")  # the plugin's own: a private Ray for the sweep
    joined = hydra_cfg("hydra/launcher=ray_cluster")
    assert "RayLauncher" in joined and "address: auto" in joined and "object_store_memory: null" in joined


def test_submitit_runs_cells_as_separate_jobs(tmp_path):
    # submitit's local executor: the same code path as SLURM, with local processes instead of sbatch.
    cmd = [*BASE, "dataset.n_articles=2", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env_for(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for i in (0, 1):
        assert json.loads((tmp_path / "sweep" / str(i) / "summary.json").read_text())["status"] == "complete"


def rows(db):
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def test_killed_sweep_resumes_without_repeating_work(tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [*BASE, "dataset.n_articles=6", f"hydra.sweep.dir={sweep}"]
    db = tmp_path / "calls.sqlite"
    proc = subprocess.Popen(cmd, cwd=REPO, env=env_for(tmp_path, FAKE_DELAY_S="0.1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while rows(db) < 12 and time.time() < deadline:  # mid-way through the first cell's 6 + 24 calls
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = rows(db)
    assert 12 <= done_before < 30, done_before
    assert not (sweep / "0" / "summary.json").exists()  # a killed cell leaves no finished-looking result
    assert not list(sweep.glob("*/results.jsonl"))
    assert not list(sweep.glob("*/.*.tmp-*"))

    again = subprocess.run(cmd, cwd=REPO, env=env_for(tmp_path), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    summaries = [json.loads((sweep / str(i) / "summary.json").read_text()) for i in (0, 1)]
    # every call the killed run finished was served from the cache: no call made twice
    total_calls = rows(db)
    assert sum(s["model_calls"] for s in summaries) == total_calls - done_before
    assert summaries[0]["cache_hits"] >= done_before

    # ... and the results equal an uninterrupted run's (fresh store, fresh sweep dir)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    clean = subprocess.run([*BASE, "dataset.n_articles=6", f"hydra.sweep.dir={fresh / 'sweep'}"], cwd=REPO,
                           env=env_for(fresh), capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr[-2000:]
    for i in (0, 1):
        assert ((sweep / str(i) / "results.jsonl").read_text()
                == (fresh / "sweep" / str(i) / "results.jsonl").read_text())
        a = json.loads((sweep / str(i) / "summary.json").read_text())
        b = json.loads((fresh / "sweep" / str(i) / "summary.json").read_text())
        assert a["recognition"] == b["recognition"] and a["preference"] == b["preference"]
