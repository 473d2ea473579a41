"""The local backend's settings (models/local/): fields of a model config (evaluator.*, source.*), each with its
default and its allowed range; config.ModelConfig is made of these, the other backends' and the shared fields."""

from __future__ import annotations

from dataclasses import dataclass

from ...schema_fields import COUNT, NON_NEGATIVE, Range, ranged


@dataclass
class LocalSettings:
    # Reuse the KV cache of shared prompt prefixes when scoring batches of judge prompts.
    prefix_reuse: bool = True
    # Local models: keep the KV caches of prompt prefixes (chat header + article, ...) between calls, up to
    # this many MiB per loaded model, so the cells of a sweep over sources compute each article once. 0: off.
    prefix_cache_mb: float = ranged(1024, NON_NEGATIVE)
    # Local models: summaries decoded together in one left-padded batch (prompts of similar length); in
    # batch-invariant computation, the fixed row count of every decoding step (on a GPU, batch_invariant_rows).
    generate_batch: int = ranged(8, COUNT)
    # Local models: batch-invariant computation, so a result depends only on its own prompt, never on which
    # other requests shared its batch or what the prefix cache held (a killed-and-resumed or re-split sweep gives
    # the same numbers). Prompts' KV caches are built in fixed chunks of batch_invariant_chunk tokens from
    # position 0 and reused only at those boundaries; pieces of one shape from many prompts share a forward
    # where that cannot change a row's bits (see batch_invariant_rows). null (auto): on
    # where the model runs in a 16-bit type (bf16 rounding makes batched results depend on the batch), off in
    # float32 (exact up to float32 rounding, and faster batched). models/local/.
    batch_invariant: bool | None = None
    batch_invariant_chunk: int = ranged(64, Range(low=1, high=4096, integer=True))
    # Local models, batch-invariant computation: rows of every forward (filled up with copies), for a device whose
    # rounding depends on a product's row count (a GPU): results then depend on their prompt and this number,
    # which the cache key holds. null (auto): 32 on a GPU, 0 elsewhere; 0: pieces share a forward only where the
    # device gives each row what it gives alone (a CPU), else one per forward.
    batch_invariant_rows: int | None = ranged(None, Range(low=0, high=4096, integer=True))
    # Local models: tokens per forward pass. null: from the device (512 on a CPU, 16384 on a GPU).
    forward_tokens: int | None = ranged(None, Range(low=1, high=2 ** 20, integer=True))
