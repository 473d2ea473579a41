"""Judging a cell's pairs in the pairwise or the individual setting.

All of a cell's judge prompts go to the model in one batch, so the backend can share prompt
prefixes across the whole cell; scoring.py turns the answer distributions into scores.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import ConfigError
from .models.base import AnswerRequest
from .models.cached import CachedModel
from .prompts import chat, pairwise_messages
from .scoring import individual_value, score_individual, score_order, score_pair


@dataclass(frozen=True)
class Pair:
    article_id: str
    article: str
    own: str
    other: str


# ------------------------------------------------------------------------------ source labels
def assign_labels(mode: str, pairs: Sequence[Pair], own_name: str, other_name: str, seed: int
                  ) -> Dict[str, Tuple[str, str]]:
    """article id -> (label on the own summary, label on the other summary).

    correct: the true sources; wrong: swapped; random: the pair of tags shuffled per item with a
    generator seeded by (seed, article id), so it is stable across runs and the same in both orders.
    """
    if mode == "none":
        return {}
    labels = {}
    for p in pairs:
        tags = (own_name, other_name)
        if mode == "wrong":
            tags = (other_name, own_name)
        elif mode == "random":
            if random.Random(f"{seed}:{p.article_id}").random() < 0.5:
                tags = (other_name, own_name)
        elif mode != "correct":
            raise ConfigError(f"Unknown label mode {mode!r}; valid: none, correct, wrong, random.")
        labels[p.article_id] = tags
    return labels


def _pairwise_messages(prompts: Mapping, question: str, pair: Pair, first_own: bool,
                       labels: Optional[Tuple[str, str]]):
    s1, s2 = (pair.own, pair.other) if first_own else (pair.other, pair.own)
    if labels is None or question != "preference":
        return pairwise_messages(prompts, question, pair.article, s1, s2)
    l1, l2 = labels if first_own else labels[::-1]  # each tag stays on its summary in both orders
    return chat(prompts["pairwise_labelled"][question], article=pair.article, summary1=s1, summary2=s2,
                label1=l1, label2=l2)


def pairwise_requests(model: CachedModel, prompts: Mapping, question: str, pair: Pair,
                      labels: Optional[Tuple[str, str]] = None) -> Dict[str, AnswerRequest]:
    answers = tuple(prompts["pairwise_answers"])
    return {
        "forward": AnswerRequest(model.identity, _pairwise_messages(prompts, question, pair, True, labels), answers),
        "backward": AnswerRequest(model.identity, _pairwise_messages(prompts, question, pair, False, labels),
                                  answers),
    }


RequestPlan = List[Dict[str, Dict[str, AnswerRequest]]]  # per pair: question -> slot -> request


def request_plan(model: CachedModel, prompts: Mapping, setting: str, questions: Sequence[str],
                 pairs: Sequence[Pair], labels: Optional[Dict[str, Tuple[str, str]]] = None) -> RequestPlan:
    """Every judge request of a cell. Slots: forward/backward (pairwise) or own/other (individual)."""
    if setting == "individual":
        return [{q: {"own": individual_request(model, prompts, q, p.article, p.own),
                     "other": individual_request(model, prompts, q, p.article, p.other)} for q in questions}
                for p in pairs]
    labels = labels or {}
    return [{q: pairwise_requests(model, prompts, q, p, labels.get(p.article_id)) for q in questions} for p in pairs]


def flatten(plan: RequestPlan) -> List[AnswerRequest]:
    return [r for item in plan for by_slot in item.values() for r in by_slot.values()]


def judge_pairwise(model: CachedModel, prompts: Mapping, questions: Sequence[str], pairs: Sequence[Pair],
                   min_mass: float, labels: Optional[Dict[str, Tuple[str, str]]] = None) -> List[Dict[str, dict]]:
    """One dict per pair: question -> scored record (see scoring.score_pair).
    forward = (own, other), backward = (other, own)."""
    answers = tuple(prompts["pairwise_answers"])
    labels = labels or {}
    plan = request_plan(model, prompts, "pairwise", questions, pairs, labels)
    dists = model.answer_distributions(flatten(plan), desc="judging")
    scored = []
    for pair, item in zip(pairs, plan):
        verdicts = {}
        for q, reqs in item.items():
            verdicts[q] = score_pair(score_order(dists[reqs["forward"]], own_position=1, answers=answers),
                                     score_order(dists[reqs["backward"]], own_position=2, answers=answers), min_mass)
            if q == "preference" and pair.article_id in labels:
                own_tag, other_tag = labels[pair.article_id]
                verdicts[q]["labels"] = {"own": own_tag, "other": other_tag}
        scored.append(verdicts)
    return scored


# ------------------------------------------------------------------------- individual setting
def individual_request(model: CachedModel, prompts: Mapping, question: str, article: str, summary: str
                       ) -> AnswerRequest:
    if question not in prompts.get("individual", {}):
        raise ConfigError(f"No individual-setting prompt for question {question!r}.")
    return AnswerRequest(model.identity, chat(prompts["individual"][question], article=article, summary=summary),
                         tuple(prompts["individual_answers"][question]))


def judge_individual(model: CachedModel, prompts: Mapping, questions: Sequence[str], pairs: Sequence[Pair],
                     min_mass: float) -> List[Dict[str, dict]]:
    """Each summary judged alone; per article own/(own+other) (see scoring.score_individual)."""
    plan = request_plan(model, prompts, "individual", questions, pairs)
    dists = model.answer_distributions(flatten(plan), desc="judging")
    return [{q: score_individual(individual_value(dists[reqs["own"]], q, reqs["own"].answers),
                                 individual_value(dists[reqs["other"]], q, reqs["other"].answers), min_mass)
             for q, reqs in item.items()} for item in plan]
