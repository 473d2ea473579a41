"""The in-process vLLM backend's settings (models/vllm_engine.py): fields of a model config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..schema_fields import Range, ranged


@dataclass
class VllmSettings:
    # backend vllm (models/vllm_engine.py): the share of the device's memory vLLM takes for weights and KV cache
    # (its gpu_memory_utilization; on a CPU, of the machine's memory). null: vLLM's default on a GPU, 0.3 on a CPU.
    vllm_memory_fraction: Optional[float] = ranged(None, Range(low=0, high=1, low_open=True))
    # backend vllm: run the model eagerly, without torch.compile (and, on a GPU, without CUDA graphs): it starts
    # far sooner on a CPU (compiling takes minutes on 2 cores); vLLM's compiled default is the one for a GPU.
    vllm_enforce_eager: bool = False
