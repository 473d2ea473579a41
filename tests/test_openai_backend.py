"""The OpenAI backend (selfpref_sweep.models.openai.openai_api).

Unit tests (no network) cover the config, the key handling and the logprob arithmetic. The
`real_model` tests talk to a real OpenAI-compatible server, llama-cpp-python's, on 127.0.0.1 only
(tests/openai_server.py), through the real `openai` client: directly, and through a seeded
fault-injecting proxy (tests/fault_proxy.py) that answers a fraction of the requests with 429s,
500s, hangs past the client timeout, 401s or responses without logprobs. They skip, saying why,
when llama_cpp or the SmolLM2 GGUF is not installed.

The server is started with an API key (a fake one), so every request is really authenticated and a
wrong key really gets a 401.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from selfpref_sweep.errors import ConfigError, ModelUnavailableError
from selfpref_sweep.models.base import (
    AnswerDistribution,
    AnswerRequest,
    GenerateRequest,
    GenerationDecoding,
    JudgeDecoding,
    Message,
    ModelIdentity,
)
from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.models.openai.openai_api import (
    BACKEND_VERSION,
    NO_KEY,
    OpenAIModel,
    answer_matches,
    distribution_from_top_logprobs,
    is_loopback,
)
from selfpref_sweep.models.retry import retry_after_s
from selfpref_sweep.store import Store
from tests.fault_proxy import FaultProxy
from tests.openai_server import ARTICLES, few_shot_judge_requests, start_or_skip

SECRET = "sk-test-SECRET123"  # a fake key; must never reach the store, the logs or an error message
WRONG_KEY = "sk-test-WRONG456"
KEY_ENV = "SELFPREF_TEST_OPENAI_KEY"
CONF = Path(__file__).resolve().parents[1] / "conf"


def model_cfg(base_url="http://127.0.0.1:9/v1", **over):
    cfg = {"name": "smol_api", "backend": "openai", "model": "smollm135", "base_url": base_url,
           "api_key_env": KEY_ENV, "max_concurrency": 4, "top_logprobs": 20, "timeout_s": 20.0, "max_retries": 6,
           "sample_fallback_k": 0}
    cfg.update(over)
    return OmegaConf.create(cfg)


# ----------------------------------------------------------------------------------- unit tests
def test_identity_holds_url_and_model_but_never_the_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    cfg = model_cfg(base_url="http://127.0.0.1:9/v1/")
    ident = OpenAIModel.identity_for(cfg)
    assert ident == ModelIdentity(name="smol_api", backend="openai", weights="api:http://127.0.0.1:9/v1:smollm135",
                                  dtype="", adapter=None, backend_version=BACKEND_VERSION)
    default = OpenAIModel.identity_for(model_cfg(base_url=None, model="gpt-4o-mini", adapter={"fingerprint": "abc"}))
    assert default.weights == "api:https://api.openai.com/v1:gpt-4o-mini" and default.adapter == "abc"
    model = OpenAIModel(cfg, model_cache="unused")
    assert SECRET not in repr(model) and SECRET not in repr(ident)
    req = AnswerRequest(ident, (Message("user", "hi"),), JudgeDecoding(("1", "2")))
    assert SECRET not in req.cache_key() and SECRET not in str(req)
    model.close()


def test_missing_key_fails_clearly_except_on_loopback(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ModelUnavailableError, match=KEY_ENV):
        OpenAIModel(model_cfg(base_url=None), model_cache="")
    with pytest.raises(ModelUnavailableError, match=KEY_ENV):
        OpenAIModel(model_cfg(base_url="https://example.invalid/v1"), model_cache="")
    for url in ("http://127.0.0.1:9/v1", "http://localhost:9/v1", "http://[::1]:9/v1", "http://127.8.0.1/v1"):
        model = OpenAIModel(model_cfg(base_url=url), model_cache="")
        assert model._client.api_key == NO_KEY
        model.close()
    assert not is_loopback("https://api.openai.com/v1") and not is_loopback("http://10.0.0.1:80/v1")


@pytest.mark.parametrize("name,api_model", [("gpt35", "gpt-3.5-turbo"), ("gpt4", "gpt-4-turbo"),
                                            ("gpt4o_mini", "gpt-4o-mini"), ("gpt41_nano", "gpt-4.1-nano")])
def test_api_model_configs_compose(name, api_model):
    from hydra import compose, initialize_config_dir

    from selfpref_sweep.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=[f"evaluator={name}", f"source={name}"])
    for m in (cfg.evaluator, cfg.source.model):
        assert m.backend == "openai" and m.model == api_model and m.base_url is None
        assert m.price_per_mtok_prompt > 0 and m.price_per_mtok_completion > 0
    assert cfg.source.kind.value == "model" and cfg.source.name == name
    assert OpenAIModel.identity_for(cfg.evaluator).weights == f"api:https://api.openai.com/v1:{api_model}"


def test_openai_compatible_requires_model_and_url(monkeypatch):
    from hydra import compose, initialize_config_dir

    from selfpref_sweep.config import register_configs

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_COMPATIBLE_MODEL", raising=False)
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        bare = compose("config", overrides=["evaluator=openai_compatible"])
        given = compose("config", overrides=["evaluator=openai_compatible", "evaluator.model=m",
                                             "evaluator.base_url=http://127.0.0.1:8000/v1"])
    with pytest.raises(ConfigError, match="model"):
        OpenAIModel.identity_for(bare.evaluator)
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIModel.identity_for(OmegaConf.merge(bare.evaluator, {"model": "m"}))
    assert OpenAIModel.identity_for(given.evaluator).weights == "api:http://127.0.0.1:8000/v1:m"


def test_distribution_sums_every_spelling():
    top = [(" 1", math.log(0.4)), ("1", math.log(0.2)), ("\n1", math.log(0.05)), ("2", math.log(0.1)),
           (" 2", math.log(0.05)), ("12", math.log(0.03)), ("The", math.log(0.1)), ("", -math.inf)]
    d = distribution_from_top_logprobs(top, ("1", "2"), prompt_tokens=7, completion_tokens=1)
    assert d.probs == pytest.approx({"1": 0.65, "2": 0.15})
    assert d.method == "logprobs" and d.missing_reason is None
    assert d.top_tokens[0] == (" 1", 0.4) and len(d.top_tokens) == 5
    assert (d.prompt_tokens, d.completion_tokens) == (7, 1)
    yes = distribution_from_top_logprobs([("Yes", math.log(0.5)), (" yes", math.log(0.2)), ("YES", math.log(0.1)),
                                          ("No", math.log(0.1)), ("Nope", math.log(0.05))], ("Yes", "No"))
    assert yes.probs == pytest.approx({"Yes": 0.8, "No": 0.1})
    assert answer_matches(" 1", "1") and not answer_matches("1.", "1") and not answer_matches("l", "1")


def test_answers_absent_from_top_logprobs_are_recorded_not_dropped():
    d = distribution_from_top_logprobs([("The", math.log(0.7)), ("I", math.log(0.2))], ("1", "2"))
    assert d.probs == {"1": 0.0, "2": 0.0}
    assert d.method == "logprobs" and d.missing_reason == "answers_not_in_top_logprobs"
    assert d.bounded == []  # no answer listed: bounds alone would compare nothing


def test_an_absent_answer_is_bounded_by_the_smallest_listed_probability():
    top = [(" 1", math.log(0.6)), ("1", math.log(0.3)), ("The", math.log(0.05)), ("I", math.log(1e-4)),
           ("A", math.log(3e-9))]
    d = distribution_from_top_logprobs(top, ("1", "2"))
    assert d.bounded == ["2"] and d.missing_reason is None
    assert d.probs["2"] == pytest.approx(3e-9, rel=1e-12)  # no unlisted token is likelier than "A"
    assert d.probs["1"] == pytest.approx(0.9)  # the listed spellings, summed as before
    # Any listed spelling makes an answer read, not bounded: " yes" is listed, "No" in no spelling.
    yes = distribution_from_top_logprobs([(" yes", math.log(0.7)), ("Sure", math.log(0.01))], ("Yes", "No"))
    assert yes.bounded == ["No"] and yes.probs == pytest.approx({"Yes": 0.7, "No": 0.01})
    # The flag is stored with the distribution; an entry stored before bounds loads with none.
    assert AnswerDistribution.from_json(d.to_json()) == d
    old = {k: v for k, v in d.to_json().items() if k != "bounded"}
    assert AnswerDistribution.from_json(old).bounded == []


def test_retry_after_parsing():
    class Exc:
        def __init__(self, headers):
            self.response = type("R", (), {"headers": headers})()

    assert retry_after_s(Exc({"retry-after": "1"})) == 1.0
    assert retry_after_s(Exc({"retry-after": "0"})) == 0.0
    assert retry_after_s(Exc({"retry-after-ms": "250"})) == 0.25
    assert retry_after_s(Exc({})) is None
    assert 0 < retry_after_s(Exc({"retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)})) <= 31
    assert retry_after_s(Exc({"retry-after": "soon"})) is None
    assert retry_after_s(ValueError("no response")) is None


# ------------------------------------------------------------------------------ real server tests


def judge_requests(identity, sample_fallback_k=0):
    return few_shot_judge_requests(identity, sample_fallback_k)  # 8


@pytest.fixture(scope="module")
def server():
    srv = start_or_skip(api_key=SECRET)
    yield srv
    srv.stop()


@pytest.fixture
def fresh_server():
    """A server whose answer to a request depends on that request alone (no reuse of the previous request's
    KV cache; tests/llama_server_fresh.py): for comparing whole cells, whose greedy summaries would otherwise
    depend on the order faults and retries put the requests in."""
    srv = start_or_skip(api_key=SECRET, fresh_cache=True)
    yield srv
    srv.stop()


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


@pytest.fixture(scope="module")
def baseline(server):
    """The fault-free judgements of judge_requests(), keyed by request text (identity-free)."""
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, SECRET)
    try:
        model = OpenAIModel(model_cfg(server.base_url, max_concurrency=1), model_cache="")
        out = {req.messages: d for req, d in model.answer_distributions(judge_requests(model.identity))}
        model.close()
    finally:
        mp.undo()
    return out


def assert_same_judgements(results, baseline, tol=2e-3):
    """Equal up to llama.cpp's float noise: a prompt whose prefix was cached by the previous request
    may be computed in a different batch split than from scratch (observed: identical here)."""
    for req, d in results.items():
        ref = baseline[req.messages]
        assert d.method == ref.method == "logprobs"
        assert d.probs == pytest.approx(ref.probs, abs=tol), (d.probs, ref.probs)


@pytest.mark.real_model
def test_judge_reads_first_token_top_logprobs(server, key_env, baseline):
    model = OpenAIModel(model_cfg(server.base_url), model_cache="")
    reqs = judge_requests(model.identity)
    # The backend's sum must equal the sum over the matching spellings in the raw API response.
    raw = model._client.chat.completions.create(
        model=server.model, messages=[{"role": m.role, "content": m.content} for m in reqs[0].messages],
        temperature=0, max_tokens=1, logprobs=True, top_logprobs=20)
    top = raw.choices[0].logprobs.content[0].top_logprobs
    assert len(top) >= 10
    expect = {a: sum(math.exp(t.logprob) for t in top if t.token.strip() == a) for a in ("1", "2")}
    got = baseline[reqs[0].messages]
    assert got.probs == pytest.approx(expect, abs=2e-3)
    for d in baseline.values():
        assert d.method == "logprobs" and d.missing_reason is None
        assert all(p > 0 for p in d.probs.values())  # with the two shots, both digits are in SmolLM2's top 20
        assert 0 < d.mass <= 1 + 1e-6
        assert d.prompt_tokens > 100 and d.completion_tokens == 1 and len(d.top_tokens) == 5
    # Four in flight give the same numbers as one at a time, one result per request.
    results = list(model.answer_distributions(reqs + reqs[:3]))  # duplicates are asked once
    assert len(results) == len(reqs) and {r for r, _ in results} == set(reqs)
    assert_same_judgements(dict(results), baseline)
    model.close()


@pytest.mark.real_model
def test_generate_returns_text_and_usage(server, key_env):
    model = OpenAIModel(model_cfg(server.base_url), model_cache="")
    article = ARTICLES[0][0]
    reqs = [GenerateRequest(model.identity, (Message("system", "Summarize the article in one sentence."),
                                              Message("user", f"Article:\n{article}")),
                            GenerationDecoding(max_new_tokens=n))
            for n in (8, 16)]
    out = dict(model.generate(reqs))
    assert set(out) == set(reqs)
    for req, g in out.items():
        assert g.text and g.prompt_tokens > 20 and 0 < g.completion_tokens <= req.max_new_tokens
    with pytest.raises(ConfigError, match="completion-style"):
        list(model.generate([GenerateRequest(model.identity, prompt="Article: x\n\nTL;DR:")]))
    model.close()


@pytest.mark.real_model
def test_second_pass_is_served_from_the_cache_and_the_key_is_nowhere(server, key_env, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    store = Store(tmp_path / "calls.sqlite")
    cfg = model_cfg(server.base_url)
    built = []

    def factory():
        built.append(OpenAIModel(cfg, model_cache=""))
        return built[-1]

    first = CachedModel(OpenAIModel.identity_for(cfg), factory, store, show_progress=False)
    reqs = judge_requests(first.identity)[:6]
    gen = [GenerateRequest(first.identity, (Message("user", "Say hello."),),
                           decoding=GenerationDecoding(max_new_tokens=4))]
    a = first.answer_distributions(reqs)
    g = first.generate(gen)
    assert first.calls == 7 and first.prompt_tokens > 0 and first.completion_tokens >= 7
    assert len(store) == 7
    first.close()

    second = CachedModel(OpenAIModel.identity_for(cfg), factory, store, show_progress=False)
    assert second.answer_distributions(reqs) == a and second.generate(gen) == g
    assert second.calls == 0 and second.cache_hits == 7 and len(built) == 1  # no backend was even built
    store.close()

    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert SECRET.encode() not in blob
    assert SECRET not in caplog.text
    assert caplog.records  # the check above saw real log output (the openai client logs at DEBUG)


@pytest.mark.real_model
def test_transient_faults_are_retried_and_lose_nothing(server, key_env, baseline, caplog):
    # The client timeout must exceed the real server's latency, or real calls time out too (and are
    # retried: still correct, only slower); the proxy's "timeout" fault holds a request past it.
    with FaultProxy(server.root_url, faults=("429", "500", "timeout"), fault_rate=0.3, seed=8, delay_s=7.0) as proxy:
        model = OpenAIModel(model_cfg(proxy.base_url + "/v1", max_concurrency=2, timeout_s=6.0, max_retries=8),
                            model_cache="")
        reqs = judge_requests(model.identity)
        t0 = time.time()
        results = list(model.answer_distributions(reqs))
        elapsed = time.time() - t0
    assert len(results) == len(reqs) and {r for r, _ in results} == set(reqs)  # none lost, none twice
    assert_same_judgements(dict(results), baseline)
    assert proxy.counts["429"] and proxy.counts["500"] and proxy.counts["timeout"], proxy.counts
    # Every injected fault was retried (a real call slower than the timeout on a busy machine adds one).
    assert model.retries >= sum(proxy.counts[f] for f in ("429", "500", "timeout")) > 0
    assert all(h == f"Bearer {SECRET}" for h in proxy.auth_headers)  # the key was sent...
    assert SECRET not in caplog.text  # ...but never logged
    assert elapsed < 60
    model.close()


@pytest.mark.real_model
def test_stripped_logprobs_are_retried_or_recorded_or_sampled(server, key_env, baseline):
    # A server that returns logprobs but sometimes drops them: every dropped one is asked again.
    with FaultProxy(server.root_url, faults=("strip_logprobs",), fault_rate=0.5, seed=3) as proxy:
        model = OpenAIModel(model_cfg(proxy.base_url + "/v1", max_concurrency=1, retry_backoff_s=0.05),
                            model_cache="")
        reqs = judge_requests(model.identity)
        results = dict(model.answer_distributions(reqs))
        assert proxy.counts["strip_logprobs"] > 0
        assert proxy.counts["forwarded"] == len(reqs)  # each request answered with logprobs exactly once
        assert_same_judgements(results, baseline)
        model.close()

        # A server that never returns logprobs: recorded per item at once, without retries.
        proxy.fault_rate = 1.0
        proxy.counts.clear()
        model = OpenAIModel(model_cfg(proxy.base_url + "/v1", max_concurrency=2), model_cache="")
        results = dict(model.answer_distributions(reqs))
        assert proxy.counts["strip_logprobs"] == len(reqs) and model.retries == 0
        for d in results.values():
            assert d.method == "unavailable" and d.missing_reason == "no_logprobs"
            assert d.probs == {"1": 0.0, "2": 0.0} and d.prompt_tokens > 0
        model.close()

        # With a sampling fallback the same gap is filled by an estimate from k samples, marked as such.
        proxy.faults, proxy.fault_rate = ("strip_logprobs",), 1.0
        model = OpenAIModel(model_cfg(proxy.base_url + "/v1", max_concurrency=2, sample_fallback_k=4),
                            model_cache="")
        reqs = judge_requests(model.identity, sample_fallback_k=4)[:1]  # the fallback is a decoding setting
        for _req, d in model.answer_distributions(reqs):
            assert d.method == "sampled"
            assert all(p * 4 == int(p * 4) for p in d.probs.values()) and d.mass <= 1
            assert d.missing_reason in (None, "answers_not_in_samples")
            assert d.completion_tokens >= 4  # the samples' usage counts too
        model.close()


@pytest.mark.real_model
def test_bad_key_fails_fast_with_a_clear_message(server, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(KEY_ENV, WRONG_KEY)
    # A real 401 from the server, which checks the key.
    model = OpenAIModel(model_cfg(server.base_url, max_retries=6), model_cache="")
    t0 = time.time()
    with pytest.raises(ModelUnavailableError) as info:
        list(model.answer_distributions(judge_requests(model.identity)))
    assert time.time() - t0 < 5
    msg = str(info.value)
    assert "401" in msg and KEY_ENV in msg and WRONG_KEY not in msg
    assert info.value.__cause__ is None and info.value.__context__ is None  # no request (headers) attached
    model.close()

    # An injected 401 from the proxy, with the right key.
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FaultProxy(server.root_url, faults=("401",), fault_rate=1.0) as proxy:
        model = OpenAIModel(model_cfg(proxy.base_url + "/v1", max_concurrency=4), model_cache="")
        t0 = time.time()
        with pytest.raises(ModelUnavailableError, match="rejected") as info:
            list(model.answer_distributions(judge_requests(model.identity)))
        assert time.time() - t0 < 5
        assert proxy.counts["401"] <= 4  # those in flight; pending requests were cancelled, not sent
        model.close()
    for text in (str(info.value), repr(info.value), caplog.text):
        assert SECRET not in text and WRONG_KEY not in text
    assert "HTTP 404" not in str(info.value)  # not "404": the proxy's random port may contain it



@pytest.mark.real_model
@pytest.mark.parametrize("status,words", [("400", "rejected the request"), ("403", "not allowed"),
                                          ("404", "unknown model")])
def test_other_client_errors_are_permanent(server, key_env, status, words):
    with FaultProxy(server.root_url, faults=(status,), fault_rate=1.0) as proxy:
        model = OpenAIModel(model_cfg(proxy.base_url + "/v1", max_concurrency=2), model_cache="")
        t0 = time.time()
        with pytest.raises(ModelUnavailableError, match=words):
            list(model.answer_distributions(judge_requests(model.identity)))
        assert time.time() - t0 < 5
        assert proxy.counts[status] <= 2  # the two in flight; nothing was sent after the first failure
        model.close()


@pytest.mark.real_model
def test_outage_raises_after_retries_and_a_rerun_resumes(server, key_env, tmp_path, baseline):
    store = Store(tmp_path / "calls.sqlite")
    with FaultProxy(server.root_url, faults=(), fault_rate=0.0) as proxy:
        cfg = model_cfg(proxy.base_url + "/v1", max_concurrency=2, max_retries=2)
        handle = CachedModel(OpenAIModel.identity_for(cfg), lambda: OpenAIModel(cfg, model_cache=""), store,
                             show_progress=False)
        reqs = judge_requests(handle.identity)
        handle.answer_distributions(reqs[:4])  # these are done before the outage
        proxy.faults, proxy.fault_rate = ("500",), 1.0  # the server goes down
        t0 = time.time()
        with pytest.raises(ModelUnavailableError, match="still failing after 3 attempts"):
            handle.answer_distributions(reqs)
        assert time.time() - t0 < 20
        assert len(store) == 4
        proxy.fault_rate = 0.0  # back up: the re-run makes only the missing calls
        handle.calls = 0
        results = handle.answer_distributions(reqs)
        assert handle.calls == len(reqs) - 4 and len(store) == len(reqs)
        assert_same_judgements(results, baseline)
        handle.close()
    store.close()


# ------------------------------------------------------------------ transient faults never change a result
FOUR_FAULTS = ("429", "500", "timeout", "strip_logprobs")


@pytest.mark.real_model
def test_all_four_faults_never_change_results(server, key_env, baseline, tmp_path):
    """30% seeded faults of every transient kind: the results equal the fault-free ones, all cached. Seed 109
    strips the very first response (before the server has shown logprobs) and then times out, 429s and 500s."""
    store = Store(tmp_path / "calls.sqlite")
    with FaultProxy(server.root_url, faults=FOUR_FAULTS, fault_rate=0.3, seed=109, delay_s=7.0) as proxy:
        cfg = model_cfg(proxy.base_url + "/v1", max_concurrency=2, timeout_s=6.0, max_retries=8, retry_backoff_s=0.05)
        model = CachedModel(OpenAIModel.identity_for(cfg), lambda: OpenAIModel(cfg, model_cache=""), store,
                            show_progress=False)
        reqs = judge_requests(model.identity)
        results = model.answer_distributions(reqs)
        assert all(proxy.counts[f] for f in FOUR_FAULTS), proxy.counts
        assert_same_judgements(results, baseline)
        assert len(store) == len(reqs)  # every result is genuine, so every one is cached
        model.close()
    store.close()


def cell_overrides(base_url):
    return ["evaluator=openai_compatible", "evaluator.name=smol_api", "evaluator.model=smollm135",
            f"evaluator.base_url={base_url}", f"evaluator.api_key_env={KEY_ENV}", "evaluator.context_tokens=2048",
            "evaluator.max_concurrency=2", "evaluator.timeout_s=15", "evaluator.max_retries=8",
            "evaluator.retry_backoff_s=0.05", "dataset.n_articles=2", "summaries.max_new_tokens=30",
            "judge.min_answer_mass=0"]


def cell_items(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def assert_same_items(items, reference, tol=2e-3):
    assert [it["article_id"] for it in items] == [it["article_id"] for it in reference]
    for it, ref in zip(items, reference, strict=True):
        assert (it["own_summary"], it["other_summary"]) == (ref["own_summary"], ref["other_summary"])
        for q in ("recognition", "preference"):
            assert it[q]["exclusion_reason"] == ref[q]["exclusion_reason"]
            if ref[q]["score"] is None:
                assert it[q]["score"] is None
            else:
                assert it[q]["score"] == pytest.approx(ref[q]["score"], abs=tol)


@pytest.mark.real_model
def test_a_faulty_cell_equals_the_fault_free_one_and_a_rerun_repairs_recorded_failures(fresh_server, key_env,
                                                                                       compose_cfg, tmp_path):
    from selfpref_sweep.config.spec import resolve_cell
    from selfpref_sweep.run.runner import run_cell

    clean_cfg = compose_cfg(cell_overrides(fresh_server.base_url), store=tmp_path / "clean.sqlite")
    clean = run_cell(resolve_cell(clean_cfg), tmp_path / "clean")
    reference = cell_items(tmp_path / "clean")
    assert clean["n_items"] == 2 and clean["exclusions"].get("no_logprobs") is None
    # A whole cell's calls (summaries, judging, the controls) queue at a one-slot server: under a loaded CPU a
    # fault-free call can take several seconds, so the client's timeout is generous and an injected timeout
    # hangs past it.
    with FaultProxy(fresh_server.root_url, faults=FOUR_FAULTS, fault_rate=0.3, seed=84, delay_s=16.0) as proxy:
        cfg = compose_cfg(cell_overrides(proxy.base_url + "/v1"), store=tmp_path / "faulty.sqlite")
        run_cell(resolve_cell(cfg), tmp_path / "faulty")
        assert all(proxy.counts[f] for f in FOUR_FAULTS), proxy.counts
        assert_same_items(cell_items(tmp_path / "faulty"), reference)

        # Every logprob dropped (a server or proxy that strips them): the judgements are recorded as counted
        # no_logprobs exclusions, and not cached...
        proxy.faults, proxy.fault_rate = ("strip_logprobs",), 1.0
        cfg = compose_cfg(cell_overrides(proxy.base_url + "/v1"), store=tmp_path / "repair.sqlite")
        broken = run_cell(resolve_cell(cfg), tmp_path / "broken")
        assert broken["exclusions"] == {"no_logprobs": 2} and broken["recognition"]["n"] == 0
        # ...so once the faults stop, the same command makes only the judge calls again and gets the fault-free
        # results (the summaries, genuine, come from the cache).
        proxy.fault_rate = 0.0
        repaired = run_cell(resolve_cell(cfg), tmp_path / "repaired")
        assert repaired["model_calls"] == 2 * 2 * 2 and repaired["cache_hits"] == 2
        assert_same_items(cell_items(tmp_path / "repaired"), reference)
