"""Which floating-point type a local model runs in.

`dtype: auto` (the local models' default) means bfloat16 where the hardware computes it natively (a GPU
with bf16, or a CPU with AVX512-BF16, AMX or Arm's BF16 instructions) and float32 elsewhere. On a CPU
without those instructions PyTorch emulates bf16 matrix products, which we measured at 1.1 GFLOP/s against
81 GFLOP/s in float32 on a 2-core AVX2 EPYC: a sweep would run dozens of times slower in bf16 there.

The choice is made once per process and from the hardware only (never from a timing), so a machine always
resolves `auto` the same way and its cache keys, which hold the resolved dtype, stay stable. bf16 and
float32 give slightly different probabilities, so their calls are cached apart.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

log = logging.getLogger(__name__)

AUTO = "auto"
# /proc/cpuinfo flags (x86 "flags", Arm "Features") of instructions that compute bf16 products natively.
NATIVE_BF16_CPU_FLAGS: frozenset[str] = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags listed in a /proc/cpuinfo text."""
    flags = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)


def _cpu_native_bf16() -> bool:
    try:
        return bool(cpu_flags(Path("/proc/cpuinfo").read_text()) & NATIVE_BF16_CPU_FLAGS)
    except OSError:  # not Linux: ask oneDNN, which knows the CPU's bf16 support
        import torch

        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@functools.lru_cache(maxsize=1)
def native_bf16() -> bool:
    """Whether this process's device (the GPU if there is one, else the CPU) computes bf16 natively."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    return _cpu_native_bf16()


def resolve_dtype(dtype: str) -> str:
    """A concrete torch dtype name: `auto` becomes bfloat16 or float32 (see the module note); anything else is
    returned as given."""
    if dtype != AUTO:
        return dtype
    chosen = "bfloat16" if native_bf16() else "float32"
    log.debug("dtype auto -> %s", chosen)
    return chosen
