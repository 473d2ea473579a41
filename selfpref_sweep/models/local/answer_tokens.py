"""Answer tokens: the vocabulary tokens that spell an answer, whitespace-only tokens, where generation stops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

from ..base import spells_answer

FULL_METHOD = "full_distribution"  # the answer position's full next-token distribution
SPLIT_METHOD = "full_distribution+split"  # ... plus a second position after whitespace-only tokens
# Whitespace mass below this is left unread (a negligible share next to judge.min_answer_mass), so the
# second position runs only for prompts whose model actually starts its answer with whitespace.
SPLIT_MIN_MASS = 0.01
SPLIT_MAX_TOKENS = 4

# End-of-turn markers of the chat templates we know; generation stops at any that the vocabulary has.
_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "</s>")


def answer_token_ids(decoded_vocab: Sequence[str], answer: str, special_ids: set) -> list[int]:
    """Ids of every token that spells `answer`, whitespace aside ("1", " 1", "\\n1"); letters
    match in any case ("Yes", " yes", "YES")."""
    return [i for i, text in enumerate(decoded_vocab) if i not in special_ids and spells_answer(text, answer)]


def whitespace_token_ids(decoded_vocab: Sequence[str], special_ids: set,
                         decode_in_context: Callable[[list[int]], list[str]]) -> list[int]:
    """Ids of the tokens whose text is whitespace only (" ", "\\n", sentencepiece's "▁"). A token that
    decodes to "" alone is decoded again after a word (`decode_in_context`): sentencepiece drops a
    leading "▁" at the start of a text, so "▁" alone reads as "" but adds a space after a word."""
    def blank(text: str) -> bool:
        return bool(text) and not text.strip()

    ids = [i for i, t in enumerate(decoded_vocab) if i not in special_ids and blank(t)]
    empty = [i for i, t in enumerate(decoded_vocab) if i not in special_ids and t == ""]
    if empty:
        ids += [i for i, t in zip(empty, decode_in_context(empty), strict=True) if blank(t)]
    return sorted(ids)


def stop_token_ids(tokenizer) -> list[int]:
    """The tokens generation stops at: the tokenizer's end of sequence and every end-of-turn marker it has."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in _END_OF_TURN if t in vocab)
    return sorted(ids)


def tokenizer_whitespace_ids(tokenizer, decoded_vocab: Sequence[str]) -> list[int]:
    """`whitespace_token_ids` of a Hugging Face tokenizer, a token that decodes to "" read after a word."""
    special = set(tokenizer.all_special_ids)
    word = next((i for i, t in enumerate(decoded_vocab) if i not in special and t.isalnum()), None)

    def decode_in_context(ids: list[int]) -> list[str]:
        if word is None:
            return [""] * len(ids)
        lead = tokenizer.decode([word])
        texts = tokenizer.batch_decode([[word, i] for i in ids])
        return [t[len(lead):] if t.startswith(lead) else "" for t in texts]

    return whitespace_token_ids(decoded_vocab, special, decode_in_context)


def split_tokens(ws_probs: Sequence[tuple[int, float]], min_mass: float = SPLIT_MIN_MASS,
                 max_tokens: int = SPLIT_MAX_TOKENS) -> list[tuple[int, float]]:
    """The whitespace-only tokens worth a second position, from (id, probability) pairs: the most
    probable first, until the whitespace mass left is below `min_mass`, at most `max_tokens`."""
    left = sum(p for _, p in ws_probs)
    chosen = []
    for i, p in sorted(ws_probs, key=lambda t: -t[1]):
        if left < min_mass or len(chosen) == max_tokens:
            break
        chosen.append((i, p))
        left -= p
    return chosen


class Tokens:
    """LocalModel's prompts as tokens: chat rendering, encoding, and the ids of answers, whitespace and stops."""

    def render(self, messages) -> str:
        return self.tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                                  add_generation_prompt=True, tokenize=False)

    def encode(self, text: str, chat: bool = True) -> list[int]:
        # A chat template already holds any BOS (adding another would repeat the paper's double BOS);
        # a raw completion prompt needs the tokenizer's own (base models go astray without it).
        return self.tokenizer(text, add_special_tokens=not chat)["input_ids"]

    @cached_property
    def _decoded_vocab(self) -> list[str]:
        return self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])

    def _token_text(self, i: int) -> str:
        """A token's text; the output layer may have rows past the tokenizer's vocabulary (padding)."""
        return self._decoded_vocab[i] if i < len(self._decoded_vocab) else f"<id {i}>"

    def answer_ids(self, answer: str) -> list[int]:
        if answer not in self._answer_ids:
            special = set(self.tokenizer.all_special_ids)
            self._answer_ids[answer] = answer_token_ids(self._decoded_vocab, answer, special)
        return self._answer_ids[answer]

    @cached_property
    def _whitespace_ids(self) -> list[int]:
        return tokenizer_whitespace_ids(self.tokenizer, self._decoded_vocab)

    @cached_property
    def _stop_ids(self) -> list[int]:
        return stop_token_ids(self.tokenizer)

    @property
    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self._stop_ids[0]
