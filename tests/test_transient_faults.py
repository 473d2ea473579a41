"""Transient faults never change a result (fast, no server).

The OpenAI backend runs against a scripted stand-in for the `openai` client whose responses lose their
logprobs on the calls a test picks; the cache rule is checked on a CachedModel over a real Store. The same
behaviour against a real server behind the fault-injecting proxy is in test_openai_backend.py.
"""

from __future__ import annotations

import hashlib
import math
import threading
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from selfpref_sweep.models.base import (
    AnswerDistribution,
    AnswerRequest,
    JudgeDecoding,
    Message,
    ModelAPI,
    ModelIdentity,
)
from selfpref_sweep.models.cached import CachedModel, is_failure
from selfpref_sweep.models.openai.openai_api import OpenAIModel
from selfpref_sweep.store import Store


def answer_probs(messages) -> dict:
    """The stand-in server's (deterministic) probabilities of "1" and "2" for a prompt."""
    digest = hashlib.sha256(repr(messages).encode()).digest()
    p1 = 0.1 + 0.8 * digest[0] / 255
    return {"1": p1, "2": 0.95 - p1}


class ScriptedClient:
    """chat.completions.create as a server would answer, with logprobs stripped on the calls `strip(i)` picks
    (i counts every call from 0)."""

    def __init__(self, strip):
        self.strip = strip
        self.n = 0
        self._lock = threading.Lock()
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, model, messages, **kwargs):
        with self._lock:
            i = self.n
            self.n += 1
        probs = answer_probs(messages)
        top = [SimpleNamespace(token=t, logprob=math.log(p)) for t, p in probs.items()]
        logprobs = None if self.strip(i) else SimpleNamespace(content=[SimpleNamespace(token="1",
                                                                                         logprob=top[0].logprob,
                                                                                         top_logprobs=top)])
        choice = SimpleNamespace(logprobs=logprobs, message=SimpleNamespace(content="1"), finish_reason="length")
        return SimpleNamespace(choices=[choice], usage=SimpleNamespace(prompt_tokens=12, completion_tokens=1))

    def close(self):
        pass


def scripted_model(strip, max_retries=3, max_concurrency=1):
    cfg = OmegaConf.create({"name": "scripted", "backend": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                            "api_key_env": "SELFPREF_TEST_UNSET_KEY", "max_concurrency": max_concurrency,
                            "max_retries": max_retries, "retry_backoff_s": 0.0, "timeout_s": 5.0})
    model = OpenAIModel(cfg, model_cache="")
    model._client = ScriptedClient(strip)
    return model


def requests(identity, n=6):
    return [AnswerRequest(identity, (Message("user", f"Question {i}: 1 or 2?"),),
                          JudgeDecoding(("1", "2"), top_logprobs=20))
            for i in range(n)]


def assert_genuine(results, reqs):
    assert set(results) == set(reqs)
    for req, d in results.items():
        assert d.method == "logprobs" and d.missing_reason is None
        assert d.probs == pytest.approx(answer_probs([{"role": m.role, "content": m.content} for m in req.messages]))


def test_a_response_without_logprobs_after_some_had_them_is_retried():
    model = scripted_model(strip=lambda i: i in (2, 3, 5))
    reqs = requests(model.identity)
    results = dict(model.answer_distributions(reqs))
    assert_genuine(results, reqs)
    assert model._client.n == len(reqs) + 3 and model.retries == 3


def test_one_before_the_server_showed_logprobs_is_asked_again_after_the_batch():
    model = scripted_model(strip=lambda i: i == 0)
    reqs = requests(model.identity)
    order = [req for req, _ in model.answer_distributions(reqs)]
    assert order[-1] == reqs[0]  # held back, then asked again once the server had shown logprobs
    assert_genuine(dict(model.answer_distributions(reqs)), reqs)


def test_a_server_that_never_returns_logprobs_is_recorded_at_once():
    model = scripted_model(strip=lambda i: True)
    reqs = requests(model.identity)
    results = dict(model.answer_distributions(reqs))
    assert model._client.n == len(reqs)  # no retries: this server does not give logprobs
    for d in results.values():
        assert d.method == "unavailable" and d.missing_reason == "no_logprobs" and d.prompt_tokens == 12


def test_retries_are_bounded_then_the_gap_is_recorded():
    model = scripted_model(strip=lambda i: i > 0, max_retries=2)
    reqs = requests(model.identity, n=3)
    results = dict(model.answer_distributions(reqs))
    assert results[reqs[0]].method == "logprobs"
    for req in reqs[1:]:
        assert results[req].missing_reason == "no_logprobs"
    # each of the two: max_retries + 1 attempts in the batch, and as many again when asked after it
    assert model._client.n == 1 + 2 * 2 * (2 + 1)


# ------------------------------------------------------------------------- the cache rule
class FlakyBackend(ModelAPI):
    """Answers genuinely, or with no logprobs while `broken` is set; one request is a genuine answer with no
    probability on the answers (a weak model), which is not a failure."""

    def __init__(self, identity):
        self.identity = identity
        self.broken = True
        self.calls = 0

    def generate(self, requests):
        raise NotImplementedError

    def answer_distributions(self, requests):
        for req in requests:
            self.calls += 1
            if "weak" in req.messages[0].content:
                yield req, AnswerDistribution({"1": 0.0, "2": 0.0}, method="logprobs",
                                              missing_reason="answers_not_in_top_logprobs")
            elif self.broken:
                yield req, AnswerDistribution({"1": 0.0, "2": 0.0}, method="unavailable", missing_reason="no_logprobs")
            else:
                yield req, AnswerDistribution(answer_probs(req.messages), method="logprobs")


def test_failures_are_recorded_but_never_cached_and_a_rerun_repairs_them(tmp_path):
    identity = ModelIdentity("flaky", "fake", "fake:flaky")
    backend = FlakyBackend(identity)
    store = Store(tmp_path / "calls.sqlite")
    model = CachedModel(identity, lambda: backend, store, show_progress=False)
    reqs = requests(identity, n=3) + [AnswerRequest(identity, (Message("user", "weak"),),
                                                    JudgeDecoding(("1", "2"), top_logprobs=20))]
    first = model.answer_distributions(reqs)
    assert sum(is_failure(d) for d in first.values()) == 3  # returned to the cell, which counts them
    assert len(store) == 1  # only the genuine (weak) answer was stored
    assert all(model.cached(r) is None for r in reqs[:3])  # plan mode sees them as still to do

    backend.broken = False  # the faults stop
    model.calls = 0
    again = model.answer_distributions(reqs)
    assert model.calls == 3 and backend.calls == 4 + 3  # the weak answer came from the cache
    assert not any(is_failure(d) for d in again.values())
    assert again[reqs[3]] == first[reqs[3]]
    assert len(store) == 4


def test_a_failure_stored_by_an_older_version_is_recomputed(tmp_path):
    identity = ModelIdentity("flaky", "fake", "fake:flaky")
    backend = FlakyBackend(identity)
    backend.broken = False
    store = Store(tmp_path / "calls.sqlite")
    req = requests(identity, n=1)[0]
    store.put(req.cache_key(), kind="answer_distribution", model="flaky", request={},
              value=AnswerDistribution({"1": 0.0, "2": 0.0}, method="unavailable",
                                       missing_reason="no_logprobs").to_json())
    model = CachedModel(identity, lambda: backend, store, show_progress=False)
    assert model.cached(req) is None
    result = model.answer_distributions([req])[req]
    assert model.calls == 1 and model.cache_hits == 0 and result.method == "logprobs"
    assert AnswerDistribution.from_json(store.get(req.cache_key())) == result  # the entry is repaired


# ------------------------------------------------- over HTTP, through the fault proxy (no llama-cpp needed)
class StubServer:
    """A minimal OpenAI-compatible chat-completions server on 127.0.0.1: deterministic top_logprobs (from the
    prompt's hash) and, for generation, the last user message's first sentence. What is under test is the
    client path (the real `openai` client, retries, logprobs handling, the cache), not a model."""

    def __init__(self):
        import json as _json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, payload):
                body = _json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "stub", "object": "model"}]})

            def do_POST(self):
                req = _json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                messages = [{"role": m["role"], "content": m["content"]} for m in req["messages"]]
                logprobs = None
                if req.get("logprobs"):
                    top = [{"token": t, "logprob": math.log(p), "bytes": None}
                           for t, p in answer_probs(messages).items()]
                    logprobs = {"content": [{"token": "1", "logprob": top[0]["logprob"], "bytes": None,
                                             "top_logprobs": top}]}
                    text = "1"
                else:
                    text = messages[-1]["content"].split("Article:\n", 1)[-1].split(". ")[0] + "."
                self._send({"id": "c", "object": "chat.completion", "created": 0, "model": req["model"],
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                         "logprobs": logprobs, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21}})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.root_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self):
        self._server.shutdown()
        self._server.server_close()


FOUR_FAULTS = ("429", "500", "timeout", "strip_logprobs")


@pytest.fixture
def stub_server():
    server = StubServer()
    yield server
    server.stop()


def http_model_cfg(base_url):
    return OmegaConf.create({"name": "stub_api", "backend": "openai", "model": "stub", "base_url": base_url,
                            "api_key_env": "SELFPREF_TEST_UNSET_KEY", "max_concurrency": 3, "max_retries": 8,
                            "retry_backoff_s": 0.01, "timeout_s": 0.5, "top_logprobs": 20})


def test_thirty_percent_faults_of_all_four_kinds_change_nothing(stub_server, tmp_path):
    from tests.fault_proxy import FaultProxy

    store = Store(tmp_path / "calls.sqlite")
    # Seed 109 strips the very first response (before the server has shown logprobs), then holds one past the
    # client's timeout, answers 429 (Retry-After 0 or 1) and 500.
    with FaultProxy(stub_server.root_url, faults=FOUR_FAULTS, fault_rate=0.3, seed=109, delay_s=1.0) as proxy:
        cfg = http_model_cfg(proxy.base_url + "/v1")
        model = CachedModel(OpenAIModel.identity_for(cfg), lambda: OpenAIModel(cfg, model_cache=""), store,
                            show_progress=False)
        reqs = requests(model.identity, n=20)
        results = model.answer_distributions(reqs)
        assert all(proxy.counts[f] for f in FOUR_FAULTS), proxy.counts
        assert_genuine(results, reqs)  # identical to the fault-free answers
        assert len(store) == len(reqs)
        model.close()
    store.close()


def test_a_rerun_after_the_faults_stop_repairs_recorded_failures(stub_server, tmp_path, compose_cfg):
    """A whole cell over HTTP: a faulty run equals the fault-free one; a run whose every logprob was dropped
    records counted no_logprobs exclusions, and re-running it once the faults stop gives the fault-free results."""
    import json

    from selfpref_sweep.config.spec import resolve_cell
    from selfpref_sweep.run.runner import run_cell
    from tests.fault_proxy import FaultProxy

    def overrides(url):
        return ["evaluator=openai_compatible", "evaluator.name=stub_api", "evaluator.model=stub",
                f"evaluator.base_url={url}/v1", "evaluator.api_key_env=SELFPREF_TEST_UNSET_KEY",
                "evaluator.max_concurrency=3", "evaluator.timeout_s=0.5", "evaluator.max_retries=8",
                "evaluator.retry_backoff_s=0.01", "dataset.n_articles=4"]

    def items(run_dir):
        return [{k: v for k, v in json.loads(line).items()}
                for line in (run_dir / "results.jsonl").read_text().splitlines()]

    clean = run_cell(resolve_cell(compose_cfg(overrides(stub_server.root_url), store=tmp_path / "clean.sqlite")),
                     tmp_path / "clean")
    assert clean["n_excluded"] == 0
    with FaultProxy(stub_server.root_url, faults=FOUR_FAULTS, fault_rate=0.3, seed=84, delay_s=1.0) as proxy:
        run_cell(resolve_cell(compose_cfg(overrides(proxy.base_url), store=tmp_path / "faulty.sqlite")),
                 tmp_path / "faulty")
        assert all(proxy.counts[f] for f in FOUR_FAULTS), proxy.counts
        assert items(tmp_path / "faulty") == items(tmp_path / "clean")

        proxy.faults, proxy.fault_rate = ("strip_logprobs",), 1.0
        cfg = compose_cfg(overrides(proxy.base_url), store=tmp_path / "repair.sqlite")
        broken = run_cell(resolve_cell(cfg), tmp_path / "broken")
        assert broken["exclusions"] == {"no_logprobs": 4} and broken["recognition"]["n"] == 0
        proxy.fault_rate = 0.0
        repaired = run_cell(resolve_cell(cfg), tmp_path / "repaired")
        assert repaired["model_calls"] == 4 * 2 * 2 and repaired["cache_hits"] == 4  # summaries were cached
        assert items(tmp_path / "repaired") == items(tmp_path / "clean")
