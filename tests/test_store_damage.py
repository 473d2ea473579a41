"""A damaged call store is named, checked and salvaged; a full disk or an unwritable store is a clear error
that leaves the store healthy; damaged result files are reported by the analysis and rebuilt by a re-run."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from selfpref_sweep.errors import StorageError, StoreDamagedError
from selfpref_sweep.store import Store
from selfpref_sweep.store.commands import main as store_main
from selfpref_sweep.store.salvage import check_store, salvage_store
from tests.conftest import FAKE_BACKEND, REPO

DAMAGE = ("truncated", "random_bytes", "header")


def damage(path: Path, how: str, seed: int = 0) -> None:
    """The three damages of a store seen in practice: cut to half, 4 KB of noise in the middle, header lost."""
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "random_bytes":
        mid = len(data) // 2 + 123
        data[mid: mid + 4096] = random.Random(seed).randbytes(4096)
    else:
        data[:100] = random.Random(seed).randbytes(100)
    path.write_bytes(bytes(data))


def checkpointed(path: Path) -> Path:
    """Every call in the main file (none left in the WAL), as a finished sweep leaves it."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def rows(path: Path) -> dict:
    with sqlite3.connect(path) as conn:
        return {k: (m, v) for k, m, v in conn.execute("SELECT key, model, value FROM calls")}


@pytest.fixture
def full_store(tmp_path) -> Path:
    rng = random.Random(1)
    store = Store(tmp_path / "calls.sqlite")
    for i in range(1500):
        store.put(f"key{i:05d}", kind="answer_distribution", model=f"model{i % 3}",
                  request={"prompt": "x" * rng.randint(40, 400)},
                  value={"p": [rng.random() for _ in range(rng.randint(3, 40))]})
    store.close()
    return checkpointed(tmp_path / "calls.sqlite")


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_store_is_named_checked_and_salvaged(full_store, how, capsys):
    original = rows(full_store)
    damage(full_store, how)
    with pytest.raises(StoreDamagedError) as err:
        Store(full_store)
    message = str(err.value)
    assert str(full_store) in message and f"python -m selfpref_sweep.store salvage {full_store}" in message

    assert store_main(["check", str(full_store)]) == 2
    assert "DAMAGED" in capsys.readouterr().out

    report = salvage_store(full_store)
    salvaged = rows(full_store)
    assert salvaged and len(salvaged) == sum(report.copied.values())
    assert all(original[k] == v for k, v in salvaged.items())  # nothing copied that differs from what was stored
    if report.lost is not None:
        assert report.lost == len(original) - len(salvaged)
    if how == "header":  # the header is rebuilt: every call survives
        assert report.header_rebuilt and salvaged == original
    assert Path(report.backup).is_file()
    assert store_main(["check", str(full_store)]) == 0
    assert Store(full_store).get("key00000") in (None, json.loads(original["key00000"][1]))


def test_salvage_into_a_new_path_leaves_the_damaged_file_alone(full_store, tmp_path, capsys):
    damage(full_store, "random_bytes")
    before = full_store.read_bytes()
    assert store_main(["salvage", str(full_store), str(tmp_path / "new.sqlite")]) == 0
    assert "salvaged" in capsys.readouterr().out
    assert full_store.read_bytes() == before
    assert len(Store(tmp_path / "new.sqlite")) > 0
    assert store_main(["salvage", str(full_store), str(tmp_path / "new.sqlite")]) == 2  # never overwrites


def test_an_unreadable_entry_is_a_counted_miss_and_a_put_repairs_it(tmp_path):
    store = Store(tmp_path / "calls.sqlite")
    store.put("k", kind="generate", model="m", request={}, value={"text": "fine"})
    store._connect().execute("UPDATE calls SET value = CAST(X'7B22ff' AS TEXT) WHERE key = 'k'")  # not UTF-8
    assert store.get("k") is None and store.unreadable == 1
    report = check_store(tmp_path / "calls.sqlite")
    assert report.healthy and report.unreadable == {"m": 1}
    store.put("k", kind="generate", model="m", request={}, value={"text": "again"})
    assert store.get("k") == {"text": "again"} and store.unreadable == 1


def test_a_full_disk_is_a_clear_error_and_the_store_stays_healthy(tmp_path):
    store = Store(tmp_path / "calls.sqlite")
    store.put("first", kind="generate", model="m", request={}, value={"text": "kept"})
    # SQLITE_FULL, as on a full disk: the file may not grow past its current pages
    pages = store._connect().execute("PRAGMA page_count").fetchone()[0]
    store._connect().execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StorageError) as err:
        for i in range(200):
            store.put(f"k{i}", kind="generate", model="m", request={}, value={"text": "y" * 2000})
    assert str(tmp_path / "calls.sqlite") in str(err.value) and "space" in str(err.value)
    store.close()
    assert check_store(tmp_path / "calls.sqlite").healthy
    assert Store(tmp_path / "calls.sqlite").get("first") == {"text": "kept"}


def test_a_read_only_store_is_a_clear_error(tmp_path, monkeypatch):
    Store(tmp_path / "calls.sqlite").close()
    from selfpref_sweep.store import calls

    real = sqlite3.connect
    monkeypatch.setattr(calls.sqlite3, "connect", lambda path, **kw: real(
        f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, **kw))
    store = Store(tmp_path / "calls.sqlite")  # a WAL store opens read-only ...
    with pytest.raises(StorageError) as err:  # ... and its first write says why it fails
        store.put("k", kind="generate", model="m", request={}, value={})
    assert str(tmp_path / "calls.sqlite") in str(err.value) and "writable" in str(err.value)


# ------------------------------------------------------------------------------- a sweep, damaged, repaired
SWEEP = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
         "source=human,fake_other", "dataset.n_articles=10", "show_progress=false",
         "hydra.callbacks.analysis.enabled=false"]


def sweep(tmp_path: Path, store: Path, name: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "disabled", "SELFPREF_STORE": str(store)}
    return subprocess.run([*SWEEP, f"hydra.sweep.dir={tmp_path / name}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    base = tmp_path_factory.mktemp("finished")
    proc = sweep(base, base / "calls.sqlite", "sweep")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return base


def results(sweep_dir: Path) -> list:
    return [(sweep_dir / str(i) / "results.jsonl").read_text() for i in (0, 1)]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_sweep_on_a_damaged_store_exits_2_naming_it_and_finishes_after_salvage(finished_sweep, tmp_path, how):
    store = tmp_path / "calls.sqlite"
    shutil.copy(checkpointed(finished_sweep / "calls.sqlite"), store)
    original = rows(store)
    damage(store, how)

    failed = sweep(tmp_path, store, "sweep")
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr
    assert f"The call store {store} is damaged" in failed.stderr
    assert f"python -m selfpref_sweep.store salvage {store}" in failed.stderr

    salvage = subprocess.run([sys.executable, "-m", "selfpref_sweep.store", "salvage", str(store)], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert salvage.returncode == 0, salvage.stderr
    kept = len(rows(store))
    again = sweep(tmp_path, store, "sweep")
    assert again.returncode == 0, again.stderr[-3000:]
    summaries = [json.loads((tmp_path / "sweep" / str(i) / "summary.json").read_text()) for i in (0, 1)]
    # only what was lost is made again, and the numbers are those of the undamaged sweep
    assert sum(s["model_calls"] for s in summaries) == len(original) - kept
    assert results(tmp_path / "sweep") == results(finished_sweep / "sweep")


def test_damaged_result_files_are_reported_then_rebuilt_from_the_store(finished_sweep, tmp_path):
    from selfpref_sweep.analysis.sweep.load import load_sweeps

    store = tmp_path / "calls.sqlite"
    shutil.copy(checkpointed(finished_sweep / "calls.sqlite"), store)
    shutil.copytree(finished_sweep / "sweep", tmp_path / "sweep")
    cells = tmp_path / "sweep"
    (cells / "0" / "summary.json").write_bytes((cells / "0" / "summary.json").read_bytes()[:200])
    (cells / "1" / "results.jsonl").write_bytes(b"\x00\xff" * 50 + (cells / "1" / "results.jsonl").read_bytes()[300:])

    data = load_sweeps([cells])  # no crash: each damaged cell is named
    reasons = {p.cell.split("/")[-1]: p.reason for p in data.problems}
    assert "summary.json" in reasons["0"] and "results.jsonl" in reasons["1"]

    again = sweep(tmp_path, store, "sweep")
    assert again.returncode == 0, again.stderr[-3000:]
    assert [json.loads((cells / str(i) / "summary.json").read_text())["model_calls"] for i in (0, 1)] == [0, 0]
    assert results(cells) == results(finished_sweep / "sweep")
