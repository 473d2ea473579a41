"""One cell of the experiment matrix: a short composition of the stages, plus its files and W&B run.

    articles -> summaries (own, other) -> pairs -> judge requests -> answer distributions -> scores -> record
                                                -> familiarity (the judge's log-likelihood of each summary)

Each stage lives in the module named after it (articles, summaries, pairs, judging, scoring, results);
plan mode (plan.py), fine-tuning (finetune/) and the inverse check reuse them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .articles import ArticleSelection, select_articles
from .competence import CompetenceControl, competence_requests, control_summaries, score_competence
from .config import ModelConfig
from .data import Dataset, load_dataset, selection_warnings
from .errors import ConfigError, DataError
from .familiarity import FamiliarityStage, familiarity_requests, measure_familiarity
from .files import atomic_write_json, atomic_write_jsonl
from .finetune import drop_training_articles, prepare_finetuned_evaluator
from .judging import ItemRequests, answer_distributions, judge_requests
from .models import POOL, load_model
from .models.cached import CachedModel
from .pairs import PairSet, assign_labels, make_pairs
from .record import INVERSE_FILE, RESULTS_FILE, STATUS_SKIPPED, SUMMARY_FILE
from .results import cell_summary, format_result, item_records, table_row
from .scoring import score_items
from .spec import CellSpec
from .store import Store
from .summaries import SummarySet, own_summaries, own_summaries_warnings, source_summaries
from .tracking import CellTracker, log_finetune

log = logging.getLogger(__name__)


def run_cell(spec: CellSpec, run_dir: Path, wandb_group: Optional[str] = None) -> Dict[str, Any]:
    start, run_dir = time.time(), Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if spec.skip_reason:
        return _skipped(spec, run_dir)
    with CellModels(spec) as models:
        dataset, warnings = _load_articles(spec)
        warnings += own_summaries_warnings(spec.evaluator)
        evaluator = models.load(spec.evaluator)  # the base: writes the own summaries
        finetune = prepare_finetuned_evaluator(spec, evaluator)  # None when finetune_task=none
        judge = models.load(finetune.model) if finetune else evaluator
        source = models.load_source(spec.source_model, evaluator)
        articles, n_dropped = drop_training_articles(dataset.articles, finetune)
        if not articles:
            raise DataError(f"Every article of {dataset.name!r} was a fine-tuning article; raise dataset.offset.")
        selection = select_articles(articles, [spec.evaluator, spec.source_model], spec.summaries.max_new_tokens,
                                    spec.articles)
        own = own_summaries(evaluator, spec.evaluator, dataset, spec.prompts, selection.usable, spec.summaries)
        if finetune is not None:
            evaluator.close()  # the base's weights are not needed while its fine-tuned copy judges
        other = source_summaries(spec.source, source, dataset, spec.prompts, selection.usable,
                                 spec.summaries.max_new_tokens, spec.summaries)
        pairs = make_pairs(selection.usable, own, other, selection.excluded)
        pairs.labels = assign_labels(spec.label, pairs.pairs, spec.own_display_name, spec.other_display_name,
                                     spec.seed)
        judged = judge_cell(spec, judge, finetune.model if finetune else spec.evaluator, dataset, selection, own,
                            other, pairs)
        items = item_records(spec, selection, own, other, pairs, judged.verdicts, judged.competence,
                             judged.familiarity)
        summary = cell_summary(spec, items, selection, warnings, judged.control, judged.competence,
                               [own, other, judged.shown], judged.familiarity)
        if finetune is not None:
            summary["finetune"] = {**finetune.summary_block(), "eval_articles_dropped_as_training": n_dropped}
            if spec.finetune.settings.inverse_check:
                summary["inverse_check"] = _inverse_check(spec, evaluator, judge, finetune.model, dataset,
                                                          selection.all, run_dir)
        summary.update(models.ledger())  # after every call of the cell (the inverse check's included)
    atomic_write_jsonl(run_dir / RESULTS_FILE, items)
    summary["elapsed_s"] = round(time.time() - start, 2)
    _track(spec, run_dir, wandb_group, summary, items)
    atomic_write_json(run_dir / SUMMARY_FILE, summary)
    print(format_result(summary, str(run_dir / SUMMARY_FILE)))
    return summary


@dataclass
class CellJudgements:
    """What the judge said about a cell's pairs: the judge requests and their verdicts, the competence
    control (its requests and verdicts) and the familiarity stage."""

    requests: List[ItemRequests]
    verdicts: List[Dict[str, dict]]
    control: CompetenceControl
    competence: Dict[str, dict]  # article id -> the control's verdict
    familiarity: FamiliarityStage
    shown: SummarySet  # the summaries the control showed


def judge_cell(spec: CellSpec, judge: CachedModel, judge_cfg: ModelConfig, dataset: Dataset,
               selection: ArticleSelection, own: SummarySet, other: SummarySet, pairs: PairSet) -> CellJudgements:
    """Stages 4-6 for a cell's pairs: judge requests and the competence control -> answer distributions (one
    batch, so the backend shares prompt prefixes across both) -> scores; the familiarity stage beside them.
    `judge` is a CachedModel, or plan mode's stand-in (which serves placeholders and counts the calls)."""
    requests = judge_requests(judge, spec.prompts, spec.setting, spec.questions, pairs.pairs, pairs.labels)
    shown = control_summaries(spec.judge, own, other, dataset, selection.usable, spec.summaries)
    control = competence_requests(judge, spec.judge, spec.evaluator.backend, spec.prompts, pairs.pairs, shown,
                                  spec.seed)
    familiarity = familiarity_requests(judge, judge_cfg, spec.judge, spec.prompts, dataset.task, selection.usable,
                                       pairs.pairs, spec.summaries.max_new_tokens)
    dists = answer_distributions(judge, [*requests, *control.items])
    measure_familiarity(judge, familiarity)
    min_mass = spec.judge.min_answer_mass
    return CellJudgements(requests, score_items(requests, dists, spec.setting, min_mass), control,
                          score_competence(control, dists, min_mass), familiarity, shown)


class CellModels:
    """The cell's call store and model handles, closed when the cell ends (on failure too)."""

    def __init__(self, spec: CellSpec):
        self.spec = spec
        POOL.configure(spec.model_pool_gb)
        self.store = Store(spec.store_path)
        self.models: List[CachedModel] = []

    def load(self, model_cfg: ModelConfig) -> CachedModel:
        model = load_model(model_cfg, self.store, self.spec.model_cache, self.spec.show_progress)
        self.models.append(model)
        return model

    def load_source(self, model_cfg: Optional[ModelConfig], evaluator: CachedModel) -> Optional[CachedModel]:
        """The other source's model (None for dataset summaries); never the evaluator itself."""
        if model_cfg is None:
            return None
        model = self.load(model_cfg)
        if model.identity == evaluator.identity:
            raise ConfigError(f"source={self.spec.source.name} is the evaluator itself; pick another source "
                              f"(e.g. source=human).")
        return model

    def ledger(self) -> Dict[str, Any]:
        """Calls not served from the cache, cache hits and tokens, over every model of the cell."""
        return {"model_calls": sum(m.calls for m in self.models),
                "cache_hits": sum(m.cache_hits for m in self.models),
                "tokens": {"prompt": sum(m.prompt_tokens for m in self.models),
                           "completion": sum(m.completion_tokens for m in self.models)}}

    def __enter__(self) -> "CellModels":
        return self

    def __exit__(self, *exc) -> None:
        for m in self.models:
            m.close()
        self.store.close()


def _load_articles(spec: CellSpec) -> Tuple[Dataset, List[str]]:
    """The evaluation dataset, and warnings about its size (fewer articles than asked: said, never silent)."""
    dataset = load_dataset(spec.dataset)
    if not dataset.articles:
        raise DataError(f"Dataset {dataset.name!r} selected no articles (n_articles={spec.dataset.n_articles}, "
                        f"offset={spec.dataset.offset}).")
    warnings = selection_warnings(spec.dataset, dataset)
    for w in warnings:
        log.warning(w)
    return dataset, warnings


def _inverse_check(spec: CellSpec, base: CachedModel, tuned: CachedModel, tuned_cfg: ModelConfig, dataset: Dataset,
                   articles, run_dir: Path) -> Dict[str, Any]:
    from .finetune.inverse import inverse_check

    inverse = inverse_check(spec, base, tuned, tuned_cfg, dataset, articles)
    atomic_write_jsonl(run_dir / INVERSE_FILE, inverse.pop("items"))
    return inverse


def _skipped(spec: CellSpec, run_dir: Path) -> Dict[str, Any]:
    """A grid point outside the design (e.g. a labelled individual cell): recorded as skipped, not failed."""
    summary = {"status": STATUS_SKIPPED, "reason": spec.skip_reason, "cell": spec.coordinates.to_json()}
    atomic_write_json(run_dir / SUMMARY_FILE, summary)
    print(f"\n== skipped cell: {spec.skip_reason} ==")
    return summary


def _track(spec: CellSpec, run_dir: Path, group: Optional[str], summary: Dict[str, Any], items) -> None:
    tracker = CellTracker(spec.wandb, run_dir, name=spec.coordinates.run_name, group=group or run_dir.name,
                          config=dict(spec.config))
    try:
        summary["wandb_dir"] = tracker.log_cell(summary, [table_row(it, spec.questions) for it in items])
        log_finetune(tracker.run, summary.get("finetune"))  # the training-loss curve as its own series
    finally:
        tracker.finish()
