"""A model behind the call store: hits are served from the cache, misses go to the backend in one
batch and are written back one by one as they arrive.

Failure outcomes (a response without logprobs, an error) are returned to the cell, which records and
counts them, but never stored: they say nothing about the model, and a re-run must ask again. A stored
one (written before this rule) counts as a miss."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import asdict

from tqdm.auto import tqdm

from ..store import Store
from .base import (
    AnswerDistribution,
    AnswerRequest,
    GenerateRequest,
    Generation,
    JudgeDecoding,
    ModelAPI,
    ModelIdentity,
    SequenceLogprobs,
    SequenceRequest,
    unique,
)

# missing_reason values of an AnswerDistribution that describe the call, not the model's answer.
FAILURE_REASONS = frozenset({"no_logprobs", "error"})

# The call store whose misses the backend is serving right now (set while a CachedModel iterates its
# backend): a backend that records work in flight, the OpenAI Batch API's batch ids, keeps it beside it.
CALL_STORE: ContextVar[Store | None] = ContextVar("selfpref_call_store", default=None)


# request kind -> the type of its stored result
RESULT_TYPES = {"generate": Generation, "answer_distribution": AnswerDistribution,
                "sequence_logprobs": SequenceLogprobs}


def is_failure(result: object) -> bool:
    """A transient failure outcome, not a genuine answer (an answer with no probability on the answer
    tokens, e.g. answers_not_in_top_logprobs, is genuine and stays cached)."""
    return isinstance(result, AnswerDistribution) and (
        result.method == "unavailable" or result.missing_reason in FAILURE_REASONS)


def stored_result(store: Store, request) -> object | None:
    """The stored genuine result of a request; None when there is none (or only a failure outcome)."""
    value = store.get(request.cache_key())
    if value is None:
        return None
    result = RESULT_TYPES[request.kind].from_json(value)
    return None if is_failure(result) else result


class CachedModel:
    """Wraps a backend factory; the backend (and its weights) is only built on the first miss,
    so a fully cached re-run never loads a model."""

    def __init__(self, identity: ModelIdentity, factory: Callable[[], ModelAPI], store: Store,
                 show_progress: bool = True, judge_settings: dict[str, object] | None = None,
                 release: Callable[[ModelAPI, bool], None] | None = None):
        self.identity = identity
        self._release = release  # hands the backend back to the model pool instead of closing it
        self.judge_settings = dict(judge_settings or {})
        self._factory = factory
        self._backend: ModelAPI | None = None
        self.store = store
        self.show_progress = show_progress
        self.calls = 0  # calls not served from the cache
        self.cache_hits = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def judge_decoding(self, answers: Sequence[str]) -> JudgeDecoding:
        """The decoding settings of this model's judge requests for these answers."""
        return JudgeDecoding(tuple(answers), **self.judge_settings)

    @property
    def backend(self) -> ModelAPI:
        if self._backend is None:
            self._backend = self._factory()
        return self._backend

    def _run(self, requests, kind: str, call, desc: str) -> dict:
        requests = unique(requests)
        results: dict = {}
        misses = []
        for req in requests:
            hit = stored_result(self.store, req)
            if hit is None:
                misses.append(req)
            else:
                results[req] = hit
                self.cache_hits += 1
        if misses:
            bar = tqdm(total=len(misses), desc=f"{desc} [{self.identity.label}]", disable=not self.show_progress,
                       leave=False)
            token = CALL_STORE.set(self.store)
            try:
                for req, out in call(misses):
                    self.calls += 1
                    self.prompt_tokens += out.prompt_tokens
                    self.completion_tokens += getattr(out, "completion_tokens", 0)
                    if not is_failure(out):
                        self.store.put(req.cache_key(), kind=kind, model=self.identity.label, request=asdict(req),
                                       value=out.to_json())
                    results[req] = out
                    bar.update(1)
            finally:
                CALL_STORE.reset(token)
            bar.close()
        return results

    def cached(self, request) -> object | None:
        """The stored result of a request, without calling the model (plan mode)."""
        return stored_result(self.store, request)

    def generate(self, requests: Sequence[GenerateRequest], desc: str = "generate"
                 ) -> dict[GenerateRequest, Generation]:
        return self._run(requests, "generate", lambda r: self.backend.generate(r), desc)

    def answer_distributions(self, requests: Sequence[AnswerRequest], desc: str = "judge"
                             ) -> dict[AnswerRequest, AnswerDistribution]:
        return self._run(requests, "answer_distribution", lambda r: self.backend.answer_distributions(r), desc)

    def sequence_logprobs(self, requests: Sequence[SequenceRequest], desc: str = "log-likelihood"
                          ) -> dict[SequenceRequest, SequenceLogprobs]:
        return self._run(requests, "sequence_logprobs", lambda r: self.backend.sequence_logprobs(r), desc)

    def close(self, keep: bool = True) -> None:
        """Done with the backend: back to the model pool (kept for a later cell unless keep=False or the
        pool is over its budget), or closed when it did not come from one."""
        if self._backend is not None:
            if self._release is not None:
                self._release(self._backend, keep)
            else:
                self._backend.close()
            self._backend = None
