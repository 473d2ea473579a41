"""A cell runs once however often it is launched: a second launch waits for the first and uses its results,
a claim whose launch is gone is taken over, and two nodes sharing a sweep folder never both do a cell."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from selfpref_sweep.errors import ConfigError
from selfpref_sweep.store import claims
from selfpref_sweep.store.claims import Claim, Holder, cell_digest
from tests.conftest import FAKE_BACKEND, REPO
from tests.test_launchers import rows


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(claims, "STALE_S", 0.5)
    monkeypatch.setattr(claims, "POLL_S", 0.02)


def test_a_second_claim_waits_for_the_first(tmp_path, quick):
    first = Claim(tmp_path / "c.claim", "cell", "here")
    first.acquire(on_wait=lambda *a: None)
    waited, got = [], threading.Event()

    def second():
        other = Claim(tmp_path / "c.claim", "cell", "here")
        other.acquire(on_wait=lambda holder, path: waited.append(holder))
        got.set()
        other.release()

    t = threading.Thread(target=second)
    t.start()
    time.sleep(1.0)  # twice STALE_S: the heartbeat keeps the first claim live
    assert not got.is_set() and waited and waited[0].token == first.me.token
    first.release()
    t.join(5)
    assert got.is_set() and not (tmp_path / "c.claim").exists()


def test_a_claim_from_a_dead_process_here_is_taken_over_at_once(tmp_path, quick):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = Holder(claims.socket.gethostname(), int(dead.stdout), "then", "t0", "cell", "here")
    (tmp_path / "c.claim").write_text(json.dumps(holder.__dict__))
    claim = Claim(tmp_path / "c.claim", "cell", "here")
    start = time.monotonic()
    claim.acquire(on_wait=lambda *a: pytest.fail("waited for a dead process"))
    assert time.monotonic() - start < claims.STALE_S
    claim.release()


def test_a_claim_from_another_node_is_taken_over_once_its_heartbeat_stops(tmp_path, quick):
    holder = Holder("node-b", 1, "then", "t0", "cell", "there")
    (tmp_path / "c.claim").write_text(json.dumps(holder.__dict__))
    claim = Claim(tmp_path / "c.claim", "cell", "here")
    seen = []
    start = time.monotonic()
    claim.acquire(on_wait=lambda h, p: seen.append(h.host))
    assert seen == ["node-b"] and time.monotonic() - start >= claims.STALE_S
    assert Holder.parse((tmp_path / "c.claim").read_bytes()).token == claim.me.token
    claim.release()


def test_a_folder_in_use_by_another_cell_is_a_clear_error(tmp_path, quick):
    first = Claim(tmp_path / "c.claim", "cell-a", "here")
    first.acquire(on_wait=lambda *a: None)
    with pytest.raises(ConfigError, match="different cell"):
        Claim(tmp_path / "c.claim", "cell-b", "here").acquire(on_wait=lambda *a: None)
    first.release()


def test_the_digest_ignores_where_results_go():
    cfg = {"evaluator": {"name": "x"}, "seed": 0, "wandb": {"mode": "offline"}, "store": {"path": "a"}}
    assert cell_digest(cfg) == cell_digest({**cfg, "wandb": {"mode": "disabled"}, "store": {"path": "b"}})
    assert cell_digest(cfg) != cell_digest({**cfg, "seed": 1})


# --------------------------------------------------------------------------------------------- processes
def env_for(store: Path, **extra) -> dict:
    return {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
            "SELFPREF_STORE": str(store), **extra}


CELL = [sys.executable, "run.py", "hydra.searchpath=[file://tests/conf]", "evaluator=fake", "source=fake_other",
        "dataset.n_articles=6", "show_progress=false"]


def test_two_launches_of_one_cell_make_one_set_of_calls(tmp_path):
    store, cell = tmp_path / "calls.sqlite", tmp_path / "cell"
    cmd = [*CELL, f"hydra.run.dir={cell}"]
    env = env_for(store, FAKE_DELAY_S="0.1")
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (cell / claims.CELL_CLAIM_FILE).exists() and time.time() < deadline:
        time.sleep(0.05)
    second = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=600) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], [o[1][-2000:] for o in outs]
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["model_calls"] == rows(store) > 0  # one set of calls
    # It met the first launch's claim and waited, or (on a busy machine) got there once the first had finished.
    assert "this launch made no calls" in outs[1][0]
    assert "waiting for it to finish" in outs[1][0] or "finished this cell while this launch ran" in outs[1][0]
    assert "made no calls" not in outs[0][0]
    assert len(list((cell / "wandb").glob("offline-run-*"))) == 1  # one W&B run
    assert not (cell / claims.CELL_CLAIM_FILE).exists()


def test_a_killed_launch_is_taken_over_without_repeating_its_calls(tmp_path):
    store, cell = tmp_path / "calls.sqlite", tmp_path / "cell"
    cmd = [*CELL, f"hydra.run.dir={cell}"]
    killed = subprocess.Popen(cmd, cwd=REPO, env=env_for(store, FAKE_DELAY_S="0.1"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while rows(store) < 14 and time.time() < deadline:  # mid-way through its judging
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    done_before = rows(store)
    assert (cell / claims.CELL_CLAIM_FILE).exists()  # its claim is left behind
    again = subprocess.run(cmd, cwd=REPO, env=env_for(store), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["model_calls"] == rows(store) - done_before and summary["cache_hits"] >= done_before
    assert not (cell / claims.CELL_CLAIM_FILE).exists()


def keys(db: Path) -> set:
    with sqlite3.connect(db) as conn:
        return {k for (k,) in conn.execute("SELECT key FROM calls")}


def test_two_nodes_sharing_a_sweep_folder_do_each_cell_once(tmp_path):
    """Two launches of one sweep into one folder, each with its own store (as two nodes would have): every
    cell is computed by one of them, and the other uses its results. (A node that computes a cell whose own
    summaries the other node wrote makes them again: its store does not have them.)"""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
           "source=human,fake_other", "dataset.n_articles=4", "show_progress=false",
           "hydra.callbacks.analysis.enabled=false", f"hydra.sweep.dir={sweep}"]
    # The waiting launch polls the claim every min(2 s, heartbeat): at the default 2 s it could learn that cell 0
    # was done only after the other launch had finished cell 1 too (about 1 s of calls). A launch that comes to a
    # cell finished meanwhile uses its results as well (the next test); a fast heartbeat keeps the two launches
    # overlapping on the claims, which is what this test is about.
    nodes = [subprocess.Popen(cmd, cwd=REPO, env=env_for(tmp_path / f"node{i}.sqlite", FAKE_DELAY_S="0.05",
                                                         SELFPREF_CLAIM_HEARTBEAT_S="0.2"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    outs = [p.communicate(timeout=600) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], [o[1][-2000:] for o in outs]
    alone = tmp_path / "alone"
    single = subprocess.run([*cmd[:-1], f"hydra.sweep.dir={alone / 'sweep'}"], cwd=REPO,
                            env=env_for(alone / "calls.sqlite"), capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-2000:]

    reused = [out.count("this launch made no calls") for out, _ in outs]
    # a reused one prints it too
    computed = [out.count("model calls:") - r for (out, _), r in zip(outs, reused, strict=True)]
    assert sum(computed) == 2 and [c + r for c, r in zip(computed, reused, strict=True)] == [2, 2]  # each cell once
    stores = [tmp_path / f"node{i}.sqlite" for i in (0, 1)]
    summaries = [json.loads((sweep / str(i) / "summary.json").read_text()) for i in (0, 1)]
    assert sum(s["model_calls"] for s in summaries) == sum(rows(db) for db in stores if db.exists())
    assert set().union(*(keys(db) for db in stores if db.exists())) == keys(alone / "calls.sqlite")
    for i in (0, 1):
        assert len(list((sweep / str(i) / "wandb").glob("offline-run-*"))) == 1
        assert ((sweep / str(i) / "results.jsonl").read_text()
                == (alone / "sweep" / str(i) / "results.jsonl").read_text())


def test_a_launch_reaching_a_cell_another_launch_finished_meanwhile_uses_its_results(tmp_path):
    """Two launches of one sweep into one folder, each with its own store: the slow one starts first; the fast
    one, started later with only the second cell, finishes that cell while the slow one is still on its first.
    The slow launch then reaches a finished cell without ever meeting its claim, and uses the other's results
    instead of computing them again. A later re-run of the finished sweep still recomputes (from its cache)."""
    sweep = tmp_path / "sweep"
    base = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
            "dataset.n_articles=4", "show_progress=false", "hydra.callbacks.analysis.enabled=false",
            f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.override_dirname}"]
    slow = subprocess.Popen([*base, "source=human,fake_other"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_for(tmp_path / "slow.sqlite", FAKE_DELAY_S="1"))
    deadline = time.time() + 120
    while not list(sweep.glob(f"*source=human*/{claims.CELL_CLAIM_FILE}")) and time.time() < deadline:
        time.sleep(0.05)
    fast = subprocess.run([*base, "source=fake_other"], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=env_for(tmp_path / "fast.sqlite"))
    assert fast.returncode == 0, fast.stderr[-2000:]
    assert slow.poll() is None, "the slow launch ended before the fast one finished: no overlap to test"
    out, err = slow.communicate(timeout=600)
    assert slow.returncode == 0, err[-2000:]
    assert out.count("this launch made no calls") == 1
    assert "another launch, which finished this cell while this launch ran" in out
    [cell] = sweep.glob("*source=fake_other*")  # the sub-directory names every override of the grid's axes
    done = json.loads((cell / "summary.json").read_text())
    assert done["model_calls"] > 0 and done["launch"]["cell_digest"]  # the fast launch's own record
    assert len(list((cell / "wandb").glob("offline-run-*"))) == 1  # one W&B run

    again = subprocess.run([*base, "source=fake_other"], cwd=REPO, capture_output=True, text=True, timeout=600,
                           env=env_for(tmp_path / "fast.sqlite"))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "made no calls" not in again.stdout  # an earlier run's result: recomputed from the cache, as before
    assert json.loads((cell / "summary.json").read_text())["model_calls"] == 0


def test_a_claim_that_cannot_be_written_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    from selfpref_sweep.errors import StorageError

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(claims.os, "write", full)
    with pytest.raises(StorageError, match=f"{tmp_path / 'c.claim'}.*No space left"):
        Claim(tmp_path / "c.claim", "cell", "here").acquire(on_wait=lambda *a: None)
    assert list(tmp_path.iterdir()) == []
