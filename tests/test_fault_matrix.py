"""Every fault the tool handles, in one table: each ends in the fault-free scores or in a clear, counted
exclusion or error. API faults go through the fault-injecting proxy in front of a stub OpenAI-compatible
server (loopback only); store faults damage, fill or garble the call store of a finished cell."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.errors import ModelUnavailableError, StorageError, StoreDamagedError
from selfpref_sweep.run.runner import run_cell
from selfpref_sweep.store import calls
from selfpref_sweep.store.salvage import check_store, salvage_store
from tests.conftest import FAKE_EVALUATOR
from tests.fault_proxy import FaultProxy
from tests.test_store_damage import checkpointed, damage, rows
from tests.test_transient_faults import StubServer

N_ARTICLES = 4
# The first POSTs of a cell (4 own + 4 other summaries, then the judging) get the fault here.
SCHEDULE = (None, "X", None, "X", "X", None, None, "X", None, None, "X", None, "X")
RETRIED = ("429", "500", "502", "503", "timeout", "drop", "strip_logprobs", "malformed")


@pytest.fixture(scope="module")
def stub():
    server = StubServer()
    yield server
    server.stop()


def api_overrides(url: str):
    return ["evaluator=openai_compatible", "evaluator.name=stub_api", "evaluator.model=stub",
            f"evaluator.base_url={url}/v1", "evaluator.api_key_env=SELFPREF_TEST_UNSET_KEY",
            "evaluator.max_concurrency=2", "evaluator.timeout_s=0.5", "evaluator.max_retries=6",
            "evaluator.retry_backoff_s=0.01", f"dataset.n_articles={N_ARTICLES}"]


def items(run_dir: Path) -> list:
    return (run_dir / "results.jsonl").read_text().splitlines()


def cell(compose_cfg, overrides, store: Path, run_dir: Path) -> dict:
    return run_cell(resolve_cell(compose_cfg(overrides, store=store)), run_dir)


# ------------------------------------------------------------------------------------------- API faults
def api_retried(fault, stub, compose_cfg, tmp_path):
    """A fault that asking again cures: the same items as without it."""
    clean = cell(compose_cfg, api_overrides(stub.root_url), tmp_path / "clean.sqlite", tmp_path / "clean")
    with FaultProxy(stub.root_url, fault_rate=0.0, delay_s=1.0,
                    schedule=[fault if s else None for s in SCHEDULE]) as proxy:
        faulty = cell(compose_cfg, api_overrides(proxy.base_url), tmp_path / "faulty.sqlite", tmp_path / "faulty")
        assert proxy.counts[fault] == SCHEDULE.count("X"), proxy.counts
    assert items(tmp_path / "faulty") == items(tmp_path / "clean")
    assert faulty["n_excluded"] == clean["n_excluded"] == 0


def api_logprobs_never_come(stub, compose_cfg, tmp_path):
    """A server that drops every judging logprob: each item excluded and counted, none stored."""
    cfg = api_overrides(stub.root_url)
    cell(compose_cfg, cfg, tmp_path / "calls.sqlite", tmp_path / "summaries")  # the summaries, fault-free
    with FaultProxy(stub.root_url, faults=("strip_logprobs",), fault_rate=1.0) as proxy:
        broken = cell(compose_cfg, api_overrides(proxy.base_url), tmp_path / "calls.sqlite", tmp_path / "broken")
    assert broken["exclusions"] == {"no_logprobs": N_ARTICLES} and broken["recognition"]["n"] == 0


def api_outage(stub, compose_cfg, tmp_path):
    """A server that answers 503 past the retries: a clear error naming it, nothing stored for the failures."""
    with (FaultProxy(stub.root_url, faults=("503",), fault_rate=1.0) as proxy,
          pytest.raises(ModelUnavailableError, match="still failing")):
        cell(compose_cfg, api_overrides(proxy.base_url), tmp_path / "calls.sqlite", tmp_path / "cell")
    assert rows(tmp_path / "calls.sqlite") == {}


# ----------------------------------------------------------------------------------------- store faults
def finished_fake_cell(compose_cfg, tmp_path) -> Path:
    overrides = [*FAKE_EVALUATOR, "source=human", "dataset.n_articles=10"]
    cell(compose_cfg, overrides, tmp_path / "calls.sqlite", tmp_path / "clean")
    return checkpointed(tmp_path / "calls.sqlite")


def store_damaged(how, compose_cfg, tmp_path):
    """A damaged store: a clear error naming it; after salvage, the same items, only lost calls made again."""
    store = finished_fake_cell(compose_cfg, tmp_path)
    before = len(rows(store))
    damage(store, how)
    overrides = [*FAKE_EVALUATOR, "source=human", "dataset.n_articles=10"]
    with pytest.raises(StoreDamagedError, match=str(store)):
        cell(compose_cfg, overrides, store, tmp_path / "again")
    salvage_store(store)
    kept = len(rows(store))
    again = cell(compose_cfg, overrides, store, tmp_path / "again")
    assert again["model_calls"] == before - kept
    assert items(tmp_path / "again") == items(tmp_path / "clean")


def store_unreadable_entry(compose_cfg, tmp_path):
    """An entry whose value is no longer UTF-8 JSON: a counted miss, recomputed, the same items."""
    store = finished_fake_cell(compose_cfg, tmp_path)
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE calls SET value = CAST(X'7B22ff' AS TEXT) WHERE rowid IN "
                     "(SELECT rowid FROM calls ORDER BY rowid LIMIT 3)")
    again = cell(compose_cfg, [*FAKE_EVALUATOR, "source=human", "dataset.n_articles=10"], store, tmp_path / "again")
    assert again["cache_unreadable"] == 3 and again["model_calls"] == 3
    assert items(tmp_path / "again") == items(tmp_path / "clean")


def store_disk_full(compose_cfg, tmp_path, monkeypatch):
    """The disk fills mid-cell: a clear error naming the store, which stays healthy; a re-run once there is
    space makes only the calls that were not stored, and gives the same items."""
    overrides = [*FAKE_EVALUATOR, "source=human", "dataset.n_articles=10"]
    clean = cell(compose_cfg, overrides, tmp_path / "clean.sqlite", tmp_path / "clean")
    store, real, writes = tmp_path / "calls.sqlite", calls.Store._write, []

    def filling(self, sql, params):
        if len(writes) >= 15:
            raise sqlite3.OperationalError("database or disk is full")
        writes.append(1)
        return real(self, sql, params)

    monkeypatch.setattr(calls.Store, "_write", filling)
    with pytest.raises(StorageError, match=f"{store}.*no space left"):
        cell(compose_cfg, overrides, store, tmp_path / "full")
    monkeypatch.setattr(calls.Store, "_write", real)
    assert check_store(store).healthy and len(rows(store)) == 15
    assert not (tmp_path / "full" / "summary.json").exists()
    again = cell(compose_cfg, overrides, store, tmp_path / "full")
    assert again["model_calls"] == clean["model_calls"] - 15 and again["cache_hits"] == 15
    assert items(tmp_path / "full") == items(tmp_path / "clean")


FAULTS = [*(pytest.param("api", f, id=f"api-{f}") for f in RETRIED),
          pytest.param("api", "strip_logprobs_always", id="api-logprobs-never"),
          pytest.param("api", "503_always", id="api-outage"),
          *(pytest.param("store", how, id=f"store-{how}") for how in ("truncated", "random_bytes", "header")),
          pytest.param("store", "unreadable_entry", id="store-unreadable-entry"),
          pytest.param("store", "disk_full", id="store-disk-full")]


@pytest.mark.parametrize("where, fault", FAULTS)
def test_fault_matrix(where, fault, stub, compose_cfg, tmp_path, monkeypatch):
    if fault in RETRIED:
        api_retried(fault, stub, compose_cfg, tmp_path)
    elif fault == "strip_logprobs_always":
        api_logprobs_never_come(stub, compose_cfg, tmp_path)
    elif fault == "503_always":
        api_outage(stub, compose_cfg, tmp_path)
    elif fault == "unreadable_entry":
        store_unreadable_entry(compose_cfg, tmp_path)
    elif fault == "disk_full":
        store_disk_full(compose_cfg, tmp_path, monkeypatch)
    else:
        store_damaged(fault, compose_cfg, tmp_path)
