"""Split answer tokens in the local backend: a sentencepiece tokenizer (trained here, loaded as
transformers' Llama tokenizer) writes " 1" as "▁" then "1", as Llama-2's does. A stub model plants the
next-token distributions, so the marginal P(a) = P(a) + P(▁)·P(a | prompt + ▁) is computed by hand."""

import io
import math
from types import SimpleNamespace

import pytest
import sentencepiece
import torch
from transformers import DynamicCache, LlamaTokenizer

from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding, Message, ModelIdentity
from selfpref_sweep.models.local import FULL_METHOD, SPLIT_METHOD, LocalModel, split_tokens, whitespace_token_ids
from selfpref_sweep.models.local.prefix import Score, schedule

# Prompts with a "?" are the ones whose (stub) model starts its answer with whitespace. They share a prefix
# and then branch, so prefix reuse scores all four in one padded batch, two of them split, of unequal length.
PROMPTS = ["Which summary is better, 1 or 2?", "Which summary is better; answer 1 or 2.",
           "Which summary is better: summary 1 or summary 2?", "Which summary is better. Answer:"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(PROMPTS * 10 + ["The answer is 1.", "I wrote summary 2."] * 10), model_writer=model,
        vocab_size=60, model_type="bpe", split_digits=True, character_coverage=1.0, hard_vocab_limit=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    folder = tmp_path_factory.mktemp("spm")
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    tok = LlamaTokenizer.from_pretrained(str(folder))
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    return tok


class PlantedDecoder(torch.nn.Module):
    """Keeps each row's token ids as its KV cache's keys, and returns as hidden state the log of a planted
    next-token distribution of the row's context (what it can attend to). It checks that a new token's
    position id is its context's length, so a wrong mask or position fails the test."""

    def __init__(self, planted):
        super().__init__()
        self.planted = planted  # context (tuple of ids) -> {token id: probability}

    def forward(self, input_ids, past_key_values=None, use_cache=False, attention_mask=None, position_ids=None):
        batch, n = input_ids.shape
        past = [[] for _ in range(batch)]
        if past_key_values is not None and past_key_values.get_seq_length() > 0:
            ids = past_key_values.layers[0].keys[:, 0, :, 0].long()
            for b in range(batch):
                keep = attention_mask[b, : ids.shape[1]].bool() if attention_mask is not None else slice(None)
                past[b] = ids[b][keep].tolist()
        hidden = torch.full((batch, n, self.planted.vocab), -1e4)
        for b in range(batch):
            if position_ids is not None:
                assert position_ids[b, 0] == len(past[b]), "a new token is not placed after its own context"
            for t in range(n):
                for tok, p in self.planted(tuple(past[b] + input_ids[b, : t + 1].tolist())).items():
                    hidden[b, t, tok] = math.log(p)
        if use_cache:
            past_key_values = past_key_values if past_key_values is not None else DynamicCache()
            keys = input_ids.float()[:, None, :, None]
            past_key_values.update(keys, keys.clone(), 0)
        return SimpleNamespace(last_hidden_state=hidden, past_key_values=past_key_values if use_cache else None)


class StubModel(torch.nn.Module):
    """A causal LM whose output layer is the identity: the logits are the decoder's planted log-probabilities."""

    def __init__(self, planted):
        super().__init__()
        self.decoder = PlantedDecoder(planted)
        self.head = torch.nn.Linear(planted.vocab, planted.vocab, bias=False)
        self.head.weight.data = torch.eye(planted.vocab)
        self.config = SimpleNamespace()

    def get_decoder(self):
        return self.decoder

    def get_output_embeddings(self):
        return self.head


class StubLocal(LocalModel):
    """The local backend with a given tokenizer and model instead of loaded weights."""

    def __init__(self, tokenizer, model):
        self._given = tokenizer, model
        super().__init__(SimpleNamespace(name="stub", dtype="float32"), model_cache="")

    @classmethod
    def identity_for(cls, cfg):
        return ModelIdentity(name=cfg.name, backend="local", weights="stub")

    def _load(self):
        self.torch, self.device = torch, "cpu"
        self.tokenizer, self.model = self._given


@pytest.fixture(scope="module")
def stub(tokenizer):
    space, one, two = (tokenizer.convert_tokens_to_ids(t) for t in ("▁", "1", "2"))
    question = tokenizer.convert_tokens_to_ids("?")

    def planted(context):
        if tokenizer.eos_token_id in context:  # a padded context: what reading the wrong position gives
            return {question: 1.0}
        if context[-1] == space:  # the answer's digit after the whitespace piece
            return {one: 0.6, two: 0.3, question: 0.1} if question in context else {two: 0.9, question: 0.1}
        if question in context:  # the answer starts with whitespace half the time
            return {space: 0.5, one: 0.3, two: 0.2}
        return {one: 0.6, two: 0.395, space: 0.005}  # whitespace below SPLIT_MIN_MASS: one position

    planted.vocab = len(tokenizer)
    return StubLocal(tokenizer, StubModel(planted))


def test_the_tokenizer_splits_the_answer_and_its_whitespace_piece_is_found(tokenizer, stub):
    pieces = tokenizer.convert_ids_to_tokens(tokenizer("Answer: 1", add_special_tokens=False)["input_ids"])
    assert pieces[-2:] == ["▁", "1"]  # as Llama-2 writes " 1"
    assert tokenizer.decode([tokenizer.convert_tokens_to_ids("▁")]) == ""  # alone, "▁" decodes to nothing
    assert stub._whitespace_ids == [tokenizer.convert_tokens_to_ids("▁")]


@pytest.mark.parametrize("prefix_reuse, chunk, split_free", [(True, 0, False), (False, 0, False), (True, 4, False),
                                                               (True, 4, True), (False, 4, True)])
def test_split_answers_are_marginalized_and_unsplit_ones_read_as_before(stub, prefix_reuse, chunk, split_free):
    """Batched over shared prefixes, from scratch, and batch-invariant: in chunks of 4, and split-free (over the
    shared prefixes or from scratch, every forward right-padded to its query width: a real position or a second
    position that saw the padding would read the planted pad answer)."""
    stub.prefix_reuse, stub.second_positions, stub.chunk = prefix_reuse, 0, chunk
    stub.key_blocks, stub.__dict__["split_free"] = split_free, split_free
    stub.prefix_lru.clear()
    stub.min_extend_saving = 0  # these prompts are short: walk the exact trie, so the batch shares a cached prefix
    reqs = [AnswerRequest(stub.identity, (Message("user", p),), JudgeDecoding(("1", "2"))) for p in PROMPTS]
    got = dict(stub.answer_distributions(reqs))
    for r in reqs:
        d = got[r]
        if r.messages[0].content.endswith("?"):
            # P(1) = 0.3 + 0.5 * 0.6, P(2) = 0.2 + 0.5 * 0.3
            assert d.method == SPLIT_METHOD
            assert d.probs == pytest.approx({"1": 0.6, "2": 0.35}, abs=1e-6)
        else:  # 0.005 on "▁" is below SPLIT_MIN_MASS: the first position alone, as before
            assert d.method == FULL_METHOD
            assert d.probs == pytest.approx({"1": 0.6, "2": 0.395}, abs=1e-6)
        assert d.prompt_tokens == len(stub.encode(r.messages[0].content))
    assert stub.second_positions == 2
    stub.chunk, stub.key_blocks = 0, False
    stub.__dict__.pop("split_free")
    if prefix_reuse and chunk and not split_free:  # every cache the LRU holds ends at a chunk boundary
        assert stub.prefix_lru._lengths and all(n % chunk == 0 for n in stub.prefix_lru._lengths)
    elif prefix_reuse:  # the four prompts share a prefix and were scored in one padded batch
        assert stub.tokens_computed < stub.tokens_requested
        batches = [s.prompts for s in schedule([stub.encode(p) for p in PROMPTS]) if isinstance(s, Score)]
        assert [sorted(b) for b in batches] == [[0, 1, 2, 3]]


def test_split_token_rule():
    # the most probable first, until less than min_mass of whitespace is left unread
    assert split_tokens([(7, 0.3), (8, 0.5), (9, 0.005)], min_mass=0.01) == [(8, 0.5), (7, 0.3)]
    assert split_tokens([(7, 0.004), (8, 0.005)], min_mass=0.01) == []  # 0.009 in all: negligible
    assert split_tokens([(i, 0.1) for i in range(6)], min_mass=0.01, max_tokens=4) == [(i, 0.1) for i in range(4)]
    assert split_tokens([]) == []


def test_whitespace_token_ids():
    vocab = ["a", " ", "", "\n", "", "<s>", " 1", "\t\t"]
    in_context = {2: " ", 4: ""}  # id 2 reads as a space after a word (sentencepiece's "▁"); id 4 stays empty
    found = whitespace_token_ids(vocab, {5}, lambda ids: [in_context[i] for i in ids])
    assert found == [1, 2, 3, 7]


def test_a_row_s_distribution_does_not_depend_on_the_output_layer_block_it_is_read_in():
    """Batch-invariant answers read the float32 output layer HEAD_ROWS rows at a time, across prompts: a row
    must come out the same among any companions, alone, or at another place in the block (on a CPU a 1-row
    product rounds otherwise than a row among several, so reading a short block unpadded would fail here)."""
    from selfpref_sweep.models.local import HEAD_ROWS

    vocab, width = 4096, 256  # a head of real proportions: large enough for a GEMM's blocked kernels
    model = StubModel(SimpleNamespace(vocab=1))
    model.head = torch.nn.Linear(width, vocab, bias=False)
    torch.nn.init.normal_(model.head.weight, generator=torch.Generator().manual_seed(1))
    local = StubLocal(None, model)
    states = torch.randn(HEAD_ROWS + 5, width, generator=torch.Generator().manual_seed(2))
    block = local._head_probs(states[:HEAD_ROWS])
    assert local.head_rows_invariant  # the CPUs measured (oneDNN, float32): a row is the same beside any rows
    assert local._head_probs(states[5:])[:HEAD_ROWS - 5].equal(block[5:])  # other companions, other places
    alone = [local._head_probs(states[k:k + 1])[0] for k in range(HEAD_ROWS)]  # filled up with copies
    assert all(row.equal(block[k]) for k, row in enumerate(alone))
    assert local._head_probs(states[2:5]).equal(block[2:5])  # a short block
    local.__dict__["head_rows_invariant"] = False  # a device where companions matter: each row among copies
    assert local._head_probs(states[:HEAD_ROWS]).equal(block)
