"""OpenAI backend: the chat-completions API of OpenAI or of any OpenAI-compatible server.

Judging reads the first generated token's `top_logprobs` (temperature 0, one token) and sums, per
answer, the probability of every listed token that spells it (" 1", "1", "Yes", " yes", ...), as
the local backend does over its whole vocabulary. What the API does not give is recorded, never
dropped: a response without logprobs has `missing_reason="no_logprobs"` (or, with
`sample_fallback_k > 0`, probabilities estimated from k samples, method "sampled"). An answer absent
from the top list is worth at most the smallest listed probability (no unlisted token is likelier), and
it gets that bound as its value, listed in the distribution's `bounded`; when no answer is listed at all
the probabilities stay 0 with `missing_reason="answers_not_in_top_logprobs"`.
A response without logprobs from a server that has returned them before is a transient fault (a proxy or
a server under load dropping them): it is retried like a 5xx before it is recorded, and a response
without logprobs that came before the server had shown any is asked again once the batch shows it can.

Requests run `max_concurrency` at a time and are yielded as each completes, so the caller caches
every finished call at once. Transient failures (429, 5xx, timeouts, dropped connections) are
retried by one policy (`retry.py`, shared with the fine-tuning trainer: tenacity's exponential
backoff with jitter, honouring Retry-After); the openai client's own retries are off. Permanent failures (bad key, unknown model, bad request) and
an outage that outlasts the retries raise ModelUnavailableError; pending work is cancelled, and
whatever finished before that has already been yielded, so a re-run resumes from the cache.

The API key is read from the environment variable `api_key_env` and lives only inside the client:
it is not part of the identity, cache keys, logs, repr or any message this module raises.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import threading
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar
from urllib.parse import urlparse

from omegaconf import DictConfig
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from ..errors import ConfigError, ModelUnavailableError
from .base import (AnswerDistribution, AnswerRequest, Generation, GenerateRequest, ModelAPI, ModelIdentity,
                   adapter_fingerprint, spells_answer, unique)
from .retry import is_transient, retrying, status_code

log = logging.getLogger(__name__)

# Bump when a change here changes any result, so old cache entries are not served.
# 2: an answer absent from the top logprobs is valued at the smallest listed probability (a bound), not 0.
BACKEND_VERSION = 2

DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "sk-no-key"  # sent to a loopback server when the key variable is unset
MAX_TOP_LOGPROBS = 20  # OpenAI's limit
SHUTDOWN_GRACE_S = 1.0  # after a fatal error, results finishing within this are still yielded

T = TypeVar("T")
R = TypeVar("R")


# ---------------------------------------------------------------------------------------- config
def _cfg_value(cfg, key: str, default=None):
    """cfg[key] (a typed ModelConfig or a DictConfig), turning an unset required value (`???`, or an
    unset ${oc.env:...}) into a message that says what to set."""
    try:
        value = getattr(cfg, key, default)
    except (MissingMandatoryValue, InterpolationResolutionError) as exc:
        name = _safe_name(cfg)
        detail = str(exc).splitlines()[0]
        raise ConfigError(
            f"Model {name!r} (backend openai) needs `{key}` ({detail}); set it on the command line, e.g. "
            f"evaluator.{key}=... or source.model.{key}=..."
        ) from None
    return default if value is None else value


def _safe_name(cfg) -> str:
    try:
        return str(getattr(cfg, "name", "?"))
    except MissingMandatoryValue:
        return "?"


def _base_url(cfg: DictConfig) -> str:
    return str(_cfg_value(cfg, "base_url") or DEFAULT_BASE_URL).rstrip("/")


def is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


answer_matches = spells_answer  # the rule the local backend reads its vocabulary by


# --------------------------------------------------------------------------------------- errors
class _Cancelled(Exception):
    """Another request failed for good; this one stops instead of retrying."""


class _NoLogprobs(Exception):
    """A response without the logprobs that were asked for, from a server that has returned them: retried."""

    def __init__(self, completion):
        super().__init__("a response without logprobs, from a server that has returned them")
        self.completion = completion


def _describe(exc: BaseException) -> str:
    """A short description of an API error (status, type, server message) without the request."""
    status = status_code(exc)
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    kind = type(exc).__name__
    return f"{kind} (HTTP {status}): {message}" if status is not None else f"{kind}: {message}"


# -------------------------------------------------------------------------------------- backend
class OpenAIModel(ModelAPI):
    def __init__(self, cfg: DictConfig, model_cache: Optional[str] = None, show_progress: bool = True):
        import openai  # lazily: only cells that use an API model need the client

        self.cfg = cfg
        self.identity = self.identity_for(cfg)
        self.name = _safe_name(cfg)
        self.api_model = str(_cfg_value(cfg, "model"))
        self.base_url = _base_url(cfg)
        self.max_concurrency = max(1, int(_cfg_value(cfg, "max_concurrency", 8)))
        self.timeout_s = float(_cfg_value(cfg, "timeout_s", 60.0))
        self.max_retries = max(0, int(_cfg_value(cfg, "max_retries", 6)))
        self.retry_backoff_s = max(0.0, float(_cfg_value(cfg, "retry_backoff_s", 0.5)))
        self._logprobs_seen = False  # whether this server has returned logprobs (then a response without is a fault)
        self._n_supported: Optional[bool] = None  # whether the server honours n > 1
        key = self._api_key(cfg)
        self._secrets = tuple(s for s in (key,) if s and s != NO_KEY)
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, timeout=self.timeout_s, max_retries=0)
        self.calls_made = 0  # HTTP attempts, retries included
        self.retries = 0
        self._lock = threading.Lock()

    @classmethod
    def identity_for(cls, cfg: DictConfig) -> ModelIdentity:
        api_model = _cfg_value(cfg, "model")
        if not api_model:
            raise ConfigError(f"Model {_safe_name(cfg)!r} (backend openai) has no `model`, e.g. gpt-4o-mini.")
        return ModelIdentity(name=cfg.name, backend="openai", weights=f"api:{_base_url(cfg)}:{api_model}", dtype="",
                             adapter=adapter_fingerprint(cfg), backend_version=BACKEND_VERSION)

    @classmethod
    def judge_settings(cls, cfg) -> Dict[str, object]:
        """top_logprobs (capped at the API's limit) and the sampling fallback: they change results, so they
        travel in each judge request's JudgeDecoding (and its cache key)."""
        return {"top_logprobs": max(0, min(int(_cfg_value(cfg, "top_logprobs", MAX_TOP_LOGPROBS)), MAX_TOP_LOGPROBS)),
                "sample_fallback_k": max(0, int(_cfg_value(cfg, "sample_fallback_k", 0)))}

    def _api_key(self, cfg: DictConfig) -> str:
        env = str(_cfg_value(cfg, "api_key_env", "OPENAI_API_KEY"))
        key = os.environ.get(env, "").strip()
        if key:
            return key
        if is_loopback(self.base_url):
            return NO_KEY
        raise ModelUnavailableError(
            f"Model {self.name!r} calls {self.base_url} but the environment variable {env} (which should hold "
            f"its API key) is not set. Export it (export {env}=...) or point base_url at a local server."
        )

    def __repr__(self) -> str:  # never the key
        return f"OpenAIModel(name={self.name!r}, model={self.api_model!r}, base_url={self.base_url!r})"

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    # ------------------------------------------------------------------------------- one call
    def _with_retry(self, fn: Callable[[], T], stop: threading.Event, what: str,
                    check: Optional[Callable[[T], None]] = None) -> T:
        """fn() under the retry policy; transient errors are retried, others raise at once. `check(result)`
        may raise _NoLogprobs, retried the same way; once the retries are spent, that last result is returned
        (the caller records it)."""
        def before_sleep(state) -> None:
            with self._lock:
                self.retries += 1
            log.warning("%s: %s; retry %d/%d in %.1fs", self.identity.label,
                        self._scrub(_describe(state.outcome.exception())), state.attempt_number, self.max_retries,
                        state.next_action.sleep if state.next_action else 0.0)

        def attempt() -> T:
            if stop.is_set():
                raise _Cancelled()
            with self._lock:
                self.calls_made += 1
            result = fn()
            if check is not None:
                check(result)
            return result

        policy = retrying(self.max_retries, self.retry_backoff_s,
                          retry_on=lambda exc: isinstance(exc, _NoLogprobs) or is_transient(exc),
                          sleep=lambda s: stop.wait(s),  # wakes at once when the run is being stopped
                          before_sleep=before_sleep)
        failure: Optional[str] = None
        try:
            return policy(attempt)
        except _Cancelled:
            raise
        except _NoLogprobs as exc:
            return exc.completion  # still none after the retries: recorded as such, and never cached
        except Exception as exc:  # noqa: BLE001 - translated below, outside the except block
            import openai

            if not isinstance(exc, openai.OpenAIError):
                raise
            if stop.is_set():
                raise _Cancelled() from None
            if is_transient(exc):
                failure = (f"{self.identity.label} ({self.base_url}) still failing after {self.max_retries + 1} "
                           f"attempts at {what}: {_describe(exc)}. Every result finished before this is cached; "
                           f"re-run to resume.")
            else:
                failure = self._permanent_message(exc, what)
        # Raised here, not inside `except`, so the exception does not carry the openai error (and its
        # request, whose headers hold the key) as its context.
        raise ModelUnavailableError(self._scrub(failure))

    def _permanent_message(self, exc: BaseException, what: str) -> str:
        status = status_code(exc)
        where = f"{self.identity.label} ({self.api_model} at {self.base_url})"
        env = _cfg_value(self.cfg, "api_key_env", "OPENAI_API_KEY")
        hint = {
            401: f"the API key was rejected; check the environment variable {env}",
            403: f"the API key in {env} is not allowed to use this model or endpoint",
            404: f"unknown model or endpoint; check model={self.api_model!r} and base_url",
            400: "the server rejected the request",
            422: "the server rejected the request",
            429: "the account is out of quota",
        }.get(status or 0, "the request failed")
        return f"{where}: {hint}. {_describe(exc)} (while {what})"

    def _chat(self, stop: threading.Event, what: str, check: Optional[Callable] = None, **kwargs):
        return self._with_retry(
            lambda: self._client.chat.completions.create(model=self.api_model, **kwargs), stop, what, check)

    # ------------------------------------------------------------------------------- fan-out
    def _fan_out(self, requests: Sequence[R], work: Callable[[R, threading.Event], T]) -> Iterator[Tuple[R, T]]:
        """work(request) for every request, `max_concurrency` in flight; yields as each completes."""
        requests = unique(requests)
        if not requests:
            return
        stop = threading.Event()

        def guarded(req: R) -> T:
            try:
                return work(req, stop)
            except _Cancelled:
                raise
            except BaseException:
                stop.set()  # at once, so no other worker sends another request
                raise

        pool = ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests)),
                                  thread_name_prefix=f"openai-{self.name}")
        futures: Dict[Future, R] = {pool.submit(guarded, req): req for req in requests}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                error: Optional[BaseException] = None
                finished: List[Tuple[R, T]] = []
                for fut in done:
                    exc = fut.exception()
                    if exc is None:
                        finished.append((futures[fut], fut.result()))
                    elif error is None or isinstance(error, _Cancelled):
                        error = exc
                for pair in finished:
                    yield pair
                if error is not None:
                    stop.set()
                    for fut in pending:
                        fut.cancel()
                    # Keep what is just finishing: it is paid for, and the caller caches it.
                    late, _ = wait(pending, timeout=SHUTDOWN_GRACE_S)
                    for fut in late:
                        if not fut.cancelled() and fut.exception() is None:
                            yield futures[fut], fut.result()
                    raise error
        finally:
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------------ generation
    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Tuple[GenerateRequest, Generation]]:
        for req in requests:
            if not req.messages:
                raise ConfigError(
                    f"Model {self.name!r} uses the chat-completions API; completion-style prompts (chat: false, "
                    f"completion_prompt) are not supported by the openai backend. Use a chat model."
                )
        return self._fan_out(requests, self._generate_one)

    def _generate_one(self, req: GenerateRequest, stop: threading.Event) -> Generation:
        kwargs = dict(messages=_messages(req), temperature=req.decoding.temperature, max_tokens=req.max_new_tokens)
        if req.stop:
            kwargs["stop"] = list(req.stop)[:4]  # the API takes at most 4
        resp = self._chat(stop, "generating", **kwargs)
        choice = resp.choices[0] if resp.choices else None
        text = (choice.message.content if choice and choice.message else None) or ""
        if choice is not None and not text:
            log.warning("%s returned no text (finish_reason=%s)", self.identity.label, choice.finish_reason)
        for s in req.stop:
            text = text.split(s)[0]
        prompt_tokens, completion_tokens = _usage(resp)
        return Generation(text=text.strip(), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)

    # --------------------------------------------------------------------------------- judging
    def answer_distributions(self, requests: Sequence[AnswerRequest]
                             ) -> Iterator[Tuple[AnswerRequest, AnswerDistribution]]:
        # A response still without logprobs waits for the rest of the batch (it may have come before the server
        # had shown any): if the server returns logprobs, the request is asked again, with retries; if it never
        # does, it does not give them, and the response is recorded as it is.
        without: Dict[AnswerRequest, Tuple[int, int]] = {}  # request -> its usage
        for req, result in self._fan_out(requests, self._judge_one):
            if isinstance(result, AnswerDistribution):
                yield req, result
            else:
                without[req] = result
        if without:
            yield from self._fan_out(list(without), lambda req, stop: self._judge_again(req, stop, *without[req]))

    def _judge_kwargs(self, req: AnswerRequest) -> dict:
        top_logprobs = req.decoding.top_logprobs
        if top_logprobs is None:  # a request built without this model's settings: the API's most
            top_logprobs = MAX_TOP_LOGPROBS
        kwargs = dict(messages=_messages(req), temperature=0, max_tokens=1, logprobs=True)
        if top_logprobs > 0:
            kwargs["top_logprobs"] = min(int(top_logprobs), MAX_TOP_LOGPROBS)
        return kwargs

    def _require_logprobs(self, resp) -> None:
        if self._logprobs_seen and _first_token_top_logprobs(resp) is None:
            raise _NoLogprobs(resp)

    def _judge_one(self, req: AnswerRequest, stop: threading.Event):
        """The answer distribution, or the usage (prompt_tokens, completion_tokens) of a response that still
        had no logprobs (answer_distributions decides what to do with it)."""
        resp = self._chat(stop, "judging", check=self._require_logprobs, **self._judge_kwargs(req))
        prompt_tokens, completion_tokens = _usage(resp)
        top = _first_token_top_logprobs(resp)
        if top is None:
            return prompt_tokens, completion_tokens
        self._logprobs_seen = True
        return distribution_from_top_logprobs(top, req.answers, prompt_tokens, completion_tokens)

    def _judge_again(self, req: AnswerRequest, stop: threading.Event, prompt_tokens: int,
                     completion_tokens: int) -> AnswerDistribution:
        if not self._logprobs_seen:  # the server gives none: no use asking again
            return self._without_logprobs(req, stop, prompt_tokens, completion_tokens)
        result = self._judge_one(req, stop)
        if isinstance(result, AnswerDistribution):
            return result
        return self._without_logprobs(req, stop, *result)

    def _without_logprobs(self, req: AnswerRequest, stop: threading.Event, prompt_tokens: int,
                          completion_tokens: int) -> AnswerDistribution:
        """No logprobs to read: an estimate from samples (sample_fallback_k > 0), or the gap recorded."""
        if req.decoding.sample_fallback_k > 0:
            return self._sampled(req, stop, prompt_tokens, completion_tokens)
        return AnswerDistribution(probs={a: 0.0 for a in req.answers}, method="unavailable",
                                  prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                  missing_reason="no_logprobs")

    def _sampled(self, req: AnswerRequest, stop: threading.Event, prompt_tokens: int,
                 completion_tokens: int) -> AnswerDistribution:
        """No logprobs: estimate each answer's probability from k samples at temperature 1."""
        k = req.decoding.sample_fallback_k
        texts: List[str] = []
        base = dict(messages=_messages(req), temperature=1.0, max_tokens=1)
        if self._n_supported is not False:
            resp = self._chat(stop, "sampling", n=k, **base)
            texts += [(c.message.content or "") for c in resp.choices[:k]]
            p, c = _usage(resp)
            prompt_tokens, completion_tokens = prompt_tokens + p, completion_tokens + c
            self._n_supported = len(resp.choices) >= k
        while len(texts) < k:
            resp = self._chat(stop, "sampling", **base)
            texts.append((resp.choices[0].message.content or "") if resp.choices else "")
            p, c = _usage(resp)
            prompt_tokens, completion_tokens = prompt_tokens + p, completion_tokens + c
        counts = {a: sum(1 for t in texts if spells_answer(t, a)) for a in req.answers}
        probs = {a: counts[a] / k for a in req.answers}
        seen = Counter(texts).most_common(5)
        return AnswerDistribution(probs=probs, method="sampled", top_tokens=[(t, n / k) for t, n in seen],
                                  prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                  missing_reason=None if any(counts.values()) else "answers_not_in_samples")

    def close(self) -> None:
        self._client.close()


# -------------------------------------------------------------------------------------- helpers
def _messages(req) -> List[dict]:
    return [{"role": m.role, "content": m.content} for m in req.messages]


def _usage(resp) -> Tuple[int, int]:
    usage = getattr(resp, "usage", None)
    if usage is None:
        return 0, 0
    return int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)


def _first_token_top_logprobs(resp) -> Optional[List[Tuple[str, float]]]:
    """(token, logprob) of the first generated token's top list; None when the response has none."""
    if not resp.choices:
        return None
    lp = resp.choices[0].logprobs
    content = getattr(lp, "content", None) if lp is not None else None
    if not content:
        return None
    first = content[0]
    top = [(t.token, float(t.logprob)) for t in (first.top_logprobs or [])]
    if not top and first.token is not None and first.logprob is not None:
        top = [(first.token, float(first.logprob))]
    return top or None


def distribution_from_top_logprobs(top: Sequence[Tuple[str, float]], answers: Sequence[str],
                                   prompt_tokens: int = 0, completion_tokens: int = 0) -> AnswerDistribution:
    """Sum exp(logprob) over every listed spelling of each answer. An answer with no listed spelling gets the
    smallest listed probability, an upper bound on each of its spellings, and is named in `bounded`: 0 would
    make its log-odds whatever the scorer's clip says. With no answer listed, nothing is bounded: bounds alone
    compare nothing, and the reading stays empty (answers_not_in_top_logprobs)."""
    probs = {a: 0.0 for a in answers}
    listed = set()
    for token, logprob in top:
        p = math.exp(logprob) if math.isfinite(logprob) else 0.0
        for a in answers:
            if spells_answer(token, a):
                probs[a] += p
                listed.add(a)
    ranked = sorted(top, key=lambda t: -t[1])[:5]
    top_tokens = [(tok, round(math.exp(lp), 6) if math.isfinite(lp) else 0.0) for tok, lp in ranked]
    bounded = [a for a in answers if a not in listed] if listed else []
    floor = min((math.exp(lp) if math.isfinite(lp) else 0.0) for _, lp in top) if top else 0.0
    for a in bounded:
        probs[a] = floor
    missing = None if any(p > 0 for p in probs.values()) else "answers_not_in_top_logprobs"
    return AnswerDistribution(probs=probs, method="logprobs", top_tokens=top_tokens, prompt_tokens=prompt_tokens,
                              completion_tokens=completion_tokens, missing_reason=missing, bounded=bounded)
