"""The fine-tuning stage of a cell: fine-tune the evaluator (or reuse the cached fine-tune), hold the
training articles out of the evaluation, and say what a fine-tune would do without training (plan mode).

    ft = prepare_finetuned_evaluator(spec, evaluator)   # None when finetune_task=none
    judge = load_model(ft.model, store, ...)            # base + adapter (or the API's fine-tuned model)

The fine-tuned evaluator judges its *base* model's summaries as its own (as in the paper): the own
summaries keep coming from `evaluator`, the base model's handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cell.dataset_loaders import PAPER_SOURCES
from ..config import DatasetKind, ModelConfig
from ..config.spec import CellSpec
from ..errors import ConfigError
from ..models import model_identity
from ..models.cached import CachedModel
from . import labels as L
from .adapters import cache_entry
from .examples import available_others, build_examples
from .trainer import Trainer, trainer_for


@dataclass
class FinetuneResult:
    model: ModelConfig  # the fine-tuned evaluator: load_model(result.model, ...)
    record: dict[str, Any]  # finetune.json: what was trained, how, loss curve, time
    trained: bool  # True when this call trained it; False when it came from the cache
    entry_dir: Path

    @property
    def fingerprint(self) -> str:
        return self.model.adapter.fingerprint

    @property
    def train_article_ids(self) -> list[str]:
        return list(self.record.get("train_article_ids") or [])

    def summary_block(self) -> dict[str, Any]:
        """summary.json's "finetune" block."""
        r = self.record
        keep = ("task", "question", "dataset", "n_articles", "n_articles_used", "seed", "others", "trainer",
                "n_examples", "n_pairs", "n_ties_dropped", "n_tie_pairs", "pairs_skipped", "label_balance",
                "loss_curve", "n_steps", "seconds", "s_per_step", "load_seconds", "tokens_per_step", "train_dtype",
                "trainable_params", "peak_rss_gb", "hyperparameters", "model_id", "job_id", "trained_tokens",
                "examples_sha256", "created_at")
        block = {k: r.get(k) for k in keep if k in r}
        block.update({"fingerprint": self.fingerprint, "trained_in_this_cell": self.trained,
                      "cache_dir": str(self.entry_dir),
                      "final_loss": r["loss_curve"][-1] if r.get("loss_curve") else None})
        return block


def _trainer_and_entry(spec: CellSpec, show_progress: bool):
    trainer = trainer_for(spec.evaluator, spec.finetune, spec.model_cache, show_progress)
    return trainer, cache_entry(spec, model_identity(spec.evaluator), trainer.hyperparameters(), trainer.kind)


def prepare_finetuned_evaluator(spec: CellSpec, evaluator: CachedModel | None) -> FinetuneResult | None:
    """The fine-tuned evaluator for this cell: trained now (once, under a file lock) or reused from the cache.
    None when finetune_task=none. `evaluator` is the base model's cached handle; its own summaries of the
    training articles are generated through it (and shared with cells through the call store)."""
    if spec.finetune is None:
        return None
    if spec.evaluator.adapter is not None:
        raise ConfigError(f"The evaluator {spec.evaluator.name} already carries an adapter; fine-tune its base.")
    trainer, entry = _trainer_and_entry(spec, spec.show_progress)
    record, trained = trainer.train_or_load(entry, lambda: build_examples(spec, evaluator),
                                              lambda: evaluator.close(keep=False))
    return FinetuneResult(model=trainer.tuned_model(entry, record), record=record, trained=trained,
                          entry_dir=entry.dir)


# ------------------------------------------------------------------------------------------ plan
def _count_others(spec: CellSpec) -> tuple[int, str]:
    ft = spec.finetune
    ds = ft.dataset
    paper = ds.kind == DatasetKind.paper
    if ft.settings.others or not paper:
        others = available_others(spec.evaluator.name, ft.settings.others, paper, [])
        return len(others), ("configured" if ft.settings.others else "human reference")
    folder = Path(str(ds.root)).expanduser() / "summaries" if ds.root else None
    if folder is not None and folder.is_dir():
        have = [k for k in PAPER_SOURCES if (folder / ds.paper_name / f"{ds.paper_name}_train_{k}_responses.json")
                .exists()]
        others = available_others(spec.evaluator.name, None, True, have)
        return len(others), ", ".join(others)
    others = available_others(spec.evaluator.name, None, True, list(PAPER_SOURCES))
    return len(others), ", ".join(others) + " (assumed: data folder not found)"


def finetune_plan(spec: CellSpec) -> dict[str, Any] | None:
    """What the fine-tune of this cell would do, without training, loading a model or reading the data (it
    only looks at the cache entry and, for the paper layout, which summary files exist)."""
    ft = spec.finetune
    if ft is None:
        return None
    trainer, entry = _trainer_and_entry(spec, False)
    n_others, others_txt = _count_others(spec)
    one_at_a_time = ft.task.value in L.INDIVIDUAL_TASKS  # one example per summary: the own and each other's
    fmt = "individual" if one_at_a_time else "pairwise"  # the prompt set its training examples use
    n_examples = ft.n_articles * (n_others + 1 if one_at_a_time else n_others * 2)
    return {
        **trainer.plan(entry, n_examples),
        "task": ft.task.value,
        "evaluator": spec.evaluator.name,
        "finetune_dataset": ft.dataset.name,
        "n_articles": ft.n_articles,
        "others": others_txt,
        "n_examples": n_examples,
        "n_examples_is_upper_bound": ft.task.value in L.CONTROL_TASKS + L.PREFERENCE_TASKS,  # ties are dropped
        "cache_dir": str(entry.dir),
        "question": ft.question,
        "prompt_format": fmt,
        "prompt_missing": ft.question not in spec.prompts[fmt],
        "transfer": spec.transfer.value,
        "eval_offset": int(spec.dataset.offset or 0),
        "inverse_check": bool(ft.settings.inverse_check),
        "fingerprint": entry.fingerprint(trainer.kind),
    }


def planned_judge(spec: CellSpec) -> ModelConfig | None:
    """The fine-tuned evaluator's config as it will be, without training (plan mode: the judge calls of a
    fine-tuned cell go to this identity, so none of them is cached before it exists). For an API job that
    has not finished, the model id is a placeholder. None when finetune_task=none."""
    if spec.finetune is None:
        return None
    trainer, entry = _trainer_and_entry(spec, False)
    record = entry.record() or {"model_id": f"ft:{spec.evaluator.model}:pending:{entry.digest[:8]}"}
    return trainer.tuned_model(entry, record)


def planned_training_articles(spec: CellSpec) -> list[str]:
    """The articles a cached fine-tune of this cell was trained on (plan mode leaves them out of the evaluation,
    as the run does); none before the fine-tune exists."""
    if spec.finetune is None:
        return []
    _, entry = _trainer_and_entry(spec, False)
    return list((entry.record() or {}).get("train_article_ids") or [])


def format_plan(plan: dict[str, Any] | None) -> str:
    """One line for plan mode."""
    if plan is None:
        return "finetune: none"
    n = plan["n_examples"]
    ex = "?" if n is None else (f"<= {n}" if plan["n_examples_is_upper_bound"] else str(n))
    steps = "" if plan["steps"] is None else f", {plan['steps']} steps"
    action = {"ready": "cached, no training"}.get(plan["status"], plan["status"])
    if plan["status"] == "absent":
        action = "would train" if plan["trainer"] != "openai" else "would start an OpenAI fine-tuning job"
    warn = f"  [prompts.{plan['prompt_format']}.{plan['question']} is missing]" if plan["prompt_missing"] else ""
    return (f"finetune {plan['task']} of {plan['evaluator']} on {plan['finetune_dataset']} "
            f"(n_articles={plan['n_articles']}, others: {plan['others']}): {ex} examples{steps} via {plan['trainer']}"
            f" - {action}; evaluated {plan['transfer']} from article {plan['eval_offset']}{warn}")


__all__ = ["FinetuneResult", "Trainer", "finetune_plan", "format_plan", "planned_judge",
           "planned_training_articles",
           "prepare_finetuned_evaluator"]
