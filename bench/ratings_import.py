"""Judge ratings in long form, imported and analysed: wall time and peak memory of `python -m selfpref_sweep.imports
ratings` and of `python -m selfpref_sweep.analysis` on the sweep it writes (self_bias.csv included).

    python bench/ratings_import.py [--rows 50000] [--judges 5] [--authors 10] [--keep DIR]

Writes a synthetic ratings CSV to a temporary folder (judges x authors x items rows, the judges among the authors,
with human anchor and correct columns), then imports and analyses it, each as its own process, so the figures are
what a user's commands cost. The target: 50,000 rows imported and analysed in under 2 minutes and 2 GB on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COLUMNS = "judge=judge,author=author,item=item,score=score,human=human,correct=correct"


def write_ratings(path: Path, rows: int, n_judges: int, n_authors: int, seed: int = 0) -> int:
    """A ratings CSV of about ``rows`` rows (whole items: judges x authors per item); returns the rows written."""
    rng = random.Random(seed)
    authors = [f"model{a}" for a in range(n_authors)]
    judges = authors[:n_judges]
    n_items = max(1, rows // (n_judges * n_authors))
    quality = {(a, i): rng.uniform(1, 10) for a in authors for i in range(n_items)}
    with path.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["judge", "author", "item", "score", "human", "correct"])
        for i in range(n_items):
            for j in judges:
                for a in authors:
                    q = quality[(a, i)]
                    score = round(q + (0.5 if a == j else 0.0) + rng.gauss(0, 1), 3)
                    out.writerow([j, a, f"item{i}", score, round(q, 2), "yes" if q > 5 else "no"])
    return n_items * n_judges * n_authors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="about this many rows (whole items)")
    parser.add_argument("--judges", type=int, default=5)
    parser.add_argument("--authors", type=int, default=10)
    parser.add_argument("--keep", help="write the CSV and the sweep here instead of a temporary folder")
    args = parser.parse_args()
    if not 0 < args.judges <= args.authors:
        parser.error("--judges must be between 1 and --authors")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        src, out = root / "ratings.csv", root / "sweep"
        n = write_ratings(src, args.rows, args.judges, args.authors)
        times = {}
        for step, cmd in (("import", ["-m", "selfpref_sweep.imports", "ratings", str(src), "--out", str(out),
                                      "--columns", COLUMNS, "--replace"]),
                          ("analysis", ["-m", "selfpref_sweep.analysis", str(out), "--wandb-mode", "disabled"])):
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, *cmd], capture_output=True, text=True)
            times[step] = time.perf_counter() - start
            if proc.returncode:
                sys.exit(f"{step} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
            if step == "import":
                first = proc.stdout.strip().splitlines()[0]
        n_bias = sum(1 for _ in (out / "analysis" / "self_bias.csv").open(encoding="utf-8")) - 1
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux; the larger step
    print(first)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}")
    print(f"rows: {n}, import: {times['import']:.1f} s, analysis: {times['analysis']:.1f} s ({n_bias} self_bias.csv "
          f"rows), both: {sum(times.values()):.1f} s, peak memory of either: {peak_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
