"""The paper's rows read as verdicts: the authors' stored score kept (``imported_score``), and the project's
reading made wherever the stored fields allow it.

- Pairwise, Llama rows keep each order's raw P("1") and P("2"): the project's reading is the one formula, each
  order's P(own) renormalised over the two answers, averaged over the orders. The authors' stored scores mix
  four formulas across files (raw P(own); the fields swapped; P("1"), a position bias; renormalised P(own)).
- Pairwise, GPT rows keep only the top answer of each order (and, in the newer files, that answer's
  probability in three of the four orders): the second answer's probability is not stored, so nothing can
  be renormalised. The project takes the stored score as it is, with no log-odds; a row whose top token was
  not an answer ("1"/"2") is excluded here, where the authors stored 0.
- Individual rows: each summary's P(Yes) (or its top two answers' probabilities, ``res``, in the fine-tunes'
  files) and its 1-5 score distribution; own / (own + other) per article, as the authors' notebook reads it.
- Label rows: the stored preference is P(own) in some files and 1 - P(own) in others (the wrong-label runs on
  XSUM); the project's reading is always P(the evaluator's actual own summary). The Llama label runs asked one
  order (own summary first): their verdicts hold that order alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records.schema import STORED_TOP_TOKENS, Verdict
from . import readings as R

# Exclusion reasons an imported item can carry (counted in summary.json, as a cell counts its own).
NO_ROW = "authors_no_row"  # the authors' file has no row for this article and source (dropped by their code)
NO_SCORE = "authors_no_score"  # the row has no stored score
NOT_AN_ANSWER = "authors_top_token_not_an_answer"  # the top token was not "1"/"2"; the authors stored 0
NO_ANSWER_MASS = "no_answer_probability"  # P("1") = P("2") = 0 in an order (the authors stored 0.5)
BAD_VALUE = "authors_value_not_a_probability"  # a stored value that is not a number in [0, 1]
NAN_OUTPUT = "authors_output_nan"  # the model's stored output probabilities are NaN (a numerical failure there)
ZERO_DENOMINATOR = "zero_denominator"  # individual: own and other both 0 (0/0, dropped by the notebook too)

# The pairwise fields of each question in the authors' rows.
FIELDS = {"recognition": ("detection", "detection_score"), "preference": ("comparison", "self_preference")}


def _has_nan(raw: Any) -> bool:
    return isinstance(raw, Mapping) and any(isinstance(v, float) and v != v for v in raw.values())


def excluded_no_row() -> Verdict:
    """An expected item the authors' file has no row for (their code dropped it silently)."""
    return R.excluded(NO_ROW)


# The label files whose stored preference is 1 - P(own), found by comparing each file's stored values with its
# top tokens and, for the newer files, their probabilities: the wrong-label runs of the GPT evaluators on XSUM.
COMPLEMENT_FILES = frozenset({("wrong", "xsum", "gpt4"), ("wrong", "xsum", "gpt35"),
                              ("wrong", "xsum", "xsum_500_ft_gpt35")})


def stores_complement(pf) -> bool:
    """Whether a label file stores 1 - P(own) rather than P(own)."""
    return (pf.label, pf.dataset, pf.model.name) in COMPLEMENT_FILES


def _token_choice(forward: Any, backward: Any) -> bool | None:
    """Whether the two orders' top answers name the same summary (position-consistent); None when either is not
    an answer."""
    if forward not in R.PAIR_ANSWERS or backward not in R.PAIR_ANSWERS:
        return None
    return forward != backward  # forward "1" = own, backward "2" = own


def pairwise_verdict(row: Mapping[str, Any], question: str, origin: dict[str, Any]) -> Verdict:
    """One question of a pairwise row (results/): Llama rows from their raw outputs, GPT rows from the stored
    score."""
    name, score_field = FIELDS[question]
    stored = R.finite(row.get(score_field))
    extra = {STORED_TOP_TOKENS: [row.get(f"forward_{name}"), row.get(f"backward_{name}")], **origin}
    fwd_raw, bwd_raw = row.get(f"forward_{name}_output"), row.get(f"backward_{name}_output")
    if fwd_raw is not None or bwd_raw is not None:
        fwd, bwd = R.probabilities(fwd_raw, R.PAIR_ANSWERS), R.probabilities(bwd_raw, R.PAIR_ANSWERS)
        if fwd is None or bwd is None:
            why = NAN_OUTPUT if _has_nan(fwd_raw) or _has_nan(bwd_raw) else BAD_VALUE
            return R.excluded(why, **{R.IMPORTED_SCORE: stored}, **extra)
        verdict = R.pair_from_probs(fwd, bwd, stored, **extra)
        if verdict.excluded:
            verdict.exclusion_reason = NO_ANSWER_MASS
        return verdict
    if stored is None:
        return R.excluded(NO_SCORE, **extra)
    consistent = _token_choice(row.get(f"forward_{name}"), row.get(f"backward_{name}"))
    if consistent is None:
        return R.excluded(NOT_AN_ANSWER, **{R.IMPORTED_SCORE: stored}, **extra)
    if not 0.0 <= stored <= 1.0:
        return R.excluded(BAD_VALUE, **{R.IMPORTED_SCORE: stored}, **extra)
    return R.stored_pair(stored, consistent, **extra)


def label_verdict(row: Mapping[str, Any], stores_complement: bool, origin: dict[str, Any],
                  one_order: bool = False) -> Verdict:
    """The preference of a label-condition row, as P(own): the stored value, or 1 minus it in the files that
    store the complement. ``one_order``: the run asked the own-first order only (the Llama label runs), and the
    stored value is that order's P("1") renormalised, so the verdict records it as its one order (``orders``
    holds "forward" alone), which the label comparison reads to compare it with the same order unlabelled."""
    stored = R.finite(row.get("self_preference"))
    extra = {STORED_TOP_TOKENS: [row.get("forward_comparison"), row.get("backward_comparison")],
             "authors_stores_complement": stores_complement, **origin}
    if stored is None:
        return R.excluded(NO_SCORE, **extra)
    if not 0.0 <= stored <= 1.0:
        return R.excluded(BAD_VALUE, **{R.IMPORTED_SCORE: stored}, **extra)
    tokens = (row.get("forward_comparison"), row.get("backward_comparison"))
    if tokens != (None, None) and _token_choice(*tokens) is None:
        return R.excluded(NOT_AN_ANSWER, **{R.IMPORTED_SCORE: stored}, **extra)
    value = 1.0 - stored if stores_complement else stored
    verdict = R.stored_pair(value, None if tokens == (None, None) else _token_choice(*tokens), **extra)
    verdict.extra[R.IMPORTED_SCORE] = stored
    if one_order:
        verdict.orders = {"forward": R.order_reading({"1": value, "2": 1.0 - value}, 1)}
    return verdict


# ------------------------------------------------------------------------------------- individual
def recognition_reading(row: Mapping[str, Any]):
    """A summary's P(Yes): renormalised over Yes/No where the row keeps both (``res``), else the stored value
    (GPT: the raw top-2 P(Yes); Llama: already Yes / (Yes + No)). None when it has no usable value."""
    res = row.get("res")
    if isinstance(res, Mapping) and "Yes" in res and "No" in res:
        probs = R.probabilities(res, R.YES_NO)
        if probs is not None and sum(probs.values()) > 0:
            return R.summary_reading(probs, R.YES_NO), R.READ_RENORMALISED
    raw = row.get("recognition_score")
    if isinstance(raw, float) and raw != raw:
        return None, NAN_OUTPUT
    value = R.finite(raw)
    return (None, None) if value is None or not 0 <= value <= 1 else (R.stored_value(value), R.READ_STORED_VALUES)


def score_reading(row: Mapping[str, Any]):
    """A summary's expected 1-5 score under its score distribution renormalised over "1".."5" (the authors'
    formula too); the stored score where the distribution is absent."""
    if isinstance(row.get("scores"), Mapping):
        probs = R.probabilities(row.get("scores"), R.SCORES)
        if probs is None or sum(probs.values()) <= 0:  # NaN, or no mass on "1".."5" (the authors stored 2.5)
            return None, NAN_OUTPUT if _has_nan(row.get("scores")) else NO_ANSWER_MASS
        return R.summary_reading(probs, R.SCORES), R.READ_RENORMALISED
    value = R.finite(row.get("score"))
    return (None, None) if value is None or not 1 <= value <= 5 else (R.stored_value(value), R.READ_STORED_VALUES)


STORED_VALUE = {"recognition": "recognition_score", "preference": "score"}


def individual_verdict(own_row: Mapping[str, Any] | None, other_row: Mapping[str, Any] | None,
                       question: str, origin: dict[str, Any]) -> Verdict:
    """own / (own + other) for one article from its two rows (either may be missing: excluded, counted)."""
    if own_row is None or other_row is None:
        return R.excluded(NO_ROW, authors_missing="own" if own_row is None else "other", **origin)
    read = recognition_reading if question == "recognition" else score_reading
    (own, how_own), (other, how_other) = read(own_row), read(other_row)
    field = STORED_VALUE[question]
    stored_own, stored_other = R.finite(own_row.get(field)), R.finite(other_row.get(field))
    authors = None
    if stored_own is not None and stored_other is not None and stored_own + stored_other > 0:
        authors = stored_own / (stored_own + stored_other)
    extra = {R.IMPORTED_SCORE: authors, "authors_values": [stored_own, stored_other], **origin}
    if own is None or other is None:
        why = (how_own if own is None else how_other) or BAD_VALUE
        return R.excluded(why, **extra)
    how = how_own if how_own == how_other else f"{how_own} (own), {how_other} (other)"
    verdict = R.individual_from(own, other, how, **extra)
    if verdict.excluded and verdict.exclusion_reason not in (ZERO_DENOMINATOR,):
        verdict.exclusion_reason = NO_ANSWER_MASS
    return verdict
