"""The OpenAI trainer against a stand-in for the files and fine-tuning endpoints on 127.0.0.1
(tests/openai_finetune_standin.py): JSONL and request shapes, the job flow, the cached model id,
resume after a restart (no second job), a crash between job creation and saving its id, and failures."""

from __future__ import annotations

import json

import pytest

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.errors import ModelUnavailableError
from selfpref_sweep.finetune import finetune_plan, format_plan, prepare_finetuned_evaluator
from selfpref_sweep.finetune.openai_trainer import STATE, FinetuneFailed, FinetunePending
from selfpref_sweep.models import load_model
from selfpref_sweep.store import Store
from tests.conftest import FAKE_BACKEND
from tests.openai_finetune_standin import StandIn

OPENAI_BACKEND = "openai=selfpref_sweep.models.openai.openai_api:OpenAIModel"


@pytest.fixture(autouse=True)
def _backends(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", f"{FAKE_BACKEND},{OPENAI_BACKEND}")
    monkeypatch.delenv("SELFPREF_TRAINERS", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def api():
    with StandIn(run_polls=2) as server:
        yield server


@pytest.fixture
def gpt_cfg(compose_cfg, tmp_path, api):
    def _make(*extra):
        return compose_cfg(["evaluator=gpt35", f"evaluator.base_url={api.base_url}", "evaluator.max_retries=1",
                            "finetune_task=recognition", "finetune_task.n_articles=2",
                            "finetune_task.openai.poll_interval_s=0.01", f"paths.model_cache={tmp_path / 'models'}",
                            *extra])

    return _make


def _prepare(cfg):
    store = Store(cfg.store.path)
    evaluator = load_model(cfg.evaluator, store, cfg.paths.model_cache, False)
    return prepare_finetuned_evaluator(resolve_cell(cfg), evaluator), evaluator


def test_job_flow_request_shapes_and_cached_model_id(gpt_cfg, api):
    cfg = gpt_cfg()
    result, base = _prepare(cfg)
    assert result.trained
    # one upload, one job, polled until it succeeded
    assert api.count("POST", "/v1/files") == 1 and api.count("POST", "/v1/fine_tuning/jobs") == 1
    upload = [r for r in api.requests if r["method"] == "POST" and r["path"] == "/v1/files"][0]
    assert upload["body"] == {"purpose": "fine-tune", "filename": "training.jsonl"}
    assert upload["content_type"].startswith("multipart/form-data")
    create = [r for r in api.requests if r["method"] == "POST" and r["path"] == "/v1/fine_tuning/jobs"][0]["body"]
    assert create["model"] == "gpt-3.5-turbo" and create["training_file"].startswith("file-")
    assert create["seed"] == 0 and len(create["suffix"]) <= 18
    assert create["metadata"]["selfpref_spec"] == result.record["spec_sha256"][:64]
    assert "method" not in create and "hyperparameters" not in create  # API defaults, as in the paper
    # the JSONL: chat rows, the recognition prompt, the answer as the assistant turn, balanced
    rows = list(api.file_rows.values())[0]
    assert len(rows) == 2 * 1 * 2  # demo: 2 articles x human x 2 orders
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system", "user", "assistant"]
        assert "Can you tell me which summary you wrote?" in row["messages"][1]["content"]
    assert sorted(r["messages"][2]["content"] for r in rows) == ["1", "1", "2", "2"]
    # own summaries were the base model's (through the chat endpoint), written into the prompts
    assert any("Stand-in:" in r["messages"][1]["content"] for r in rows)
    # the fine-tuned evaluator: the API's model id, identity with the fine-tune's fingerprint
    job = list(api.jobs.values())[0]
    assert result.record["model_id"] == job["fine_tuned_model"] and result.record["job_id"] == job["id"]
    assert result.model.model == job["fine_tuned_model"]
    tuned = load_model(result.model, base.store, cfg.paths.model_cache, False)
    assert tuned.identity.adapter == result.fingerprint and tuned.identity.weights != base.identity.weights
    assert result.record["loss_curve"] == [round(0.7 / s, 4) for s in range(1, 5)]
    assert result.summary_block()["model_id"] == job["fine_tuned_model"]
    # a second cell reuses the cached model id: no API call at all
    before = len(api.requests)
    again, _ = _prepare(gpt_cfg("dataset.n_articles=3"))
    assert not again.trained and again.model.model == job["fine_tuned_model"]
    assert len(api.requests) == before


def test_hyperparameters_when_set_use_the_supervised_method(gpt_cfg, api):
    _prepare(gpt_cfg("finetune_task.openai.n_epochs=3", "finetune_task.openai.learning_rate_multiplier=2.0"))
    create = [r for r in api.requests if r["path"] == "/v1/fine_tuning/jobs" and r["method"] == "POST"][0]["body"]
    assert create["method"] == {"type": "supervised",
                                "supervised": {"hyperparameters": {"n_epochs": 3, "learning_rate_multiplier": 2.0}}}


def test_a_restarted_sweep_resumes_polling_the_same_job(gpt_cfg, api, tmp_path):
    cfg = gpt_cfg("finetune_task.openai.wait_timeout_s=0.3")
    api.hold = True  # the job keeps running
    with pytest.raises(FinetunePending, match="Re-run"):
        _prepare(cfg)
    state_files = list((tmp_path / "models" / "finetunes").glob(f"*/{STATE}"))
    assert len(state_files) == 1
    state = json.loads(state_files[0].read_text())
    assert state["job_id"] in api.jobs and state["status"] in ("validating_files", "queued", "running")
    plan = finetune_plan(resolve_cell(cfg))
    assert state["job_id"] in plan["status"] and "resumes polling" in format_plan(plan)
    # "restart": a new process (new trainer, new client); the job finishes now
    api.hold = False
    result, _ = _prepare(gpt_cfg())
    assert result.trained and result.record["job_id"] == state["job_id"]
    assert api.count("POST", "/v1/fine_tuning/jobs") == 1 and api.count("POST", "/v1/files") == 1
    assert finetune_plan(resolve_cell(cfg))["status"] == "ready"


def test_a_crash_between_job_creation_and_saving_its_id_finds_the_job(gpt_cfg, api, tmp_path):
    cfg = gpt_cfg("finetune_task.openai.wait_timeout_s=0.2")
    api.hold = True
    with pytest.raises(FinetunePending):
        _prepare(cfg)
    path = next((tmp_path / "models" / "finetunes").glob(f"*/{STATE}"))
    state = json.loads(path.read_text())
    job_id = state.pop("job_id")
    state.pop("status")
    path.write_text(json.dumps(state))  # as if killed right after jobs.create returned
    api.hold = False
    result, _ = _prepare(gpt_cfg())
    assert result.record["job_id"] == job_id
    assert api.count("POST", "/v1/fine_tuning/jobs") == 1 and api.count("POST", "/v1/files") == 1
    listed = [r for r in api.requests if r["method"] == "GET" and r["path"] == "/v1/fine_tuning/jobs"]
    assert listed and listed[0]["query"].get("metadata[selfpref_spec]") == result.record["spec_sha256"][:64]


def test_a_failed_job_is_reported_and_not_silently_restarted(gpt_cfg, api):
    api.fail_next = True
    with pytest.raises(FinetuneFailed, match="stand-in failure"):
        _prepare(gpt_cfg())
    with pytest.raises(FinetuneFailed, match="Delete"):
        _prepare(gpt_cfg())
    assert api.count("POST", "/v1/fine_tuning/jobs") == 1


def test_no_key_is_needed_on_loopback_but_is_off_loopback(gpt_cfg, compose_cfg, tmp_path):
    from selfpref_sweep.errors import ModelUnavailableError
    from selfpref_sweep.finetune.openai_trainer import OpenAITrainer

    cfg = compose_cfg(["evaluator=gpt35", "finetune_task=recognition", f"paths.model_cache={tmp_path}"])
    with pytest.raises(ModelUnavailableError, match="OPENAI_API_KEY"):
        spec = resolve_cell(cfg)
        _ = OpenAITrainer(spec.evaluator, spec.finetune, spec.model_cache).client  # the property raises


def test_rate_limits_are_retried_after_the_servers_retry_after(gpt_cfg, api, monkeypatch):
    # The trainer shares the backend's retry policy (models/retry.py): a 429 is retried after the wait
    # the server names, and the job is created once.
    import time

    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)  # the trainer's default sleep; the polls use it too
    api.rate_limit_next, api.retry_after, api.rate_limit_path = 2, "7", "/v1/files"
    result, _ = _prepare(gpt_cfg("evaluator.max_retries=2"))
    assert result.trained
    limited = [r for r in api.requests if r.get("rate_limited")]
    assert len(limited) == 2
    assert sum(1 for w in waits if 7.0 <= w <= 7.1) == 2, waits  # Retry-After, plus at most 0.1 s jitter
    assert api.count("POST", "/v1/fine_tuning/jobs") == 1


def test_a_rate_limit_that_outlasts_the_retries_is_a_clear_error(gpt_cfg, api, monkeypatch):
    import time

    monkeypatch.setattr(time, "sleep", lambda s: None)
    api.rate_limit_next, api.rate_limit_path = 10, "/v1/files"
    with pytest.raises(ModelUnavailableError, match="RateLimitError"):
        _prepare(gpt_cfg("evaluator.max_retries=1"))
