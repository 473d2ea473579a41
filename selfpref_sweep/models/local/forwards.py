"""Forward passes on KV caches: the walk over shared prefixes (the prefix LRU's), and rows run on caches."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from functools import cached_property

from ...errors import ModelUnavailableError
from .key_blocks import query_width
from .kv_cache import _clone_cache, _croppable, _returned_cache
from .prefix import Extend, Score


class Forwards:
    """LocalModel's forwards: prefixes extended into the KV cache (from and into the prefix LRU), batches scored on
    a shared prefix's cache, rows of equal length run on theirs."""

    def _prompt_cache(self, tokens: list[int]):
        """The KV cache of these tokens: from the longest prefix the LRU holds, the rest computed (and the
        whole stored)."""
        n, cache = self.prefix_lru.longest(tokens)
        if n < len(tokens):
            cache = self._extend(tokens[n:], cache)
            self.prefix_lru.put(tokens, cache)
        return cache

    def _walk(self, prompts: list[list[int]], steps) -> Iterator[tuple[Score, object]]:
        """Run a schedule's Extend steps into the KV cache and yield each Score step with the cache of the
        shared prefix it starts from (None when it starts from scratch). An Extend starts from the longest
        prefix of its tokens in the LRU of earlier calls, and its result goes into that LRU."""
        cache, cache_len = None, 0
        for step in steps:
            if cache is not None and cache_len > step.start:
                cache.crop(step.start - cache_len)  # back to the shared prefix this step starts from
                cache_len = step.start
            if isinstance(step, Extend):
                tokens = prompts[step.prompt][:step.end]
                n, stored = self.prefix_lru.longest(tokens, at_least=cache_len + 1)
                if stored is not None:
                    cache, cache_len = stored, n
                if cache_len < step.end:
                    cache = self._extend(tokens[cache_len:], cache)
                    self.tokens_computed += step.end - cache_len
                    cache_len = step.end
                    self.prefix_lru.put(tokens, cache)
                continue
            yield from self._score_from_stored(prompts, step, cache if step.start else None)

    def _score_from_stored(self, prompts: list[list[int]], step: Score, cache) -> Iterator[tuple[Score, object]]:
        """A Score step as scheduled, except that prompts with a longer prefix in the prefix LRU start from
        it: in a later cell an article often has a single new prompt (the new source's summary), which the
        schedule scores from the shared chat header, not from the article an earlier cell computed. Prompts
        that find the same stored prefix are scored together on one clone of it. The last prompt token is
        never taken from the LRU: its position's output is what the step reads."""
        if not len(self.prefix_lru):
            yield step, cache
            return
        rest, found = [], {}
        for i in step.prompts:
            n, stored = self.prefix_lru.longest(prompts[i][:len(prompts[i]) - 1], at_least=step.start + 1)
            if stored is None:
                rest.append(i)
            else:
                found.setdefault(tuple(prompts[i][:n]), (stored, []))[1].append(i)
        if rest:
            yield Score(rest, step.start), cache
        for key, (stored, group) in found.items():
            yield Score(group, len(key)), stored

    def _run_into_cache(self, ids: list[int], cache):
        """The cache after running one row of tokens on it (a forward of exactly these tokens; with key blocks,
        of their query width, the padding cropped off again)."""
        pad = self._query_width(len(ids)) - len(ids)
        cache = _returned_cache(self._forward_rows([ids + [self._pad_id] * pad], cache))
        if pad:
            cache.crop(-pad)
        return cache

    def _extend(self, ids: list[int], cache):
        extended = self._run_into_cache(ids, cache)
        if not _croppable(extended):  # the schedule crops caches back to shared prefixes
            raise ModelUnavailableError(f"{self.cfg.name}: its KV cache cannot be cropped (sliding-window "
                                        f"layers); set prefix_reuse: false for this model.")
        return extended

    def _forward_last(self, suffixes: list[list[int]], cache):
        """The last hidden state after each suffix, all in one right-padded batch on top of a copy
        of the shared prefix's cache, and the batch's own cache (for a second position). Each row is
        read at its last real token."""
        torch = self.torch
        out = self._forward_batch(suffixes, cache)
        with torch.inference_mode():
            last = out.last_hidden_state[torch.arange(len(suffixes)), torch.tensor([len(s) - 1 for s in suffixes])]
        return last, _returned_cache(out)

    def _forward_batch(self, suffixes: list[list[int]], cache):
        """The model's output over the suffixes, in one right-padded batch on the shared prefix's cache.
        With right padding no real token attends to a pad (attention is causal), so no mask is needed.
        The prefix is lent read-only: a new cache object whose layers hold the prefix's tensors expanded
        (not copied) to the batch; the forward concatenates onto them into new tensors, so the prefix
        stays intact for the next batch without a copy of its own."""
        width = self._query_width(max(map(len, suffixes)))
        pad = self._stop_ids[0]
        if cache is not None:
            cache = _clone_cache(cache, batch=len(suffixes))
        return self._forward_rows([s + [pad] * (width - len(s)) for s in suffixes], cache)

    def _forward_rows(self, ids: list[list[int]], cache):
        """The model's output over rows of equal length, in one batch on `cache` (one row per prompt)."""
        torch = self.torch
        self.forwards += 1
        self.largest_batch = max(self.largest_batch, len(ids))
        with torch.inference_mode():
            return self.model.get_decoder()(input_ids=torch.tensor(ids, device=self.device), **self._kv(cache),
                                            use_cache=True)

    def _run_rows(self, ids: list[list[int]], cache):
        """The cache after running rows of equal length on it."""
        return _returned_cache(self._forward_rows(ids, cache))

    def _kv(self, cache) -> dict[str, object]:
        """The KV-cache keyword argument, by the name this transformers takes: 5.x renamed `past_key_values`
        to `cache` (the old name warns on every call and is removed in 5.40); older releases know only the old."""
        return {self._kv_name: cache}

    @cached_property
    def _kv_name(self) -> str:
        forward = inspect.signature(self.model.get_decoder().forward).parameters
        return "cache" if "cache" in forward else "past_key_values"

    def _query_width(self, length: int) -> int:
        """A forward's width for `length` new tokens: with key blocks its query width (models/local/key_blocks.py),
        else the length itself."""
        return query_width(length) if self.key_blocks else length

    def _right_padded(self, ids: list[int], width: int) -> list[int]:
        return ids + [self._pad_id] * (width - len(ids))
