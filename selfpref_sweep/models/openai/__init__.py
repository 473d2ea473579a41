"""The OpenAI backend: OpenAI's chat-completions API or an OpenAI-compatible server, direct or by Batch API."""

from __future__ import annotations

from ...registry import lazy_exports

# name -> the module that defines it, imported when first used: the config schema imports openai_settings (and
# so this package), and reading a config should not load the backend.
_EXPORTS = {"OpenAIModel": ".openai_api", "BatchPending": ".openai_batch", "OpenAISettings": ".openai_settings",
            "EchoLogprobsMode": ".openai_settings", "MAX_TOP_LOGPROBS": ".openai_settings"}

__all__ = ["MAX_TOP_LOGPROBS", "BatchPending", "EchoLogprobsMode", "OpenAIModel", "OpenAISettings"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
