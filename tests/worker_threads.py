"""How the suite shares this machine's cores: how many pytest-xdist workers run side by side (pyproject's
``-n auto``), and how many threads each worker's own work may use (torch, the llama.cpp server, the golden grid).

Two workers on 2 cores with torch's default threads ran slower than one: each worker's 2 OpenMP threads spun against
the other's (docs/results/ci_parallel.md). So a worker's share is its cores divided among the workers, set in the
environment before torch loads; subprocesses inherit it.
"""

from __future__ import annotations

import os
import sys

from selfpref_sweep.models.vllm.vllm_sizing import available_bytes

# The most workers `-n auto` starts: the count measured on CI's 2-core, 24 GiB machines. More were never tried;
# `python -m pytest -n N` asks for N.
MAX_WORKERS = 2
# What one worker may need at once: the serial suite, alone on a 23 GiB machine, left no less than 15.1 GiB
# available (about 7.3 GiB in use at its peak: a model in pytest beside a vLLM engine or a training subprocess).
GIB_PER_WORKER = 8
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def available_gib() -> float:
    """The memory the system can give new processes now, in GiB (the vLLM sizing's reading: MemAvailable)."""
    return available_bytes() / 2 ** 30


def auto_workers(n_cores: int, gib: float) -> int:
    """Workers for ``-n auto``: one per core, each with GIB_PER_WORKER of memory, at most MAX_WORKERS; 0 (the
    suite in this process, every core to its tests) where only one fits."""
    n = min(MAX_WORKERS, n_cores, int(gib // GIB_PER_WORKER))
    return n if n > 1 else 0


def worker_threads() -> int:
    """Threads for this process's work: every core when the suite runs alone, its share under xdist."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    return max(1, cores() // max(1, workers))


def pin_worker_threads() -> None:
    """Under xdist, each worker's share of the cores as OMP/MKL_NUM_THREADS (unless set already), before torch
    loads; torch's count too if something imported it first."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    share = str(worker_threads())
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, share)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
