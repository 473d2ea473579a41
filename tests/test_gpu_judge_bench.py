"""bench/gpu_judge.py, the GPU owner's one command, runs anywhere: here on the CPU with the tiny shape.

It runs in vLLM's virtualenv where setup.sh made one (CI does), so the table has the vLLM rows beside the local
backend's; without it, in this interpreter, with the local and plain-HF rows only. vLLM's engines run inside the
bench's process (VLLM_ENABLE_V1_MULTIPROCESSING=0): each of its two engine starts then takes about 10 s on 2 cores
instead of 40 (two processes fewer to start and import into); the rows read the same."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.test_vllm import VLLM_PYTHON

VLLM_ROWS = ("vllm, reproducible (default)", "vllm, vllm_reproducible=false")


@pytest.mark.real_model  # qwen05's tokenizer, converted from its package on first use
def test_the_gpu_bench_prints_its_table_on_a_cpu_with_the_tiny_shape():
    with_vllm = VLLM_PYTHON.exists()
    python = str(VLLM_PYTHON) if with_vllm else sys.executable
    # bf16 named, not left to auto: auto picks float32 on a CPU without native bf16 (AVX2), where the default path
    # is the batched one; in bf16 every CPU kind runs the batch-invariant default this test reads.
    proc = subprocess.run([python, "bench/gpu_judge.py", "--device", "cpu", "--shape", "tiny", "--dtype",
                           "bfloat16", "--articles", "2", "--summaries", "2", "--new-tokens", "8"], cwd=REPO,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in table[1:]}
    paths = list(cells)
    assert paths[0] == "default (chunks64k512h16d8w512)" and paths[1] == "batched (batched)"
    assert "plain HF, batches of 32" in paths and paths[-1].startswith("limit")
    assert all(row in paths for row in VLLM_ROWS) == with_vllm, paths
    for path in paths[:-1]:  # every measured path: a positive time per judgement and a summary rate
        ms, rate = float(cells[path][0]), float(cells[path][1])
        assert ms > 0 and rate > 0
    # the default (batch-invariant) path judges the prompts, and writes the summaries, split in two on an empty
    # cache, to the bit; so does vLLM's reproducible mode
    n = int(proc.stdout.split(" judge prompts")[0].split()[-1])
    assert cells[paths[0]][3] == f"{n}/{n}; 2/2"
    if with_vllm:
        assert cells[VLLM_ROWS[0]][3] == f"{n}/{n}; 2/2"
