"""Loaded models kept across the cells of one process, so a sweep loads each model once.

Hydra's basic launcher runs a sweep's cells one after another in one process; without a pool every
cell loads its evaluator, source and adapter again (seconds to tens of seconds each). The pool keeps a
loaded backend under its model identity and the config it was built from, lends it to any cell that
asks for the same, and frees the least recently used idle ones once the loaded models' memory is over
the budget (`model_pool.budget_gb`; 0 frees every model when its cell is done, as without a pool).

Only backends that say they are worth keeping (`poolable`, the local ones: weights in memory) are
pooled; an API client costs nothing to build. A backend lent out is never freed under a cell.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from .base import ModelAPI

log = logging.getLogger(__name__)

GIB = 1024 ** 3


@dataclass
class _Entry:
    backend: ModelAPI
    leases: int = 0


class ModelPool:
    def __init__(self, budget_bytes: int = 0):
        self.budget_bytes = int(budget_bytes)
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()  # least recently used first
        self.loads = 0  # backends built (misses)
        self.reuses = 0  # backends lent again (hits)

    def configure(self, budget_gb: float) -> None:
        self.budget_bytes = int(budget_gb * GIB)
        self._evict()

    def acquire(self, key: Hashable, build: Callable[[], ModelAPI]) -> ModelAPI:
        """The pooled backend under `key`, built with `build()` if there is none; lent until `release`."""
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(build())
            self.loads += 1
            if not getattr(entry.backend, "poolable", False):
                return entry.backend  # not kept: `release` closes it
            self._entries[key] = entry
        else:
            self.reuses += 1
            log.info("reusing loaded model %s", entry.backend.identity.label)
        self._entries.move_to_end(key)
        entry.leases += 1
        return entry.backend

    def release(self, key: Hashable, backend: ModelAPI, keep: bool = True) -> None:
        """A cell is done with the backend: kept for the next cell, or freed when over the budget (or at
        once with keep=False, e.g. before a fine-tune needs the memory, unless another cell holds it)."""
        entry = self._entries.get(key)
        if entry is None or entry.backend is not backend:  # never pooled
            backend.close()
            return
        entry.leases = max(0, entry.leases - 1)
        if not keep and not entry.leases:
            del self._entries[key]
            backend.close()
            return
        self._evict()

    def memory_bytes(self) -> int:
        return sum(_memory(e.backend) for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def _evict(self) -> None:
        """Free idle backends, least recently used first, until the pool's memory is within the budget."""
        total = self.memory_bytes()
        for key in list(self._entries):
            if total <= self.budget_bytes:
                return
            entry = self._entries[key]
            if entry.leases:
                continue
            total -= _memory(entry.backend)
            del self._entries[key]
            log.info("freeing pooled model %s (pool over %.1f GiB)", entry.backend.identity.label,
                     self.budget_bytes / GIB)
            entry.backend.close()

    def clear(self) -> None:
        """Free every idle backend (the test suite calls this between tests)."""
        for key in list(self._entries):
            if not self._entries[key].leases:
                self._entries.pop(key).backend.close()


def _memory(backend: ModelAPI) -> int:
    size = getattr(backend, "memory_bytes", None)
    return int(size()) if callable(size) else 0


# The process's pool: every CachedModel built by load_model borrows from it.
POOL = ModelPool()
