"""A killed local fine-tune resumes from its checkpoint and takes exactly the steps an uninterrupted run takes;
a checkpoint that belongs to another training is never used; the fine-tune cache hands the checkpoint path
only to trainers that resume, keeps it when training fails and removes it once the entry is complete."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from selfpref_sweep.cell.prompts import Message  # noqa: E402
from selfpref_sweep.finetune.adapters import CacheEntry  # noqa: E402
from selfpref_sweep.finetune.examples import ExampleSet, TrainingExample  # noqa: E402
from selfpref_sweep.finetune.local_trainer import Checkpoints, run_steps  # noqa: E402
from selfpref_sweep.finetune.trainer import Trainer  # noqa: E402

VOCAB = 16


class TinyLM(torch.nn.Module):
    """Enough of a causal LM for answer_loss: next-token logits from the prompt; dropout, so the torch RNG
    matters; a frozen part, so only the trainable parameters are checkpointed."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 6)
        with torch.no_grad():  # the frozen base weights are the same in every process (loaded, not drawn)
            self.emb.weight.copy_(torch.randn(VOCAB, 6, generator=torch.Generator().manual_seed(7)))
        self.emb.requires_grad_(False)
        self.head = torch.nn.Linear(6, VOCAB)

    @property
    def device(self):
        return torch.device("cpu")

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=1, use_cache=False):
        h = torch.nn.functional.dropout(self.emb(input_ids).mean(1, keepdim=True), 0.3, self.training)
        return SimpleNamespace(logits=self.head(h))


ENCODED = [([1 + i % 7, 2 + i % 5, 3 + i % 3], 1 + i % 2) for i in range(9)]  # 9 examples, answers 1/2
EPOCHS, BATCH = 2, 2
TOTAL = 10  # 5 batches per epoch (the last one short) x 2 epochs


class Bar:
    """A progress bar that kills the run at its ``kill_at``-th step, as a Ctrl-C or SIGKILL would."""

    def __init__(self, kill_at=None):
        self.kill_at, self.n = kill_at, 0

    def update(self, n):
        self.n += n
        if self.kill_at is not None and n and self.n >= self.kill_at:
            raise KeyboardInterrupt

    def set_postfix(self, **_):
        pass


def _train(path, *, init_seed=0, kill_at=None, identity=None):
    torch.manual_seed(init_seed)
    model = TinyLM()
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)
    checkpoints = Checkpoints(path, identity or {"spec": "abc", "examples": "e", "dtype": "float32"}, every_s=0)
    progress = run_steps(torch, model, optimizer, ENCODED, epochs=EPOCHS, total=TOTAL, batch_size=BATCH, pad_id=0,
                         seed=3, bar=Bar(kill_at), checkpoints=checkpoints)
    return progress, model


def _same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_uninterrupted_training_writes_no_checkpoint_without_a_path():
    progress, _ = _train(None)
    assert len(progress.losses) == TOTAL and progress.resumed_from is None and progress.epoch == EPOCHS


@pytest.mark.parametrize("kill_at", [3, 5, 6, 9])  # mid-epoch, at the epoch's last batch, just after, late
def test_a_killed_training_resumes_to_exactly_the_uninterrupted_result(tmp_path, kill_at):
    reference, ref_model = _train(None)
    ckpt = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        _train(ckpt, kill_at=kill_at)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]  # no temporary file left beside it
    # a fresh process: a different initialization, which the checkpoint must overwrite
    resumed, model = _train(ckpt, init_seed=99)
    assert resumed.resumed_from == kill_at - 1  # the killed step never reached its checkpoint
    assert resumed.losses == reference.losses and resumed.tokens == reference.tokens
    assert len(resumed.step_s) == TOTAL
    assert _same_weights(model, ref_model)
    torch.manual_seed(99)
    assert not _same_weights(TinyLM(), ref_model)  # so the equality above is the checkpoint's doing


def test_a_checkpoint_of_another_training_is_ignored(tmp_path, caplog):
    reference, ref_model = _train(None)
    ckpt = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        _train(ckpt, kill_at=4, identity={"spec": "other", "examples": "e", "dtype": "float32"})
    with caplog.at_level(logging.WARNING):
        fresh, model = _train(ckpt)
    assert "different training" in caplog.text
    assert fresh.resumed_from is None and fresh.losses == reference.losses and _same_weights(model, ref_model)


def test_an_unreadable_checkpoint_is_ignored_with_a_warning(tmp_path, caplog):
    reference, _ = _train(None)
    ckpt = tmp_path / "run.pt"
    ckpt.write_bytes(b"not a checkpoint")
    with caplog.at_level(logging.WARNING):
        fresh, _ = _train(ckpt)
    assert "unreadable" in caplog.text and fresh.resumed_from is None and fresh.losses == reference.losses


# --- the fine-tune cache's side ---------------------------------------------------------------------------------

def _examples():
    msgs = (Message("system", "s"), Message("user", "u"))
    return ExampleSet(examples=[TrainingExample("a1", "human", 1, msgs, "1")], task="recognition",
                      question="recognition", dataset="hand", n_articles=1, train_article_ids=["a1"], others=["human"])


class FlakyResumable(Trainer):
    """Saves 'progress' to its checkpoint, then fails the first time; the second run reads it back."""

    kind = "flaky"
    resumable = True

    def __init__(self):
        self.seen = []
        self.fail = True

    def hyperparameters(self):
        return {}

    def steps(self, n_examples):
        return n_examples

    def train(self, examples, workdir, digest="", checkpoint=None):
        self.seen.append((checkpoint, checkpoint.read_text() if checkpoint.exists() else None))
        checkpoint.write_text("step 1")
        if self.fail:
            raise KeyboardInterrupt
        Path(workdir, "adapter.bin").write_text("w")
        return {"trainer": self.kind, "n_steps": 2}

    def tuned_model(self, entry, record):
        raise NotImplementedError


class NotResumable(FlakyResumable):
    resumable = False

    def train(self, examples, workdir, digest=""):  # the signature trainers without checkpoints keep
        Path(workdir, "adapter.bin").write_text("w")
        return {"trainer": self.kind, "n_steps": 2}


def _settings(trainer):
    trainer.finetune = SimpleNamespace(settings=SimpleNamespace(seed=0))
    trainer.base = SimpleNamespace(name="tiny")
    return trainer


def test_the_cache_keeps_a_checkpoint_across_a_failure_and_removes_it_when_complete(tmp_path):
    entry = CacheEntry(tmp_path, {"x": 1, "base": {"name": "tiny"}}, "label")
    trainer = _settings(FlakyResumable())
    with pytest.raises(KeyboardInterrupt):
        trainer.train_or_load(entry, _examples, lambda: None)
    assert entry.record() is None and entry.checkpoint().read_text() == "step 1"
    assert trainer.plan(entry, 1)["status"] == "would resume training from its checkpoint"
    assert entry.checkpoint().parent == entry.root and entry.checkpoint() != entry.dir
    trainer.fail = False
    record, trained = trainer.train_or_load(entry, _examples, lambda: None)
    assert trained and record["n_steps"] == 2 and entry.record() is not None
    assert trainer.seen == [(entry.checkpoint(), None), (entry.checkpoint(), "step 1")]
    assert not entry.checkpoint().exists() and trainer.plan(entry, 1)["status"] == "ready"


def test_trainers_without_checkpoints_are_called_as_before(tmp_path):
    entry = CacheEntry(tmp_path, {"x": 2, "base": {"name": "tiny"}}, "label")
    record, trained = _settings(NotResumable()).train_or_load(entry, _examples, lambda: None)
    assert trained and entry.record() is not None and not entry.checkpoint().exists()


def test_a_killed_trainings_staging_directory_is_removed_by_the_next_training(tmp_path):
    entry = CacheEntry(tmp_path, {"x": 3, "base": {"name": "tiny"}}, "label")
    other = CacheEntry(tmp_path, {"x": 4, "base": {"name": "tiny"}}, "label")
    leftover, others = entry.staging(), other.staging()  # as a SIGKILLed training leaves them
    (leftover / "adapter.bin").write_text("half")
    record, trained = _settings(NotResumable()).train_or_load(entry, _examples, lambda: None)
    assert trained and not leftover.exists() and others.is_dir()  # another entry's staging is not this one's
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".staging-")) == [others.name]
