"""Stages 4 and 5, judge requests and answer distributions, in the pairwise or the individual setting.

Every judge request of a cell goes to the model in one batch, so the backend can share prompt
prefixes across the whole cell; scoring.py turns the answer distributions into scores. Plan mode and
the inverse-causation check build their requests here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..config import SettingName
from ..errors import ConfigError
from ..models.base import AnswerDistribution, AnswerRequest
from .pairs import Pair
from .prompts import chat, pairwise_messages

FORWARD, BACKWARD = "forward", "backward"  # pairwise slots: (own, other) and (other, own)
OWN, OTHER = "own", "other"  # individual slots: each summary alone


@dataclass(frozen=True)
class ItemRequests:
    """One article's judge requests: question -> slot -> request."""

    article_id: str
    by_question: Mapping[str, Mapping[str, AnswerRequest]]
    labels: tuple[str, str] | None = None  # (own tag, other tag) of the labelled preference prompt


def order_messages(prompts: Mapping, question: str, pair: Pair, own_first: bool,
                   labels: tuple[str, str] | None = None):
    """The pairwise prompt with the pair in one order; the fine-tuning examples use it too."""
    s1, s2 = (pair.own, pair.other) if own_first else (pair.other, pair.own)
    if labels is None or question != "preference":
        return pairwise_messages(prompts, question, pair.article, s1, s2)
    l1, l2 = labels if own_first else labels[::-1]  # each tag stays on its summary in both orders
    return chat(prompts["pairwise_labelled"][question], article=pair.article, summary1=s1, summary2=s2,
                label1=l1, label2=l2)


def pairwise_requests(model, prompts: Mapping, question: str, pair: Pair,
                      labels: tuple[str, str] | None = None) -> dict[str, AnswerRequest]:
    decoding = model.judge_decoding(prompts["pairwise_answers"])
    return {FORWARD: AnswerRequest(model.identity, order_messages(prompts, question, pair, True, labels), decoding),
            BACKWARD: AnswerRequest(model.identity, order_messages(prompts, question, pair, False, labels), decoding)}


def individual_messages(prompts: Mapping, question: str, article: str, summary: str, **values: str):
    """The individual-setting prompt for one summary; the individual-format fine-tuning examples use it too.
    `values` fill a prompt's further slots (the individual placebo's {words})."""
    if question not in prompts.get("individual", {}):
        raise ConfigError(f"No individual-setting prompt for question {question!r}.")
    return chat(prompts["individual"][question], article=article, summary=summary, **values)


def individual_request(model, prompts: Mapping, question: str, article: str, summary: str,
                       **values: str) -> AnswerRequest:
    """One summary's request."""
    return AnswerRequest(model.identity, individual_messages(prompts, question, article, summary, **values),
                         model.judge_decoding(prompts["individual_answers"][question]))


def judge_requests(model, prompts: Mapping, setting: SettingName, questions: Sequence[str], pairs: Sequence[Pair],
                   labels: Mapping[str, tuple[str, str]] | None = None) -> list[ItemRequests]:
    """Stage 4: every judge request of a set of pairs. `model` is the judge (a CachedModel or plan mode's
    stand-in): its identity and decoding settings go into each request."""
    labels = labels or {}
    items = []
    for p in pairs:
        if setting == SettingName.individual:
            by_q = {q: {OWN: individual_request(model, prompts, q, p.article, p.own),
                        OTHER: individual_request(model, prompts, q, p.article, p.other)} for q in questions}
        else:
            by_q = {q: pairwise_requests(model, prompts, q, p, labels.get(p.article_id)) for q in questions}
        items.append(ItemRequests(p.article_id, by_q, labels.get(p.article_id)))
    return items


def flatten(items: Sequence[ItemRequests]) -> list[AnswerRequest]:
    return [r for item in items for by_slot in item.by_question.values() for r in by_slot.values()]


def answer_distributions(model, items: Sequence[ItemRequests], desc: str = "judging"
                         ) -> dict[AnswerRequest, AnswerDistribution]:
    """Stage 5: the judge's answer distribution for every request, in one batch (cached calls are free)."""
    return model.answer_distributions(flatten(items), desc=desc)
