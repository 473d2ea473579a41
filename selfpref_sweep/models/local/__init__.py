"""The local backend: Hugging Face transformers on this machine, split by concern (LocalModel composes them)."""

from __future__ import annotations

from ...registry import lazy_exports

# name -> the module that defines it, imported when first used: the config schema imports local_settings (and so
# this package), and reading a config should not load the backend.
_EXPORTS = {
    "LocalModel": ".local_model", "attach_adapter": ".local_model", "BACKEND_VERSION": ".local_model",
    "HEAD_ROWS": ".answer_reading", "MIN_BATCHED_LENGTH": ".batch_invariant",
    "FULL_METHOD": ".answer_tokens", "SPLIT_METHOD": ".answer_tokens", "answer_token_ids": ".answer_tokens",
    "split_tokens": ".answer_tokens", "stop_token_ids": ".answer_tokens", "tokenizer_whitespace_ids": ".answer_tokens",
    "whitespace_token_ids": ".answer_tokens",
    "LocalSettings": ".local_settings",
}

__all__ = ["BACKEND_VERSION", "FULL_METHOD", "HEAD_ROWS", "MIN_BATCHED_LENGTH", "SPLIT_METHOD", "LocalModel",
           "LocalSettings", "answer_token_ids", "attach_adapter", "split_tokens", "stop_token_ids",
           "tokenizer_whitespace_ids", "whitespace_token_ids"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
