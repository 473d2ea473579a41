"""Model backends behind one small interface, found through a registry and imported lazily so an
optional backend's dependencies (torch, an API client) load only when a cell uses it."""

from __future__ import annotations

from typing import Callable, Dict

from typing import TYPE_CHECKING

from ..registry import resolve
from ..store import Store
from .base import ModelAPI, ModelIdentity
from .cached import CachedModel

if TYPE_CHECKING:
    from ..config import ModelConfig

# backend name -> "module:Class"; the class has identity_for(cfg) and __init__(cfg, model_cache, show_progress).
# SELFPREF_BACKENDS="name=module:Class,..." adds backends (plugins, the test suite's double).
BACKENDS: Dict[str, str] = {
    "local": "selfpref_sweep.models.local:LocalModel",
    "openai": "selfpref_sweep.models.openai_api:OpenAIModel",  # OpenAI and OpenAI-compatible servers
}


def backend_class(name: str):
    return resolve(BACKENDS, "SELFPREF_BACKENDS", name, "model backend")


def load_model(model_cfg: "ModelConfig", store: Store, model_cache: str, show_progress: bool = True) -> CachedModel:
    """A cached handle on the model; weights load only when a call misses the cache."""
    cls = backend_class(model_cfg.backend)
    identity: ModelIdentity = cls.identity_for(model_cfg)
    factory: Callable[[], ModelAPI] = lambda: cls(model_cfg, model_cache=model_cache, show_progress=show_progress)
    return CachedModel(identity, factory, store, show_progress=show_progress, judge_settings=cls.judge_settings(model_cfg))


def model_identity(model_cfg: "ModelConfig") -> ModelIdentity:
    """A model's identity without building anything (plan mode, fine-tune cache keys)."""
    return backend_class(model_cfg.backend).identity_for(model_cfg)


__all__ = ["BACKENDS", "CachedModel", "ModelAPI", "ModelIdentity", "backend_class", "load_model", "model_identity"]
