"""Batch-invariant computation: prompts built in fixed chunks, pieces of one shape batched where no bit changes.

Batch-invariant computation (`batch_invariant`; auto: on in bf16/fp16, off in float32). In a 16-bit type a
matrix product's rounding depends on its shapes, so a prompt scored in a batch of 8 after a shared prefix gets
other numbers (measured here: up to 2e-2 in an answer probability) than the same prompt scored alone or after
another prefix, and which batch a prompt lands in depends on what an earlier, perhaps killed, run cached. In
this mode every prompt runs alone: its KV cache is built in fixed chunks of `batch_invariant_chunk` tokens from
position 0 (chunk k always one forward of exactly those tokens on the cache of chunks < k), the prefix LRU
holds and serves only caches at chunk boundaries, and the rest of the prompt is one forward of its own. So
the same tokens always meet the same shapes, and a result depends on its own prompt alone. The pieces are
not run one prompt at a time, though: every chunk at one depth has one shape, and so has every tail of one
length on one boundary. How such pieces share a forward depends on the device:
- On a CPU (`batch_invariant_rows: 0`) attention pads its keys to whole blocks of 512 and every forward's width
  leaves 0 or 16+ rows in its last query block (models/local/key_blocks.py): then a token's numbers do not depend on
  how its prompt was cut into forwards or what shared them (`split_free`, probed once per model; true on the
  CPUs measured), and prompts are judged and scored over their shared prefixes like the batched schedule (the
  prefix trie; the answers read HEAD_ROWS at a time, each second position on its row's own cache cut to its
  prompt), with each prompt's numbers those of it alone in one forward, which are also the chunks' numbers.
  Where the probe fails, the chunks run: the device gives each row of a batched forward the bits it gives alone
  (`rows_invariant`, probed once per model; true on the CPUs measured for pieces of 16 tokens or more), so
  pieces from many prompts share a forward, up to the device's token budget (`forward_tokens`), with results
  bit-identical to one prompt per forward. Summaries use the chunks either way. Where both probes fail (an AMX
  Xeon: every piece alone, slow), faster schedules are probed and one chosen per machine, its name in the
  schedule (models/local/cpu_schedules.py).
- On a GPU a matrix product's kernel, and so its rounding, depends on the row count (cuBLAS picks tiles and
  split-K by shape), so rows cannot share a forward of a varying size. There every forward has exactly
  `batch_invariant_rows` rows (auto: GPU_INVARIANT_ROWS), filled with copies of a real one, and every tail is
  right-padded to whole chunks (attention is causal: no real position sees a pad). Each forward is then one
  of a fixed set of shapes, and a row's output depends on its own tokens only (probed once per model: a row
  gets the same bits beside other companions). The numbers are a function of the prompt and that row count,
  which the identity's schedule names ("chunks64x32").
The float32 output layer reads the tails' last positions in products of exactly HEAD_ROWS rows (filled up with
copies of a real row): a product's rounding depends on its row count, and one of 16 rows costs about what 3
single rows cost. Rows of several prompts share a product where the device gives a row the same bits beside
any companions (probed once per model, `head_rows_invariant`); elsewhere each row fills a product with copies
of itself, which gives the same bits more slowly. The schedule names the block ("h16").
Summaries are decoded in batches of a fixed row count (`batch_invariant_rows` on a GPU, else `generate_batch`)
whose rows share one width: each prompt's cache is built on its chunks and padded to its width (a function of
its own length: the next multiple of DECODE_WIDTH tokens, with key blocks of KEY_BLOCK), each new token at the
same cache slot in every row, the padding masked and each row's positions its own. Rows of one width decode
together, their tails right-padded to it; with key blocks rows of every width do, at the widest one's, their
caches padded with zeros, where a row gets the bits of its own width (`_decodes_any_width`). Every decoding
step is then one fixed shape, and a summary depends on its own prompt only. The identity's `schedule`
("chunks64k512h16d8w512", on a GPU "chunks64x32h16d32") keeps these results apart from batched ones in the call
cache. bench/judge_speed.py, bench/batch_invariance.py, bench/generate_speed.py and bench/gpu_judge.py measure
the cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property

from .kv_cache import _clone_cache, _first_rows, _returned_cache, _row_cache, _stack_padded

# Batch-invariant computation batches rows of at least this many new tokens only: a matrix product of fewer
# rows takes other kernels here (oneDNN, bf16: a 1-token row alone differs from the same row in a batch of 2,
# a 3-token one from it in a batch of 4), while from 16 rows on the measured products gave each row the same
# bits in any batch. Shorter tails run alone, as before.
MIN_BATCHED_LENGTH = 16

# Rows of every batch-invariant forward on a GPU (batch_invariant_rows auto): with 64-token chunks, 2,048 tokens
# per forward, enough to keep a 7B model's matrix products efficient while the padding rows stay few.
GPU_INVARIANT_ROWS = 32


class BatchInvariant:
    """LocalModel's batch-invariant runs: each prompt's chunks and tail, batched by shape within the device's
    token and KV-cache budgets."""

    def _bound(self, prompt: list[int]) -> int:
        """The last chunk boundary before the prompt's last token: its cache is built in chunks up to there."""
        return (len(prompt) - 1) // self.chunk * self.chunk

    def _tail_last(self, prompt: list[int]) -> int:
        """The position of the prompt's last real token within its tail forward (right padding follows it)."""
        return len(prompt) - self._bound(prompt) - 1

    def _invariant_runs(self, prompts: list[list[int]], extras: list[list[int]]
                        ) -> Iterator[tuple[list[int], object, object]]:
        """Run every prompt as batch-invariant computation does alone, batched where that changes no bit.

        Prompt i's cache is built chunk by chunk up to its boundary b_i (the last multiple of the chunk before
        its last token), then prompt[b_i:] + extras[i] runs as one forward. Chunks of the same depth are one
        shape (the chunk on a cache of depth x chunk), and so are tails of one length on one boundary; on a
        device where rows of one shape come out bit for bit as they do alone (`rows_invariant`), each shape
        runs as a few batches of many rows instead of one forward per prompt. Yields (prompt indices, the
        tails' forward output, its cache) per batch of tails."""
        order = sorted(range(len(prompts)), key=lambda i: prompts[i])
        bounds = [self._bound(p) for p in prompts]
        longest = max((len(p) + len(e) for p, e in zip(prompts, extras, strict=True)), default=1)
        window = self._window(longest)
        for w in range(0, len(order), window):
            yield from self._invariant_window(prompts, extras, bounds, order[w:w + window])

    def _invariant_window(self, prompts, extras, bounds, window: list[int]
                          ) -> Iterator[tuple[list[int], object, object]]:
        """`_invariant_runs` for some prompts, depth by depth: the tails that start at this depth, then the
        next chunk of every prompt that goes deeper (from the prefix LRU where it holds it)."""
        key = (lambda i, n: tuple(prompts[i][:n])) if self.prefix_reuse else (lambda i, n: (i,) + tuple(prompts[i][:n]))
        level: dict[tuple, object] = {}
        for depth in range(0, max(bounds[i] for i in window) + 1, self.chunk):
            tails: dict[int, list[int]] = {}
            for i in window:
                if bounds[i] == depth:
                    tails.setdefault(self._tail_width(len(prompts[i]) - depth + len(extras[i])), []).append(i)
            for width, group in sorted(tails.items()):
                for rows in self._row_batches(group, depth, width):
                    ids = [self._right_padded(prompts[i][depth:] + extras[i], width) for i in rows]
                    out = self._rows_forward(ids, [level[key(i, depth)] for i in rows] if depth else None)
                    self.tokens_computed += sum(len(prompts[i]) - depth for i in rows)
                    yield rows, out, _returned_cache(out)
            level = self._next_level(prompts, [i for i in window if bounds[i] > depth], depth, level, key)

    def _next_level(self, prompts, deeper: list[int], depth: int, level: dict[tuple, object], key
                    ) -> dict[tuple, object]:
        """The caches one chunk deeper of the given prompts: each distinct one from the LRU or computed, the
        computed ones a few batches of rows (every row one chunk on a cache of `depth` tokens)."""
        nxt: dict[tuple, object] = {}
        todo: dict[tuple, int] = {}
        for i in deeper:
            k = key(i, depth + self.chunk)
            if k in nxt or k in todo:
                continue
            stored = self.prefix_lru.longest(prompts[i][:depth + self.chunk], at_least=depth + self.chunk)[1] \
                if self.prefix_reuse else None
            if stored is not None:
                nxt[k] = stored
            else:
                todo[k] = i
        for rows in self._row_batches(list(todo.values()), depth, self.chunk):
            out = self._rows_forward([prompts[i][depth:depth + self.chunk] for i in rows],
                                     [level[key(i, depth)] for i in rows] if depth else None)
            cache = _first_rows(_returned_cache(out), len(rows))
            self.tokens_computed += self.chunk * len(rows)
            for r, i in enumerate(rows):
                nxt[key(i, depth + self.chunk)] = row = _row_cache(cache, r)
                if self.prefix_reuse:
                    self.prefix_lru.put(prompts[i][:depth + self.chunk], row)
        return nxt

    def _row_batches(self, group: list[int], depth: int, length: int) -> Iterator[list[int]]:
        """Batches of one shape (`length` new tokens on a cache of `depth`): the fixed row count where every
        forward has one, else as many rows as the budget allows where rows are invariant; else one."""
        if self.rows:
            size = self.rows if self.rows_invariant else 1
        else:
            size = self._rows(depth, length) if length >= MIN_BATCHED_LENGTH and self.rows_invariant else 1
        for k in range(0, len(group), size):
            yield group[k:k + size]

    def _tail_width(self, length: int) -> int:
        """A tail's width in its forward: whole chunks where every forward has a fixed row count (so every
        forward is one of a few shapes), else its query width (its own length with no key blocks)."""
        return -(-length // self.chunk) * self.chunk if self.rows else self._query_width(length)

    def _rows_forward(self, ids: list[list[int]], caches: list[object] | None):
        """One forward of pieces of one shape, each row of `ids` on its own cache (None: from position 0).
        Where every forward has a fixed row count, the batch is filled up with copies of its first piece; the
        pieces are the output's first rows."""
        if self.rows and len(ids) < self.rows and self.rows_invariant:
            fill = self.rows - len(ids)
            ids = ids + [ids[0]] * fill
            caches = caches + [caches[0]] * fill if caches else caches
        return self._forward_rows(ids, self._stacked(caches) if caches else None)

    def _stacked(self, caches: list[object]):
        """One batch cache from row caches of one length: a new cache object (a forward extends the one it is
        given, and these rows' caches are read again)."""
        return _clone_cache(caches[0]) if len(caches) == 1 else _stack_padded(caches, caches[0].get_seq_length())

    def _rows(self, depth: int, length: int) -> int:
        """Rows per forward of `length` new tokens on a cache of `depth`: within the device's token budget per
        forward and its KV-cache budget."""
        by_tokens = self.forward_tokens // max(1, length)
        by_memory = self.kv_budget_bytes // max(1, (depth + length) * self._kv_bytes_per_token)
        return max(1, min(by_tokens, by_memory))

    def _window(self, longest: int) -> int:
        """How many prompts batch-invariant computation takes at once: their caches fit the KV budget."""
        return max(1, self.kv_budget_bytes // max(1, longest * self._kv_bytes_per_token))

    @cached_property
    def _kv_bytes_per_token(self) -> int:
        c = self.model.config
        layers = getattr(c, "num_hidden_layers", None)
        heads = getattr(c, "num_key_value_heads", None) or getattr(c, "num_attention_heads", None)
        if not layers or not heads:
            return 1024  # a model that does not say (a test stub): any positive size works
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        size = self.torch.finfo(getattr(self.torch, self.identity.dtype)).bits // 8
        return 2 * layers * heads * head_dim * size
