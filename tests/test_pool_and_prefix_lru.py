"""One model load per process (the model pool) and prefix caches kept between calls (the prefix LRU)."""

from dataclasses import dataclass

import pytest
import torch

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models.local.prefix import PrefixLRU
from selfpref_sweep.models.pool import GIB, ModelPool
from selfpref_sweep.run.runner import run_cell
from tests import fakes
from tests.conftest import FAKE_EVALUATOR


@dataclass
class _Identity:
    label: str


class Loaded:
    """A backend that holds `gib` GiB (as far as the pool can tell) and records being closed."""

    poolable = True

    def __init__(self, name: str, gib: float = 1.0):
        self.identity = _Identity(name)
        self.gib = gib
        self.closed = False

    def memory_bytes(self) -> int:
        return 0 if self.closed else int(self.gib * GIB)

    def close(self) -> None:
        self.closed = True


def test_the_pool_lends_one_backend_per_key_and_builds_each_once():
    pool, built = ModelPool(budget_bytes=10 * GIB), []

    def build(name):
        built.append(name)
        return Loaded(name)

    a = pool.acquire("a", lambda: build("a"))
    pool.release("a", a)
    assert pool.acquire("a", lambda: build("a")) is a and built == ["a"] and not a.closed
    b = pool.acquire("b", lambda: build("b"))
    assert b is not a and built == ["a", "b"] and (pool.loads, pool.reuses) == (2, 1)


def test_the_pool_frees_the_least_recently_used_idle_backend_beyond_its_budget():
    pool = ModelPool(budget_bytes=int(2.5 * GIB))
    models = {}
    for name in ("a", "b"):
        models[name] = pool.acquire(name, lambda n=name: Loaded(n))
        pool.release(name, models[name])
    pool.release("a", pool.acquire("a", lambda: Loaded("a")))  # a is now the most recently used
    models["c"] = pool.acquire("c", lambda: Loaded("c"))  # 3 GiB held, c lent out
    pool.release("c", models["c"])
    assert models["b"].closed and "b" not in pool  # least recently used, freed
    assert not models["a"].closed and not models["c"].closed and pool.memory_bytes() <= pool.budget_bytes


def test_a_backend_lent_out_is_never_freed_and_keep_false_frees_at_once():
    pool = ModelPool(budget_bytes=0)
    a = pool.acquire("a", lambda: Loaded("a", gib=4))
    b = pool.acquire("b", lambda: Loaded("b", gib=4))
    pool.release("b", b)  # over budget: b (idle) goes, a (lent) stays
    assert b.closed and not a.closed and "a" in pool
    pool.configure(budget_gb=100)
    pool.release("a", a, keep=False)
    assert a.closed and len(pool) == 0


def test_backends_that_are_not_poolable_are_closed_when_released():
    pool = ModelPool(budget_bytes=10 * GIB)

    class Client(Loaded):
        poolable = False

    c = pool.acquire("api", lambda: Client("api"))
    pool.release("api", c)
    assert c.closed and len(pool) == 0


class PooledFake(fakes.FakeModel):
    poolable = True

    def memory_bytes(self) -> int:
        return GIB


def test_the_cells_of_a_sweep_in_one_process_load_the_evaluator_once(compose_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", "fake=tests.test_pool_and_prefix_lru:PooledFake")
    fakes.CONSTRUCTED.clear()
    for k in range(2):  # two cells: other articles (nothing cached), the same evaluator
        cfg = compose_cfg([*FAKE_EVALUATOR, f"dataset.offset={3 * k}", "dataset.n_articles=3", "judge.competence=off"])
        run_cell(resolve_cell(cfg, sweeping=True), tmp_path / f"cell{k}")
    assert fakes.CONSTRUCTED == ["fake_eval"]  # the second cell borrowed the first cell's model
    fakes.CONSTRUCTED.clear()
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=3", "judge.competence=off", "model_pool.budget_gb=0",
                       "dataset.offset=6"])
    run_cell(resolve_cell(cfg, sweeping=True), tmp_path / "cell_unpooled")  # budget 0: freed, built again
    assert fakes.CONSTRUCTED == ["fake_eval"]


# ------------------------------------------------------------------------------------------ prefix LRU
def _lru(max_bytes):
    return PrefixLRU(max_bytes, clone=lambda c: dict(c), size=lambda c: c["bytes"])


def test_the_prefix_lru_finds_the_longest_stored_prefix():
    lru = _lru(100)
    lru.put([1, 2], {"bytes": 10, "n": 2})
    lru.put([1, 2, 3, 4], {"bytes": 10, "n": 4})
    assert lru.longest([1, 2, 3, 4, 5])[0] == 4
    assert lru.longest([1, 2, 3])[0] == 2
    assert lru.longest([1, 2, 3, 4], at_least=5) == (0, None)
    assert lru.longest([9, 2]) == (0, None)
    n, cache = lru.longest([1, 2, 9])
    cache["n"] = "changed"  # a clone: the stored entry is untouched
    assert lru.longest([1, 2, 9])[1]["n"] == 2


def test_the_prefix_lru_evicts_least_recently_used_entries_beyond_its_bytes():
    lru = _lru(25)
    lru.put([1], {"bytes": 10})
    lru.put([2], {"bytes": 10})
    lru.longest([1, 5])  # [1] is now the most recently used
    lru.put([3], {"bytes": 10})
    assert lru.bytes <= 25 and lru.longest([2]) == (0, None)
    assert lru.longest([1])[0] == 1 and lru.longest([3])[0] == 1
    lru.put([4], {"bytes": 30})  # larger than the whole budget: not kept
    assert lru.longest([4]) == (0, None)


# ------------------------------------------------------- the real backend on a tiny random model
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer Qwen2 with random weights (float32) and a sentencepiece tokenizer trained here: the local
    backend's real code paths (left-padded batched generation, prefix caches), in seconds."""
    import io

    import sentencepiece
    from transformers import LlamaTokenizer, Qwen2Config, Qwen2ForCausalLM

    from selfpref_sweep.config import ModelConfig
    from selfpref_sweep.models.local import LocalModel

    text = ["The council approved a new bridge after a long debate about its cost.",
            "Scientists found ice in a crater near the south pole of the moon.",
            "A bakery in the old town won a national prize for its bread.",
            "Summary 1 or summary 2? Which one did you write? Answer 1 or 2."]
    spm = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text * 20), model_writer=spm, vocab_size=120, model_type="bpe", split_digits=True,
        character_coverage=1.0, hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    folder = tmp_path_factory.mktemp("tiny")
    (folder / "tokenizer.model").write_bytes(spm.getvalue())
    tok = LlamaTokenizer.from_pretrained(str(folder))
    tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    tok.save_pretrained(str(folder))
    torch.manual_seed(0)
    # Rows past the tokenizer's vocabulary, as real models have (and room for the pad token a reload adds).
    config = Qwen2Config(vocab_size=len(tok) + 8, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    Qwen2ForCausalLM(config).save_pretrained(str(folder))
    cfg = ModelConfig(name="tiny", backend="local", hf_id=str(folder), dtype="float32", chat=True)
    return LocalModel(cfg, model_cache=str(tmp_path_factory.mktemp("models"))), text


def _generate_requests(model, texts, n=12):
    from selfpref_sweep.models.base import GenerateRequest, GenerationDecoding, Message

    return [GenerateRequest(model.identity, (Message("user", f"Summarize: {t}"),),
                            decoding=GenerationDecoding(max_new_tokens=n)) for t in texts]


def test_batched_generation_equals_one_prompt_at_a_time(tiny, monkeypatch):
    model, text = tiny
    # Prompts of three lengths, so the batch is left-padded.
    reqs = _generate_requests(model, [text[2][:20], text[0], text[1] + " " + text[0]])
    model.generate_batch, model.prefix_reuse = 1, False  # the reference: transformers' generate(), one prompt
    one = dict(model.generate(reqs))
    # A token the first prompt's decoding emits early becomes a stop token: that row ends there while the
    # others decode on, in the batch as alone.
    stop = model.tokenizer.encode(one[reqs[0]].text, add_special_tokens=False)[2]
    monkeypatch.setitem(model.__dict__, "_stop_ids", sorted({*model._stop_ids, stop}))
    one = dict(model.generate(reqs))
    model.generate_batch, model.prefix_reuse = 8, True  # prompts prefilled alone (or from the LRU), decoded together
    model.prefix_lru.clear()
    batched = dict(model.generate(reqs))
    assert len(model.prefix_lru) == len(reqs)  # each prompt's cache is kept for scoring its summary later
    for r in reqs:
        assert (batched[r].text, batched[r].completion_tokens, batched[r].prompt_tokens) == \
               (one[r].text, one[r].completion_tokens, one[r].prompt_tokens)
    assert one[reqs[0]].completion_tokens == 3  # stopped at (and with) its stop token
    assert max(one[r].completion_tokens for r in reqs) > 3  # ... while another row went on


def _judge_requests(model, article, summaries):
    from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding, Message

    return [AnswerRequest(model.identity, (Message("user", f"Article: {article} Summary 1: {a} Summary 2: {b} "
                                                           f"Which one did you write? Answer 1 or 2."),),
                          JudgeDecoding(("1", "2")))
            for a in summaries for b in summaries if a != b]


def test_a_second_call_on_the_same_article_starts_from_its_stored_prefix(tiny):
    model, text = tiny
    article = " ".join(text[:3])
    first = _judge_requests(model, article, ["a bridge", "the bridge", "ice"])
    second = _judge_requests(model, article, ["bread prize", "a bakery", "ice on the moon"])  # another source
    model.prefix_lru.clear()
    model.prefix_lru.max_bytes = 64 * 2 ** 20
    list(model.answer_distributions(first))
    model.tokens_computed = 0
    reused = dict(model.answer_distributions(second))
    with_lru = model.tokens_computed
    model.prefix_lru.clear()
    model.tokens_computed = 0
    fresh = dict(model.answer_distributions(second))
    without_lru = model.tokens_computed
    article_tokens = len(model.encode(model.render(second[0].messages))) // 2  # at least this much was shared
    assert with_lru <= without_lru - article_tokens
    model.prefix_reuse = False
    scratch = dict(model.answer_distributions(second))
    model.prefix_reuse = True
    for r in second:
        for a in ("1", "2"):
            assert reused[r].probs[a] == pytest.approx(fresh[r].probs[a], abs=1e-5)
            assert reused[r].probs[a] == pytest.approx(scratch[r].probs[a], abs=1e-5)


def test_the_prefix_lru_stays_within_its_bytes_and_scoring_leaves_entries_intact(tiny):
    model, text = tiny
    model.prefix_lru.clear()
    model.prefix_lru.max_bytes = 200_000  # a few prefixes of this model
    for t in text:
        list(model.answer_distributions(_judge_requests(model, t, ["x y", "y z", "z x"])))
        assert model.prefix_lru.bytes <= 200_000
    assert len(model.prefix_lru) > 0
    # Each stored cache still holds exactly its key's length: batches ran on expansions of it, never on it.
    for key, (cache, _) in model.prefix_lru._entries.items():
        assert cache.get_seq_length() == len(key) and cache.layers[0].keys.shape[0] == 1


def test_a_single_new_prompt_starts_from_the_stored_article_prefix_in_judging_and_scoring(tiny):
    """A later cell often has one new prompt per article (the new source's summary): it is scored from the
    stored prefix, not from the chat header, in answer distributions and in log-likelihoods alike."""
    from selfpref_sweep.models.base import Message, SequenceRequest

    model, text = tiny
    article = " ".join(text[:3])
    model.prefix_lru.clear()
    list(model.answer_distributions(_judge_requests(model, article, ["a bridge", "ice"])))  # stores the article
    new = _judge_requests(model, article, ["a bridge", "bread"])[1:2]  # one prompt, not computed before
    prompt_len = len(model.encode(model.render(new[0].messages)))
    model.tokens_computed = 0
    reused = dict(model.answer_distributions(new))
    assert model.tokens_computed < prompt_len // 2
    messages = (Message("user", f"Summarize: {article}"),)
    seq = [SequenceRequest(model.identity, continuation=c, messages=messages) for c in ("a bridge", "ice")]
    list(model.sequence_logprobs(seq))  # stores the summarization prompt
    one = [SequenceRequest(model.identity, continuation="bread and a prize", messages=messages)]
    model.tokens_computed = 0
    scored = dict(model.sequence_logprobs(one))
    assert model.tokens_computed < len(model.encode(model.render(messages))) // 2 + 10
    model.prefix_lru.clear()
    model.prefix_reuse = False
    scratch, scratch_seq = dict(model.answer_distributions(new)), dict(model.sequence_logprobs(one))
    model.prefix_reuse = True
    assert reused[new[0]].probs["1"] == pytest.approx(scratch[new[0]].probs["1"], abs=1e-5)
    assert scored[one[0]].total == pytest.approx(scratch_seq[one[0]].total, abs=1e-4)
    assert scored[one[0]].n_tokens == scratch_seq[one[0]].n_tokens
