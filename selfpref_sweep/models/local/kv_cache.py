"""KV-cache objects of the local backend: cloned, stacked, cut into rows, sized, read off a forward's output."""

from __future__ import annotations

import copy


def _clone_cache(cache, batch: int = 1):
    """A new cache object on the same tensors (expanded, not copied, to `batch` rows). The cache classes
    used here never change a tensor in place (they concatenate, slice and index into new ones), so the
    clone and the original can each grow or be cropped without touching the other."""
    twin = copy.copy(cache)
    twin.layers = [copy.copy(layer) for layer in cache.layers]
    if batch > 1:
        for layer in twin.layers:
            if getattr(layer, "is_initialized", True) and layer.keys is not None and layer.keys.numel():
                layer.keys = layer.keys.expand(batch, -1, -1, -1)
                layer.values = layer.values.expand(batch, -1, -1, -1)
    return twin


def _stack_padded(caches: list[object], width: int, right: bool = False):
    """One batch cache from single-row caches of up to `width` positions: each row padded with zeros to `width`
    on the left (or the right), where the attention mask hides them; rows stacked in order."""
    import torch

    batch = _clone_cache(caches[0])
    for k, layer in enumerate(batch.layers):
        def stacked(name, k=k):
            rows = [getattr(c.layers[k], name) for c in caches]
            return torch.cat([torch.nn.functional.pad(t, (0, 0, 0, width - t.shape[-2]) if right
                                                      else (0, 0, width - t.shape[-2], 0)) for t in rows], dim=0)
        layer.keys, layer.values = stacked("keys"), stacked("values")
    return batch


def _row_cache(cache, row: int, length: int | None = None):
    """Row `row` of a batch cache as a cache of its own, its first `length` positions (all: None); a view."""
    twin = _clone_cache(cache)
    for layer in twin.layers:
        layer.keys, layer.values = layer.keys[row:row + 1, :, :length], layer.values[row:row + 1, :, :length]
    return twin


def _first_rows(cache, n: int):
    """The first `n` rows of a batch cache, copied where the batch has more (filler rows), so the filler rows'
    memory is not held by the caches kept."""
    return cache if cache.layers[0].keys.shape[0] == n else _rows_copy(cache, 0, n)


def _rows_copy(cache, start: int, stop: int):
    """Rows start..stop-1 of a batch cache as a cache of their own, copied (a view would hold the whole batch's
    memory)."""
    twin = _clone_cache(cache)
    for layer in twin.layers:
        layer.keys, layer.values = layer.keys[start:stop].clone(), layer.values[start:stop].clone()
    return twin


def _cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
               if t is not None)


def _returned_cache(out):
    """The KV cache a forward returned: `cache` in transformers 5.x (reading `past_key_values` warns there),
    `past_key_values` before."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def _croppable(cache) -> bool:
    layers = getattr(cache, "layers", None)
    if layers is None:
        return hasattr(cache, "crop")
    return all(type(layer).__name__ == "DynamicLayer" for layer in layers)
