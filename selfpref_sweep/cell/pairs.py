"""Stage 3, pairs: each usable article with its own and other summary, and the source labels of the
label experiment. Articles without a usable pair keep the reason (counted, never dropped)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..config import LabelName
from .dataset_loaders import Article
from .summaries import SummarySet


@dataclass(frozen=True)
class Pair:
    article_id: str
    article: str
    own: str
    other: str


@dataclass
class PairSet:
    pairs: list[Pair]
    excluded: dict[str, str] = field(default_factory=dict)  # article id -> why it has no pair
    # article id -> (label on the own summary, label on the other summary); empty without labels
    labels: dict[str, tuple[str, str]] = field(default_factory=dict)


def make_pairs(articles: Sequence[Article], own: SummarySet, other: SummarySet,
               excluded: Mapping[str, str] | None = None) -> PairSet:
    """Pairs of the usable articles; an article already excluded (`excluded`) or missing a summary gets a
    reason such as "missing_summary:<source>" instead."""
    reasons = dict(excluded or {})
    pairs = []
    for a in articles:
        if a.id in reasons:
            continue
        why = _problem(own, a.id) or _problem(other, a.id)
        if why:
            reasons[a.id] = why
            continue
        pairs.append(Pair(a.id, a.text, own.texts[a.id], other.texts[a.id]))
    return PairSet(pairs, reasons)


def _problem(summaries: SummarySet, article_id: str) -> str | None:
    why = summaries.problems.get(article_id)
    return f"{why}:{summaries.source}" if why else None


def assign_labels(mode: LabelName, pairs: Sequence[Pair], own_name: str, other_name: str, seed: int
                  ) -> dict[str, tuple[str, str]]:
    """article id -> (label on the own summary, label on the other summary).

    correct: the true sources; wrong: swapped; random: the pair of tags shuffled per item with a
    generator seeded by (seed, article id), so it is stable across runs and the same in both orders.
    """
    mode = LabelName(mode)
    if mode == LabelName.none:
        return {}
    labels = {}
    for p in pairs:
        tags = (own_name, other_name)
        if mode == LabelName.wrong or (mode == LabelName.random
                                       and random.Random(f"{seed}:{p.article_id}").random() < 0.5):
            tags = (other_name, own_name)
        labels[p.article_id] = tags
    return labels
