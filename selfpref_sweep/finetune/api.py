"""What a cell calls: fine-tune the evaluator (or reuse the cached fine-tune), plan without training,
hold the training articles out of the evaluation, and describe the fine-tune for summary.json / W&B.

    ft = prepare_finetuned_evaluator(cfg, store, evaluator)   # None when finetune_task=none
    judge = load_model(ft.evaluator_cfg, store, ...)          # base + adapter (or the API's model id)

The fine-tuned evaluator judges its *base* model's summaries as its own (as in the paper): the own
summaries keep coming from `evaluator`, the base model's handle.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from ..data import Article, PAPER_SOURCES
from ..errors import ConfigError
from ..models import backend_class
from ..models.base import ModelIdentity
from ..models.cached import CachedModel
from ..registry import resolve
from ..store import Store
from . import labels as L
from .adapters import EXAMPLES, FORMAT_VERSION, RECORD, SPEC, CacheEntry, atomic_write_json, atomic_write_text
from .examples import (article_rule, available_others, build_examples, dataset_identity, finetune_dataset_cfg,
                       question_for, same_articles, task_name)

log = logging.getLogger(__name__)

# evaluator backend -> trainer ("module:Class"); SELFPREF_TRAINERS="name=module:Class,..." adds more (tests).
TRAINERS: Dict[str, str] = {
    "local": "selfpref_sweep.finetune.local_trainer:LoraTrainer",
    "openai": "selfpref_sweep.finetune.openai_trainer:OpenAITrainer",
}


def trainer_class(backend: str):
    return resolve(TRAINERS, "SELFPREF_TRAINERS", backend, "fine-tuning trainer (for the evaluator's backend)")


def is_finetuned(cfg: DictConfig) -> bool:
    return task_name(cfg) != "none"


# ----------------------------------------------------------------------------------- the cache entry
def cache_root(cfg: DictConfig) -> Path:
    root = cfg.finetune_task.get("cache_dir") or str(Path(str(cfg.paths.model_cache)).expanduser() / "finetunes")
    return Path(str(root)).expanduser()


def finetune_spec(cfg: DictConfig, base: ModelIdentity, trainer, ft_ds: DictConfig, prompts: Dict) -> Dict[str, Any]:
    """Everything that decides the fine-tuned model (and nothing that does not, such as paths)."""
    question = question_for(cfg.finetune_task)
    ds = OmegaConf.to_container(ft_ds, resolve=True, enum_to_str=True)
    return {
        "format": FORMAT_VERSION,
        "trainer": trainer.kind,
        "base": {"name": base.name, "backend": base.backend, "weights": base.weights, "dtype": base.dtype,
                 "adapter": base.adapter},
        "task": task_name(cfg),
        "question": question,
        "prompt": prompts["pairwise"].get(question),
        "summarize_prompt": prompts["summarize"].get(ds.get("task")),
        "summaries": {"standardize": bool(cfg.summaries.standardize),
                      "max_new_tokens": int(cfg.summaries.max_new_tokens)},
        "articles": article_rule(cfg),
        "finetune_dataset": dataset_identity(ds),
        "n_articles": int(ds["n_articles"]),
        "seed": int(cfg.finetune_task.seed),
        "others": None if not cfg.finetune_task.get("others") else [str(o) for o in cfg.finetune_task.others],
        "evaluator_name": str(cfg.evaluator.name),  # decides which paper source is "own"
        "hyperparameters": trainer.hyperparameters(),
    }


def entry_label(cfg: DictConfig, ft_ds: DictConfig) -> str:
    return f"{cfg.evaluator.name}-{task_name(cfg)}-{ft_ds.name}-n{int(ft_ds.n_articles)}-s{int(cfg.finetune_task.seed)}"


def _base_identity(cfg: DictConfig) -> ModelIdentity:
    return backend_class(str(cfg.evaluator.backend)).identity_for(cfg.evaluator)


def _entry(cfg: DictConfig, base: ModelIdentity, trainer, prompts: Dict) -> Tuple[CacheEntry, DictConfig]:
    ft_ds = finetune_dataset_cfg(cfg)
    spec = finetune_spec(cfg, base, trainer, ft_ds, prompts)
    return CacheEntry(cache_root(cfg), spec, entry_label(cfg, ft_ds)), ft_ds


# ------------------------------------------------------------------------------------ the result
@dataclass
class FinetuneResult:
    evaluator_cfg: DictConfig  # the fine-tuned evaluator's model config: load_model(result.evaluator_cfg, ...)
    fingerprint: str  # ModelIdentity.adapter of the fine-tuned evaluator
    record: Dict[str, Any]  # finetune.json: what was trained, how, loss curve, time
    trained: bool  # True when this call trained it; False when it came from the cache
    finetune_dataset: str
    finetune_dataset_cfg: DictConfig
    train_article_ids: List[str]
    entry_dir: Path
    extras: Dict[str, Any] = field(default_factory=dict)

    def summary_block(self) -> Dict[str, Any]:
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
                      "final_loss": r["loss_curve"][-1] if r.get("loss_curve") else None, **self.extras})
        return block


def prepare_finetuned_evaluator(cfg: DictConfig, store: Store, evaluator: CachedModel,
                                show_progress: bool = True) -> Optional[FinetuneResult]:
    """The fine-tuned evaluator for this cell: trained now (once, under a file lock) or reused from the cache.
    None when finetune_task=none. `evaluator` is the base model's cached handle; its own summaries of the
    training articles are generated through it (and shared with cells through the call store)."""
    if not is_finetuned(cfg):
        return None
    if evaluator.identity.adapter is not None:
        raise ConfigError(f"The evaluator {evaluator.identity.label} already carries an adapter; fine-tune its base.")
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    trainer = trainer_class(str(cfg.evaluator.backend))(cfg, show_progress=show_progress)
    entry, ft_ds = _entry(cfg, evaluator.identity, trainer, prompts)
    trained = False
    with entry.lock():
        record = entry.record()
        if record is None:
            start = time.time()
            examples = build_examples(cfg, evaluator, prompts, ft_ds)
            if not examples.examples:
                raise ConfigError(f"finetune_task={examples.task} on {examples.dataset} produced no training examples "
                                  f"(pairs {examples.n_pairs}, ties dropped {examples.n_ties_dropped}, skipped "
                                  f"{examples.skipped}).")
            prep_s = time.time() - start
            if trainer.kind == "lora":
                evaluator.close()  # free the generation copy of the weights before training
            workdir = entry.workdir() if trainer.persistent_workdir else entry.staging()
            try:
                outcome = trainer.train(examples, workdir, digest=entry.digest)
                record = {**examples.stats(), **outcome, "hyperparameters": trainer.hyperparameters(),
                          "seed": int(cfg.finetune_task.seed), "base": entry.spec["base"],
                          "examples_seconds": round(prep_s, 2), "wall_seconds": round(time.time() - start, 2),
                          "spec_sha256": entry.digest, "created_at": time.time()}
                record.pop("adapter_path", None)
                atomic_write_json(workdir / SPEC, entry.spec)
                atomic_write_text(workdir / EXAMPLES, "".join(json.dumps(ex.to_json(), ensure_ascii=False) + "\n"
                                                              for ex in examples.examples))
                atomic_write_json(workdir / RECORD, record)  # last: marks the entry complete
            except BaseException:
                if not trainer.persistent_workdir:
                    import shutil

                    shutil.rmtree(workdir, ignore_errors=True)
                raise
            if not trainer.persistent_workdir:
                entry.commit(workdir)
            trained = True
            log.info("fine-tuned %s (%s) in %.0fs -> %s", cfg.evaluator.name, examples.task, record["wall_seconds"],
                     entry.dir)
    tuned_cfg = trainer.tuned_model_cfg(cfg.evaluator, entry, record)
    return FinetuneResult(evaluator_cfg=tuned_cfg, fingerprint=str(tuned_cfg.adapter), record=record, trained=trained,
                          finetune_dataset=str(ft_ds.name), finetune_dataset_cfg=ft_ds,
                          train_article_ids=list(record.get("train_article_ids") or []), entry_dir=entry.dir)


# --------------------------------------------------------------------------- evaluation articles
def finetune_dataset_name(cfg: DictConfig) -> Optional[str]:
    if not is_finetuned(cfg):
        return None
    return str(cfg.finetune_dataset.name) if cfg.get("finetune_dataset") is not None else str(cfg.dataset.name)


def transfer(cfg: DictConfig) -> str:
    """none / in_domain / cross_dataset (by dataset name, the rule the analysis uses)."""
    if not is_finetuned(cfg):
        return "none"
    return "in_domain" if finetune_dataset_name(cfg) == str(cfg.dataset.name) else "cross_dataset"


def eval_dataset_cfg(cfg: DictConfig) -> DictConfig:
    """The cell's dataset config, starting after the training articles when it draws from the same article
    list as the fine-tune dataset (the paper's keys[N:] filter); unchanged otherwise."""
    if not is_finetuned(cfg):
        return cfg.dataset
    ft = finetune_dataset_cfg(cfg)
    ev = OmegaConf.to_container(cfg.dataset, resolve=True, enum_to_str=True)
    if not same_articles(OmegaConf.to_container(ft, enum_to_str=True), ev):
        return cfg.dataset
    train_end = int(ft.get("offset") or 0) + int(ft.n_articles)
    ev["offset"] = max(int(ev.get("offset") or 0), train_end)
    return OmegaConf.create(ev)


def drop_training_articles(articles: Sequence[Article], result: Optional[FinetuneResult]) -> Tuple[List[Article], int]:
    """The evaluation articles minus any the evaluator was trained on (a guard for datasets whose order or
    selection differs, e.g. a shuffled copy): returns (kept, number dropped)."""
    if result is None or not result.train_article_ids:
        return list(articles), 0
    train = set(result.train_article_ids)
    kept = [a for a in articles if a.id not in train]
    return kept, len(articles) - len(kept)


def cell_fields(cfg: DictConfig) -> Dict[str, Any]:
    """summary.json "cell" fields: finetune_dataset, finetune_n_articles, transfer."""
    if not is_finetuned(cfg):
        return {"finetune_dataset": None, "finetune_n_articles": None, "transfer": "none"}
    return {"finetune_dataset": finetune_dataset_name(cfg), "finetune_n_articles": int(cfg.finetune_task.n_articles),
            "transfer": transfer(cfg)}


# ------------------------------------------------------------------------------------------ plan
def _count_others(cfg: DictConfig, ft_ds: DictConfig) -> Tuple[Optional[int], str]:
    kind = str(ft_ds.kind)
    if cfg.finetune_task.get("others"):
        return len(cfg.finetune_task.others), "configured"
    if kind != "paper":
        return 1, "human reference"
    root = ft_ds.get("root")
    if root and (Path(str(root)).expanduser() / "summaries").is_dir():
        ds = ft_ds.paper_name
        have = [k for k in PAPER_SOURCES
                if (Path(str(root)).expanduser() / "summaries" / ds / f"{ds}_train_{k}_responses.json").exists()]
        others = available_others(cfg, kind, have)
        return len(others), ", ".join(others)
    others = available_others(cfg, kind, list(PAPER_SOURCES))
    return len(others), ", ".join(others) + " (assumed: data folder not found)"


def finetune_plan(cfg: DictConfig) -> Optional[Dict[str, Any]]:
    """What the fine-tune of this cell would do, without training, loading a model or reading the data (it
    only looks at the cache entry and, for the paper layout, which summary files exist)."""
    if not is_finetuned(cfg):
        return None
    task = task_name(cfg)
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    trainer = trainer_class(str(cfg.evaluator.backend))(cfg, show_progress=False)
    try:
        ft_ds = finetune_dataset_cfg(cfg)
    except ConfigError:  # no data folder: still say what it would train, keyed on the config
        raw = OmegaConf.to_container(cfg.finetune_dataset if cfg.get("finetune_dataset") is not None else cfg.dataset,
                                     resolve=True, enum_to_str=True)
        raw.update({"n_articles": int(cfg.finetune_task.n_articles or 0), "root": None})
        if cfg.get("finetune_dataset") is None:
            raw["offset"] = 0
        ft_ds = OmegaConf.create(raw)
    spec = finetune_spec(cfg, _base_identity(cfg), trainer, ft_ds, prompts)
    entry = CacheEntry(cache_root(cfg), spec, entry_label(cfg, ft_ds))
    n_others, others_txt = _count_others(cfg, ft_ds)
    n_art = int(ft_ds.n_articles)
    n_examples = None if n_others is None else n_art * n_others * 2
    question = question_for(cfg.finetune_task)
    ev = eval_dataset_cfg(cfg) if ft_ds.get("root") or str(ft_ds.kind) != "paper" else cfg.dataset
    return {
        "task": task,
        "evaluator": str(cfg.evaluator.name),
        "trainer": trainer.kind,
        "finetune_dataset": str(ft_ds.name),
        "n_articles": n_art,
        "others": others_txt,
        "n_examples": n_examples,
        "n_examples_is_upper_bound": task in L.CONTROL_TASKS,  # ties are dropped
        "steps": None if n_examples is None else trainer.steps(n_examples),
        "status": trainer.status(entry),
        "cache_dir": str(entry.dir),
        "question": question,
        "prompt_missing": question not in prompts["pairwise"],
        "transfer": transfer(cfg),
        "eval_offset": int(ev.get("offset") or 0),
        "inverse_check": bool(cfg.finetune_task.get("inverse_check")),
        "fingerprint": entry.fingerprint(trainer.kind),
    }


def planned_evaluator_cfg(cfg: DictConfig) -> Optional[DictConfig]:
    """The fine-tuned evaluator's model config as it will be, without training (plan mode: the judge calls of
    a fine-tuned cell go to this identity, so none of them is cached before it exists). For an OpenAI job
    that has not finished, the model id is a placeholder. None when finetune_task=none."""
    if not is_finetuned(cfg):
        return None
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    trainer = trainer_class(str(cfg.evaluator.backend))(cfg, show_progress=False)
    try:
        ft_ds = finetune_dataset_cfg(cfg)
    except ConfigError:
        return None
    entry = CacheEntry(cache_root(cfg), finetune_spec(cfg, _base_identity(cfg), trainer, ft_ds, prompts),
                       entry_label(cfg, ft_ds))
    record = entry.record() or {"model_id": f"ft:{cfg.evaluator.get('model')}:pending:{entry.digest[:8]}"}
    return trainer.tuned_model_cfg(cfg.evaluator, entry, record)


def format_plan(plan: Optional[Dict[str, Any]]) -> str:
    """One line for run.py's plan mode."""
    if plan is None:
        return "finetune: none"
    n = plan["n_examples"]
    ex = "?" if n is None else (f"<= {n}" if plan["n_examples_is_upper_bound"] else str(n))
    steps = "" if plan["steps"] is None else f", {plan['steps']} steps"
    action = {"ready": "cached, no training"}.get(plan["status"], plan["status"])
    if plan["status"] == "absent":
        action = "would train" if plan["trainer"] != "openai" else "would start an OpenAI fine-tuning job"
    warn = f"  [prompts.pairwise.{plan['question']} is missing]" if plan["prompt_missing"] else ""
    return (f"finetune {plan['task']} of {plan['evaluator']} on {plan['finetune_dataset']} "
            f"(n_articles={plan['n_articles']}, others: {plan['others']}): {ex} examples{steps} via {plan['trainer']}"
            f" - {action}; evaluated {plan['transfer']} from article {plan['eval_offset']}{warn}")


# ------------------------------------------------------------------------------------------ W&B
def log_to_wandb(run, block: Dict[str, Any]) -> None:
    """The fine-tune's loss curve as its own series (x = finetune/step), and its scalars in the run summary."""
    if run is None or not block:
        return
    run.define_metric("finetune/step")
    run.define_metric("finetune/train_loss", step_metric="finetune/step")
    for i, loss in enumerate(block.get("loss_curve") or [], start=1):
        run.log({"finetune/step": i, "finetune/train_loss": loss})
    run.summary.update({f"finetune/{k}": v for k, v in block.items()
                        if isinstance(v, (int, float, str)) and not isinstance(v, bool) or v is None})
