"""Errors of the OpenAI backend's calls: what is retried, what is recorded, and how an API error is described."""

from __future__ import annotations

from ..retry import status_code


class _Cancelled(Exception):
    """Another request failed for good; this one stops instead of retrying."""


class _NoLogprobs(Exception):
    """A response without the logprobs that were asked for, from a server that has returned them: retried."""

    def __init__(self, completion):
        super().__init__("a response without logprobs, from a server that has returned them")
        self.completion = completion


class _LogprobsRefused(Exception):
    """The model rejects the logprobs parameter (HTTP 400 naming it): not retried, recorded."""

    def __init__(self, description: str):
        super().__init__(description)
        self.description = description


def _refuses_logprobs(exc: BaseException) -> bool:
    """Whether an API error is the model's refusal of the logprobs parameter (e.g. OpenAI's reasoning models:
    HTTP 400, "Unsupported parameter: 'logprobs' is not supported with this model.", param "logprobs")."""
    if status_code(exc) not in (400, 422):
        return False
    param = str(getattr(exc, "param", None) or "")
    message = str(getattr(exc, "message", None) or exc)
    return "logprob" in param.lower() or "logprob" in message.lower()


def _describe(exc: BaseException) -> str:
    """A short description of an API error (status, type, server message) without the request."""
    status = status_code(exc)
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    kind = type(exc).__name__
    return f"{kind} (HTTP {status}): {message}" if status is not None else f"{kind}: {message}"
