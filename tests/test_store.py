import multiprocessing as mp
import sqlite3

from selfpref_sweep.models.base import (AnswerDistribution, AnswerRequest, GenerateRequest, GenerationDecoding,
                                        JudgeDecoding, Message, ModelIdentity)
from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.store import Store

IDENT = ModelIdentity("m", "fake", "w1", "bf16")


def req(i, identity=IDENT):
    return AnswerRequest(identity, (Message("user", f"q{i}"),), JudgeDecoding(("1", "2")))


def test_key_covers_model_identity_prompt_and_settings():
    base = req(1)
    assert base.cache_key() == req(1).cache_key()
    assert base.cache_key() != req(2).cache_key()
    assert base.cache_key() != req(1, ModelIdentity("m", "fake", "w1", "bf16", adapter="abc")).cache_key()
    assert base.cache_key() != req(1, ModelIdentity("m", "fake", "w1", "fp32")).cache_key()
    assert base.cache_key() != AnswerRequest(IDENT, base.messages, JudgeDecoding(("Yes", "No"))).cache_key()
    # every decoding setting that changes an answer distribution is in the key
    for decoding in (JudgeDecoding(("1", "2"), top_logprobs=5), JudgeDecoding(("1", "2"), sample_fallback_k=4)):
        assert base.cache_key() != AnswerRequest(IDENT, base.messages, decoding).cache_key()
    gen = GenerateRequest(IDENT, (Message("user", "x"),))
    for decoding in (GenerationDecoding(max_new_tokens=50), GenerationDecoding(stop=("\n",)),
                     GenerationDecoding(temperature=1.0)):
        assert gen.cache_key() != GenerateRequest(IDENT, gen.messages, decoding=decoding).cache_key()


def test_a_backend_version_bump_stops_old_entries_being_served(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    calls = []

    class Backend:
        def answer_distributions(self, requests):
            for r in requests:
                calls.append(r)
                yield r, AnswerDistribution({"1": 0.7, "2": 0.3})

    def model(version):
        identity = ModelIdentity("m", "fake", "w1", "bf16", backend_version=version)
        return CachedModel(identity, Backend, store, show_progress=False)

    model(1).answer_distributions([req(1, model(1).identity)])
    model(1).answer_distributions([req(1, model(1).identity)])
    assert len(calls) == 1  # served from the cache
    bumped = model(2)
    bumped.answer_distributions([req(1, bumped.identity)])
    assert len(calls) == 2 and bumped.calls == 1  # the old entry is not served after the bump


def test_hit_and_miss(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    assert store.get("k") is None
    store.put("k", kind="x", model="m", request={"a": 1}, value={"v": 2})
    assert store.get("k") == {"v": 2}
    assert Store(tmp_path / "s.sqlite").get("k") == {"v": 2}  # persists across handles


def test_corrupt_entry_is_a_miss(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    store.put("k", kind="x", model="m", request={}, value={"v": 1})
    with sqlite3.connect(tmp_path / "s.sqlite") as conn:
        conn.execute("UPDATE calls SET value = ? WHERE key = 'k'", ('{"v": 1',))
    assert Store(tmp_path / "s.sqlite").get("k") is None


class Counting:
    def __init__(self):
        self.seen = []

    def answer_distributions(self, requests):
        for r in requests:
            self.seen.append(r)
            yield r, AnswerDistribution(probs={"1": 0.7, "2": 0.2}, prompt_tokens=3)


def test_cached_model_calls_once_and_loads_lazily(tmp_path):
    built = []

    def factory():
        built.append(1)
        return backend

    backend = Counting()
    model = CachedModel(IDENT, factory, Store(tmp_path / "s.sqlite"), show_progress=False)
    reqs = [req(i) for i in range(4)] + [req(0)]  # a duplicate is asked once
    out = model.answer_distributions(reqs)
    assert len(out) == 4 and model.calls == 4 and len(backend.seen) == 4
    again = CachedModel(IDENT, factory, Store(tmp_path / "s.sqlite"), show_progress=False)
    built.clear()
    out2 = again.answer_distributions(reqs)
    assert again.calls == 0 and again.cache_hits == 4 and built == []
    assert {k: v.probs for k, v in out2.items()} == {k: v.probs for k, v in out.items()}


def _writer(path, start, n):
    store = Store(path)
    for i in range(start, start + n):
        store.put(f"k{i}", kind="x", model="m", request={"i": i}, value={"i": i})
        store.get(f"k{i - 1}")


def test_concurrent_writers(tmp_path):
    path = tmp_path / "s.sqlite"
    Store(path)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w * 1000, 150)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = Store(path)
    assert len(store) == 450
    assert all(store.get(f"k{w * 1000 + i}") == {"i": w * 1000 + i} for w in range(3) for i in range(150))
