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
backoff with jitter, honouring Retry-After); the openai client's own retries are off. Permanent failures (bad key,
unknown model, bad request) and an outage that outlasts the retries raise ModelUnavailableError; pending work is
cancelled, and whatever finished before that has already been yielded, so a re-run resumes from the cache.

A model that refuses the `logprobs` parameter (HTTP 400 naming it, as reasoning models answer) is asked
once: while the server has not yet shown logprobs, a batch's first judging request goes alone. The refusal
is recorded for the model (this instance and, by server URL and model, the rest of the process), and no
further logprob request goes out: with `sample_fallback_k > 0` every answer distribution is estimated from
samples (method "sampled"); otherwise one ModelUnavailableError says so and names `sample_fallback_k`.

Familiarity (scoring a given text, `sequence_logprobs`) goes through the legacy completions endpoint with
`echo=True, logprobs=1, max_tokens=1`: the server returns the log-probability of every prompt token, and the
continuation's tokens are the last ones before the generated token, matched to the continuation's text from
its end (a token that straddles the prompt/continuation boundary is the prompt's). vLLM and llama.cpp's
servers offer this; OpenAI's API does not. `echo_logprobs` decides (auto: one probe request per server and
model per process, remembered; on; off). A completion-style request is sent as prompt + continuation; a chat
request needs the served model's chat template (`chat_template`: its Jinja text or a file holding it, or a
tokenizer_config.json), rendered as the server renders it (add_generation_prompt, an empty bos_token; openai_echo.py).

The API key is read from the environment variable `api_key_env` and lives only inside the client:
it is not part of the identity, cache keys, logs, repr or any message this module raises.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar
from urllib.parse import urlparse

from omegaconf import DictConfig

from ...errors import ConfigError, ModelUnavailableError
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
    spells_answer,
    unique,
)
from ..retry import is_transient, retrying, status_code
from .openai_echo import _chat_template_text, _mode, compile_chat_template, echoed_continuation, render_chat
from .openai_errors import _Cancelled, _describe, _LogprobsRefused, _NoLogprobs, _refuses_logprobs
from .openai_settings import MAX_TOP_LOGPROBS
from .openai_wire import (  # noqa: F401
    _cfg_value,
    _first_token_top_logprobs,
    _messages,
    _safe_name,
    _usage,
    distribution_from_top_logprobs,
    generation_from,
)

log = logging.getLogger(__name__)

# Bump when a change here changes any result, so old cache entries are not served.
# 2: an answer absent from the top logprobs is valued at the smallest listed probability (a bound), not 0.
BACKEND_VERSION = 2

DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "sk-no-key"  # sent to a loopback server when the key variable is unset
SHUTDOWN_GRACE_S = 1.0  # after a fatal error, results finishing within this are still yielded
PROBE_TEXT = "The cat sat on the mat. It was a sunny day."  # echo_logprobs=auto's probe prompt

# Per process, by (base_url, model): the refusal of the logprobs parameter (its server message), and the
# outcome of the echo probe ((scores given text?, how that was found)), so neither is asked again.
_LOGPROBS_REFUSED: dict[tuple[str, str], str] = {}
_ECHO_PROBES: dict[tuple[str, str], tuple[bool, str]] = {}
_STATE_LOCK = threading.Lock()

T = TypeVar("T")
R = TypeVar("R")


# ---------------------------------------------------------------------------------------- config
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


# -------------------------------------------------------------------------------------- backend
class OpenAIModel(ModelAPI):
    def __init__(self, cfg: DictConfig, model_cache: str | None = None, show_progress: bool = True):
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
        self._n_supported: bool | None = None  # whether the server honours n > 1
        # The model's refusal of the logprobs parameter (its server message), once seen, here or earlier in
        # the process: no logprob request goes out after it.
        self.logprobs_refused: str | None = _LOGPROBS_REFUSED.get((self.base_url, self.api_model))
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
        weights = f"api:{_base_url(cfg)}:{api_model}"
        template = _cfg_value(cfg, "chat_template")
        if template:  # it renders the prompts that familiarity scores, so it is part of what decides results
            weights += f":chat_template={hashlib.sha256(_chat_template_text(cfg).encode()).hexdigest()[:12]}"
        return ModelIdentity(name=cfg.name, backend="openai", weights=weights, dtype="",
                             adapter=adapter_fingerprint(cfg), backend_version=BACKEND_VERSION)

    # ------------------------------------------------------------------ the backend contract (base.ModelAPI)
    @classmethod
    def costs_money(cls, cfg) -> bool:
        """True unless the model config marks the server free (`free: true`: a server of one's own). A loopback
        URL alone does not say so (it may be a tunnel or proxy to a paid API)."""
        return not bool(_cfg_value(cfg, "free", False))

    @classmethod
    def sends_batches(cls, cfg) -> bool:
        """`batch: true`: a cell's uncached calls go through the Batch API (models/openai/openai_batch.py)."""
        return bool(_cfg_value(cfg, "batch", False))

    @classmethod
    def top_logprobs(cls, cfg) -> int | None:
        return int(cls.judge_settings(cfg)["top_logprobs"])

    @classmethod
    def preflight_problems(cls, cfg, model_cache: str) -> list[tuple[str, str]]:
        """An unset API key variable where the server needs one (anything off loopback)."""
        base_url = _base_url(cfg)
        env = str(_cfg_value(cfg, "api_key_env", "OPENAI_API_KEY"))
        if is_loopback(base_url) or os.environ.get(env, "").strip():
            return []
        return [("api_key", f"{_safe_name(cfg)}: the environment variable {env} (its API key) is not set; every "
                            f"call to {base_url} would fail")]

    @classmethod
    def sequence_logprobs_support(cls, cfg) -> tuple[bool, str]:
        """Whether this server scores given text through its completions endpoint (echo), and how that was
        decided: `echo_logprobs` off/on, or (auto) one probe request per server and model per process. Never
        for a chat model without `chat_template`, and (auto) never probed at api.openai.com, which refuses it."""
        if cfg is None:
            return False, "its backend scores given text only where the model config says how (echo_logprobs)"
        mode = _mode(_cfg_value(cfg, "echo_logprobs", "auto"))
        if mode == "off":
            return False, "it cannot score given text: echo_logprobs=off"
        base_url = _base_url(cfg)
        if mode == "auto" and base_url == DEFAULT_BASE_URL:
            return False, ("it cannot score given text: OpenAI's API returns no prompt logprobs (echo); "
                           "echo_logprobs=auto does not probe it")
        if bool(_cfg_value(cfg, "chat", True)) and not _cfg_value(cfg, "chat_template"):
            return False, ("it cannot score given text: a chat model's messages must be rendered into the "
                           "completions endpoint's prompt, which needs its chat template; set chat_template "
                           "(e.g. evaluator.chat_template=/path/to/template.jinja or tokenizer_config.json)")
        _chat_template_text(cfg)  # a template that cannot be read fails here, by name
        if mode == "on":
            return True, "the server scores given text (echo_logprobs=on: completions with echo, not probed)"
        return _probe_echo(cfg)

    @classmethod
    def judge_settings(cls, cfg) -> dict[str, object]:
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
                    check: Callable[[T], None] | None = None, refusable: bool = False) -> T:
        """fn() under the retry policy; transient errors are retried, others raise at once. `check(result)`
        may raise _NoLogprobs, retried the same way; once the retries are spent, that last result is returned
        (the caller records it). `refusable`: the request asks for logprobs, and the model's refusal of them
        raises _LogprobsRefused (the caller records it) instead of ModelUnavailableError."""
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
        failure: str | None = None
        refused = ""
        try:
            return policy(attempt)
        except _Cancelled:
            raise
        except _NoLogprobs as exc:
            return exc.completion  # still none after the retries: recorded as such, and never cached
        except Exception as exc:  # noqa: BLE001 - translated below, outside the except block
            import openai

            if not isinstance(exc, openai.OpenAIError) and not is_transient(exc):
                raise
            if stop.is_set():
                raise _Cancelled() from None
            if is_transient(exc):
                failure = (f"{self.identity.label} ({self.base_url}) still failing after {self.max_retries + 1} "
                           f"attempts at {what}: {_describe(exc)}. Every result finished before this is cached; "
                           f"re-run to resume.")
            elif refusable and _refuses_logprobs(exc):
                refused = self._scrub(_describe(exc))
            else:
                failure = self._permanent_message(exc, what)
        # Raised here, not inside `except`, so the exception does not carry the openai error (and its
        # request, whose headers hold the key) as its context.
        if failure is None:
            raise _LogprobsRefused(refused)
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

    def _chat(self, stop: threading.Event, what: str, check: Callable | None = None, refusable: bool = False,
              **kwargs):
        return self._with_retry(
            lambda: self._client.chat.completions.create(model=self.api_model, **kwargs), stop, what, check,
            refusable=refusable)

    # ------------------------------------------------------------------------------- fan-out
    def _fan_out(self, requests: Sequence[R], work: Callable[[R, threading.Event], T]) -> Iterator[tuple[R, T]]:
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
        futures: dict[Future, R] = {pool.submit(guarded, req): req for req in requests}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                error: BaseException | None = None
                finished: list[tuple[R, T]] = []
                for fut in done:
                    exc = fut.exception()
                    if exc is None:
                        finished.append((futures[fut], fut.result()))
                    elif error is None or isinstance(error, _Cancelled):
                        error = exc
                yield from finished
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
    def generate(self, requests: Sequence[GenerateRequest], *, direct: bool = False
                 ) -> Iterator[tuple[GenerateRequest, Generation]]:
        for req in requests:
            if not req.messages:
                raise ConfigError(
                    f"Model {self.name!r} uses the chat-completions API; completion-style prompts (chat: false, "
                    f"completion_prompt) are not supported by the openai backend. Use a chat model."
                )
        if _cfg_value(self.cfg, "batch", False) and not direct:  # the Batch API; failed lines come back direct
            from .openai_batch import run_batch
            return run_batch(self, requests, "generate")
        return self._fan_out(requests, self._generate_one)

    def _generate_one(self, req: GenerateRequest, stop: threading.Event) -> Generation:
        kwargs = dict(messages=_messages(req), temperature=req.decoding.temperature, max_tokens=req.max_new_tokens)
        if req.stop:
            kwargs["stop"] = list(req.stop)[:4]  # the API takes at most 4
        return generation_from(self.identity.label, req, self._chat(stop, "generating", **kwargs))

    # --------------------------------------------------------------------------------- judging
    def answer_distributions(self, requests: Sequence[AnswerRequest], *, direct: bool = False
                             ) -> Iterator[tuple[AnswerRequest, AnswerDistribution]]:
        if _cfg_value(self.cfg, "batch", False) and not direct:  # the Batch API; failed lines come back direct
            from .openai_batch import run_batch
            yield from run_batch(self, requests, "answer_distribution")
            return
        # A response still without logprobs waits for the rest of the batch (it may have come before the server
        # had shown any): if the server returns logprobs, the request is asked again, with retries; if it never
        # does, it does not give them, and the response is recorded as it is.
        without: dict[AnswerRequest, tuple[int, int]] = {}  # request -> its usage
        for req, result in self._judge_first_alone(requests):
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

    def _judge_first_alone(self, requests: Sequence[AnswerRequest]) -> Iterator[tuple[AnswerRequest, object]]:
        """_judge_one over the requests. Until the server has returned logprobs, the first request goes alone,
        so a model that refuses them is sent one logprob request, not one per request in flight."""
        requests = unique(requests)
        if requests and not self._logprobs_seen and self.logprobs_refused is None:
            yield from self._fan_out(requests[:1], self._judge_one)
            requests = requests[1:]
        yield from self._fan_out(requests, self._judge_one)

    def _refusal_message(self) -> str:
        return (f"{self.identity.label} ({self.api_model} at {self.base_url}) refuses logprobs "
                f"({self.logprobs_refused}); set evaluator.sample_fallback_k=K (e.g. 20) to estimate each answer "
                f"distribution from K samples instead")

    def _record_refusal(self, description: str, sample_fallback_k: int) -> None:
        """The refusal, recorded for this model in the process; said once (as a warning where the answers are
        sampled instead; otherwise the caller raises the one error)."""
        with _STATE_LOCK:
            first = self.logprobs_refused is None
            self.logprobs_refused = description
            _LOGPROBS_REFUSED[(self.base_url, self.api_model)] = description
        if first and sample_fallback_k > 0:
            log.warning("%s (%s at %s) refuses logprobs (%s): each answer distribution is estimated from %d "
                        "samples (sample_fallback_k, method \"sampled\")", self.identity.label, self.api_model,
                        self.base_url, description, sample_fallback_k)

    def _when_refused(self, req: AnswerRequest, stop: threading.Event) -> AnswerDistribution:
        """A model that refuses logprobs: sampled (sample_fallback_k > 0), or one clear error."""
        if req.decoding.sample_fallback_k > 0:
            return self._sampled(req, stop, 0, 0)
        raise ModelUnavailableError(self._refusal_message())

    def _judge_one(self, req: AnswerRequest, stop: threading.Event):
        """The answer distribution, or the usage (prompt_tokens, completion_tokens) of a response that still
        had no logprobs (answer_distributions decides what to do with it)."""
        if self.logprobs_refused is not None:  # no logprob request after a refusal
            return self._when_refused(req, stop)
        try:
            resp = self._chat(stop, "judging", check=self._require_logprobs, refusable=True,
                              **self._judge_kwargs(req))
        except _LogprobsRefused as exc:
            self._record_refusal(exc.description, req.decoding.sample_fallback_k)
            return self._when_refused(req, stop)
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
        texts: list[str] = []
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

    # ------------------------------------------------------------------------ scoring given text (familiarity)
    def sequence_logprobs(self, requests: Sequence[SequenceRequest]
                          ) -> Iterator[tuple[SequenceRequest, SequenceLogprobs]]:
        """Each continuation's log-likelihood after its prompt, from the completions endpoint's echoed prompt
        logprobs. A response whose tokens cannot be matched to the continuation gives no result (logged; the
        item's familiarity is then missing), never a wrong one."""
        supported, why = self.sequence_logprobs_support(self.cfg)
        if not supported:
            raise ModelUnavailableError(f"{self.identity.label} ({self.api_model} at {self.base_url}): {why}")
        return ((req, result) for req, result in self._fan_out(requests, self._score_one) if result is not None)

    def _render(self, messages) -> str:
        """The chat messages as the server's prompt: the chat template, the assistant turn opened."""
        template = getattr(self, "_compiled_template", None)
        if template is None:
            template = self._compiled_template = compile_chat_template(_chat_template_text(self.cfg), self.name)
        return render_chat(template, [{"role": m.role, "content": m.content} for m in messages], self.name)

    def _score_one(self, req: SequenceRequest, stop: threading.Event) -> SequenceLogprobs | None:
        prompt = self._render(req.messages) if req.messages else (req.prompt or "")
        text = prompt + req.continuation
        resp = self._with_retry(
            lambda: self._client.completions.create(model=self.api_model, prompt=text, echo=True, logprobs=1,
                                                    max_tokens=1, temperature=0), stop, "scoring a given text")
        result, why = echoed_continuation(resp, text, req.continuation)
        if result is None:
            log.warning("%s: no log-likelihood for a text of %d characters: %s", self.identity.label,
                        len(req.continuation), why)
        return result

    def close(self) -> None:
        self._client.close()


# -------------------------------------------------------------------------------------- helpers
def _probe_echo(cfg) -> tuple[bool, str]:
    """echo_logprobs=auto: whether the server returns prompt logprobs, from one small completions request with
    echo=True (a definite answer is remembered per server and model for the process; a transient failure is
    not, and says so)."""
    base_url, api_model = _base_url(cfg), str(_cfg_value(cfg, "model"))
    with _STATE_LOCK:
        known = _ECHO_PROBES.get((base_url, api_model))
    if known is not None:
        return known
    import openai

    env = str(_cfg_value(cfg, "api_key_env", "OPENAI_API_KEY"))
    key = os.environ.get(env, "").strip() or (NO_KEY if is_loopback(base_url) else "")
    if not key:
        return False, (f"it cannot score given text as far as is known: echo_logprobs=auto could not probe "
                       f"{base_url} ({env} is not set)")
    tail = PROBE_TEXT.split(". ", 1)[1]
    where = f"{base_url}/completions (echo=True, logprobs=1)"
    client = openai.OpenAI(api_key=key, base_url=base_url, max_retries=1,
                           timeout=min(30.0, float(_cfg_value(cfg, "timeout_s", 60.0))))
    failure, transient = "", False
    try:
        resp = client.completions.create(model=api_model, prompt=PROBE_TEXT, echo=True, logprobs=1, max_tokens=1,
                                         temperature=0)
    except openai.OpenAIError as exc:
        failure, transient = _describe(exc).replace(key, "***"), is_transient(exc)
    finally:
        client.close()
    if failure:  # built outside `except`, so nothing here carries the request (and its key)
        if transient:
            return False, (f"it cannot score given text as far as is known: the echo probe of {where} failed "
                           f"({failure}); echo_logprobs=on skips the probe")
        outcome = (False, f"it cannot score given text: the server refused the echo probe of {where}: {failure}")
    else:
        scored, why = echoed_continuation(resp, PROBE_TEXT, " " + tail)
        outcome = ((True, f"the server scores given text (detected by a probe of {where})") if scored is not None
                   else (False, f"it cannot score given text: the echo probe of {where} returned no usable prompt "
                                f"logprobs ({why})"))
    with _STATE_LOCK:
        _ECHO_PROBES[(base_url, api_model)] = outcome
    return outcome


