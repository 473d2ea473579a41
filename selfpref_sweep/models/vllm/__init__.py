"""The in-process vLLM backend: the engine for open-weight judges on a GPU, its sizing and its settings."""

from __future__ import annotations

from ...registry import lazy_exports

# name -> the module that defines it, imported when first used: the config schema imports vllm_settings (and so
# this package), and reading a config should not load the backend.
_EXPORTS = {"VLLMModel": ".vllm_engine", "VllmSettings": ".vllm_settings"}

__all__ = ["VLLMModel", "VllmSettings"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
