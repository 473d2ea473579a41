"""The OpenAI Batch API path (selfpref_sweep/models/openai/openai_batch.py).

The `real_model` tests run every batch line on a real OpenAI-compatible server (llama-cpp-python's, serving
SmolLM2-135M on 127.0.0.1: tests/openai_server.py) through a loopback stand-in for OpenAI's /v1/files and
/v1/batches (tests/openai_batch_standin.py), which counts the lines it runs, i.e. what OpenAI would bill.
The direct (non-batch) path on the same server is the reference every batch result must equal.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from selfpref_sweep.errors import ModelUnavailableError
from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.models.openai.openai_api import OpenAIModel
from selfpref_sweep.models.openai.openai_batch import BatchPending, recorded_batches
from selfpref_sweep.store import Store
from tests.openai_batch_child import KEY_ENV, SECRET, generate_requests, judge_requests, model_cfg
from tests.openai_batch_standin import BatchStandIn
from tests.openai_server import start_or_skip

REPO = Path(__file__).resolve().parents[1]
TOL = 2e-3  # llama.cpp's float noise between prompt-cache splits (test_openai_backend's tolerance)


# ---------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def server():
    srv = start_or_skip()
    yield srv
    srv.stop()


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


@pytest.fixture(scope="module")
def direct(server):
    """The direct path's judgements and generations on the same server, keyed by request messages."""
    model = OpenAIModel(model_cfg(server.base_url, batch=False))
    judged = {r.messages: d for r, d in model.answer_distributions(judge_requests(model.identity))}
    generated = {r.messages: g for r, g in model.generate(generate_requests(model.identity))}
    model.close()
    return judged, generated


def cached_model(base_url: str, store: Store, **over) -> CachedModel:
    cfg = model_cfg(base_url, **over)
    return CachedModel(OpenAIModel.identity_for(cfg), lambda: OpenAIModel(cfg), store, show_progress=False)


def assert_equal_to_direct(results, reference):
    assert results
    for req, d in results.items():
        ref = reference[req.messages]
        assert d.method == ref.method == "logprobs" and d.missing_reason is None
        assert d.probs == pytest.approx(ref.probs, abs=TOL), (d.probs, ref.probs)
        assert (d.prompt_tokens, d.completion_tokens) == (ref.prompt_tokens, ref.completion_tokens)
        assert [t for t, _ in d.top_tokens] == [t for t, _ in ref.top_tokens]


def records(store: Store):
    return recorded_batches(store.path.with_name(store.path.name + ".batches"))


def wait_for(predicate, timeout_s: float = 120.0, what: str = "") -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# ------------------------------------------------------------------------- acceptance: kill, resume
@pytest.mark.real_model
def test_a_killed_batch_is_resumed_and_each_line_is_paid_once(server, direct, key_env, tmp_path):
    store_path = tmp_path / "calls.sqlite"
    with BatchStandIn(server.base_url) as api:
        api.hold = True  # the batch stays in_progress: the child is killed while it polls
        env = {**os.environ, KEY_ENV: SECRET}
        child = subprocess.Popen([sys.executable, "-m", "tests.openai_batch_child", api.base_url, str(store_path)],
                                 cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: api.batches_created == 1 and api.count("GET", "/v1/batches/") >= 2
                     or child.poll() is not None, what="the child to create its batch and poll it")
            assert child.poll() is None, child.stdout.read().decode()[-3000:]
        finally:
            child.kill()  # by its own handle: mid-batch, no chance to clean up
            child.wait(timeout=30)
        store = Store(store_path)
        assert len(store) == 0  # killed before any result
        [record] = records(store)
        [batch_id] = list(api.batches)
        assert record["batch_id"] == batch_id and not record["served"] and len(record["custom_ids"]) == 8
        assert api.count("POST", "/v1/files") == 1 and sum(api.lines_served.values()) == 0

        # The re-run resumes polling the same batch: nothing uploaded, nothing created, each line run once.
        api.hold = False
        model = cached_model(api.base_url, store)
        reqs = judge_requests(model.identity)
        results = model.answer_distributions(reqs)
        assert api.batches_created == 1 and api.count("POST", "/v1/files") == 1
        assert api.count("POST", "/v1/batches") == 1
        assert sorted(api.lines_served) == sorted(r.cache_key() for r in reqs)
        assert set(api.lines_served.values()) == {1} and api.direct_calls == 0
        assert set(results) == set(reqs) and model.calls == 8 and len(store) == 8
        assert_equal_to_direct(results, direct[0])
        [record] = records(store)
        assert record["served"] and record["status"] == "completed"

        # A third run is served from the cache: no batch, no line.
        again = cached_model(api.base_url, store)
        assert again.answer_distributions(reqs) == results and again.calls == 0
        assert api.batches_created == 1 and sum(api.lines_served.values()) == 8

        # The key is in no store row, batch record or uploaded line (only in the Authorization header).
        assert all(r["authorization"] == f"Bearer {SECRET}" for r in api.requests)
        for path in [store_path, *store_path.with_name(store_path.name + ".batches").iterdir()]:
            assert SECRET.encode() not in path.read_bytes()
        assert api.uploaded and all(SECRET not in text for text in api.uploaded)
        store.close()


@pytest.mark.real_model
def test_a_batch_created_but_not_recorded_is_found_by_its_metadata(server, direct, key_env, tmp_path):
    store = Store(tmp_path / "calls.sqlite")
    with BatchStandIn(server.base_url) as api:
        api.hold = True
        model = cached_model(api.base_url, store, batch_wait_timeout_s=0.3)
        reqs = judge_requests(model.identity, n=2)
        with pytest.raises(BatchPending, match="re-run resumes polling it"):
            model.answer_distributions(reqs)
        assert api.batches_created == 1 and len(store) == 0
        # As if killed between batches.create and saving its id: the record has no batch id.
        [record] = records(store)
        path = store.path.with_name(store.path.name + ".batches") / f"{record['digest']}.json"
        path.write_text(json.dumps({**record, "batch_id": None, "status": None}))
        api.hold = False
        results = cached_model(api.base_url, store).answer_distributions(reqs)
        assert api.batches_created == 1 and api.count("GET", "/v1/batches") >= 1
        assert sum(api.lines_served.values()) == 2 and api.direct_calls == 0
        assert_equal_to_direct(results, direct[0])
    store.close()


# ------------------------------------------------------------------------------------- failures
@pytest.mark.real_model
def test_failed_lines_are_asked_again_directly_once(server, direct, key_env, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    store = Store(tmp_path / "calls.sqlite")
    with BatchStandIn(server.base_url) as api:
        api.error_next, api.http_error_next, api.drop_next = 1, 1, 1  # error file, HTTP 500, missing
        model = cached_model(api.base_url, store)
        reqs = judge_requests(model.identity, n=6)
        results = model.answer_distributions(reqs)
        assert api.batches_created == 1
        assert sum(api.lines_served.values()) == 3 and api.direct_calls == 3  # each request paid for once
        assert set(results) == set(reqs) and len(store) == 6
        assert_equal_to_direct(results, direct[0])
        [record] = records(store)
        assert record["failed_lines"] == {"server_error": 1, "HTTP 500": 1, "missing": 1} and record["served"]
        assert "3 of 6 lines" in caplog.text and "asked again directly" in caplog.text


@pytest.mark.real_model
def test_an_expired_batch_keeps_its_finished_lines(server, direct, key_env, tmp_path):
    store = Store(tmp_path / "calls.sqlite")
    with BatchStandIn(server.base_url) as api:
        api.expire_after = 2
        model = cached_model(api.base_url, store)
        reqs = judge_requests(model.identity, n=4)
        results = model.answer_distributions(reqs)
        assert sum(api.lines_served.values()) == 2 and api.direct_calls == 2
        assert_equal_to_direct(results, direct[0])
        [record] = records(store)
        assert record["status"] == "expired" and record["failed_lines"] == {"batch_expired": 2}


@pytest.mark.real_model
def test_a_batch_that_fails_validation_stops_clearly_and_a_rerun_submits_anew(server, direct, key_env, tmp_path):
    store = Store(tmp_path / "calls.sqlite")
    with BatchStandIn(server.base_url) as api:
        api.fail_validation_next = True
        model = cached_model(api.base_url, store)
        reqs = judge_requests(model.identity, n=2)
        with pytest.raises(ModelUnavailableError, match="failed validation .*stand-in validation failure.*re-run"):
            model.answer_distributions(reqs)
        assert len(store) == 0 and sum(api.lines_served.values()) == 0
        results = cached_model(api.base_url, store).answer_distributions(reqs)
        assert api.batches_created == 2 and sum(api.lines_served.values()) == 2
        assert_equal_to_direct(results, direct[0])


@pytest.mark.real_model
def test_batch_generation_equals_the_direct_path(server, direct, key_env, tmp_path):
    store = Store(tmp_path / "calls.sqlite")
    with BatchStandIn(server.base_url) as api:
        model = cached_model(api.base_url, store)
        reqs = generate_requests(model.identity)
        out = model.generate(reqs)
        assert api.batches_created == 1 and sum(api.lines_served.values()) == len(reqs) and api.direct_calls == 0
        for req, g in out.items():
            ref = direct[1][req.messages]
            assert g.text and g.text == ref.text
            assert (g.prompt_tokens, g.completion_tokens) == (ref.prompt_tokens, ref.completion_tokens)
        line = json.loads(api.uploaded[0].splitlines()[0])
        assert line["body"]["max_tokens"] == 12 and line["url"] == "/v1/chat/completions"


# ------------------------------------------------------------------------------------ plan mode
def test_plan_prices_batch_models_at_the_batch_rate(compose_cfg, tmp_path, capsys):
    from selfpref_sweep.config.spec import resolve_cell
    from selfpref_sweep.run.plan import format_plan_line, plan_cell

    common = ["evaluator=gpt4o_mini", "source=human", "dataset.n_articles=2"]
    direct_plan = plan_cell(resolve_cell(compose_cfg(common)), tmp_path / "direct")
    batch_plan = plan_cell(resolve_cell(compose_cfg([*common, "evaluator.batch=true"])), tmp_path / "batch")
    assert batch_plan["uncached_calls"] == direct_plan["uncached_calls"] > 0
    assert direct_plan["cost_usd_est"] > 0
    expected = (batch_plan["prompt_tokens_est"] * 0.15 + batch_plan["completion_tokens_est"] * 0.60) / 1e6 * 0.5
    assert batch_plan["cost_usd_est"] == pytest.approx(round(expected, 4), abs=1e-4)
    assert batch_plan["by_model"]["evaluator"]["batch"] is True
    assert batch_plan["batch_price"] == ["evaluator"] and direct_plan["batch_price"] == []
    assert "batch price" in format_plan_line(batch_plan) and "batch price" not in format_plan_line(direct_plan)
    assert "batch price for evaluator" in capsys.readouterr().out
    half = plan_cell(resolve_cell(compose_cfg([*common, "evaluator.batch=true", "evaluator.batch_price_factor=0.25"])),
                     tmp_path / "quarter")
    assert half["cost_usd_est"] == pytest.approx(round(expected / 2, 4), abs=1e-4)


def test_batch_settings_are_range_checked(compose_cfg):
    from selfpref_sweep.config.validation import unchecked_numeric_fields, validate_config
    from selfpref_sweep.errors import ConfigError

    assert unchecked_numeric_fields() == []
    with pytest.raises(ConfigError, match="batch_max_requests=0 is out of range"):
        validate_config(compose_cfg(["evaluator=gpt4o_mini", "evaluator.batch_max_requests=0"]))
    with pytest.raises(ConfigError, match="batch_poll_s=0.0 is out of range"):
        validate_config(compose_cfg(["evaluator=gpt4o_mini", "evaluator.batch_poll_s=0"]))
    validate_config(compose_cfg(["evaluator=gpt4o_mini", "evaluator.batch=true"]))
