"""Scoring a given text (the familiarity stage): the log-likelihood of each continuation after its prompt.

Scoring a given text (`sequence_logprobs`, the familiarity stage) walks the same schedule over the
requests' prompts, so an article's prompt goes through the model once for all the texts scored after it;
each text is then run on a copy of that cache and its tokens' log-probabilities are read at every position.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..base import SequenceLogprobs, SequenceRequest
from .prefix import Score, schedule


class GivenText:
    """LocalModel's sequence_logprobs: prompt + text run over the shared-prefix schedule or in chunks."""

    def sequence_logprobs(self, requests: Sequence[SequenceRequest]
                          ) -> Iterator[tuple[SequenceRequest, SequenceLogprobs]]:
        """The log-likelihood of each continuation after its prompt (the chat messages with the assistant
        turn opened, as generation renders them). The schedule runs over the prompts alone, so a shared
        prefix never reaches into a continuation and every continuation token is read in a Score step."""
        prompts, texts = [], []
        for r in requests:
            chat = bool(r.messages)
            prompt = self.encode(self.render(r.messages) if chat else (r.prompt or ""), chat=chat)
            # The continuation on its own, as the tokens a generation would have appended after the prompt.
            text = self.tokenizer(r.continuation, add_special_tokens=False)["input_ids"]
            if not prompt:
                raise ValueError("sequence_logprobs needs a non-empty prompt")
            prompts.append(prompt)
            texts.append(text)
        for rows, start, hidden in self._text_runs(prompts, texts):
            for row, i in enumerate(rows):
                first = len(prompts[i]) - 1 - start[row]  # the position that predicts the first text token
                total = self._token_logprobs(hidden[row, first:first + len(texts[i])], texts[i])
                self.tokens_requested += len(prompts[i]) + len(texts[i])
                yield requests[i], SequenceLogprobs(total=total, n_tokens=len(texts[i]), prompt_tokens=len(prompts[i]))

    def _text_runs(self, prompts: list[list[int]], texts: list[list[int]]
                   ) -> Iterator[tuple[list[int], list[int], object]]:
        """Batches of prompt + text run through the model: (prompt indices, where each row starts in its prompt,
        the last hidden states). Batch-invariant: each row from its prompt's chunk boundary; else the shared-
        prefix schedule over the prompts (without prefix reuse, each prompt from scratch)."""
        if self.chunk and not self.split_free:
            for rows, out, _ in self._invariant_runs(prompts, texts):
                self.tokens_computed += sum(map(len, (texts[i] for i in rows)))
                yield rows, [self._bound(prompts[i]) for i in rows], out.last_hidden_state
            return
        for step, cache in self._text_steps(prompts):
            suffixes = [prompts[i][step.start:] + texts[i] for i in step.prompts]
            self.tokens_computed += sum(map(len, suffixes))
            yield step.prompts, [step.start] * len(step.prompts), self._forward_batch(suffixes, cache).last_hidden_state

    def _text_steps(self, prompts: list[list[int]]) -> Iterator[tuple[Score, object]]:
        """The Score steps of scoring given texts, each with the cache it starts from: the shared-prefix schedule
        (without prefix reuse, each prompt from scratch)."""
        steps = (schedule(prompts, max_batch=self.max_batch, min_saving=self.min_extend_saving) if self.prefix_reuse
                 else [Score([i], 0) for i in range(len(prompts))])
        yield from self._walk(prompts, steps)

    def _token_logprobs(self, hidden, tokens: list[int]) -> float:
        """Sum of log P(token_k | hidden_k) over the text, from the float32 output layer."""
        if not tokens:
            return 0.0
        torch = self.torch
        with torch.inference_mode():
            logp = torch.log_softmax(self._logits(hidden), dim=-1)
            picked = logp[torch.arange(len(tokens)), torch.tensor(tokens, device=logp.device)]
            return float(picked.sum())
