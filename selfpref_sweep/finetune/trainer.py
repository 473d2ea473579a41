"""One interface for every way of fine-tuning an evaluator, and the registry that picks one by the
evaluator's backend (LoRA for local models, a fine-tuning job for OpenAI models).

A trainer says what it would do (`plan`), trains once or loads what an earlier run cached
(`train_or_load`), and gives the fine-tuned model's config (`tuned_model`): the base config with
its adapter set, so the fine-tune is part of the model's identity and of every cache key.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..config.spec import FinetuneSpec
from ..errors import ConfigError
from ..records.atomic import atomic_write_json, atomic_write_text
from ..registry import Registry
from .adapters import EXAMPLES, RECORD, SPEC, CacheEntry
from .examples import ExampleSet

log = logging.getLogger(__name__)

# evaluator backend -> trainer ("module:Class", a Trainer); plug-ins: entry points of the group
# selfpref_sweep.trainers, or SELFPREF_TRAINERS="name=module:Class,..." (tests); no plug-in reuses a built-in's name.
TRAINERS: dict[str, str] = {
    "local": "selfpref_sweep.finetune.local_trainer:LoraTrainer",
    "openai": "selfpref_sweep.finetune.openai_trainer:OpenAITrainer",
}


class Trainer(ABC):
    kind: str = ""
    # True: state lives in the cache entry across runs (API jobs); False: trains into a staging
    # directory renamed into place when complete, so a killed run leaves nothing that looks complete.
    persistent_workdir: bool = False
    # Whether the base model's generation weights should be freed before training (local trainers).
    frees_base_weights: bool = False
    # Whether train() takes a `checkpoint` path to save progress to and resume from (local trainers: a
    # killed hour-long training resumes where it stopped; the checkpoint is removed once the entry is complete).
    resumable: bool = False

    def __init__(self, base: ModelConfig, finetune: FinetuneSpec, model_cache: str, show_progress: bool = True):
        self.base = base
        self.finetune = finetune
        self.model_cache = model_cache
        self.show_progress = show_progress

    @abstractmethod
    def hyperparameters(self) -> dict[str, Any]:
        """Everything about training that changes the model (part of the fine-tune's cache key)."""

    @abstractmethod
    def steps(self, n_examples: int) -> int | None:
        """Optimizer steps for this many examples; None when the trainer does not decide it."""

    @abstractmethod
    def train(self, examples: ExampleSet, workdir: Path, digest: str) -> dict[str, Any]:
        """Train on the examples into `workdir`; returns the record's training fields (loss curve, ...)."""

    @abstractmethod
    def tuned_model(self, entry: CacheEntry, record: dict[str, Any]) -> ModelConfig:
        """The fine-tuned model's config: the base with its adapter (and, for APIs, the new model id)."""

    def status(self, entry: CacheEntry) -> str:
        if entry.record() is not None:
            return "ready"
        if self.resumable and entry.checkpoint().is_file():
            return "would resume training from its checkpoint"
        return "absent"

    def plan(self, entry: CacheEntry, n_examples: int | None) -> dict[str, Any]:
        """What train_or_load would do, without doing it."""
        return {"trainer": self.kind, "status": self.status(entry),
                "steps": None if n_examples is None else self.steps(n_examples)}

    def train_or_load(self, entry: CacheEntry, make_examples: Callable[[], ExampleSet],
                      free_base: Callable[[], None]) -> tuple[dict[str, Any], bool]:
        """(the fine-tune's record, whether this call trained it). Trains at most once per cache entry: a
        file lock makes a second cell that needs the same model wait, then reuse it."""
        with entry.lock():
            record = entry.record()
            if record is not None:
                return record, False
            start = time.time()
            examples = make_examples()
            if not examples.examples:
                raise ConfigError(f"finetune_task={examples.task} on {examples.dataset} produced no training examples "
                                  f"(pairs {examples.n_pairs}, ties dropped {examples.n_ties_dropped}, skipped "
                                  f"{examples.skipped}).")
            prep_s = time.time() - start
            if self.frees_base_weights:
                free_base()
            workdir = entry.workdir() if self.persistent_workdir else entry.staging()
            try:
                resume = {"checkpoint": entry.checkpoint()} if self.resumable else {}
                outcome = self.train(examples, workdir, digest=entry.digest, **resume)
                record = {**examples.stats(), **outcome, "hyperparameters": self.hyperparameters(),
                          "seed": int(self.finetune.settings.seed), "base": entry.spec["base"],
                          "examples_seconds": round(prep_s, 2), "wall_seconds": round(time.time() - start, 2),
                          "spec_sha256": entry.digest, "created_at": time.time()}
                atomic_write_json(workdir / SPEC, entry.spec)
                atomic_write_text(workdir / EXAMPLES, "".join(json.dumps(ex.to_json(), ensure_ascii=False) + "\n"
                                                              for ex in examples.examples))
                atomic_write_json(workdir / RECORD, record)  # last: marks the entry complete
            except BaseException:
                if not self.persistent_workdir:
                    shutil.rmtree(workdir, ignore_errors=True)
                raise
            if not self.persistent_workdir:
                entry.commit(workdir)
            if self.resumable:
                entry.checkpoint().unlink(missing_ok=True)
            log.info("fine-tuned %s (%s) in %.0fs -> %s", self.base.name, examples.task, record["wall_seconds"],
                     entry.dir)
            return record, True


REGISTRY = Registry("fine-tuning trainer (for the evaluator's backend)", Trainer, TRAINERS, "SELFPREF_TRAINERS",
                    "selfpref_sweep.trainers")


def trainer_for(base: ModelConfig, finetune: FinetuneSpec, model_cache: str, show_progress: bool = True) -> Trainer:
    cls = REGISTRY.resolve(str(base.backend))
    return cls(base, finetune, model_cache, show_progress=show_progress)
