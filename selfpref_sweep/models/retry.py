"""One retry policy for every call to an OpenAI(-compatible) server: judging, generation and fine-tuning jobs.

Transient failures (429 other than an exhausted quota, 408, 409, 5xx, timeouts, dropped connections, a reply
whose body is not JSON) are
retried with tenacity: exponential backoff with jitter, except where the server said how long to wait
(Retry-After, or OpenAI's retry-after-ms), which is honoured up to a cap. Everything else fails at once.
The openai client's own retries stay off, so this is the only policy and its retries can be counted.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After is capped; the retry budget then decides
MAX_BACKOFF_S = 30.0
_TRANSIENT_STATUS = {408, 409, 429}  # plus every 5xx


def status_code(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


def error_code(exc: BaseException) -> str | None:
    """The API's error code ("insufficient_quota", "model_not_found", ...), if the error carries one."""
    code = getattr(exc, "code", None)
    body = getattr(exc, "body", None)
    if code is None and isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        code = inner.get("code")
    return str(code) if code is not None else None


def is_transient(exc: BaseException) -> bool:
    """Whether waiting and asking again can help."""
    import openai

    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return True
    if isinstance(exc, json.JSONDecodeError):
        return True  # a 200 whose body is not JSON (the client raises this bare): a garbled or cut reply
    status = status_code(exc)
    if status is None:
        return False
    if status == 429 and error_code(exc) == "insufficient_quota":
        return False  # billing: waiting does not help
    return status in _TRANSIENT_STATUS or status >= 500


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait, if it said: OpenAI's retry-after-ms, else the standard
    Retry-After (delay-seconds or an HTTP date, parsed by urllib3)."""
    from urllib3.exceptions import InvalidHeader
    from urllib3.util.retry import Retry

    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(Retry(retry_after_max=float("inf")).parse_retry_after(value))
    except InvalidHeader:
        return None


def retrying(max_retries: int, backoff_s: float, retry_on: Callable[[BaseException], bool],
             sleep: Callable[[float], Any], before_sleep: Callable | None = None):
    """A tenacity `Retrying` with this policy: at most `max_retries` retries of what `retry_on` accepts,
    waiting Retry-After when the server gave one (capped, with a little jitter so that parallel requests
    do not return at once), otherwise exponential backoff with jitter from `backoff_s`. The last
    exception is re-raised once the retries are spent."""
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

    backoff = wait_exponential_jitter(initial=backoff_s, max=MAX_BACKOFF_S, jitter=backoff_s)

    def wait(state) -> float:
        after = retry_after_s(state.outcome.exception())
        if after is not None:
            return min(after, MAX_RETRY_AFTER_S) + random.uniform(0.0, 0.1)
        return backoff(state)

    return Retrying(retry=retry_if_exception(retry_on), stop=stop_after_attempt(max(0, int(max_retries)) + 1),
                    wait=wait, sleep=sleep, before_sleep=before_sleep, reraise=True)
