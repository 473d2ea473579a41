"""Scheduling a batch of prompts over their shared prefixes (a walk of the prompts' token trie).

Judge prompts share long prefixes: the chat header and article (all prompts of an article and
question), then the first summary (every pair that starts with the same summary). The schedule
computes each shared prefix once into the KV cache (`Extend`), then scores the prompts that branch
off at the same point together in one padded batch (`Score`), so the model runs a few large forwards
instead of one small forward per prompt. `PrefixLRU` keeps those prefixes' caches between calls, so
the next cell of a sweep (same articles, another source) starts where the last one left off.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby


@dataclass(frozen=True)
class Extend:
    """Grow the cache from `start` to `end` with tokens [start:end] of prompt `prompt`."""

    prompt: int
    start: int
    end: int


@dataclass(frozen=True)
class Score:
    """From a cache of length `start`, run tokens [start:] of each prompt and read each last position."""

    prompts: list[int]
    start: int


Step = Extend | Score


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def schedule(prompts: Sequence[Sequence[int]], max_batch: int = 8, min_saving: int = 0) -> list[Step]:
    """Steps that score every prompt once. Every prompt must be non-empty.

    In a sorted list, the prefix shared by a run of prompts is the prefix of its first and last.
    At that point the run splits by next token: runs of one prompt are leaves, scored together in
    batches of at most `max_batch` (similar lengths together, to limit padding); longer runs are
    walked recursively. The last token of a prompt is never part of a shared prefix, because its
    position's logits are the answer.

    Every Extend is a forward pass of its own, whose fixed cost (reading every weight once) is worth
    tens of tokens on a CPU. So a shared stretch is extended only when computing it once saves at least
    `min_saving` tokens over recomputing it in each prompt below it ((prompts − 1) × its length);
    otherwise it is left to the next Extend down the trie or to the leaves' own batch, and the leaves it
    would have split off are scored together with their parent's. `min_saving=0` walks the exact trie
    (each distinct prefix token computed once).
    """
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt")
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    steps: list[Step] = []

    def score(leaves: list[int], cached: int) -> None:
        leaves = sorted(leaves, key=lambda i: len(prompts[i]))
        for k in range(0, len(leaves), max_batch):
            steps.append(Score(leaves[k : k + max_batch], cached))

    def visit(group: list[int], cached: int) -> list[int]:
        """Schedule a group whose prompts share tokens [:cached] (the cache's length when its steps run);
        returns the prompts left to be scored from `cached` by the caller."""
        if len(group) == 1:
            return list(group)
        first, last = prompts[group[0]], prompts[group[-1]]
        shared = min(common_prefix_len(first, last), min(len(prompts[i]) for i in group) - 1)
        start = cached
        if shared > cached and (shared - cached) * (len(group) - 1) >= max(1, min_saving):
            steps.append(Extend(group[0], cached, shared))
            start = shared
        leaves: list[int] = []
        for _, run in groupby(group, key=lambda i: prompts[i][shared]):
            run = list(run)
            if len(run) == 1 or len(run) == len(group):  # a leaf, or no further split possible
                leaves.extend(run)
            else:
                leaves.extend(visit(run, start))
        if start == cached:  # nothing extended here: the caller scores these with its own
            return leaves
        score(leaves, start)
        return []

    if order:
        score(visit(order, 0), 0)
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


class PrefixLRU:
    """KV caches of prompt prefixes kept between calls, bounded in bytes, least recently used out first.

    A sweep over sources asks a judge about the same articles cell after cell: every judge prompt of an
    article starts with the same chat header and article. The backend stores the cache of each prefix it
    computes (`put`) and, before computing one, starts from the longest stored prefix of it (`longest`).
    Keys are token tuples, so two prompts share an entry only where their tokens are equal; the pool keeps
    one LRU per loaded model, so the model identity is part of the key by construction.

    The values are backend cache objects; `clone` gives an independent handle on the same tensors and
    `size` their bytes. Entries are never changed in place: a backend extends or crops its clone.
    """

    def __init__(self, max_bytes: int, clone: Callable[[object], object], size: Callable[[object], int]):
        self.max_bytes = int(max_bytes)
        self._clone = clone
        self._size = size
        self._entries: OrderedDict[tuple[int, ...], tuple[object, int]] = OrderedDict()
        self._lengths: dict[int, int] = {}  # prefix length -> how many entries have it
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, tokens: Sequence[int], at_least: int = 1) -> tuple[int, object | None]:
        """The longest stored prefix of `tokens` (at least `at_least` long): its length and a clone of its
        cache, or (0, None)."""
        for n in sorted(self._lengths, reverse=True):
            if n > len(tokens) or n < at_least:
                continue
            key = tuple(tokens[:n])
            if key in self._entries:
                self._entries.move_to_end(key)
                return n, self._clone(self._entries[key][0])
        return 0, None

    def put(self, tokens: Sequence[int], cache: object) -> None:
        if self.max_bytes <= 0 or not tokens:
            return
        key = tuple(tokens)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        size = self._size(cache)
        if size > self.max_bytes:
            return
        self._entries[key] = (self._clone(cache), size)
        self._lengths[len(key)] = self._lengths.get(len(key), 0) + 1
        self.bytes += size
        while self.bytes > self.max_bytes:
            old, (_, old_size) = self._entries.popitem(last=False)
            self.bytes -= old_size
            self._lengths[len(old)] -= 1
            if not self._lengths[len(old)]:
                del self._lengths[len(old)]

    def clear(self) -> None:
        self._entries.clear()
        self._lengths.clear()
        self.bytes = 0
