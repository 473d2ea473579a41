"""Every measurement through an OpenAI-compatible server, and a model that refuses logprobs.

`real_model` tests: llama-cpp-python's server on 127.0.0.1 (tests/openai_server.py, SmolLM2-135M) judges a
small cell: familiarity through the completions endpoint's echoed prompt logprobs (checked against the same
GGUF evaluated directly with llama_cpp.Llama), and the competence control, on under judge.competence=auto
because the model config marks the server free. They skip, saying why, when llama_cpp or the GGUF is missing.

Stand-in tests (tests/openai_standin.py, canned answers on 127.0.0.1): a server without echo (familiarity off
with the reason, probed once per process), a server not marked free (competence stays off), and a model that
answers HTTP 400 to the logprobs parameter (one clear error naming sample_fallback_k, or sampled answers when
it is set; either way one logprob request in all).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from selfpref_sweep.config import JudgeConfig
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.measurements.competence.competence_cell import competence_enabled
from selfpref_sweep.models.base import Message, SequenceRequest
from selfpref_sweep.models.openai.openai_api import OpenAIModel
from selfpref_sweep.models.openai.openai_echo import compile_chat_template, echoed_continuation, render_chat
from selfpref_sweep.run.runner import run_cell
from tests.conftest import REPO
from tests.openai_server import smollm_gguf, start_or_skip
from tests.openai_standin import MODEL as STANDIN_MODEL
from tests.openai_standin import SUMMARY as STANDIN_SUMMARY
from tests.openai_standin import StandIn

SECRET = "sk-test-SERVERKEY789"  # a fake key; must never reach the store, results or messages
KEY_ENV = "SELFPREF_TEST_SERVER_KEY"
ARTICLES = {"a1": "A bakery in Leeds has won a national prize for its bread.",
            "a2": "Heavy rain flooded three roads in Bristol on Monday.",
            "a3": "A school in Derby opened a new library on Friday."}
HUMAN = {"a1": "A Leeds bakery won a national bread prize.", "a2": "Rain flooded three Bristol roads.",
         "a3": "A Derby school opened a new library."}
# SmolLM2-Instruct's chat template, as its GGUF carries it (the server renders chat requests with it)
SMOL_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                 "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")


def paper_root(tmp_path: Path) -> Path:
    """Three short articles and their human summaries in the paper's layout (short prompts: a fast cell)."""
    root = tmp_path / "paper"
    (root / "articles").mkdir(parents=True)
    (root / "summaries" / "xsum").mkdir(parents=True)
    (root / "articles" / "xsum_train_articles.json").write_text(json.dumps(ARTICLES))
    (root / "summaries" / "xsum" / "xsum_train_human_responses.json").write_text(json.dumps(HUMAN))
    return root


def server_overrides(base_url: str, model: str, root: Path, *more: str, n_articles: int = 3,
                     preset: str = "openai_compatible"):
    return [f"evaluator={preset}", "evaluator.name=server_judge", f"evaluator.model={model}",
            f"evaluator.base_url={base_url}", f"evaluator.api_key_env={KEY_ENV}", "evaluator.context_tokens=2048",
            "evaluator.max_concurrency=2", "evaluator.timeout_s=30", "evaluator.max_retries=2",
            "evaluator.retry_backoff_s=0.05", "dataset=paper_xsum", f"dataset.root={root}",
            f"dataset.n_articles={n_articles}", "summaries.max_new_tokens=16", "judge.min_answer_mass=0", *more]


def smol_template(tmp_path: Path) -> Path:
    path = tmp_path / "smollm2.jinja"
    path.write_text(SMOL_TEMPLATE)
    return path


def read_items(run_dir: Path):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def orders(item: dict, question: str):
    return list(item[question]["orders"].values())


def assert_no_secret(*paths: Path) -> None:
    for path in paths:
        for f in ([path] if path.is_file() else path.rglob("*")):
            if f.is_file():
                assert SECRET.encode() not in f.read_bytes(), f


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


# ---------------------------------------------------------------------------- the llama.cpp server
@pytest.fixture(scope="module")
def server():
    # One thread: on two cores shared with other work, llama.cpp's second thread mostly waits for the first
    # (measured here: a 145-token judging prompt in 1.6 s with one thread, 4 to 9 s with two).
    srv = start_or_skip(api_key=SECRET, threads=1)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def template_file(tmp_path_factory) -> Path:
    """The GGUF's own chat template in a file, as a user would give it (chat_template=<path>)."""
    import llama_cpp

    llm = llama_cpp.Llama(str(smollm_gguf()), vocab_only=True, verbose=False)
    text = llm.metadata["tokenizer.chat_template"]
    assert text == SMOL_TEMPLATE  # the stand-in tests use the same text inline
    path = tmp_path_factory.mktemp("template") / "smollm2.jinja"
    path.write_text(text)
    return path


def direct_loglikelihood(prompt: str, continuation: str):
    """(sum of the continuation's token logprobs, its token count), by llama_cpp.Llama on the same GGUF, with
    no server: the text tokenized as llama-cpp-python's server tokenizes a completions prompt."""
    import llama_cpp

    llm = llama_cpp.Llama(str(smollm_gguf()), n_ctx=1024, logits_all=True, verbose=False, n_threads=1)
    full = llm.tokenize((prompt + continuation).encode(), add_bos=True, special=True)
    head = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    assert full[:len(head)] == head  # the boundary falls between tokens
    llm.eval(full)
    logits = np.asarray(llm.scores[:len(full)], dtype=np.float64)
    logz = np.log(np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)) + logits.max(axis=1)
    total = sum(logits[i - 1, full[i]] - logz[i - 1] for i in range(len(head), len(full)))
    n = len(full) - len(head)
    llm.close()
    return float(total), n


@pytest.mark.real_model
def test_echoed_loglikelihood_equals_the_model_evaluated_directly(server, key_env, template_file):
    cfg = OmegaConf.create({"name": "smol_api", "backend": "openai", "model": server.model,
                            "base_url": server.base_url, "api_key_env": KEY_ENV, "free": True,
                            "chat_template": str(template_file), "echo_logprobs": "auto", "max_concurrency": 2})
    supported, how = OpenAIModel.sequence_logprobs_support(cfg)
    assert supported and "probe" in how
    model = OpenAIModel(cfg, model_cache="")
    messages = (Message("user", "Summarize in one sentence: Heavy rain flooded three roads in Bristol."),)
    continuation = "Rain flooded roads in Bristol on Monday."
    req = SequenceRequest(model.identity, continuation, messages)
    first = dict(model.sequence_logprobs([req]))[req]
    again = dict(model.sequence_logprobs([req]))[req]
    model.close()
    prompt = render_chat(compile_chat_template(SMOL_TEMPLATE), [{"role": "user", "content": messages[0].content}])
    assert prompt.endswith("<|im_start|>assistant\n")
    total, n = direct_loglikelihood(prompt, continuation)
    assert first.n_tokens == n and 5 <= n <= 15
    assert first.total < 0 and first.total == pytest.approx(total, abs=0.02 * n)
    assert again.total == pytest.approx(first.total, abs=1e-6) and again.n_tokens == first.n_tokens


@pytest.mark.real_model
def test_a_cell_on_the_llama_server_records_familiarity_and_competence(server, key_env, template_file, compose_cfg,
                                                                       tmp_path):
    """Two articles (the fewest the control can pair): llama-cpp-python's server sorts the whole vocabulary for
    every echoed token, so each scoring pass costs seconds on two cores."""
    overrides = server_overrides(server.base_url, server.model, paper_root(tmp_path),
                                 f"evaluator.chat_template={template_file}", n_articles=2, preset="llama_cpp_server")
    cfg = compose_cfg(overrides)
    assert cfg.evaluator.free is True and cfg.evaluator.echo_logprobs.value == "auto"  # the preset's
    enabled, why = competence_enabled(cfg.judge, cfg.evaluator)
    assert enabled and "openai judge 'server_judge' whose calls cost nothing" in why
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    fam, jc = summary["familiarity"], summary["judge_competence"]
    assert fam["enabled"] is True and "detected by a probe" in fam["reason"], fam
    assert fam["n"] == 2 and fam["n_missing"] == 0
    assert jc["enabled"] is True and jc["n"] == 2 and math.isfinite(jc["mean"]), jc
    items = read_items(tmp_path / "cell")
    assert len(items) == 2
    for it in items:
        f = it["familiarity"]
        assert f["own"] < 0 and f["other"] < 0 and f["difference"] == pytest.approx(f["own"] - f["other"])
        assert all(isinstance(n, int) and n > 0 for n in f["n_tokens"].values())
        readings = orders(it, "recognition") + orders(it, "preference") + list(it["competence"]["orders"].values())
        assert len(readings) == 6 and all(o["method"] == "logprobs" for o in readings)
    # the same cell again: every call, the scoring passes included, comes from the cache
    rerun = run_cell(resolve_cell(cfg), tmp_path / "rerun")
    assert rerun["model_calls"] == 0 and rerun["familiarity"] == fam
    assert_no_secret(tmp_path / "cell", tmp_path / "rerun", tmp_path / "calls.sqlite")


# ------------------------------------------------------------------------------- stand-in servers
@pytest.mark.parametrize("completions", ["refuse", "ignore", "generated_only"])
def test_echo_auto_without_server_support_is_off_with_the_reason_probed_once(completions, key_env, compose_cfg,
                                                                            tmp_path):
    root = paper_root(tmp_path)
    with StandIn(completions=completions) as api:
        for run in ("first", "second"):
            cfg = compose_cfg(server_overrides(api.base_url, STANDIN_MODEL, root, "evaluator.free=true",
                                               f"evaluator.chat_template={smol_template(tmp_path)}"),
                              store=tmp_path / f"{run}.sqlite")
            summary = run_cell(resolve_cell(cfg), tmp_path / run)
            fam = summary["familiarity"]
            assert fam["enabled"] is False and "cannot score given text" in fam["reason"], fam
            assert f"{api.base_url}/completions (echo=True" in fam["reason"]
            if completions == "refuse":  # the server's own words
                assert "refused the echo probe" in fam["reason"] and "'echo' parameter is not" in fam["reason"]
            else:  # a 200 that echoes no prompt logprobs (or only the generated token's, as llama-server)
                assert "returned no usable prompt logprobs" in fam["reason"]
            on_disk = json.loads((tmp_path / run / "summary.json").read_text())["familiarity"]
            assert on_disk == fam and all(it["familiarity"] is None for it in read_items(tmp_path / run))
            assert summary["judge_competence"]["enabled"] is True  # free: the other measurements go on
        # one probe in the process, for two cells of three articles
        assert api.counts["/v1/completions"] == 1
        assert all(h == f"Bearer {SECRET}" for h in api.auth_headers)
    assert_no_secret(tmp_path / "first", tmp_path / "second")


def test_echo_off_sends_no_probe_and_says_so(key_env, compose_cfg, tmp_path):
    with StandIn(completions="refuse") as api:
        cfg = compose_cfg(server_overrides(api.base_url, STANDIN_MODEL, paper_root(tmp_path),
                                           f"evaluator.chat_template={smol_template(tmp_path)}",
                                           "evaluator.echo_logprobs=off"))
        summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
        assert api.counts["/v1/completions"] == 0
    assert summary["familiarity"] == {"enabled": False, "reason": "judge.familiarity=auto is off for the openai judge "
                                      "'server_judge': it cannot score given text: echo_logprobs=off"}


def test_a_server_not_marked_free_keeps_competence_auto_off_with_the_reason(key_env, compose_cfg, tmp_path):
    with StandIn() as api:
        cfg = compose_cfg(server_overrides(api.base_url, STANDIN_MODEL, paper_root(tmp_path)))
        assert cfg.evaluator.free is False
        summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    jc = summary["judge_competence"]
    assert jc["enabled"] is False
    assert "'server_judge', whose calls may cost" in jc["reason"] and "judge.competence=on" in jc["reason"]
    assert all(not it.get("competence") for it in read_items(tmp_path / "cell"))
    free = OmegaConf.merge(cfg.evaluator, {"free": True})
    assert competence_enabled(JudgeConfig(), free)[0] is True
    assert competence_enabled(JudgeConfig(competence="off"), free) == (False, "judge.competence=off")


def run_cli(tmp_path: Path, *overrides: str):
    env = {**os.environ, "WANDB_MODE": "disabled", KEY_ENV: SECRET}
    env.pop("HYDRA_FULL_ERROR", None)
    cmd = [sys.executable, "run.py", "show_progress=false", f"hydra.run.dir={tmp_path / 'run'}",
           f"store.path={tmp_path / 'calls.sqlite'}", *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_a_model_that_refuses_logprobs_fails_once_naming_sample_fallback_k(tmp_path):
    with StandIn(refuse_logprobs=True) as api:
        proc = run_cli(tmp_path, *server_overrides(api.base_url, STANDIN_MODEL, paper_root(tmp_path)))
        asked = api.logprob_requests
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1, proc.stderr[-3000:]
    for words in ("server_judge", "refuses logprobs", "Unsupported parameter: 'logprobs'",
                  "evaluator.sample_fallback_k=K"):
        assert words in error[0], (words, error[0])
    assert out.count("refuses logprobs") <= 2  # the error line, and the log's record of the failed cell
    assert asked == 1  # the first judging request went alone; nothing else asked for logprobs
    assert "sample_fallback_k" in (tmp_path / "run" / "cell.error.txt").read_text()
    assert SECRET not in out
    assert_no_secret(tmp_path / "run")


def test_a_model_that_refuses_logprobs_is_sampled_with_sample_fallback_k(key_env, compose_cfg, tmp_path, caplog):
    root = paper_root(tmp_path)
    with StandIn(refuse_logprobs=True) as api:
        for run in ("first", "second"):  # two cells in one process, each with a fresh store
            cfg = compose_cfg(server_overrides(api.base_url, STANDIN_MODEL, root, "evaluator.sample_fallback_k=8",
                                               "evaluator.free=true"), store=tmp_path / f"{run}.sqlite")
            summary = run_cell(resolve_cell(cfg), tmp_path / run)
            items = read_items(tmp_path / run)
            assert len(items) == 3 and summary["n_items"] == 3
            assert all(it["own_summary"] == STANDIN_SUMMARY for it in items)
            readings = [o for it in items for q in ("recognition", "preference") for o in orders(it, q)]
            readings += [o for it in items if it.get("competence") for o in it["competence"]["orders"].values()]
            assert len(readings) > 12 and all(o["method"] == "sampled" for o in readings)
            for o in readings:  # a sampled distribution: counts out of k=8
                assert sum(o["probs"].values()) == pytest.approx(1.0)
                assert all(abs(p * 8 - round(p * 8)) < 1e-9 for p in o["probs"].values())
            assert summary["recognition"]["n"] == 3 and summary["judge_competence"]["enabled"] is True
        # the refusal is recorded per model: one logprob request in all, for two cells
        assert api.logprob_requests == 1
    warned = [r for r in caplog.records if "refuses logprobs" in r.getMessage()]
    assert len(warned) == 1 and "estimated from 8 samples" in warned[0].getMessage()


# ------------------------------------------------------------------------------------ the presets
@pytest.mark.parametrize("preset,model_env,url_env,port", [("vllm", "VLLM_MODEL", "VLLM_BASE_URL", 8000),
                                                          ("llama_cpp_server", "LLAMA_SERVER_MODEL",
                                                           "LLAMA_SERVER_URL", 8000)])
def test_server_presets_compose_validate_and_are_free(preset, model_env, url_env, port, compose_cfg, monkeypatch,
                                                      tmp_path):
    from selfpref_sweep.config.validation import validate_config
    from selfpref_sweep.errors import ConfigError
    from selfpref_sweep.run.plan import plan_cell

    for env in (model_env, url_env):
        monkeypatch.delenv(env, raising=False)
    cfg = compose_cfg([f"evaluator={preset}", f"evaluator.model=served-{preset}", "dataset.n_articles=2"])
    validate_config(cfg)
    m = cfg.evaluator
    assert m.name == preset and m.backend == "openai" and m.chat is True
    assert m.free is True and m.top_logprobs == 20 and m.echo_logprobs.value == "auto" and m.chat_template is None
    assert m.sample_fallback_k == 0 and m.api_key_env.endswith("_API_KEY")
    assert OpenAIModel.identity_for(m).weights == f"api:http://127.0.0.1:{port}/v1:served-{preset}"
    assert OpenAIModel.costs_money(m) is False and OpenAIModel.top_logprobs(m) == 20
    assert competence_enabled(cfg.judge, m)[0] is True
    # no chat template: familiarity is off, and says how to turn it on (nothing is sent to decide it)
    supported, why = OpenAIModel.sequence_logprobs_support(m)
    assert not supported and "chat_template" in why
    # plan mode: the control is counted and the cell priced at nothing, the server never called
    plan = plan_cell(resolve_cell(cfg), tmp_path / "plan")
    assert plan["judge_competence"]["enabled"] is True and plan["familiarity"]["enabled"] is False
    assert plan["cost_usd_est"] == 0.0
    paid = plan_cell(resolve_cell(compose_cfg([f"evaluator={preset}", f"evaluator.model=served-{preset}",
                                               "dataset.n_articles=2", "evaluator.free=false"])), tmp_path / "paid")
    assert paid["cost_usd_est"] is None and paid["judge_competence"]["enabled"] is False  # no price known
    # the URL from the environment; the model must be named (it is the cache key), and its variable says so
    monkeypatch.setenv(url_env, "http://127.0.0.1:9999/v1")
    bare = compose_cfg([f"evaluator={preset}"])
    with pytest.raises(ConfigError, match="model"):
        OpenAIModel.identity_for(bare.evaluator)
    monkeypatch.setenv(model_env, "from-env")
    assert OpenAIModel.identity_for(compose_cfg([f"evaluator={preset}"]).evaluator).weights == \
        "api:http://127.0.0.1:9999/v1:from-env"


def test_an_echo_whose_generated_special_token_is_not_in_the_text_is_matched():
    """vLLM's echo lists a generated "<|im_end|>" among the tokens but leaves it out of the text."""
    prompt = "<|im_start|>assistant\n"
    tokens = ["<|im_start|>", "assistant", "\n", "The", " café", " is", " open", ".", "<|im_end|>"]
    logprobs = [None, -16.2, -12.1, -3.0, -2.0, -1.0, -0.5, -0.25, -0.1]
    choice = SimpleNamespace(text=prompt + "The café is open.",
                             logprobs=SimpleNamespace(tokens=tokens, token_logprobs=logprobs))
    resp = SimpleNamespace(choices=[choice], usage=SimpleNamespace(prompt_tokens=8, completion_tokens=1))
    result, why = echoed_continuation(resp, prompt + "The café is open.", "The café is open.")
    assert why == "" and result.n_tokens == 5 and result.total == pytest.approx(-6.75)
