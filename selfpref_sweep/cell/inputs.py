"""A cell's inputs, prepared once for the real run and plan mode alike: articles -> summaries -> pairs.

`run_cell` and `plan_cell` differ only in the models they pass (cached handles, or plan mode's stand-ins that
count calls) and in what they write; the chain itself (the empty-dataset error, fine-tuning articles left
out of the evaluation, truncation, standardized summaries, pairs and their labels) lives here, once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.spec import CellSpec
from ..errors import DataError
from .articles import ArticleSelection, select_articles
from .dataset_loaders import Article, Dataset, load_dataset, selection_warnings
from .pairs import PairSet, assign_labels, make_pairs
from .summaries import SummarySet, own_summaries, own_summaries_warnings, source_summaries

log = logging.getLogger(__name__)


@dataclass
class CellInputs:
    """What every judging stage of a cell reads."""

    spec: CellSpec
    dataset: Dataset
    selection: ArticleSelection
    own: SummarySet
    other: SummarySet
    pairs: PairSet
    warnings: list[str] = field(default_factory=list)
    n_training_articles_dropped: int = 0
    # Loads a further model a measurement scores with (model config, role) -> handle: the cell's CellModels
    # (cached in the call store, pooled, closed with the cell), plan mode's counting stand-in. None: no loader.
    load_model: Callable[[Any, str], Any] | None = None


def load_articles(spec: CellSpec) -> tuple[Dataset, list[str]]:
    """The evaluation dataset, and warnings about its size and own summaries (said, never silent). An empty
    selection is an error here, before anything is trained or generated."""
    dataset = load_dataset(spec.dataset)
    if not dataset.articles:
        raise DataError(f"Dataset {dataset.name!r} selected no articles (n_articles={spec.dataset.n_articles}, "
                        f"offset={spec.dataset.offset}).")
    warnings = selection_warnings(spec.dataset, dataset)
    for w in warnings:
        log.warning(w)
    return dataset, warnings + own_summaries_warnings(spec.evaluator)


def prepare_inputs(spec: CellSpec, dataset: Dataset, warnings: Sequence[str], evaluator, source,
                   training_article_ids: Sequence[str] = (), after_own: Callable[[], None] | None = None
                   ) -> CellInputs:
    """Stages 1-3: the usable articles (minus any the evaluator was fine-tuned on), the evaluator's own
    summaries and the other source's, and the labelled pairs. `evaluator` writes the own summaries and
    `source` the other source's (None for a dataset's summaries); `after_own` runs once the own summaries
    exist (a fine-tuned cell frees its base model there)."""
    articles, n_dropped = without_training_articles(dataset.articles, training_article_ids)
    if not articles:
        raise DataError(f"Every article of {dataset.name!r} was a fine-tuning article; raise dataset.offset.")
    selection = select_articles(articles, [spec.evaluator, spec.source_model], spec.summaries.max_new_tokens,
                                spec.articles)
    own = own_summaries(evaluator, spec.evaluator, dataset, spec.prompts, selection.usable, spec.summaries)
    if after_own is not None:
        after_own()
    other = source_summaries(spec.source, source, dataset, spec.prompts, selection.usable,
                             spec.summaries.max_new_tokens, spec.summaries)
    pairs = make_pairs(selection.usable, own, other, selection.excluded)
    pairs.labels = assign_labels(spec.label, pairs.pairs, spec.own_display_name, spec.other_display_name,
                                 spec.seed)
    return CellInputs(spec, dataset, selection, own, other, pairs, list(warnings), n_dropped)


def without_training_articles(articles: Sequence[Article], training_article_ids: Sequence[str]
                              ) -> tuple[list[Article], int]:
    """The evaluation articles minus any the evaluator was trained on, by id (a guard for datasets whose order
    or selection differs, e.g. a shuffled copy; offsets did the rest): (kept, number dropped)."""
    training = set(training_article_ids)
    kept = [a for a in articles if a.id not in training]
    return kept, len(articles) - len(kept)
