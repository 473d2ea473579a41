"""Matrix-product speed per dtype on this machine, and what `dtype: auto` picks here.

A qwen05-shaped product (a batch of token rows x hidden 896 -> MLP width 4864), timed in float32, bfloat16
and float16. On a CPU without native bf16 instructions the bf16 product is emulated and can be far slower
than float32; `auto` then runs local models in float32 (selfpref_sweep/models/local/precision.py). No data or
model needed:

    python bench/dtype_speed.py [--rows 512] [--repeats 5]

Ends with one line:  auto=<dtype> float32_gflops=<x> bfloat16_gflops=<y> float16_gflops=<z>
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from selfpref_sweep.models.local.precision import resolve_dtype  # noqa: E402

HIDDEN, MLP = 896, 4864  # qwen05's


def gflops(torch, dtype, rows: int, repeats: int) -> float:
    a = torch.randn(rows, HIDDEN, dtype=dtype)
    b = torch.randn(HIDDEN, MLP, dtype=dtype)
    a @ b  # warm-up: kernel selection, page faults
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    seconds = (time.perf_counter() - start) / repeats
    return 2 * rows * HIDDEN * MLP / seconds / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=512, help="token rows per product")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, CUDA {torch.cuda.is_available()}")
    figures = {name: gflops(torch, getattr(torch, name), args.rows, args.repeats)
               for name in ("float32", "bfloat16", "float16")}
    for name, value in figures.items():
        print(f"{name:>9}: {value:8.1f} GFLOP/s")
    print(f"auto={resolve_dtype('auto')} " + " ".join(f"{k}_gflops={v:.1f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
