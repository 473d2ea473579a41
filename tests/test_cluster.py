"""A sweep spread over a cluster gives the same results as one quiet run: through Ray, and split over
two "nodes" that each keep their own call store, merged afterwards."""

import json
import os
import subprocess
import sys

from selfpref_sweep.store import Store, merge_stores
from tests.conftest import FAKE_BACKEND, REPO

CELLS = ["source=human,fake_other", "setting=pairwise,individual"]  # 4 cells


def sweep(tmp_path, name, store, *overrides):
    # Ray would try to report usage statistics unless told not to.
    env = {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "disabled", "SELFPREF_STORE": str(store),
           "RAY_DEDUP_LOGS": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
           "dataset.n_articles=3", "show_progress=false", "hydra.callbacks.analysis.enabled=false",
           f"hydra.sweep.dir={tmp_path / name}", "hydra.sweep.subdir=${hydra.job.override_dirname}", *overrides]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return cells(tmp_path / name)


def cells(sweep_dir):
    """Each cell's results and summary, by its overrides, without the wall-clock time and the writing process."""
    out = {}
    for summary_path in sweep_dir.glob("*/summary.json"):
        summary = json.loads(summary_path.read_text())
        summary.pop("elapsed_s", None)
        summary.pop("launch", None)
        out[summary_path.parent.name] = ((summary_path.parent / "results.jsonl").read_text(), summary)
    return out


def test_ray_launcher_gives_the_basic_launchers_results(tmp_path):
    basic = sweep(tmp_path, "basic", tmp_path / "basic.sqlite", *CELLS)
    ray = sweep(tmp_path, "ray", tmp_path / "ray.sqlite", *CELLS, "hydra/launcher=ray",
                "+hydra.launcher.ray.init.num_cpus=2")
    assert len(basic) == 4 and ray.keys() == basic.keys()
    for name, (results, summary) in ray.items():
        assert results == basic[name][0], name
        # which cell generates a summary that two cells share depends on the order they ran in
        assert _without_call_counts(summary) == _without_call_counts(basic[name][1]), name
    calls, hits = ([sum(summary[k] for _, summary in run.values()) for run in (basic, ray)]
                   for k in ("model_calls", "cache_hits"))
    # The same requests, each on its own store. Cells that share a summary and run at once under Ray may both
    # call for it before either has stored it (seen once: one call more), so calls are at least the basic
    # launcher's, and requests (calls + cache hits) the same.
    assert calls[0] > 0 and calls[1] >= calls[0]
    assert calls[0] + hits[0] == calls[1] + hits[1]


def test_two_nodes_with_their_own_stores_then_a_merge(tmp_path):
    """Each node runs part of the sweep on its own store; after a merge, the whole sweep makes 0 calls and
    gives the same results."""
    node_a = sweep(tmp_path, "node_a", tmp_path / "a.sqlite", "source=human", "setting=pairwise,individual")
    node_b = sweep(tmp_path, "node_b", tmp_path / "b.sqlite", "source=fake_other", "setting=pairwise,individual")
    reports = merge_stores(tmp_path / "merged.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"])
    assert sum(r.added for r in reports) == len(Store(tmp_path / "merged.sqlite")) > 0
    assert all(r.conflicts == 0 for r in reports)
    whole = sweep(tmp_path, "whole", tmp_path / "merged.sqlite", *CELLS)
    nodes = {**node_a, **node_b}
    assert sorted(whole) == sorted(nodes) and len(whole) == 4
    for name, (results, summary) in whole.items():
        assert summary["model_calls"] == 0, name
        node_results, node_summary = nodes[name]
        assert results == node_results, name
        assert _without_call_counts(summary) == _without_call_counts(node_summary), name


def _without_call_counts(summary):
    return {k: v for k, v in summary.items() if k not in ("model_calls", "cache_hits", "tokens")}
