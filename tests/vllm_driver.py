"""Run by tests/test_vllm.py in vLLM's virtualenv: every in-process vLLM check on ONE engine, in one process.

    PYTHONPATH=. python tests/vllm_driver.py OUT N_RECOMPUTE OVERRIDE...    # models from $SELFPREF_MODEL_CACHE

1. an uninterrupted cell (OUT/cell, its store OUT/cell.sqlite);
2. the cell's first N_RECOMPUTE judge and familiarity calls made again by the same backend, all at once and in
   halves (the second half first), compared bit for bit with what the cell stored (tests/vllm_recompute.py);
3. the cell resumed after losing every other call: a copy of its store with those rows deleted (OUT/resumed.sqlite),
   run as a new cell (OUT/resumed) through the cache, so the lost calls are made again in other batches.

The cells go through the runner as `python run.py` does (resolve_cell, run_cell); the model pool lends the
cell's vLLM backend (and its engine) to the recompute and to the resumed cell, as to the cells of a sweep: one
engine start instead of three. test_vllm.py runs it with VLLM_ENABLE_V1_MULTIPROCESSING=0, the engine inside this
process (a start about 40 s on a 2-core CPU in processes of its own, about 10 s here).
Writes OUT/driver.json: the recompute's counts, the store's rows before and after the loss, the backends built
and the engines started.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from selfpref_sweep.config import register_configs
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models import POOL, load_model
from selfpref_sweep.run.runner import run_cell
from tests.vllm_recompute import recompute

CONF = Path(__file__).resolve().parents[1] / "conf"


class EngineStarts(logging.Handler):
    """Counts the vLLM backend's "started vLLM" log lines: one per engine start, restarts included."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += str(record.msg).startswith("started vLLM")


def cell_spec(overrides, store: Path):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["evaluator=qwen05", "evaluator.backend=vllm", *overrides,
                                           f"store.path={store}"])
    return resolve_cell(cfg)


def lose_every_other_call(store: Path, copy: Path) -> tuple[int, int]:
    """A copy of the store as a kill leaves it: every other call gone. The rows before and after."""
    shutil.copy(store, copy)
    with sqlite3.connect(copy) as conn:
        total = conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        conn.execute("DELETE FROM calls WHERE rowid % 2 = 0")
        kept = conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    return total, kept


def main(out: Path, n_recompute: int, overrides) -> None:
    register_configs()
    starts = EngineStarts()
    engine_log = logging.getLogger("selfpref_sweep.models.vllm.vllm_engine")
    engine_log.addHandler(starts)
    engine_log.setLevel(logging.INFO)
    out.mkdir(parents=True, exist_ok=True)
    spec = cell_spec(overrides, out / "cell.sqlite")
    run_cell(spec, out / "cell")
    handle = load_model(spec.evaluator, None, spec.model_cache, show_progress=False)  # the pooled backend
    recomputed = recompute(handle.backend, out / "cell.sqlite", n_recompute)
    handle.close()
    total, kept = lose_every_other_call(out / "cell.sqlite", out / "resumed.sqlite")
    run_cell(cell_spec(overrides, out / "resumed.sqlite"), out / "resumed")
    result = {"recompute": recomputed, "calls": total, "kept": kept, "backends_built": POOL.loads,
              "engine_starts": starts.count}
    POOL.clear()
    (out / "driver.json").write_text(json.dumps(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
