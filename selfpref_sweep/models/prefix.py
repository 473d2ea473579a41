"""Scheduling a batch of prompts over their shared prefixes (a walk of the prompts' token trie).

Judge prompts share long prefixes: the chat header and article (all prompts of an article and
question), then the first summary (every pair that starts with the same summary). The schedule
computes each shared prefix once into the KV cache (`Extend`), then scores the prompts that branch
off at the same point together in one padded batch (`Score`), so the model runs a few large forwards
instead of one small forward per prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import List, Sequence, Union


@dataclass(frozen=True)
class Extend:
    """Grow the cache from `start` to `end` with tokens [start:end] of prompt `prompt`."""

    prompt: int
    start: int
    end: int


@dataclass(frozen=True)
class Score:
    """From a cache of length `start`, run tokens [start:] of each prompt and read each last position."""

    prompts: List[int]
    start: int


Step = Union[Extend, Score]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def schedule(prompts: Sequence[Sequence[int]], max_batch: int = 8) -> List[Step]:
    """Steps that score every prompt once. Every prompt must be non-empty.

    In a sorted list, the prefix shared by a run of prompts is the prefix of its first and last.
    At that point the run splits by next token: runs of one prompt are leaves, scored together in
    batches of at most `max_batch` (similar lengths together, to limit padding); longer runs are
    walked recursively. The last token of a prompt is never part of a shared prefix, because its
    position's logits are the answer.
    """
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt")
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    steps: List[Step] = []

    def visit(group: List[int], cached: int) -> None:
        if len(group) == 1:
            steps.append(Score([group[0]], cached))
            return
        first, last = prompts[group[0]], prompts[group[-1]]
        shared = min(common_prefix_len(first, last), min(len(prompts[i]) for i in group) - 1)
        if shared > cached:
            steps.append(Extend(group[0], cached, shared))
            cached = shared
        leaves: List[int] = []
        for _, run in groupby(group, key=lambda i: prompts[i][cached]):
            run = list(run)
            if len(run) == 1 or len(run) == len(group):  # a leaf, or no further split possible
                leaves.extend(run)
            else:
                visit(run, cached)
        leaves.sort(key=lambda i: len(prompts[i]))
        for k in range(0, len(leaves), max_batch):
            steps.append(Score(leaves[k : k + max_batch], cached))

    if order:
        visit(order, 0)
    return steps


def computed_tokens(prompts: Sequence[Sequence[int]], steps: Sequence[Step]) -> int:
    """Tokens the schedule runs through the model (padding aside)."""
    total = 0
    for step in steps:
        if isinstance(step, Extend):
            total += step.end - step.start
        else:
            total += sum(len(prompts[i]) - step.start for i in step.prompts)
    return total
