"""Local trainer: peft LoRA on the local backend's model, loss on the answer token only.

Each example is encoded exactly as the local backend encodes a judge prompt at evaluation
(`LocalModel.render` = the model's chat template with the generation prompt, then `LocalModel.encode`),
and the loss is the cross-entropy of the answer token ("1" or "2") at the position the evaluation reads:
the last prompt token's next-token logits (`logits_to_keep=1`, so only one row of logits is computed).
Training and evaluation formats therefore cannot drift apart (the paper's Llama fine-tunes trained on
"[/INST] 1" but were evaluated after "My answer is ").

Seeded (LoRA init, example order), bf16 where the CPU supports it (else float32), AdamW with a constant
learning rate, no warm-up, as the authors' Llama fine-tune (1 epoch, batch 1). The adapter is saved with
peft's save_pretrained; it is loaded *unmerged* at evaluation (`attach_adapter`): merging a small LoRA
delta into bf16 weights would round much of it away.

Training checkpoints every couple of minutes (`Checkpoints`): a sweep killed during an hour-long fine-tune
resumes at its last checkpoint and takes the same steps, in the same order, as a run never stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import AdapterConfig, FinetuneTaskConfig, ModelConfig
from ..errors import ConfigError
from ..models.local.precision import AUTO, resolve_dtype
from ..records.atomic import atomic_write
from .adapters import spec_digest
from .examples import ExampleSet, TrainingExample
from .trainer import Trainer

log = logging.getLogger(__name__)


def bf16_supported(torch) -> bool:
    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    try:
        a = torch.randn(8, 8, dtype=torch.bfloat16, requires_grad=True)
        (a @ a).float().sum().backward()
        return a.grad is not None
    except Exception:  # noqa: BLE001 - any failure means: not here
        return False


def training_dtype(requested: str | None, evaluator_dtype: str | None, torch) -> str:
    want = resolve_dtype(requested or evaluator_dtype or AUTO)
    if want == "bfloat16" and not bf16_supported(torch):
        log.warning("bfloat16 is not supported for training on this machine; training in float32")
        return "float32"
    return str(want)


def answer_token_id(tokenizer, answer: str, allowed: Sequence[int]) -> int:
    """The single token the assistant's answer starts with after the generation prompt: the tokenizer's own
    encoding of the answer, which must be one of the ids the evaluation sums for that answer."""
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if len(ids) == 1 and ids[0] in allowed:
        return ids[0]
    exact = [i for i in allowed if tokenizer.decode([i]) == answer]
    if exact:
        return exact[0]
    if allowed:
        return allowed[0]
    raise ConfigError(f"The tokenizer has no token that spells the answer {answer!r}.")


def answer_loss(torch, model, batch: Sequence[tuple[list[int], int]], pad_id: int):
    """Mean cross-entropy of each example's answer token, predicted from its whole prompt."""
    import torch.nn.functional as F

    targets = torch.tensor([t for _, t in batch], device=model.device)
    if len(batch) == 1:
        ids = torch.tensor([batch[0][0]], device=model.device)
        out = model(input_ids=ids, logits_to_keep=1, use_cache=False)
    else:  # left padding: every row's last position is its real last token
        width = max(len(ids) for ids, _ in batch)
        ids = torch.tensor([[pad_id] * (width - len(s)) + s for s, _ in batch], device=model.device)
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s, _ in batch], device=model.device)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, logits_to_keep=1, use_cache=False)
    return F.cross_entropy(out.logits[:, -1, :].float(), targets)


def lora_hyperparameters(t: FinetuneTaskConfig, evaluator_dtype: str | None) -> dict[str, Any]:
    lora = {"r": int(t.lora.r), "alpha": int(t.lora.alpha), "dropout": float(t.lora.dropout),
            "target_modules": list(t.lora.target_modules)}
    return {"method": "lora", "lora": lora, "lr": float(t.lr), "weight_decay": float(t.weight_decay),
            "epochs": int(t.epochs), "batch_size": int(t.batch_size),
            "max_steps": None if t.max_steps is None else int(t.max_steps),
            "dtype": resolve_dtype(t.dtype or evaluator_dtype or AUTO), "optimizer": "adamw",
            "schedule": "constant", "loss": "answer_token"}


def n_steps(n_examples: int, epochs: int, batch_size: int, max_steps: int | None) -> int:
    steps = math.ceil(n_examples / max(1, batch_size)) * max(1, epochs)
    return steps if max_steps is None else min(steps, int(max_steps))


def encode_examples(local_model, examples: Sequence[TrainingExample]) -> list[tuple[list[int], int]]:
    """(prompt ids exactly as the evaluation scores them, answer token id) per example."""
    out = []
    for ex in examples:
        ids = local_model.encode(local_model.render(ex.messages))
        out.append((ids, answer_token_id(local_model.tokenizer, ex.answer, local_model.answer_ids(ex.answer))))
    return out


@dataclasses.dataclass
class Progress:
    """Where training stands: what a checkpoint saves besides the weights and optimizer, so that a resumed
    run takes exactly the steps the uninterrupted run would have taken."""
    losses: list[float] = dataclasses.field(default_factory=list)
    step_s: list[float] = dataclasses.field(default_factory=list)
    tokens: int = 0
    epoch: int = 0
    order: list[int] | None = None  # this epoch's shuffled example order (None: not drawn yet)
    next_batch: int = 0  # index into ``order`` of the next batch's first example
    rng_state: Any = None  # the shuffle generator's state after drawing ``order``
    elapsed_s: float = 0.0  # training seconds spent before this process
    resumed_from: int | None = None


class Checkpoints:
    """A killed training resumes instead of restarting: every ``every_s`` seconds the LoRA weights, the
    optimizer state, the RNG states and the `Progress` go to one file, written atomically. A checkpoint is
    used only by a training with the same identity (fine-tune spec, encoded examples, dtype); any other is
    ignored with a warning, never half-used."""

    def __init__(self, path: Path | None, identity: dict[str, Any], every_s: float):
        self.path = None if path is None else Path(path)
        self.identity = identity
        self.every_s = float(every_s)
        self._last = time.time()

    def load(self, torch, model, optimizer) -> Progress | None:
        if self.path is None or not self.path.is_file():
            return None
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - an unreadable checkpoint only costs the steps it held
            log.warning("ignoring unreadable training checkpoint %s (%s); training from the start", self.path, err)
            return None
        if saved.get("identity") != self.identity:
            log.warning("ignoring training checkpoint %s: it belongs to a different training", self.path)
            return None
        params = dict(model.named_parameters())
        for name, value in saved["lora"].items():
            params[name].data.copy_(value)
        optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch_rng"])
        progress = Progress(**saved["progress"])
        progress.rng_state = _tuples(progress.rng_state)
        progress.resumed_from = len(progress.losses)
        log.info("resuming training from its checkpoint at step %d (%s)", progress.resumed_from, self.path)
        return progress

    def maybe_save(self, torch, model, optimizer, progress: Progress, elapsed_s: float) -> None:
        if self.path is None or time.time() - self._last < self.every_s:
            return
        state = dataclasses.asdict(progress)
        state.update(elapsed_s=round(elapsed_s, 3), resumed_from=None)
        blob = {"identity": self.identity, "progress": state, "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "lora": {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda f: torch.save(blob, f))
        self._last = time.time()


def _tuples(x: Any) -> Any:
    """random.Random.setstate wants the nested tuples its getstate gave (a saved state comes back as lists)."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def run_steps(torch: Any, model: Any, optimizer: Any, encoded: list, *, epochs: int, total: int, batch_size: int,
              pad_id: int, seed: int, bar: Any, checkpoints: Checkpoints) -> Progress:
    """The optimizer steps: each epoch a fresh shuffle (from a generator seeded with ``seed``, so a seed gives
    the same order), at most ``total`` steps in all, resumed from a checkpoint where there is one."""
    progress = checkpoints.load(torch, model, optimizer) or Progress()
    rng = random.Random(seed)
    if progress.rng_state is not None:
        rng.setstate(progress.rng_state)
    bar.update(len(progress.losses))
    start = time.time()
    while progress.epoch < epochs and len(progress.losses) < total:
        if progress.order is None:
            order = list(range(len(encoded)))
            rng.shuffle(order)
            progress.order, progress.next_batch, progress.rng_state = order, 0, rng.getstate()
        order = progress.order
        while progress.next_batch < len(order) and len(progress.losses) < total:
            batch = [encoded[i] for i in order[progress.next_batch:progress.next_batch + batch_size]]
            s0 = time.time()
            loss = answer_loss(torch, model, batch, pad_id)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            progress.step_s.append(time.time() - s0)
            progress.losses.append(round(float(loss.detach()), 6))
            progress.tokens += sum(len(ids) for ids, _ in batch)
            progress.next_batch += batch_size
            bar.update(1)
            bar.set_postfix(loss=f"{progress.losses[-1]:.3f}")
            if progress.next_batch >= len(order):
                progress.epoch, progress.order = progress.epoch + 1, None
            if len(progress.losses) < total:
                checkpoints.maybe_save(torch, model, optimizer, progress, progress.elapsed_s + time.time() - start)
    progress.elapsed_s += time.time() - start
    return progress


class LoraTrainer(Trainer):
    """Trains a LoRA adapter for a local evaluator (backend "local")."""

    kind = "lora"
    persistent_workdir = False  # trains into a staging directory that is renamed into place when complete
    frees_base_weights = True  # the generation copy of the weights is not needed while training
    resumable = True  # checkpoints as it trains; a killed training resumes from its last checkpoint
    checkpoint_seconds = 120.0  # a few MB (LoRA weights + AdamW moments) every 2 minutes

    def hyperparameters(self) -> dict[str, Any]:
        return lora_hyperparameters(self.finetune.settings, self.base.dtype)

    def steps(self, n_examples: int) -> int:
        t = self.finetune.settings
        return n_steps(n_examples, int(t.epochs), int(t.batch_size), t.max_steps)

    def load_model(self, dtype: str):
        from ..models.local import LocalModel

        return LocalModel(dataclasses.replace(self.base, dtype=dtype, adapter=None), model_cache=self.model_cache,
                          show_progress=self.show_progress)

    def train(self, examples: ExampleSet, workdir: Path, digest: str = "", checkpoint: Path | None = None
              ) -> dict[str, Any]:
        import torch
        from peft import LoraConfig, get_peft_model
        from tqdm.auto import tqdm

        t = self.finetune.settings
        seed = int(t.seed)
        dtype = training_dtype(t.dtype, self.base.dtype, torch)
        start = time.time()
        local = self.load_model(dtype)
        load_s = time.time() - start
        encoded = encode_examples(local, examples.examples)
        lora = t.lora
        torch.manual_seed(seed)
        model = get_peft_model(local.model, LoraConfig(
            r=int(lora.r), lora_alpha=int(lora.alpha), lora_dropout=float(lora.dropout),
            target_modules=list(lora.target_modules), bias="none", task_type="CAUSAL_LM"))
        model.train()
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=float(t.lr), weight_decay=float(t.weight_decay))
        batch_size, total = max(1, int(t.batch_size)), self.steps(len(encoded))
        pad_id = local._stop_ids[0] if local._stop_ids else 0
        bar = tqdm(total=total, desc=f"LoRA {examples.task} [{local.identity.label}]", disable=not self.show_progress,
                   leave=False)
        checkpoints = Checkpoints(checkpoint, {"spec": digest, "examples": spec_digest(encoded), "dtype": dtype,
                                               "total": total}, self.checkpoint_seconds)
        progress = run_steps(torch, model, optimizer, encoded, epochs=max(1, int(t.epochs)), total=total,
                             batch_size=batch_size, pad_id=pad_id, seed=seed, bar=bar, checkpoints=checkpoints)
        bar.close()
        losses, step_s, tokens, train_s = progress.losses, progress.step_s, progress.tokens, progress.elapsed_s
        workdir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(workdir))
        n_params = sum(p.numel() for p in trainable)
        local.close()
        del model, optimizer
        return {
            "trainer": self.kind,
            "loss_curve": losses,
            "n_steps": len(losses),
            "seconds": round(train_s, 2),
            "load_seconds": round(load_s, 2),
            "s_per_step": round(train_s / len(losses), 3) if losses else None,
            "step_seconds": [round(s, 3) for s in step_s],
            "tokens_per_step": round(tokens / len(losses), 1) if losses else None,
            "train_dtype": dtype,
            "trainable_params": int(n_params),
            "resumed_from_step": progress.resumed_from,
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        }

    def tuned_model(self, entry, record: dict[str, Any]) -> ModelConfig:
        """The base plus its adapter: the fingerprint (part of the identity and so of every cache key) and
        the directory LocalModel loads it from."""
        return dataclasses.replace(self.base, adapter=AdapterConfig(fingerprint=entry.fingerprint(self.kind),
                                                                    path=str(entry.dir)))
