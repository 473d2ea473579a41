"""Judging: answer distributions read at the answer position from the float32 output layer.

Judging reads the full next-token distribution at the answer position and sums, for each answer,
the probability of every vocabulary token that spells it ("1", " 1", ...). A batch of judge prompts
is walked over its shared prefixes (models/local/prefix.py): each distinct prefix (chat header + article,
then the first summary) goes through the model once into the KV cache, and the prompts that branch
off at the same point are scored together in one padded batch on a read-only expansion of that cache.
The caches of the prefixes computed are kept between calls in a bounded LRU (`prefix_cache_mb`), so the
next cell of a sweep (same articles, another source) starts from its articles' prefixes.

Split answers: some tokenizers write " 1" as a whitespace-only piece and then the digit (Llama-2's
sentencepiece emits "▁", then "1"), so part of the answer's mass sits one position further on. Where the
whitespace-only tokens carry at least SPLIT_MIN_MASS at the answer position, the most probable of them
(largest first, until the whitespace mass left unread is below SPLIT_MIN_MASS, at most SPLIT_MAX_TOKENS)
each get a second position on the batch's own KV cache, and P(a) = sum of P(spellings of a) + sum over
those w of P(w) * P(spellings of a | prompt + w). Such a result's method is SPLIT_METHOD; every other
prompt is read exactly as before (one position, FULL_METHOD).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property

from ..base import AnswerDistribution, AnswerRequest
from .answer_tokens import FULL_METHOD, SPLIT_METHOD, split_tokens
from .kv_cache import _row_cache
from .prefix import schedule

# Rows of every output-layer product that reads batch-invariant answer distributions. A float32 product of 1
# row rounds otherwise than the same row among 8 or more (oneDNN here), but among a fixed count a row gets the
# same bits whatever its companions; and the product is memory-bound at one row (2 AVX-512 cores, a float32
# matrix of qwen05's head's shape, 151,936 x 896: 49 ms for 1 row, 111 ms for 8, 134 ms for 16), so blocks of
# 16 read the rows of several prompts at a third of the cost each.
HEAD_ROWS = 16


class AnswerReading:
    """LocalModel's judging: answer distributions over shared prefixes or batch-invariant, split answers' second
    positions, and the float32 output layer they are read from."""

    def answer_distributions(self, requests: Sequence[AnswerRequest]
                             ) -> Iterator[tuple[AnswerRequest, AnswerDistribution]]:
        prompts = [self.encode(self.render(r.messages)) for r in requests]
        if self.chunk:  # batch-invariant: each prompt's numbers as if alone
            runs = self._trie_tails(prompts) if self.split_free else self._chunk_tails(prompts)
            yield from self._read_in_blocks(runs, prompts, requests)
            return
        for rows, last, cache in self._trie_tails(prompts):
            batch = self._distributions(last, cache, [len(prompts[i]) for i in rows], [requests[i] for i in rows])
            for i, dist in zip(rows, batch, strict=True):
                self.tokens_requested += len(prompts[i])
                yield requests[i], dist

    def _trie_tails(self, prompts: list[list[int]]) -> Iterator[tuple[list[int], object, object]]:
        """(prompt indices, each one's last hidden state, the batch's cache) per forward that ends prompts: over
        their shared prefixes (models/local/prefix.py), or without prefix reuse each prompt from scratch."""
        if not self.prefix_reuse:
            for i, ids in enumerate(prompts):
                last, cache = self._forward_last([ids], cache=None)
                self.tokens_computed += len(ids)
                yield [i], last, cache
            return
        steps = schedule(prompts, max_batch=self.max_batch, min_saving=self.min_extend_saving)
        for step, cache in self._walk(prompts, steps):
            suffixes = [prompts[i][step.start:] for i in step.prompts]
            last, batch_cache = self._forward_last(suffixes, cache=cache)
            self.tokens_computed += sum(map(len, suffixes))
            yield step.prompts, last, batch_cache

    def _chunk_tails(self, prompts: list[list[int]]) -> Iterator[tuple[list[int], object, object]]:
        """`_trie_tails` by fixed chunks (`_invariant_runs`): each prompt's tail on its chunk-boundary cache."""
        for rows, out, cache in self._invariant_runs(prompts, [[] for _ in prompts]):
            last = out.last_hidden_state[list(range(len(rows))), [self._tail_last(prompts[i]) for i in rows]]
            yield rows, last, cache

    def _read_in_blocks(self, runs, prompts: list[list[int]], requests: Sequence[AnswerRequest]
                        ) -> Iterator[tuple[AnswerRequest, AnswerDistribution]]:
        """Batch-invariant answers from runs of (prompt indices, last hidden states, batch cache): the last
        positions read HEAD_ROWS at a time, across runs (`_head_probs`); each row's second position (split answers)
        on its own cache, which keeps its run's batch cache alive until the row is read. With key blocks the
        row's cache is cut to its prompt: the padding after it depends on its batch (trie) or width (chunks)."""
        pending: list[tuple[int, object, object]] = []
        for rows, last, cache in runs:
            for r, i in enumerate(rows):
                pending.append((i, last[r], _row_cache(cache, r, len(prompts[i]) if self.key_blocks else None)))
            while len(pending) >= HEAD_ROWS:
                yield from self._read_block(pending[:HEAD_ROWS], prompts, requests)
                pending = pending[HEAD_ROWS:]
        if pending:
            yield from self._read_block(pending, prompts, requests)

    def _read_block(self, block, prompts, requests) -> Iterator[tuple[AnswerRequest, AnswerDistribution]]:
        probs = self._head_probs(self.torch.stack([h for _, h, _ in block]))
        for (i, _, cache), row in zip(block, probs, strict=True):
            self.tokens_requested += len(prompts[i])
            yield requests[i], self._distributions_of(row[None], cache, [len(prompts[i])], [requests[i]])[0]

    def _head_probs(self, hidden):
        """Next-token distributions of up to HEAD_ROWS hidden states, each from a product (and softmax) of
        exactly HEAD_ROWS rows: the states together, filled up with copies of the first, where a row's bits do
        not depend on its companions here; else each state with copies of itself."""
        torch = self.torch
        n = hidden.shape[0]
        if self.head_rows_invariant:
            return self._probs(torch.cat([hidden, hidden[:1].expand(HEAD_ROWS - n, -1)]))[:n]
        return torch.stack([self._probs(h.expand(HEAD_ROWS, -1).contiguous())[0] for h in hidden])

    def _second_position(self, cache, lengths: list[int], picks: list[tuple[int, int]]):
        """The hidden state one position on, for each (row, token) in `picks`: the row's prompt plus
        that token, in one batch on the first batch's cache (consumed: no prompt is recomputed). The
        rows are right-padded to the cache's width, so the mask hides each row's padding and its
        position ids continue from the row's own length."""
        torch = self.torch
        width = cache.get_seq_length()
        cache.batch_select_indices(torch.tensor([row for row, _ in picks], device=self.device))
        mask = torch.zeros(len(picks), width + 1, dtype=torch.long, device=self.device)
        for k, (row, _) in enumerate(picks):
            mask[k, : lengths[row]] = 1
        mask[:, width] = 1
        with torch.inference_mode():
            out = self.model.get_decoder()(
                input_ids=torch.tensor([[tok] for _, tok in picks], device=self.device), attention_mask=mask,
                position_ids=torch.tensor([[lengths[row]] for row, _ in picks], device=self.device),
                **self._kv(cache), use_cache=True)
            return out.last_hidden_state[:, -1]

    @cached_property
    def _head_fp32(self):
        """A float32 copy of the output layer (~0.5 GB for a 150k vocabulary). A bf16 lm_head rounds
        logits of typical size to steps of 1/8, which would quantize every answer probability."""
        head = self.model.get_output_embeddings()
        bias = getattr(head, "bias", None)
        return head.weight.detach().float(), None if bias is None else bias.detach().float()

    def _logits(self, hidden):
        """Float32 logits of hidden states (one row, or a row per position), soft-capped where the model is."""
        torch = self.torch
        weight, bias = self._head_fp32
        with torch.inference_mode():
            logits = hidden.float() @ weight.T
            if bias is not None:
                logits = logits + bias
            cap = getattr(self.model.config, "final_logit_softcapping", None)
            if cap:
                logits = cap * torch.tanh(logits / cap)
            return logits

    def _probs(self, hidden):
        """The next-token distribution of a hidden state (or of each row of a batch of them)."""
        torch = self.torch
        with torch.inference_mode():
            return torch.softmax(self._logits(hidden), dim=-1)

    def _answer_probs(self, probs, answers: Sequence[str]) -> dict[str, float]:
        return {a: float(probs[self.answer_ids(a)].sum()) if self.answer_ids(a) else 0.0 for a in answers}

    def _distributions(self, hidden, cache, lengths: list[int], requests: Sequence[AnswerRequest]
                       ) -> list[AnswerDistribution]:
        """One batch's answer distributions, from its last hidden states and its cache; the rows
        whose whitespace-only tokens carry enough mass get a second position (split answers)."""
        # One output-layer product for the whole batch: the float32 head is read once, not once per row.
        return self._distributions_of(self._probs(hidden), cache, lengths, requests)

    def _distributions_of(self, batch_probs, cache, lengths: list[int], requests: Sequence[AnswerRequest]
                          ) -> list[AnswerDistribution]:
        """`_distributions` from the rows' next-token distributions."""
        dists, picks = [], []
        for row, (probs, req) in enumerate(zip(batch_probs, requests, strict=True)):
            top = probs.topk(5)
            top_tokens = [(self._token_text(i), round(float(p), 6))
                          for p, i in zip(top.values, top.indices.tolist(), strict=True)]
            dists.append(AnswerDistribution(probs=self._answer_probs(probs, req.answers), method=FULL_METHOD,
                                            top_tokens=top_tokens, prompt_tokens=lengths[row]))
            ws = self._whitespace_ids
            ws_probs = list(zip(ws, probs[ws].tolist(), strict=True)) if ws else []
            picks += [(row, tok, p) for tok, p in split_tokens(ws_probs)]
        if picks:
            second = self._second_position(cache, lengths, [(row, tok) for row, tok, _ in picks])
            for (row, _, p_ws), h in zip(picks, second, strict=True):
                dist = dists[row]
                after = self._answer_probs(self._probs(h), requests[row].answers)
                dist.probs = {a: dist.probs[a] + p_ws * after[a] for a in dist.probs}
                dist.method = SPLIT_METHOD
            self.second_positions += len({row for row, _, _ in picks})
        return dists
