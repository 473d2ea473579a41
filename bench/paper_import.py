"""Import plus analysis of the paper's published judgements: wall time and peak memory of each step.

    python bench/paper_import.py ../shared/paper-data [--out /tmp/paper_sweep]

Each step runs as its own process (`python -m selfpref_sweep.imports paper ROOT --out SWEEP --replace`, then
`python -m selfpref_sweep.analysis SWEEP --wandb-mode disabled`), so a figure is what a user's command costs.
The target (the issue that asked for the importer): both together under 10 minutes on 2 cores, in at most 4 GB.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time


def _step(name: str, argv: list[str]) -> tuple[str, float, float]:
    """(name, seconds, peak resident GiB of the step's process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux: the largest child so far
    print(proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else "", file=sys.stderr)
    return name, seconds, max(peak, before) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="the authors' layout (e.g. ../shared/paper-data)")
    parser.add_argument("--out", default="/tmp/paper_sweep_bench")
    args = parser.parse_args()
    rows = [_step("import", ["-m", "selfpref_sweep.imports", "paper", args.root, "--out", args.out, "--replace"]),
            _step("analysis", ["-m", "selfpref_sweep.analysis", args.out, "--wandb-mode", "disabled"])]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}")
    print("| step | wall time (s) | peak memory so far (GiB) |\n|---|---|---|")
    for name, seconds, gib in rows:
        print(f"| {name} | {seconds:.0f} | {gib:.2f} |")
    total = sum(r[1] for r in rows)
    print(f"| both | {total:.0f} | {max(r[2] for r in rows):.2f} |")
    print(f"target: under 600 s and 4 GiB -> {'met' if total < 600 and max(r[2] for r in rows) <= 4 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
