"""Name -> class registries with lazy imports: a backend's or trainer's dependencies load only when a
cell uses it. An environment variable adds entries ("name=module:Class,..."), for plugins and for the
test suite's deterministic doubles."""

from __future__ import annotations

import importlib
import os
from typing import Dict

from .errors import ConfigError


def resolve(builtins: Dict[str, str], env_var: str, name: str, what: str):
    entries = dict(builtins)
    for entry in filter(None, os.environ.get(env_var, "").split(",")):
        key, _, target = entry.partition("=")
        entries[key.strip()] = target.strip()
    if name not in entries:
        raise ConfigError(f"Unknown {what} {name!r}; valid: {', '.join(sorted(entries))}.")
    module, _, cls = entries[name].partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"The {what} {name!r} names {entries[name]!r}, which cannot be loaded: {exc}") from exc


def lazy_exports(package: str, exports: Dict[str, str]):
    """A package's module-level __getattr__ for its public names: each name is taken from the module (relative to
    the package) that `exports` maps it to, imported when the name is first asked for."""
    def __getattr__(name: str):
        if name in exports:
            return getattr(importlib.import_module(exports[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
