"""Time a fixed grid from a cold call cache, by phase.

The grid: qwen05 judging, pairwise, paper_xsum and paper_cnn x 10 articles x sources human, paper_gpt4,
paper_claude and smollm135 (8 cells, one process: Hydra's basic launcher), then the analysis job. The call
store and the sweep directory are fresh temporary ones; converted weights in the model cache are reused
(a first run converts them). Needs the paper data and the qwen05 and smollm135 weight packages:

    python bench/sweep_speed.py [--root ../shared/paper-data] [--n-articles 10] [--keep DIR]

The phases are measured by wrapping the functions that do them, so the bench runs unchanged on older
versions of the code: load (building a local model), generate (summaries), judge (answer distributions),
familiarity (log-likelihoods of given summaries), write (result files and the call store), wandb (each
cell's W&B run), analysis (the job after the sweep), other (the rest: configs, data, scoring, bootstrap).
Time inside a model call is counted once, in its phase, however the call is nested.

Prints the phases and the prompt tokens the judge computed, and ends with one line:
    grid_s=<x> per_judgement_s=<y>
where per_judgement_s = judge seconds / judge prompts computed (cache misses).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PHASES = ("load", "generate", "judge", "familiarity", "write", "wandb", "analysis")
spent = defaultdict(float)
counts = defaultdict(int)
tokens = defaultdict(int)  # prompt tokens the model computed, by phase
_active = []  # the phase being timed (nested calls count in the outermost one)


def _timed(phase, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _active:
            return fn(*args, **kwargs)
        _active.append(phase)
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[phase] += time.perf_counter() - start
            _active.pop()
    return wrapper


def _timed_iter(phase, fn):
    """A generator method: time spent producing each item (not the caller's work between items)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        model = args[0]
        it = iter(fn(*args, **kwargs))
        while True:
            nested = bool(_active)
            if not nested:
                _active.append(phase)
            start, before = time.perf_counter(), getattr(model, "tokens_computed", 0)
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                if not nested:
                    spent[phase] += time.perf_counter() - start
                    tokens[phase] += getattr(model, "tokens_computed", 0) - before
                    _active.pop()
            counts[phase] += 1
            yield item
    return wrapper


def instrument():
    """Wrap the functions of each phase; returns the list the local models built are appended to."""
    import selfpref_sweep.analysis.job.callback as analysis_callback
    import selfpref_sweep.run.runner as cell
    import selfpref_sweep.store as store
    from selfpref_sweep.models import local

    models = []
    original_init = local.LocalModel.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        models.append(self)

    local.LocalModel.__init__ = init
    local.LocalModel._load = _timed("load", local.LocalModel._load)
    local.LocalModel.generate = _timed_iter("generate", local.LocalModel.generate)
    local.LocalModel.answer_distributions = _timed_iter("judge", local.LocalModel.answer_distributions)
    if hasattr(local.LocalModel, "sequence_logprobs"):
        local.LocalModel.sequence_logprobs = _timed_iter("familiarity", local.LocalModel.sequence_logprobs)
    for name in ("atomic_write_json", "atomic_write_jsonl"):
        setattr(cell, name, _timed("write", getattr(cell, name)))
    store.Store.put = _timed("write", store.Store.put)
    cell._track = _timed("wandb", cell._track)
    cb = analysis_callback.AnalysisCallback
    cb.on_multirun_end = _timed("analysis", cb.on_multirun_end)
    return models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(REPO.parent / "shared" / "paper-data"))
    ap.add_argument("--n-articles", type=int, default=10)
    ap.add_argument("--keep", help="write the sweep here (default: a temporary directory, removed)")
    args = ap.parse_args()

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sweep_speed_"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_SILENT", "true")
    models = instrument()
    from selfpref_sweep.cli import main as sweep

    sys.argv = ["run.py", "-m", "evaluator=qwen05", "setting=pairwise", "dataset=paper_xsum,paper_cnn",
                f"dataset.root={Path(args.root).resolve()}", f"dataset.n_articles={args.n_articles}",
                "source=human,paper_gpt4,paper_claude,smollm135", f"store.path={work / 'calls.sqlite'}",
                f"hydra.sweep.dir={work / 'multirun'}", "show_progress=false", "wandb.mode=offline"]
    start = time.perf_counter()
    try:
        sweep()
    except SystemExit as exc:  # the sweep exits 1 when a cell failed: say so, the figures are not comparable
        if exc.code:
            print(f"\nwarning: the sweep exited with status {exc.code} (a cell failed); see {work}")
    grid_s = time.perf_counter() - start

    judgements = counts["judge"]
    print(f"\n== sweep_speed: {work} ==")
    print(f"local models built: {len(models)} ({', '.join(m.cfg.name for m in models)})")
    for phase in PHASES:
        n = f" ({counts[phase]} results)" if counts[phase] else ""
        print(f"  {phase:<12} {spent[phase]:8.1f} s{n}")
    print(f"  {'other':<12} {grid_s - sum(spent.values()):8.1f} s")
    print(f"tokens computed: judging {tokens['judge']:,} "
          f"({tokens['judge'] / max(1, judgements):.0f} per judgement over "
          f"{judgements} judgements), familiarity {tokens['familiarity']:,}")
    print(f"grid_s={grid_s:.1f} per_judgement_s={spent['judge'] / max(1, judgements):.3f}")


if __name__ == "__main__":
    main()
