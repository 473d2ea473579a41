"""Name -> class registries with lazy imports: a backend's, trainer's or measurement's dependencies load only when
something uses it. Each registry (`Registry`) holds its built-ins ("name" -> "module:Class") and adds plug-ins
from two places, neither imported until a name is resolved:

- Python entry points of its group (e.g. `selfpref_sweep.backends`), declared by an installed distribution:
  `[project.entry-points."selfpref_sweep.backends"] my_backend = "my_package.my_module:MyBackend"`;
- an environment variable ("name=module:Class,...", e.g. $SELFPREF_BACKENDS), for a plug-in not installed as a
  distribution and for the test suite's deterministic doubles.

The rule for names: one name, one target. A plug-in may not reuse a built-in's name, and two plug-ins may not share
a name, unless they name the same target (declaring it twice is harmless; the test suite registers the
built-in `openai` backend again that way). There is no override, not even from the environment variable: a config
that says `backend: local` always means the built-in local backend, so a cell's record and its cache keys never
depend on what happens to be installed or exported. A clash is a `ConfigError` naming both targets; so is an entry
whose class is not a subclass of the registry's interface (`ModelAPI`, `Trainer`, `Measurement`).

Entry points are read once per `sys.path` (`importlib.metadata` scans every installed distribution, a few ms);
`refresh()` reads them again, for a distribution installed into a directory already on the path mid-process."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points

from .errors import ConfigError

BUILT_IN = "built in"


@dataclass(frozen=True)
class Entry:
    target: str  # "module:attr"
    source: str  # where it was declared ("built in", "$SELFPREF_BACKENDS", "entry point 'x' of dist y ...")


class Registry:
    """One registry: `kind` names its entries in messages ("model backend"), `interface` is the class each entry
    must subclass, `group` the entry-point group its plug-ins declare themselves under."""

    def __init__(self, kind: str, interface: type, builtins: Mapping[str, str], env_var: str, group: str):
        self.kind, self.interface, self.builtins = kind, interface, builtins
        self.env_var, self.group = env_var, group

    def entries(self) -> dict[str, Entry]:
        """name -> entry, built-ins first (in their order), then entry points (by name), then the environment
        variable's (in its order)."""
        merged = {name: Entry(target, BUILT_IN) for name, target in self.builtins.items()}
        for name, entry in [*_discovered(self.group, tuple(sys.path)), *self._from_env()]:
            self._check_form(name, entry)
            held = merged.setdefault(name, entry)
            if held.target != entry.target:
                raise ConfigError(
                    f"The {self.kind} name {name!r} is declared twice with different targets: {held.target!r} "
                    f"({held.source}) and {entry.target!r} ({entry.source}). A plug-in may neither reuse a "
                    f"built-in's name nor another plug-in's; rename one of them.")
        return merged

    def names(self) -> list[str]:
        return list(self.entries())

    def resolve(self, name: str) -> type:
        """The class registered under `name`, imported now; a ConfigError when there is none, it cannot be
        imported, or it is not a subclass of the interface."""
        entries = self.entries()
        if name not in entries:
            raise ConfigError(f"Unknown {self.kind} {name!r}; valid: {', '.join(sorted(entries))} (a plug-in adds one "
                              f"through the entry-point group {self.group} or ${self.env_var}).")
        entry = entries[name]
        try:
            found = load(entry.target)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"The {self.kind} {name!r} names {entry.target!r}, which cannot be loaded: {exc} "
                              f"(declared by {entry.source}).") from exc
        if not (isinstance(found, type) and issubclass(found, self.interface)):
            raise ConfigError(f"The {self.kind} {name!r} names {entry.target!r} ({entry.source}), which is "
                              f"{_describe(found)}, not a subclass of {_qualified(self.interface)}.")
        return found

    @staticmethod
    def refresh() -> None:
        _discovered.cache_clear()

    def _from_env(self) -> list[tuple[str, Entry]]:
        out = []
        for item in filter(None, (s.strip() for s in os.environ.get(self.env_var, "").split(","))):
            name, eq, target = item.partition("=")
            if not eq:
                raise ConfigError(f"${self.env_var} holds {item!r}, which is not name=module:Class.")
            out.append((name.strip(), Entry(target.strip(), f"${self.env_var}")))
        return out

    def _check_form(self, name: str, entry: Entry) -> None:
        module, colon, attr = entry.target.partition(":")
        if not (name and module.strip() and colon and attr.strip()):
            raise ConfigError(f"The {self.kind} entry {name!r} -> {entry.target!r} ({entry.source}) is not "
                              f"name -> module:Class.")


def load(target: str):
    """What "module:attr" (attr dotted or not) names, its module imported now."""
    module, _, attr = target.partition(":")
    return functools.reduce(getattr, attr.split("."), importlib.import_module(module))


@functools.lru_cache(maxsize=32)
def _discovered(group: str, path: tuple[str, ...]) -> tuple[tuple[str, Entry], ...]:
    """The group's entry points on this `sys.path` (the key: a directory added to the path is read), by name."""
    found = []
    for ep in entry_points(group=group):
        dist = getattr(ep, "dist", None)
        where = f"entry point {ep.name!r} of {dist.name if dist is not None else 'an installed distribution'}"
        found.append((ep.name.strip(), Entry(ep.value.partition("[")[0].strip(), f"{where}, group {group}")))
    return tuple(sorted(found, key=lambda item: (item[0], item[1].target)))


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(obj) -> str:
    """'class m.C', 'function m.f', or the type and repr of anything else (an instance, a module constant)."""
    if isinstance(obj, type):
        return f"class {_qualified(obj)}"
    if hasattr(obj, "__qualname__") and hasattr(obj, "__module__"):
        return f"{type(obj).__name__} {obj.__module__}.{obj.__qualname__}"
    return f"{type(obj).__name__} {obj!r}"[:120]


def lazy_exports(package: str, exports: dict[str, str]):
    """A package's module-level __getattr__ for its public names: each name is taken from the module (relative to
    the package) that `exports` maps it to, imported when the name is first asked for."""
    def __getattr__(name: str):
        if name in exports:
            return getattr(importlib.import_module(exports[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
