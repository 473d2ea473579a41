"""Local backend: Hugging Face transformers on CPU (or a GPU when there is one).

Judging reads the full next-token distribution at the answer position and sums, for each answer,
the probability of every vocabulary token that spells it ("1", " 1", ...). Batches of judge prompts
are scored in lexicographic token order, keeping the KV cache of the previous prompt and cropping it
to the shared prefix, so each distinct prefix (chat header + article, then the first summary) is
computed once: the work done equals the number of distinct prefix tokens in the batch.
"""

from __future__ import annotations

import logging
import time
from functools import cached_property
from typing import Dict, Iterator, List, Sequence, Tuple

from omegaconf import DictConfig

from ..errors import ModelUnavailableError
from .base import AnswerDistribution, AnswerRequest, Generation, GenerateRequest, ModelAPI, ModelIdentity
from .weights import local_hf_dir, weights_fingerprint

log = logging.getLogger(__name__)

# End-of-turn markers of the chat templates we know; generation stops at any that the vocabulary has.
_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "</s>")


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def answer_token_ids(decoded_vocab: Sequence[str], answer: str, special_ids: set) -> List[int]:
    """Ids of every token that spells `answer`, whitespace aside ("1", " 1", "\\n1"); letters
    match in any case ("Yes", " yes", "YES")."""
    want = answer.strip()
    fold = want.isalpha()
    ids = []
    for i, text in enumerate(decoded_vocab):
        if i in special_ids:
            continue
        t = text.strip()
        if t == want or (fold and t.lower() == want.lower()):
            ids.append(i)
    return ids


class LocalModel(ModelAPI):
    def __init__(self, cfg: DictConfig, model_cache: str, show_progress: bool = True):
        self.cfg = cfg
        self.identity = self.identity_for(cfg)
        self.model_cache = model_cache
        self.prefix_reuse = bool(cfg.get("prefix_reuse", True))
        self._answer_ids: Dict[str, List[int]] = {}
        self.tokens_computed = 0  # prompt tokens actually run through the model (after prefix reuse)
        self.tokens_requested = 0
        self._load()

    @classmethod
    def identity_for(cls, cfg: DictConfig) -> ModelIdentity:
        return ModelIdentity(name=cfg.name, backend="local", weights=weights_fingerprint(cfg), dtype=cfg.dtype,
                             adapter=cfg.get("adapter"))

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        start = time.time()
        if self.cfg.get("weights"):
            path, kwargs = str(local_hf_dir(self.cfg, self.model_cache)), {}
        else:
            path, kwargs = self.cfg.hf_id, {"revision": self.cfg.get("revision")}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, self.cfg.dtype), **kwargs)
        except OSError as exc:  # no hub here: name the way out instead of a long traceback
            raise ModelUnavailableError(
                f"Could not load model {self.cfg.name!r} from {path!r}: {exc}. Offline machines cannot reach the "
                f"Hugging Face hub; point hf_id at a local copy (e.g. evaluator.hf_id=/models/Llama-2-7b-chat-hf)."
            ) from exc
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model.to(self.device).eval()
        if self.cfg.chat and not self.tokenizer.chat_template:
            raise ModelUnavailableError(f"Model {self.cfg.name!r} has no chat template; set chat: false and a "
                                        f"completion_prompt to use it as a summary source.")
        log.info("loaded %s in %.1fs on %s", self.identity.label, time.time() - start, self.device)

    # ----------------------------------------------------------------- prompts
    def render(self, messages) -> str:
        return self.tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                                  add_generation_prompt=True, tokenize=False)

    def encode(self, text: str) -> List[int]:
        # The chat template already holds any BOS; adding another would repeat the paper's double BOS.
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @cached_property
    def _decoded_vocab(self) -> List[str]:
        return self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])

    def answer_ids(self, answer: str) -> List[int]:
        if answer not in self._answer_ids:
            special = set(self.tokenizer.all_special_ids)
            self._answer_ids[answer] = answer_token_ids(self._decoded_vocab, answer, special)
        return self._answer_ids[answer]

    @cached_property
    def _stop_ids(self) -> List[int]:
        ids = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in _END_OF_TURN if t in vocab)
        return sorted(ids)

    # -------------------------------------------------------------- generation
    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Tuple[GenerateRequest, Generation]]:
        torch = self.torch
        for req in requests:
            text = self.render(req.messages) if req.messages else req.prompt
            ids = torch.tensor([self.encode(text)], device=self.device)
            with torch.inference_mode():
                out = self.model.generate(
                    ids, attention_mask=torch.ones_like(ids), max_new_tokens=req.max_new_tokens, do_sample=False,
                    temperature=None, top_p=None, top_k=None, eos_token_id=self._stop_ids,
                    pad_token_id=self.tokenizer.pad_token_id or self._stop_ids[0],
                )
            new = out[0, ids.shape[1]:].tolist()
            completion = self.tokenizer.decode(new, skip_special_tokens=True)
            for stop in req.stop:  # completion models run on; cut where the summary ends
                completion = completion.split(stop)[0]
            yield req, Generation(text=completion.strip(), prompt_tokens=ids.shape[1], completion_tokens=len(new))

    # ------------------------------------------------------------------ judging
    def answer_distributions(self, requests: Sequence[AnswerRequest]
                             ) -> Iterator[Tuple[AnswerRequest, AnswerDistribution]]:
        torch = self.torch
        encoded = [(self.encode(self.render(r.messages)), r) for r in requests]
        encoded.sort(key=lambda pair: pair[0])  # neighbours share the longest prefixes
        cache, cached_ids = None, []
        for ids, req in encoded:
            keep = 0
            if cache is not None and self.prefix_reuse:
                # Always recompute at least the last token: its logits are the answer.
                keep = min(common_prefix_len(cached_ids, ids), len(ids) - 1)
                if keep == 0:
                    cache = None
                else:
                    cache.crop(keep - cache.get_seq_length())
            else:
                cache = None
            new = torch.tensor([ids[keep:]], device=self.device)
            with torch.inference_mode():
                out = self.model(input_ids=new, past_key_values=cache, use_cache=self.prefix_reuse, logits_to_keep=1)
            self.tokens_computed += len(ids) - keep
            self.tokens_requested += len(ids)
            if self.prefix_reuse:
                cache, cached_ids = out.past_key_values, ids
                if not _croppable(cache):
                    self.prefix_reuse, cache = False, None  # sliding-window layers cannot be cropped
            probs = torch.softmax(out.logits[0, -1].float(), dim=-1)
            yield req, self._distribution(probs, req.answers, len(ids))

    def _distribution(self, probs, answers: Sequence[str], n_prompt: int) -> AnswerDistribution:
        per_answer = {a: float(probs[self.answer_ids(a)].sum()) if self.answer_ids(a) else 0.0 for a in answers}
        top = probs.topk(5)
        top_tokens = [(self._decoded_vocab[i], round(float(p), 6)) for p, i in zip(top.values, top.indices.tolist())]
        return AnswerDistribution(probs=per_answer, method="full_distribution", top_tokens=top_tokens,
                                  prompt_tokens=n_prompt)

    def close(self) -> None:
        self.model = None


def _croppable(cache) -> bool:
    layers = getattr(cache, "layers", None)
    if layers is None:
        return hasattr(cache, "crop")
    return all(type(layer).__name__ == "DynamicLayer" for layer in layers)

