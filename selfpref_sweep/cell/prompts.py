"""Turning the configured prompt templates into chat messages, and the summary clean-up.

Templates live in config (conf/prompts/); slots are filled in one pass so that braces or slot
names inside an article are never substituted a second time.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError
from ..models.base import Message

_SLOT = re.compile(r"\{(\w+)\}")
_FINAL_PUNCTUATION = ".!?\"'\u201d\u2019"


def fill(template: str, **values: str) -> str:
    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)  # not a slot of this template (literal braces)
        return values[name]

    return _SLOT.sub(sub, template)


def chat(prompt: Mapping, **values: str) -> tuple[Message, ...]:
    return (Message("system", fill(prompt["system"], **values)), Message("user", fill(prompt["user"], **values)))


def summarize_messages(prompts: Mapping, task: str, article: str) -> tuple[Message, ...]:
    if task not in prompts["summarize"]:
        raise ConfigError(f"No summarization prompt for task {task!r}; prompts has: {sorted(prompts['summarize'])}.")
    return chat(prompts["summarize"][task], article=article)


def pairwise_messages(prompts: Mapping, question: str, article: str, summary1: str, summary2: str
                      ) -> tuple[Message, ...]:
    if question not in prompts["pairwise"]:
        raise ConfigError(f"No pairwise prompt for question {question!r}; prompts has: {sorted(prompts['pairwise'])}.")
    return chat(prompts["pairwise"][question], article=article, summary1=summary1, summary2=summary2)


# What standardization can strip, as counted per source in summary.json["standardization"].
PREAMBLE, BULLET, NUMBERING = "preamble", "bullet", "numbering"
STRIP_RULES = (PREAMBLE, BULLET, NUMBERING)
_BULLET = re.compile(r"^[-*\u2022\u25cf\u25aa\u25e6\u2023\u2043\u00b7\u2013\u2014]\s+")
# "1. " / "1) " / "(1) ": the punctuation and the space are required, so "3 people died" is text.
_NUMBERING = re.compile(r"^\(?\d{1,2}[.)]\s+")


@dataclass(frozen=True)
class Standardizer:
    """The clean-up every source gets alike: optionally strip leading non-summary lines (preambles) and
    bullets/numbering, then the replication notebook's rules line by line (CNN highlights are one per line):
    collapse whitespace, capitalize the first letter, end with punctuation."""

    preamble_patterns: tuple[str, ...] = ()  # regexes; matched case-insensitively at a leading line's start
    strip_bullets: bool = False

    def clean(self, summary: str) -> tuple[str, frozenset[str]]:
        """The standardized text, and the strip rules that removed something from it."""
        applied: set[str] = set()
        lines = [re.sub(r"\s+", " ", line).strip() for line in summary.splitlines()]
        lines = self._without_preambles([line for line in lines if line], applied)
        out = []
        for line in lines:
            if self.strip_bullets:
                line = _strip(line, _BULLET, BULLET, applied)
                line = _strip(line, _NUMBERING, NUMBERING, applied)
            if not line:
                continue
            line = line[0].upper() + line[1:]
            if line[-1] not in _FINAL_PUNCTUATION:
                line += "."
            out.append(line)
        return "\n".join(out), frozenset(applied)

    def _without_preambles(self, lines: list[str], applied: set[str]) -> list[str]:
        """Leading lines with their preambles cut off; a line that was only a preamble goes."""
        patterns = _compiled(self.preamble_patterns)
        while lines and patterns:
            line = _strip_preambles(lines[0], patterns)
            if line == lines[0]:
                break
            applied.add(PREAMBLE)
            if line:
                return [line] + lines[1:]
            lines = lines[1:]
        return lines


def _strip_preambles(line: str, patterns: tuple[re.Pattern, ...]) -> str:
    """The line without the preambles at its start ("Sure! Here is a summary:" is two of them)."""
    while True:
        match = next((m for m in (p.match(line) for p in patterns) if m and m.end() > 0), None)
        if match is None:
            return line
        line = line[match.end():].strip()


def _strip(line: str, pattern: re.Pattern, rule: str, applied: set[str]) -> str:
    match = pattern.match(line)
    if not match:
        return line
    applied.add(rule)
    return line[match.end():].strip()


@functools.lru_cache(maxsize=32)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern, ...]:
    # Markdown emphasis or a heading mark around a preamble ("**Summary:**", "## Highlights:") goes with it.
    return tuple(re.compile(rf"[#*_\s]*(?:{p})[*_]*\s*", re.IGNORECASE) for p in patterns)


def standardize(summary: str, standardizer: Standardizer = Standardizer()) -> str:
    """The standardized text (see Standardizer); by default only the notebook's whitespace, capital and
    punctuation rules."""
    return standardizer.clean(summary)[0]
