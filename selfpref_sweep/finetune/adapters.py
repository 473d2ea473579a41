"""The fine-tune cache: one directory per distinct fine-tuned model, shared by every cell that needs it.

The directory name carries a readable label and a hash of the fine-tune's *spec*: the base model's
identity, the task and its prompt, the fine-tune dataset's root-independent identity, n_articles,
seed, the summary settings the own summaries depend on, the other sources, and the trainer's
hyperparameters. Two cells that need the same model find the same directory; a change to any of
these makes a new one. Moving the data folder does not (no paths in the spec).

A file lock serializes cells that need the same model (the second waits, then reuses); local adapters
are written into a staging directory and renamed into place, so a killed run never leaves a
half-written adapter that looks complete (the same pattern as models/local/weights.py). `finetune.json`,
written last, marks an entry as complete. A resumable trainer's progress lives beside the entry in
`.checkpoint-<entry>.pt` until the entry is complete, so a killed training resumes rather than restarts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from ..cell.articles import article_budget
from ..config.spec import dataset_identity
from ..models.base import ModelIdentity

if TYPE_CHECKING:
    from ..config.spec import CellSpec

FORMAT_VERSION = 1
RECORD = "finetune.json"
EXAMPLES = "examples.jsonl"
SPEC = "spec.json"


def spec_digest(spec: Any) -> str:
    blob = json.dumps(spec, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _safe(part: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(part))[:60]


class CacheEntry:
    def __init__(self, root: Path, spec: dict[str, Any], label: str):
        self.root = Path(root).expanduser()
        self.spec = spec
        self.digest = spec_digest(spec)
        self.dir = self.root / f"{_safe(label)}-{self.digest[:12]}"

    def fingerprint(self, kind: str) -> str:
        """The fine-tuned model's identity suffix (ModelIdentity.adapter)."""
        return f"{kind}:{self.digest[:16]}"

    @contextmanager
    def lock(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.dir) + ".lock"):
            yield

    def record(self) -> dict[str, Any] | None:
        """The completed fine-tune's record, or None if there is none (or it is unreadable)."""
        path = self.dir / RECORD
        if not path.is_file():
            return None
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return rec if rec.get("spec_sha256") == self.digest else None

    def staging(self) -> Path:
        """A fresh staging directory. Called under the entry's lock, so any earlier staging directory of this
        entry is a leftover of a killed training (a SIGKILL or SIGTERM skips the clean-up) and is removed."""
        self.root.mkdir(parents=True, exist_ok=True)
        for leftover in self.root.glob(f".staging-{self.dir.name}-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix=f".staging-{self.dir.name}-", dir=self.root))

    def commit(self, staging: Path) -> None:
        """Move a complete staging directory into place (replacing a leftover incomplete one)."""
        if self.dir.exists():
            shutil.rmtree(self.dir)
        os.replace(staging, self.dir)

    def checkpoint(self) -> Path:
        """Where a resumable trainer keeps its in-progress state (beside the entry, so never mistaken for it)."""
        return self.root / f".checkpoint-{self.dir.name}.pt"

    def workdir(self) -> Path:
        """The entry's own directory, for trainers that keep state across runs (API jobs)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        return self.dir


def finetune_cache_spec(spec: CellSpec, base: ModelIdentity, hyperparameters: dict[str, Any], trainer_kind: str
                        ) -> dict[str, Any]:
    """Everything that decides the fine-tuned model (and nothing that does not, such as paths)."""
    ft = spec.finetune
    ds = ft.dataset
    return {
        "format": FORMAT_VERSION,
        "trainer": trainer_kind,
        "base": {"name": base.name, "backend": base.backend, "weights": base.weights, "dtype": base.dtype,
                 "adapter": base.adapter},
        "task": ft.task.value,
        "question": ft.question,
        "prompt": spec.prompts["pairwise"].get(ft.question),
        "summarize_prompt": spec.prompts["summarize"].get(ds.task),
        "summaries": {"standardize": bool(spec.summaries.standardize),
                      # what standardization strips changes the training texts
                      "preamble_patterns": list(spec.summaries.preamble_patterns) if spec.summaries.strip_preambles
                      else [],
                      "strip_bullets": bool(spec.summaries.strip_bullets),
                      "max_new_tokens": int(spec.summaries.max_new_tokens)},
        "articles": {"budget_chars": article_budget([spec.evaluator], spec.summaries.max_new_tokens, spec.articles),
                     "policy": spec.articles.too_long.value},
        "finetune_dataset": dataset_identity(ds),
        "n_articles": ft.n_articles,
        "seed": int(ft.settings.seed),
        "others": None if not ft.settings.others else [str(o) for o in ft.settings.others],
        "evaluator_name": str(spec.evaluator.name),  # decides which paper source is "own"
        "hyperparameters": hyperparameters,
    }


def cache_entry(spec: CellSpec, base: ModelIdentity, hyperparameters: dict[str, Any], trainer_kind: str
                ) -> CacheEntry:
    """The cache entry of the cell's fine-tune."""
    ft = spec.finetune
    label = f"{spec.evaluator.name}-{ft.task.value}-{ft.dataset.name}-n{ft.n_articles}-s{int(ft.settings.seed)}"
    return CacheEntry(ft.cache_root, finetune_cache_spec(spec, base, hyperparameters, trainer_kind), label)
