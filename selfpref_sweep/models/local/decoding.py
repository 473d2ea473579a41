"""Summaries: greedy decoding, in left-padded batches or batch-invariant at fixed widths.

Summaries are decoded greedily in left-padded batches of prompts of similar length (`generate_batch`);
each row stops at its own end-of-turn token. Which prompts share a batch is not part of a summary's cache
key: a row never attends to another row (its padding is masked and its positions start at its first real
token), so the batch changes a summary only through floating-point rounding order, as the thread count
does; keying on it would instead make a re-run over another article subset regenerate (and possibly
change) summaries that earlier cells already judged. bench/generate_speed.py counts how many batched
summaries equal the batch-of-one decoding token for token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from itertools import groupby

from ..base import GenerateRequest, Generation
from .key_blocks import KEY_BLOCK, folded_heads
from .kv_cache import _returned_cache, _row_cache, _rows_copy, _stack_padded

# Batch-invariant summaries without key blocks (a GPU): a prompt's cache is padded to the next multiple of this
# many tokens (rounded up to whole chunks), and prompts of one such width decode together. Wider steps group more
# prompts per width (more rows per decoding step) for more padded positions in each prompt's last forward. With
# key blocks (a CPU) the step is KEY_BLOCK and rows of every width decode together (`_decodes_any_width`).
DECODE_WIDTH = 256


class Decoding:
    """LocalModel's summaries: batches of prompts of similar length, or batch-invariant rows of one width."""

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[tuple[GenerateRequest, Generation]]:
        """Greedy decoding in batches of up to `generate_batch` prompts; sorted by length so a batch pads
        little, and grouped by decoding length (a batch shares max_new_tokens)."""
        encoded = []
        for req in requests:
            chat = bool(req.messages)
            encoded.append((req, self.encode(self.render(req.messages) if chat else req.prompt, chat=chat)))
        encoded.sort(key=lambda e: (e[0].max_new_tokens, len(e[1])))
        for _, group in groupby(encoded, key=lambda e: e[0].max_new_tokens):
            group = list(group)
            if self.chunk:
                yield from self._invariant_generate(group)
                continue
            size = max(1, self.generate_batch)
            for k in range(0, len(group), size):
                yield from self._generate_batch(group[k:k + size])

    def _generate_batch(self, batch: list[tuple[GenerateRequest, list[int]]]
                        ) -> Iterator[tuple[GenerateRequest, Generation]]:
        """One left-padded batch: the mask hides each row's padding (and generate() derives each row's
        positions from it), and a row that emits a stop token is finished while the others go on.

        Each prompt but its last token is first run alone into its own KV cache (from the prefix LRU where
        it holds the prompt's start, and stored there, so scoring these summaries later starts from it):
        no padding is computed and the prompt is run exactly as a batch of one would. Those caches,
        left-padded to the batch's width, are what the batch decodes on."""
        torch = self.torch
        width = max(len(ids) for _, ids in batch)
        pad = self._pad_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for _, p in batch], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for _, p in batch], device=self.device)
        cache = self._generation_cache(batch, width)
        with torch.inference_mode():
            out = self.model.generate(
                ids, attention_mask=mask, **self._kv(cache), max_new_tokens=batch[0][0].max_new_tokens,
                do_sample=False, temperature=None, top_p=None, top_k=None, eos_token_id=self._stop_ids,
                pad_token_id=pad)
        for row, (req, prompt) in enumerate(batch):
            yield req, self._generation(req, prompt, out[row, width:].tolist())

    def _generation(self, req: GenerateRequest, prompt: list[int], new: list[int]) -> Generation:
        """A row's summary from its new tokens: up to and with its first stop token (what follows is padding)."""
        stops = set(self._stop_ids)
        new = new[:next((i + 1 for i, t in enumerate(new) if t in stops), len(new))]
        completion = self.tokenizer.decode(new, skip_special_tokens=True)
        for stop in req.stop:  # completion models run on; cut where the summary ends
            completion = completion.split(stop)[0]
        return Generation(text=completion.strip(), prompt_tokens=len(prompt), completion_tokens=len(new))

    def _invariant_generate(self, group: list[tuple[GenerateRequest, list[int]]]
                            ) -> Iterator[tuple[GenerateRequest, Generation]]:
        """Batch-invariant summaries (one max_new_tokens): each prompt's cache built to its width, then rows
        decoded together as soon as a batch of them is ready, or, when the waiting rows' caches outgrow half the
        KV budget, the fullest batch's rows as they are (the rest at the end). Rows of one width share a batch,
        their last forwards right-padded to it; where rows of every width share one (`_decodes_any_width`), the
        caches are padded with zeros instead, which no real position sees. Which rows share a batch never
        changes a row's bits (every batch is filled to the same row count)."""
        prompts = [ids for _, ids in group]
        widths = [self._decode_width(len(p)) for p in prompts]
        any_width = self._decodes_any_width
        extras = [[] if any_width else [self._pad_id] * (w - len(p)) for p, w in zip(prompts, widths, strict=True)]
        pending: dict[int, list] = {}
        for rows, out, cache in self._invariant_runs(prompts, extras):
            for r, i in enumerate(rows):
                key = 0 if any_width else widths[i]
                ready = pending.setdefault(key, [])
                # the row's cache cut to its prompt (its width): a forward's query width may have padded it further
                cut = len(prompts[i]) if any_width else widths[i]
                ready.append((i, out.last_hidden_state[r, self._tail_last(prompts[i])].clone(),
                              _rows_copy(_row_cache(cache, r, cut), 0, 1)))
                if len(ready) == self._decode_rows:
                    yield from self._decode_ready(group, pending.pop(key), widths)
            waiting = sum(widths[i] for ready in pending.values() for i, _, _ in ready) * self._kv_bytes_per_token
            if waiting > self.kv_budget_bytes // 2:
                key = max(pending, key=lambda k: len(pending[k]))
                yield from self._decode_ready(group, pending.pop(key), widths)
        for _key, ready in sorted(pending.items()):
            yield from self._decode_ready(group, ready, widths)

    @property
    def _decodes_any_width(self) -> bool:
        """Whether rows of every width share decoding batches. With key blocks, where the device gives a row the
        same bits however far its padding reaches (`split_free`), a row decodes at any width of whole key blocks
        from its own with the bits it gets at its own: every padding block is fully masked and adds exact
        zeros, and its new tokens start a block of their own. So there rows decode at the widest one's width,
        and few prompts of many lengths still fill the batches."""
        return self.key_blocks and self.split_free

    def _decode_ready(self, group, ready: list, widths: list[int]) -> Iterator[tuple[GenerateRequest, Generation]]:
        width = max(widths[i] for i, _, _ in ready)
        new = self._decode_rows_greedy([len(group[i][1]) for i, _, _ in ready], [h for _, h, _ in ready],
                                       [c for _, _, c in ready], width, group[0][0].max_new_tokens)
        for (i, _, _), tokens in zip(ready, new, strict=True):
            yield group[i][0], self._generation(group[i][0], group[i][1], tokens)

    def _decode_rows_greedy(self, lengths: list[int], hidden: list, caches: list, width: int, max_new: int
                            ) -> list[list[int]]:
        """Greedy decoding of rows whose caches are up to `width` wide (row r's prompt in its first lengths[r]
        slots, padding after, the cache right-padded to `width`), from each prompt's last hidden state, in one
        batch of exactly `_decode_rows` rows (filled up with copies of the first): every step is one shape, each
        row's new token at slot width + s, its positions continuing its own prompt, its padding masked."""
        torch = self.torch
        n, fill = len(lengths), self._decode_rows - len(lengths)
        lengths, hidden, caches = lengths + lengths[:1] * fill, hidden + hidden[:1] * fill, caches + caches[:1] * fill
        cache = _stack_padded(caches, width, right=True)
        mask = torch.zeros(len(lengths), width + max_new, dtype=torch.long, device=self.device)
        for r, length in enumerate(lengths):
            mask[r, :length] = 1
        positions = torch.tensor(lengths, device=self.device)[:, None]
        stops, new, done = set(self._stop_ids), [[] for _ in range(n)], [False] * n
        with torch.inference_mode(), folded_heads() if self.key_blocks else contextlib.nullcontext():
            token = self.model.get_output_embeddings()(torch.stack(hidden)).argmax(-1)
            for step in range(max_new):
                for r, t in enumerate(token[:n].tolist()):
                    if not done[r]:
                        new[r].append(t)
                        done[r] = t in stops
                if all(done) or step == max_new - 1:
                    break
                mask[:, width + step] = 1
                out = self.model(input_ids=token[:, None], attention_mask=mask[:, :width + step + 1],
                                 position_ids=positions + step, **self._kv(cache), use_cache=True, logits_to_keep=1)
                cache = _returned_cache(out)
                token = out.logits[:, -1].argmax(-1)
        return new

    def _decode_width(self, length: int) -> int:
        """The width of a prompt's cache for batch-invariant decoding: with key blocks whole key blocks (see
        `_decodes_any_width`), else DECODE_WIDTH steps of whole chunks."""
        step = KEY_BLOCK if self.key_blocks else -(-DECODE_WIDTH // self.chunk) * self.chunk
        return -(-length // step) * step

    @property
    def _decode_rows(self) -> int:
        return self.rows or max(1, self.generate_batch)

    def _generation_cache(self, batch: list[tuple[GenerateRequest, list[int]]], width: int):
        """The KV cache a batch decodes on: each prompt but its last token, left-padded to the batch."""
        if self.prefix_reuse and all(len(p) > 1 for _, p in batch):
            return _stack_padded([self._prompt_cache(p[:-1]) for _, p in batch], width - 1)
        return None
