"""One cell of the experiment matrix, end to end: summaries, judging, scores, files, W&B."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from .articles import usable_articles
from .config import enum_value
from .data import load_dataset, selection_warnings
from .errors import ConfigError, DataError, StorageError
from .finetune import (cell_fields, drop_training_articles, eval_dataset_cfg, log_to_wandb,
                       prepare_finetuned_evaluator)
from .judging import Pair, assign_labels, judge_individual, judge_pairwise
from .models import load_model
from .models.cached import CachedModel
from .scoring import summarize_question
from .store import Store
from .summaries import clean, dataset_summaries, model_summaries
from .tracking import CellTracker, redact

log = logging.getLogger(__name__)

def cell_description(cfg: DictConfig) -> Dict[str, Any]:
    """The cell's coordinates in the matrix; the analysis job groups cells by these."""
    finetune = enum_value(cfg.finetune_task.name)
    return {
        "evaluator": cfg.evaluator.name,
        "source": cfg.source.name,
        "dataset": cfg.dataset.name,
        "setting": enum_value(cfg.setting.name),
        "label": enum_value(cfg.label.name),
        "finetune_task": finetune,
        **cell_fields(cfg),  # finetune_dataset, finetune_n_articles, transfer (none / in_domain / cross_dataset)
    }


def display_name(cfg: DictConfig, node: DictConfig) -> str:
    """The name a summary's source goes by in the label experiment."""
    return cfg.label.display_names.get(node.name) or node.get("display_name") or node.name


def _atomic_write(path: Path, text: str) -> None:
    """Write-then-rename: a killed process or a full disk never leaves a half-written result."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"Could not write {path} ({exc.strerror or exc}); nothing partial was kept. Free some "
                           f"space (or fix permissions) and re-run the same command: finished model calls are "
                           f"cached, so nothing is recomputed.") from exc


def _unjudged(reason: str) -> Dict[str, Any]:
    return {"score": None, "excluded": True, "exclusion_reason": reason, "consistent": None}


def run_cell(cfg: DictConfig, run_dir: Path, wandb_group: Optional[str] = None) -> Dict[str, Any]:
    start = time.time()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cell = cell_description(cfg)
    if cell["label"] != "none" and cell["setting"] != "pairwise":
        # A grid like setting=pairwise,individual label=none,correct crosses these; such a cell is
        # recorded as skipped (listed by the analysis), not failed.
        reason = (f"label={cell['label']} tags the two summaries of the pairwise preference prompt; "
                  f"it does not apply to setting={cell['setting']}")
        summary = {"status": "skipped", "reason": reason, "cell": cell}
        _atomic_write(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        print(f"\n== skipped cell: {reason} ==")
        return summary
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    questions = list(cfg.setting.questions)
    show = bool(cfg.show_progress)

    store = Store(cfg.store.path)
    # In-domain fine-tunes: evaluation starts after the training articles (the paper's keys[N:]).
    dataset_cfg = eval_dataset_cfg(cfg)
    dataset = load_dataset(dataset_cfg)
    articles = dataset.articles
    warnings = selection_warnings(dataset_cfg, dataset)  # fewer articles than asked: said, never silent
    for w in warnings:
        log.warning(w)
    if not articles:
        raise DataError(f"Dataset {dataset.name!r} selected no articles (n_articles={cfg.dataset.n_articles}, "
                        f"offset={cfg.dataset.offset}).")

    evaluator = load_model(cfg.evaluator, store, cfg.paths.model_cache, show)  # the base: writes the own summaries
    models: List[CachedModel] = [evaluator]
    # Fine-tuned evaluator (trained once per distinct fine-tune, then cached): it judges its base model's summaries.
    finetune = prepare_finetuned_evaluator(cfg, store, evaluator, show)  # None when finetune_task=none
    judge = evaluator
    n_training_dropped = 0
    if finetune is not None:
        judge = load_model(finetune.evaluator_cfg, store, cfg.paths.model_cache, show)
        models.append(judge)
        articles, n_training_dropped = drop_training_articles(articles, finetune)  # a guard; offsets did the rest
        if not articles:
            raise DataError(f"Every article of {dataset.name!r} was a fine-tuning article; raise dataset.offset.")
    source_kind = enum_value(cfg.source.kind)
    source_model = None
    if source_kind == "model":
        source_model = load_model(cfg.source.model, store, cfg.paths.model_cache, show)
        if source_model.identity == evaluator.identity:
            raise ConfigError(f"source={cfg.source.name} is the evaluator itself; pick another source "
                              f"(e.g. source=human).")
        models.append(source_model)

    usable, truncated, reasons = usable_articles(cfg, articles)
    max_new = int(cfg.summaries.max_new_tokens)
    own_raw = model_summaries(evaluator, cfg.evaluator, prompts, dataset, usable, max_new)
    if finetune is not None:
        evaluator.close()  # the base's weights are not needed while its fine-tuned copy judges
    if source_model is not None:
        other_raw = model_summaries(source_model, cfg.source.model, prompts, dataset, usable, max_new)
    else:
        other_raw = dataset_summaries(cfg.source, dataset, usable)
    own, own_problems = clean(own_raw, cfg.summaries.standardize)
    other, other_problems = clean(other_raw, cfg.summaries.standardize)
    for aid, why in own_problems.items():
        reasons.setdefault(aid, f"{why}:{cell['evaluator']}")
    for aid, why in other_problems.items():
        reasons.setdefault(aid, f"{why}:{cell['source']}")

    pairs = [Pair(a.id, a.text, own[a.id], other[a.id]) for a in usable if a.id not in reasons]
    min_mass = float(cfg.judge.min_answer_mass)
    if cell["setting"] == "individual":
        verdicts = judge_individual(judge, prompts, questions, pairs, min_mass)
    else:
        labels = assign_labels(cell["label"], pairs, display_name(cfg, cfg.evaluator),
                               display_name(cfg, cfg.source), int(cfg.seed))
        verdicts = judge_pairwise(judge, prompts, questions, pairs, min_mass, labels)
    judged = dict(zip((p.article_id for p in pairs), verdicts))

    items = []
    for a in articles:
        verdicts = judged.get(a.id) or {q: _unjudged(reasons[a.id]) for q in questions}
        items.append({"article_id": a.id, "evaluator": cell["evaluator"], "source": cell["source"],
                      "dataset": cell["dataset"], "article_truncated": a.id in truncated,
                      "own_summary": own.get(a.id), "other_summary": other.get(a.id), **verdicts})

    boot = cfg.bootstrap
    per_question = {q: summarize_question(items, q, int(boot.n_resamples), float(boot.confidence), int(cfg.seed))
                    for q in questions}
    excluded_items = [it for it in items if any(it[q]["excluded"] for q in questions)]
    exclusion_counts: Dict[str, int] = {}
    for it in excluded_items:
        for why in sorted({it[q]["exclusion_reason"] for q in questions if it[q]["excluded"]}):
            exclusion_counts[why] = exclusion_counts.get(why, 0) + 1

    summary: Dict[str, Any] = {
        "status": "complete",
        "cell": cell,
        "n_articles": len(articles),
        "n_items": len(items),
        "n_excluded": len(excluded_items),
        "exclusions": exclusion_counts,
        "n_truncated_articles": len(truncated),
        **per_question,
        "position_consistency": {q: per_question[q]["position_consistency"] for q in questions},
        "min_answer_mass": float(cfg.judge.min_answer_mass),
        "warnings": warnings,
        "elapsed_s": None,
    }

    if finetune is not None:
        summary["finetune"] = {**finetune.summary_block(), "eval_articles_dropped_as_training": n_training_dropped}
        if cfg.finetune_task.inverse_check:
            from .finetune.inverse import inverse_check

            inverse = inverse_check(cfg, evaluator, judge, finetune.evaluator_cfg, dataset, articles, prompts,
                                    ["recognition", "preference"])
            _atomic_write(run_dir / "inverse.jsonl",
                          "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in inverse.pop("items")))
            summary["inverse_check"] = inverse
    # The call ledger, after every call of the cell (the inverse check's included).
    summary["model_calls"] = sum(m.calls for m in models)
    summary["cache_hits"] = sum(m.cache_hits for m in models)
    summary["tokens"] = {"prompt": sum(m.prompt_tokens for m in models),
                         "completion": sum(m.completion_tokens for m in models)}
    _atomic_write(run_dir / "results.jsonl", "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items))
    summary["elapsed_s"] = round(time.time() - start, 2)
    config = redact(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    tracker = CellTracker(OmegaConf.to_container(cfg.wandb, resolve=True), run_dir, name=_run_name(cell),
                          group=wandb_group or run_dir.name, config=config)
    try:
        summary["wandb_dir"] = tracker.log_cell(summary, [_table_row(it, questions) for it in items])
        log_to_wandb(tracker.run, summary.get("finetune"))  # the training-loss curve as its own series
    finally:
        tracker.finish()
    _atomic_write(run_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    for m in models:
        m.close()
    store.close()
    print(format_result(summary, run_dir))
    return summary


def _run_name(cell: Dict[str, Any]) -> str:
    name = f"{cell['evaluator']}-vs-{cell['source']}-{cell['dataset']}-{cell['setting']}"
    if cell["finetune_task"] != "none":
        name += f"-ft_{cell['finetune_task']}"
    if cell["label"] != "none":
        name += f"-label_{cell['label']}"
    return name


def _table_row(item: Dict[str, Any], questions: List[str]) -> Dict[str, Any]:
    row: Dict[str, Any] = {"article_id": item["article_id"], "source": item["source"]}
    for q in questions:
        v = item[q]
        row[f"{q}_score"] = v["score"]
        row[f"{q}_excluded"] = v["exclusion_reason"]
        if "summaries" in v:  # individual setting: each summary's value and answer mass
            for name in ("own", "other"):
                o = (v["summaries"] or {}).get(name) or {}
                row[f"{q}_{name}_value"] = o.get("value")
                row[f"{q}_{name}_mass"] = o.get("mass")
            continue
        for name in ("forward", "backward"):
            o = (v.get("orders") or {}).get(name) or {}
            row[f"{q}_{name}_p_own"] = o.get("p_own")
            row[f"{q}_{name}_mass"] = o.get("mass")
            row[f"{q}_{name}_chosen_position"] = o.get("chosen_position")
    return row


def _fmt(stats: Dict[str, Any]) -> str:
    if stats.get("mean") is None:
        return "n/a (no scored items)"
    ci = "" if stats.get("ci_low") is None else f"  95% CI [{stats['ci_low']:.3f}, {stats['ci_high']:.3f}]"
    return f"{stats['mean']:.3f}{ci}  (n={stats['n']}, excluded {stats['n_excluded']})"


def format_result(summary: Dict[str, Any], run_dir: Path) -> str:
    c = summary["cell"]
    lines = [
        "",
        f"== {c['evaluator']} judging its own summaries vs {c['source']} on {c['dataset']} ({c['setting']}) ==",
    ]
    for q in ("recognition", "preference"):
        if q in summary:
            pc = summary["position_consistency"].get(q)
            lines.append(f"  self-{q:<12} {_fmt(summary[q])}"
                         + ("" if pc is None else f"  position-consistent {pc:.0%}"))
    lines.append("  (0.5 = no bias; > 0.5 = the evaluator recognizes / favours its own summary)")
    for w in summary.get("warnings") or []:
        lines.append(f"  warning: {w}")
    if summary["n_excluded"]:
        lines.append(f"  excluded items: {summary['n_excluded']} of {summary['n_items']} {summary['exclusions']}")
    lines.append(f"  model calls: {summary['model_calls']} (cache hits {summary['cache_hits']}), "
                 f"{summary['elapsed_s']:.1f}s -> {run_dir / 'summary.json'}")
    return "\n".join(lines)
