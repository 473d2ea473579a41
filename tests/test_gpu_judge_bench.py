"""bench/gpu_judge.py, the GPU owner's one command, runs anywhere: here on the CPU with the tiny shape."""

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.real_model  # qwen05's tokenizer, converted from its package on first use
def test_the_gpu_bench_prints_its_table_on_a_cpu_with_the_tiny_shape():
    proc = subprocess.run([sys.executable, "bench/gpu_judge.py", "--device", "cpu", "--shape", "tiny", "--articles",
                           "2", "--summaries", "2", "--new-tokens", "8"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    paths = [line.split("|")[1].strip() for line in table[1:]]
    assert paths[:2] == ["default", "batched"] and "plain HF, batches of 32" in paths and paths[-1].startswith("limit")
    for line in table[2:-1]:  # every measured path: a positive time per judgement and a summary rate
        ms, rate = (float(x) for x in line.split("|")[2:4])
        assert ms > 0 and rate > 0
