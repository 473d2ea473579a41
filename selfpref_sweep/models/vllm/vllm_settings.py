"""The in-process vLLM backend's settings (models/vllm/vllm_engine.py): fields of a model config."""

from __future__ import annotations

from dataclasses import dataclass

from ...schema_fields import COUNT, Range, ranged


@dataclass
class VllmSettings:
    # backend vllm (models/vllm/vllm_engine.py): results that depend on their own prompt only, whatever shared their
    # batch, came before them or was cached. Each prompt is computed whole in one step from no cached prefix; on a
    # GPU with vLLM's batch-invariant kernels (VLLM_BATCH_INVARIANT=1) too. Costs prefix sharing (docs/vllm.md).
    # false: vLLM's fastest schedule, whose numbers may move in their last bits. Part of the cache key.
    vllm_reproducible: bool = True
    # backend vllm: the engine's longest sequence (vLLM's max_model_len). null: the longest request the engine
    # first meets plus 1,024 tokens (at least 2,048), restarted longer if a later request needs more.
    vllm_max_model_len: int | None = ranged(None, COUNT)
    # backend vllm: the KV cache in GiB (vLLM's kv_cache_memory_bytes). null: on a CPU, 8 sequences of
    # vllm_max_model_len tokens; on a GPU, what vllm_memory_fraction leaves.
    vllm_kv_cache_gib: float | None = ranged(None, Range(low=0, low_open=True))
    # backend vllm: the share of the GPU's memory vLLM takes for weights and KV cache (its
    # gpu_memory_utilization). null: vLLM's default on a GPU; on a CPU the KV cache is sized as above instead.
    vllm_memory_fraction: float | None = ranged(None, Range(low=0, high=1, low_open=True))
    # backend vllm: run the model eagerly, without torch.compile (and, on a GPU, without CUDA graphs): it starts
    # far sooner on a CPU (compiling takes minutes on 2 cores); vLLM's compiled default is the one for a GPU.
    vllm_enforce_eager: bool = False
