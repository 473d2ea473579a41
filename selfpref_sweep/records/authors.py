"""Who wrote the two summaries of an item, and what a third party knows about each: the facts that the estimators
of self-preference net of quality (analysis/self_bias/) read.

Authors. A judge's self term needs one name per author across the cells of a sweep: judge gpt4's own summaries and
source ``paper_gpt4`` (GPT-4's published summaries) are one author, as are evaluator ``llama2`` and source
``paper_llama``. The rule, from the cell's coordinates: a source ``paper_<key>`` is author ``<key>``; any other
source or evaluator is its model's paper key where it has one (``PAPER_KEY_BY_MODEL_NAME``), else its own name;
own summaries taken from the dataset (``evaluator.own_summaries=paper_gpt35``) are that source's author. The config
refuses (or, in a sweep, skips) a cell whose two sides are one author by the same rule (config/spec.own_is_other).
A record may state its authors outright in the item's ``outputs`` block (the ratings import does): that wins.

Output facts. An item's ``outputs`` block (``OUTPUTS_KEY`` in results.jsonl) holds, per side (``own``, ``other``),
what is known of that output apart from the judge's verdict: its ``author``, a third-party score (``anchor``: a
human rating, or a referee judge's), whether its answer is ``correct`` (tasks with verifiable answers), its
``family`` (models of one maker) and its length in ``words``; and, under ``judge``, the judge's ``family``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The paper's key of a model that wrote some of its summaries, by model name, for configs without `paper_key`.
PAPER_KEY_BY_MODEL_NAME = {"gpt35": "gpt35", "gpt4": "gpt4", "llama2": "llama", "llama": "llama", "claude": "claude"}
PAPER_SOURCE_PREFIX = "paper_"  # source=paper_<key> are the dataset's imported summaries <key>

OUTPUTS_KEY = "outputs"  # an item's facts about its two outputs (module docstring)
SIDES = ("own", "other")
JUDGE = "judge"
AUTHOR, ANCHOR, CORRECT, FAMILY, WORD_COUNT = "author", "anchor", "correct", "family", "words"


def author_key(name: Any) -> str:
    """A source's or model's name as an author: ``paper_<key>`` -> ``<key>``, a model with a paper key -> that key."""
    text = str(name)
    if text.startswith(PAPER_SOURCE_PREFIX):
        return text[len(PAPER_SOURCE_PREFIX):]
    return PAPER_KEY_BY_MODEL_NAME.get(text, text)


def own_author(evaluator: Any, own_summaries: Any = "") -> str:
    """The author of a cell's own summaries: the evaluator's, or the dataset source they were taken from (the
    analysis' ``own_summaries`` column: "dataset paper_gpt35"; "path X" keeps the evaluator as the author)."""
    kind, _, name = str(own_summaries or "").partition(" ")
    return author_key(name) if kind == "dataset" and name else author_key(evaluator)


def output_facts(measured: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """An item's ``outputs`` block read tolerantly: side -> {fact: value}; anything malformed reads as absent."""
    block = (measured or {}).get(OUTPUTS_KEY)
    if not isinstance(block, Mapping):
        return {}
    return {side: dict(v) for side, v in block.items() if side in (*SIDES, JUDGE) and isinstance(v, Mapping)}
