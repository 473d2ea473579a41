"""The OpenAI wire format, read and written the same way by the direct backend (openai_api.py) and the Batch
API (openai_batch.py): a model config's values, chat messages as the API takes them, a response's usage and its
first token's top logprobs, and the answer distribution those give."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from ...errors import ConfigError
from ..base import AnswerDistribution, GenerateRequest, Generation, spells_answer

log = logging.getLogger(__name__)


def _safe_name(cfg) -> str:
    try:
        return str(getattr(cfg, "name", "?"))
    except MissingMandatoryValue:
        return "?"


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


def _messages(req) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in req.messages]


def _usage(resp) -> tuple[int, int]:
    usage = getattr(resp, "usage", None)
    if usage is None:
        return 0, 0
    return int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)


def _first_token_top_logprobs(resp) -> list[tuple[str, float]] | None:
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


def distribution_from_top_logprobs(top: Sequence[tuple[str, float]], answers: Sequence[str],
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


def generation_from(label: str, req: GenerateRequest, resp) -> Generation:
    """A chat-completion response as a summary: its text cut at the request's stop strings (the API takes at
    most 4 of them), and its usage. An empty text is logged with the finish reason."""
    choice = resp.choices[0] if resp.choices else None
    text = (choice.message.content if choice and choice.message else None) or ""
    if choice is not None and not text:
        log.warning("%s returned no text (finish_reason=%s)", label, choice.finish_reason)
    for s in req.stop:
        text = text.split(s)[0]
    prompt_tokens, completion_tokens = _usage(resp)
    return Generation(text=text.strip(), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
