"""Pairwise judging: both questions, both orders, one batch per cell (so the backend can share
prompt prefixes across the whole cell), scored with scoring.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence

from .models.base import AnswerRequest
from .models.cached import CachedModel
from .prompts import pairwise_messages
from .scoring import score_order, score_pair


@dataclass(frozen=True)
class Pair:
    article_id: str
    article: str
    own: str
    other: str


def pairwise_requests(model: CachedModel, prompts: Mapping, question: str, pair: Pair) -> Dict[str, AnswerRequest]:
    answers = tuple(prompts["pairwise_answers"])
    return {
        "forward": AnswerRequest(model.identity, pairwise_messages(prompts, question, pair.article, pair.own, pair.other),
                                 answers),
        "backward": AnswerRequest(model.identity, pairwise_messages(prompts, question, pair.article, pair.other, pair.own),
                                  answers),
    }


def judge_pairwise(model: CachedModel, prompts: Mapping, questions: Sequence[str], pairs: Sequence[Pair],
                   min_mass: float) -> List[Dict[str, dict]]:
    """One dict per pair: question -> scored record (see scoring.score_pair)."""
    answers = tuple(prompts["pairwise_answers"])
    plan = [{q: pairwise_requests(model, prompts, q, p) for q in questions} for p in pairs]
    everything = [req for item in plan for by_order in item.values() for req in by_order.values()]
    dists = model.answer_distributions(everything, desc="judging")
    scored = []
    for item in plan:
        scored.append({
            q: score_pair(score_order(dists[reqs["forward"]], own_position=1, answers=answers),
                          score_order(dists[reqs["backward"]], own_position=2, answers=answers), min_mass)
            for q, reqs in item.items()
        })
    return scored
