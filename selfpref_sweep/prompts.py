"""Turning the configured prompt templates into chat messages, and the summary clean-up.

Templates live in config (conf/prompts/); slots are filled in one pass so that braces or slot
names inside an article are never substituted a second time.
"""

from __future__ import annotations

import re
from typing import Mapping, Tuple

from .errors import ConfigError
from .models.base import Message

_SLOT = re.compile(r"\{(\w+)\}")
_FINAL_PUNCTUATION = ".!?\"'\u201d\u2019"


def fill(template: str, **values: str) -> str:
    def sub(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)  # not a slot of this template (literal braces)
        return values[name]

    return _SLOT.sub(sub, template)


def chat(prompt: Mapping, **values: str) -> Tuple[Message, ...]:
    return (Message("system", fill(prompt["system"], **values)), Message("user", fill(prompt["user"], **values)))


def summarize_messages(prompts: Mapping, task: str, article: str) -> Tuple[Message, ...]:
    if task not in prompts["summarize"]:
        raise ConfigError(f"No summarization prompt for task {task!r}; prompts has: {sorted(prompts['summarize'])}.")
    return chat(prompts["summarize"][task], article=article)


def pairwise_messages(prompts: Mapping, question: str, article: str, summary1: str, summary2: str
                      ) -> Tuple[Message, ...]:
    if question not in prompts["pairwise"]:
        raise ConfigError(f"No pairwise prompt for question {question!r}; prompts has: {sorted(prompts['pairwise'])}.")
    return chat(prompts["pairwise"][question], article=article, summary1=summary1, summary2=summary2)


def standardize(summary: str) -> str:
    """The replication notebook's clean-up, line by line (CNN highlights are one per line):
    collapse whitespace, capitalize the first letter, end with punctuation."""
    lines = []
    for line in summary.splitlines():
        line = re.sub(r"\s+", " ", line).strip()
        if not line:
            continue
        line = line[0].upper() + line[1:]
        if line[-1] not in _FINAL_PUNCTUATION:
            line += "."
        lines.append(line)
    return "\n".join(lines)
