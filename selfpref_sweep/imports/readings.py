"""Imported answers as the cell's verdicts: answer probabilities become the same order and summary readings a
cell makes (renormalised over the answers, one formula), and the score the other tool stored is kept beside
the project's reading, never in its place.

Where only a score was stored (no probability of each answer), the verdict carries that score as it is, with
`reading` saying so: it cannot be renormalised, and it has no log-odds."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..cell.scoring import individual_reading, individual_verdict, unjudged_verdict
from ..models.base import AnswerDistribution
from ..records.schema import OrderReading, SummaryReading, Verdict
from ..records.scores import pair_verdict, score_order

METHOD = "imported"
PAIR_ANSWERS = ("1", "2")
YES_NO = ("Yes", "No")
SCORES = ("1", "2", "3", "4", "5")

# Verdict.extra keys: the score the source stored, and how the project's reading was made from it.
IMPORTED_SCORE = "imported_score"
READING = "reading"
READ_RENORMALISED = "renormalised"  # from each answer's probability, renormalised over the answers
READ_STORED = "stored score"  # only a score was stored: taken as it is (not renormalised, no log-odds)
READ_STORED_VALUES = "stored values"  # individual: each summary's stored value, the project's ratio of them


def finite(value: Any) -> float | None:
    """A finite float, else None (a missing, non-numeric or NaN value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def probabilities(raw: Any, answers) -> dict[str, float] | None:
    """{answer: probability} for each answer (a missing answer has probability 0), or None when ``raw`` is
    not a mapping of finite probabilities in [0, 1]."""
    if not isinstance(raw, Mapping):
        return None
    out = {}
    for a in answers:
        p = finite(raw.get(a, 0.0))
        if p is None or not -1e-9 <= p <= 1 + 1e-9:
            return None
        out[a] = min(max(p, 0.0), 1.0)
    return out


def order_reading(probs: Mapping[str, float], own_position: int) -> OrderReading:
    """One order read as the cell reads it (scores.score_order)."""
    return score_order(AnswerDistribution(dict(probs), method=METHOD), own_position, PAIR_ANSWERS)


def pair_from_probs(forward: Mapping[str, float], backward: Mapping[str, float], stored: float | None,
                    **extra: Any) -> Verdict:
    """The project's pairwise verdict from both orders' answer probabilities (forward: own summary first)."""
    verdict = pair_verdict(order_reading(forward, 1), order_reading(backward, 2), 0.0)
    verdict.extra.update({IMPORTED_SCORE: stored, READING: READ_RENORMALISED, **extra})
    return verdict


def stored_pair(stored: float, consistent: bool | None = None, **extra: Any) -> Verdict:
    """A pairwise verdict from a stored score alone."""
    return Verdict(float(stored), None, False, None, consistent,
                   extra={IMPORTED_SCORE: float(stored), READING: READ_STORED, **extra})


def summary_reading(probs: Mapping[str, float], answers) -> SummaryReading:
    """One summary read as the cell reads it (scoring.individual_reading): P(Yes) renormalised over Yes/No, or
    the expected 1-5 score."""
    question = "recognition" if tuple(answers) == YES_NO else "preference"
    return individual_reading(AnswerDistribution(dict(probs), method=METHOD), question, tuple(answers))


def stored_value(value: float) -> SummaryReading:
    """A summary's stored value (P(Yes) or an expected score) without the answers' probabilities."""
    return SummaryReading({}, 1.0, float(value), METHOD)


def individual_from(own: SummaryReading, other: SummaryReading, reading: str, **extra: Any) -> Verdict:
    """The project's individual verdict (own / (own + other) per article), the stored values beside it."""
    verdict = individual_verdict(own, other, 0.0)
    verdict.extra.update({READING: reading, **extra})
    return verdict


def excluded(reason: str, **extra: Any) -> Verdict:
    """An item that has no usable judgement, counted under ``reason``."""
    verdict = unjudged_verdict(reason)
    verdict.extra.update(extra)
    return verdict
