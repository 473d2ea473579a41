"""How large the in-process vLLM engine is made (models/vllm/vllm_engine.py): its longest sequence and, on a CPU, its
KV cache, both from what the cell asks of it rather than from the model and the machine.

vLLM's own defaults size both for the largest case: `max_model_len` is the model's whole context (32,768 tokens
for qwen05), and on a CPU the KV cache is a fraction of the machine's memory less what the weights and a warm-up
took. On a 2-core machine with 16.5 GiB visible that left 0.37 GiB for a cache that had to hold one 32,768-token
sequence (0.75 GiB), and the engine did not start, though a cell's prompts need a few thousand tokens.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

GIB = 2 ** 30
LENGTH_STEP = 1024  # max_model_len is rounded up to whole steps
MIN_LENGTH = 2048
# Tokens beyond the longest request seen when the engine starts: the first requests are usually a cell's
# summaries, and its judge prompts carry the same article with two summaries and instructions more.
HEADROOM = 1024
CPU_KV_SEQUENCES = 8  # sequences of the longest length the CPU KV cache holds at once
# An allowance for what a CPU engine needs besides weights and KV cache (activations, its processes, the
# tokenizer). A lower bound, not an estimate (qwen05's float32 worker alone held 5.3 GB with 2 GB of weights and
# a 0.5 GiB cache): a start is refused up front only where even this does not fit.
CPU_OVERHEAD_BYTES = int(1.5 * GIB)
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def engine_length(need: int, model_max: int | None, configured: int | None = None) -> int:
    """The engine's `max_model_len` for requests of at most `need` tokens (prompt plus generation):
    `configured` if set; otherwise need plus HEADROOM, at least MIN_LENGTH, rounded up to LENGTH_STEP; never
    beyond the model's own context."""
    if configured:
        length = int(configured)
    else:
        length = max(MIN_LENGTH, int(math.ceil((need + HEADROOM) / LENGTH_STEP)) * LENGTH_STEP)
    if model_max:
        length = min(length, int(model_max))
    if need > length:
        raise ValueError(f"a request of {need} tokens does not fit the engine's {length} "
                         f"(model context {model_max}, evaluator.vllm_max_model_len {configured})")
    return length


def model_context(config: dict) -> int | None:
    """The model's own context from its Hugging Face config (max_position_embeddings), or None where unknown."""
    value = config.get("text_config", config).get("max_position_embeddings")
    return int(value) if value else None


def kv_bytes_per_token(config: dict, dtype: str) -> int | None:
    """Keys and values of one token across every layer, from the model's Hugging Face config; None where the
    config does not say."""
    config = config.get("text_config", config)
    try:
        layers, heads = int(config["num_hidden_layers"]), int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError):
        return None
    return layers * 2 * kv_heads * head_dim * _BYTES.get(dtype, 4)


def cpu_kv_bytes(per_token: int | None, length: int) -> int:
    """The CPU KV cache: CPU_KV_SEQUENCES sequences of `length` tokens (1 GiB where the shape is unknown)."""
    if not per_token:
        return GIB
    return int(per_token * length * CPU_KV_SEQUENCES)


def weights_bytes(model_dir: Path) -> int:
    """The size of the weight files in a local model folder (0 for a hub id not on disk)."""
    path = Path(model_dir)
    if not path.is_dir():
        return 0
    return sum(f.stat().st_size for f in path.iterdir() if f.suffix in (".safetensors", ".bin"))


def available_bytes() -> int:
    """Memory the system can give a new process now: Linux's MemAvailable (free pages elsewhere)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def cpu_shortfall(weights: int, kv: int, available: int) -> str | None:
    """Why a CPU engine of this size cannot start here, naming the settings that shrink it; None when it fits."""
    need = weights + kv + CPU_OVERHEAD_BYTES
    if need <= available:
        return None
    return (f"vLLM needs about {need / GIB:.1f} GiB here (weights {weights / GIB:.1f}, KV cache {kv / GIB:.2f}, "
            f"engine {CPU_OVERHEAD_BYTES / GIB:.1f}) and {available / GIB:.1f} GiB is available. Free memory, or "
            f"set evaluator.vllm_kv_cache_gib (at least one sequence of evaluator.vllm_max_model_len tokens), or "
            f"use backend local.")
