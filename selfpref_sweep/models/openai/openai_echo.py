"""Scoring given text through echo: chat templates rendered as the server renders them, echoed tokens read."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from ...errors import ConfigError
from ..base import SequenceLogprobs
from .openai_wire import _cfg_value, _safe_name, _usage


def _mode(value) -> str:
    """An enum setting (EchoLogprobsMode, or its plain string in an untyped config) as its value."""
    return str(getattr(value, "value", value))


def _chat_template_text(cfg) -> str:
    """The model's `chat_template`: the Jinja text itself, the text of the file it names, or a Hugging Face
    tokenizer_config.json's "chat_template"; "" when unset."""
    value = str(_cfg_value(cfg, "chat_template", "") or "")
    if not value or "{{" in value or "{%" in value:
        return value
    path = Path(os.path.expanduser(value))
    where = f"Model {_safe_name(cfg)!r}: chat_template={value!r}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where} is neither a Jinja chat template nor a readable file ({exc.strerror or exc}); "
                          f"give the template's text or a path to a file holding it") from None
    if path.suffix != ".json":
        return text
    try:
        template = json.loads(text)["chat_template"]
    except (ValueError, KeyError, TypeError):
        template = None
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    if not isinstance(template, str) or not template:
        raise ConfigError(f"{where}: the JSON file has no \"chat_template\" string (a tokenizer_config.json has one)")
    return template


def compile_chat_template(text: str, name: str = "?"):
    """A Jinja chat template compiled as Hugging Face and llama-cpp-python's server compile it (sandboxed,
    trim_blocks, lstrip_blocks, loop controls, a tojson filter that keeps non-ASCII)."""
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise ConfigError(f"Model {name!r}: rendering chat_template needs jinja2 (pip install jinja2)") from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, ensure_ascii=False, indent=indent)
    try:
        return env.from_string(text)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"Model {name!r}: chat_template is not a valid Jinja template: {exc}") from None


def render_chat(template, messages: list[dict], name: str = "?") -> str:
    """The messages rendered with the assistant's turn opened. bos_token is empty: a server adds BOS itself
    where its tokenizer does (llama.cpp's, vLLM's)."""
    import jinja2

    def raise_exception(message: str):
        raise ConfigError(f"Model {name!r}: its chat_template refuses these messages: {message}")

    try:
        return template.render(messages=messages, add_generation_prompt=True, bos_token="", eos_token="",
                               raise_exception=raise_exception)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"Model {name!r}: chat_template failed to render: {exc}") from None


def echoed_continuation(resp, text: str, continuation: str) -> tuple[SequenceLogprobs | None, str]:
    """The continuation's summed token logprobs from a completions response with echo=True and logprobs: the
    echoed tokens after the prompt, matched from the end of the text (after the generated tokens). Offsets
    are not used: llama-cpp-python's text_offset leaves out special tokens. A token that straddles the
    prompt/continuation boundary counts as the prompt's. (None, why) when the tokens do not spell the text."""
    choice = resp.choices[0] if getattr(resp, "choices", None) else None
    lp = getattr(choice, "logprobs", None) if choice is not None else None
    tokens = list(getattr(lp, "tokens", None) or [])
    values = list(getattr(lp, "token_logprobs", None) or [])
    if not tokens or len(tokens) != len(values):
        return None, "the response has no prompt logprobs (echo)"
    echoed = choice.text or ""
    if not echoed.startswith(text):
        return None, "the response does not echo the prompt"
    generated = echoed[len(text):]
    prompt_tokens, completion_tokens = _usage(resp)
    # The generated tokens at the end: as many as the server counts (vLLM lists them, an empty-text end of
    # sequence included), or none (llama-cpp-python lists the prompt's only), whichever spells a start of the
    # generated text after tokens that end with the continuation. vLLM leaves a generated special token
    # ("<|im_end|>") out of the echoed text but lists it: the text is then a start of the tokens instead.
    for k in dict.fromkeys((min(max(completion_tokens, 0), len(tokens)), 0)):
        end = len(tokens) - k
        tail = "".join(tokens[end:])
        if ((generated.startswith(tail) or (k and tail.startswith(generated)))
                and "".join(tokens[:end]).endswith(continuation)):
            break
    else:
        return None, "the echoed tokens do not spell the continuation before the generated text"
    picked: list[int] = []
    need = len(continuation)
    i = end
    while need > 0 and i > 0:
        i -= 1
        need -= len(tokens[i])
        picked.append(i)
    if need > 0 or not "".join(tokens[j] for j in reversed(picked)).endswith(continuation):
        return None, "the echoed tokens do not spell the continuation"
    if need < 0:
        picked.pop()  # its first token began in the prompt
    scores = [values[j] for j in picked]
    if any(v is None or not math.isfinite(float(v)) for v in scores):
        return None, "a continuation token has no logprob"
    return SequenceLogprobs(total=float(sum(scores)), n_tokens=len(scores), prompt_tokens=prompt_tokens), ""
