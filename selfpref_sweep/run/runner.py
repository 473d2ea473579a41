"""One cell of the experiment matrix: a short composition of the stages, plus its files and W&B run.

    articles -> summaries (own, other) -> pairs -> judge requests -> answer distributions -> scores -> record
                                                -> measurements (measurements/: competence, familiarity, ...)

Each stage lives in cell/, in the module named after it (inputs for stages 1-3, judging, scoring, results); this
module composes them with what sits beside or above the cell: fine-tuning (finetune/), the measurements (through
their registry), the call store and model pool, the cell's files and its W&B run. Plan mode (plan.py) runs the same
composition with stand-in models.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cell.dataset_loaders import Dataset
from ..cell.inputs import CellInputs, load_articles, prepare_inputs
from ..cell.judging import ItemRequests, answer_distributions, judge_requests
from ..cell.results import cell_summary, format_result, item_records, table_row
from ..cell.scoring import item_verdicts
from ..config import ModelConfig
from ..config.spec import CellSpec
from ..errors import ConfigError
from ..finetune import prepare_finetuned_evaluator
from ..measurements import Measurement, Stage, registered
from ..models import POOL, load_model
from ..models.cached import CachedModel
from ..records.atomic import atomic_write_json, atomic_write_jsonl
from ..records.schema import (
    INVERSE_FILE,
    RESULTS_FILE,
    STATUS_COMPLETE,
    STATUS_SKIPPED,
    SUMMARY_FILE,
    CellSummary,
    Verdict,
    read_cell,
)
from ..store import Store
from ..store.claims import CellClaims, Holder, cell_claims
from ..tracking import CellTracker, log_finetune

log = logging.getLogger(__name__)

# When this process began its launch (as near as the runner's import): a cell summary written since then by
# another process is another launch's work, done while this one ran (_finished_by_another_launch).
LAUNCH_STARTED = time.time()


def run_cell(spec: CellSpec, run_dir: Path, wandb_group: str | None = None) -> dict[str, Any]:
    start, run_dir = time.time(), Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if spec.skip_reason:
        return _skipped(spec, run_dir)
    # One launch runs the cell; another launch of it (same folder, or same store) waits, then uses its results.
    with cell_claims(spec.config, run_dir, spec.store_path, run_dir / SUMMARY_FILE, _say_waiting) as claims:
        reused = _reused_result(claims, run_dir, spec.verbose)
        if reused is not None:
            return reused
        return _run_claimed(spec, run_dir, wandb_group, start, claims.digest)


def _run_claimed(spec: CellSpec, run_dir: Path, wandb_group: str | None, start: float, digest: str
                 ) -> dict[str, Any]:
    with CellModels(spec) as models:
        dataset, warnings = load_articles(spec)  # an empty selection fails here, before any training
        evaluator = models.load(spec.evaluator)  # the base: writes the own summaries
        finetune = prepare_finetuned_evaluator(spec, evaluator)  # None when finetune_task=none
        judge_cfg = finetune.model if finetune else spec.evaluator
        judge = models.load(judge_cfg) if finetune else evaluator
        source = models.load_source(spec.source_model, evaluator)
        inputs = prepare_inputs(spec, dataset, warnings, evaluator, source,
                                finetune.train_article_ids if finetune else (),
                                # the base's weights are not needed while its fine-tuned copy judges
                                after_own=evaluator.close if finetune else None)
        inputs.load_model = lambda model_cfg, role: models.load(model_cfg)  # a measurement's further models
        judged = judge_cell(inputs, judge, judge_cfg)
        items = item_records(inputs, judged.verdicts, judged.measured)
        summary = cell_summary(inputs, items, judged.measured)
        if finetune is not None:
            summary.extra["finetune"] = {**finetune.summary_block(),
                                   "eval_articles_dropped_as_training": inputs.n_training_articles_dropped}
            if spec.finetune.settings.inverse_check:
                summary.extra["inverse_check"] = _inverse_check(spec, evaluator, judge, finetune.model, dataset,
                                                          inputs.selection.all, run_dir)
        summary.extra.update(models.ledger())  # after every call of the cell (the inverse check's included)
        summary.extra["launch"] = _launch_block(digest)
    atomic_write_jsonl(run_dir / RESULTS_FILE, [it.to_json() for it in items])
    summary.elapsed_s = round(time.time() - start, 2)
    _track(spec, run_dir, wandb_group, summary, items)
    record = summary.to_json()
    atomic_write_json(run_dir / SUMMARY_FILE, record)
    print(format_result(record, str(run_dir / SUMMARY_FILE), spec.verbose))
    return record


def _say_waiting(holder: Holder, claim: Path) -> None:
    print(f"\n== this cell is being run by another launch ({holder.describe()}, claim {claim}); waiting for it to "
          f"finish, then using its results. A claim whose launch is gone is taken over. ==", flush=True)


def _reused_result(claims: CellClaims, run_dir: Path, verbose: bool) -> dict[str, Any] | None:
    """The result another launch wrote into this folder, when it finished the cell: the launch this one waited
    for, or one that finished it while this one ran without meeting its claim (it got there first); None when
    there is none to use (it ran elsewhere or failed, or the folder holds an earlier run's result): this launch
    then runs the cell, from the cache."""
    if claims.waited_on is not None and claims.summary_changed:
        by = f"the launch it waited for, {claims.waited_on.describe()}"
    elif _finished_by_another_launch(run_dir / SUMMARY_FILE, claims.digest):
        by = "another launch, which finished this cell while this launch ran"
    else:
        return None
    record = read_cell(run_dir, items=False)
    if record.summary is None or record.summary.status != STATUS_COMPLETE:
        return None
    summary = json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    print(format_result(summary, str(run_dir / SUMMARY_FILE), verbose))
    print(f"  (computed by {by}; this launch made no calls)")
    return summary


def _launch_block(digest: str) -> dict[str, Any]:
    """summary.json's `launch`: which work (the cell's digest) which process (host, PID) wrote."""
    return {"cell_digest": digest, "host": socket.gethostname(), "pid": os.getpid()}


def _finished_by_another_launch(summary_file: Path, digest: str) -> bool:
    """Whether the summary file was written, since this launch began, by another process for the same work. A
    file from before (a re-run of a finished sweep) does not count: that re-run recomputes from the cache, as
    a re-run always has."""
    try:
        if summary_file.stat().st_mtime < LAUNCH_STARTED:
            return False
        launch = json.loads(summary_file.read_text(encoding="utf-8")).get("launch") or {}
    except (OSError, ValueError, AttributeError):
        return False
    return bool(digest) and launch.get("cell_digest") == digest and \
        (launch.get("host"), launch.get("pid")) != (socket.gethostname(), os.getpid())


@dataclass
class CellJudgements:
    """What the judge said about a cell's pairs: the judge requests and their verdicts, and each registered
    measurement with its stage (requests, and per-item records once scored)."""

    requests: list[ItemRequests]
    verdicts: list[dict[str, Verdict]]
    measured: list[tuple[Measurement, Stage]]


def judge_cell(inputs: CellInputs, judge, judge_cfg: ModelConfig) -> CellJudgements:
    """Stages 4-6 for a cell's pairs: the judge requests and every measurement's answer requests -> answer
    distributions (one batch, so the backend shares prompt prefixes across all of them) -> scores. `judge` is
    a CachedModel, or plan mode's stand-in (which serves placeholders and counts the calls); `judge_cfg` its
    model config."""
    spec = inputs.spec
    requests = judge_requests(judge, spec.prompts, spec.setting, spec.questions, inputs.pairs.pairs,
                              inputs.pairs.labels)
    measured = [(m, m.prepare(inputs, judge, judge_cfg)) for m in registered()]
    dists = answer_distributions(judge, [*requests, *(r for _, stage in measured for r in stage.answer_items)])
    min_mass = spec.judge.min_answer_mass
    for m, stage in measured:
        if stage.enabled:
            stage.records = m.score(judge, stage, dists, min_mass)
    return CellJudgements(requests, item_verdicts(requests, dists, spec.setting, min_mass), measured)


class CellModels:
    """The cell's call store and model handles, closed when the cell ends (on failure too)."""

    def __init__(self, spec: CellSpec):
        self.spec = spec
        POOL.configure(spec.model_pool_gb)
        self.store = Store(spec.store_path)
        self.models: list[CachedModel] = []

    def load(self, model_cfg: ModelConfig) -> CachedModel:
        model = load_model(model_cfg, self.store, self.spec.model_cache, self.spec.show_progress)
        self.models.append(model)
        return model

    def load_source(self, model_cfg: ModelConfig | None, evaluator: CachedModel) -> CachedModel | None:
        """The other source's model (None for dataset summaries); never the evaluator itself."""
        if model_cfg is None:
            return None
        model = self.load(model_cfg)
        if model.identity == evaluator.identity:
            raise ConfigError(f"source={self.spec.source.name} is the evaluator itself; pick another source "
                              f"(e.g. source=human).")
        return model

    def ledger(self) -> dict[str, Any]:
        """Calls not served from the cache, cache hits and tokens, over every model of the cell."""
        return {"model_calls": sum(m.calls for m in self.models),
                "cache_hits": sum(m.cache_hits for m in self.models),
                # entries found in the store but not readable (damaged): served as misses and recomputed
                "cache_unreadable": self.store.unreadable,
                "tokens": {"prompt": sum(m.prompt_tokens for m in self.models),
                           "completion": sum(m.completion_tokens for m in self.models)}}

    def __enter__(self) -> CellModels:
        return self

    def __exit__(self, *exc) -> None:
        for m in self.models:
            m.close()
        self.store.close()


def _inverse_check(spec: CellSpec, base: CachedModel, tuned: CachedModel, tuned_cfg: ModelConfig, dataset: Dataset,
                   articles, run_dir: Path) -> dict[str, Any]:
    from ..finetune.inverse import inverse_check

    inverse = inverse_check(spec, base, tuned, tuned_cfg, dataset, articles)
    atomic_write_jsonl(run_dir / INVERSE_FILE, inverse.pop("items"))
    return inverse


def _skipped(spec: CellSpec, run_dir: Path) -> dict[str, Any]:
    """A grid point outside the design (e.g. a labelled individual cell): recorded as skipped, not failed."""
    summary = CellSummary(STATUS_SKIPPED, spec.coordinates.to_json(), extra={"reason": spec.skip_reason}).to_json()
    atomic_write_json(run_dir / SUMMARY_FILE, summary)
    print(f"\n== skipped cell: {spec.skip_reason} ==")
    return summary


def _track(spec: CellSpec, run_dir: Path, group: str | None, summary: CellSummary, items) -> None:
    tracker = CellTracker(spec.wandb, run_dir, name=spec.coordinates.run_name, group=group or run_dir.name,
                          config=dict(spec.config))
    try:
        rows = [table_row(it, spec.questions) for it in items]
        summary.extra["wandb_dir"] = tracker.log_cell(summary.to_json(), rows)
        log_finetune(tracker.run, summary.extra.get("finetune"))  # the training-loss curve as its own series
    finally:
        tracker.finish()
