"""Model backends behind one small interface, found through a registry and imported lazily so an
optional backend's dependencies (torch, an API client) load only when a cell uses it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..registry import Registry
from .backends import BACKENDS
from .base import ModelAPI, ModelIdentity

if TYPE_CHECKING:
    from ..store import Store
    from .cached import CachedModel

# The call store and the model pool load when first used, not with the package: the config schema reads the
# backends' settings (backends.py), and reading a config should not open the cache's machinery.
_LAZY = {"CachedModel": ".cached", "POOL": ".pool"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# The built-in backends (backends.py: each one's class and its settings). Plug-ins: entry points of the group
# selfpref_sweep.backends, or SELFPREF_BACKENDS="name=module:Class,..." (the test suite's doubles); neither reuses a
# built-in's name (registry.py).
REGISTRY = Registry("model backend", ModelAPI, BACKENDS, "SELFPREF_BACKENDS", "selfpref_sweep.backends")


def backend_class(name: str):
    return REGISTRY.resolve(name)


def load_model(model_cfg: Any, store: Store, model_cache: str, show_progress: bool = True) -> CachedModel:
    """A cached handle on the model (`model_cfg`: a config.ModelConfig); weights load only when a call misses the
    cache, and come from the process's model pool (models/pool.py) when an earlier cell loaded the same model with
    the same config."""
    from .cached import CachedModel
    from .pool import POOL

    cls = backend_class(model_cfg.backend)
    identity: ModelIdentity = cls.identity_for(model_cfg)
    key = (identity, repr(model_cfg))  # the config too: settings outside the identity (prefix_reuse, ...)
    def build() -> ModelAPI:
        return cls(model_cfg, model_cache=model_cache, show_progress=show_progress)

    return CachedModel(identity, lambda: POOL.acquire(key, build), store, show_progress=show_progress,
                       judge_settings=cls.judge_settings(model_cfg),
                       release=lambda backend, keep: POOL.release(key, backend, keep))


def model_identity(model_cfg: Any) -> ModelIdentity:
    """A model's identity without building anything (plan mode, fine-tune cache keys)."""
    return backend_class(model_cfg.backend).identity_for(model_cfg)


__all__ = ["BACKENDS", "POOL", "REGISTRY", "CachedModel", "ModelAPI", "ModelIdentity", "backend_class", "load_model",
           "model_identity"]
