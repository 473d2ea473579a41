"""The simulator's coverage mode (python -m selfpref_sweep.analysis.simulate --coverage): rows, data path, arithmetic."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfpref_sweep.analysis import coverage as cov
from selfpref_sweep.analysis import simulate as sim
from selfpref_sweep.analysis.load import load_sweeps


def test_coverage_mode_prints_every_row_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md, cache = tmp_path / "docs" / "coverage.md", tmp_path / "reps.jsonl"
    args = ["--coverage", "--articles", "5", "--settings", "pairwise", "--workers", "1", "--cache", str(cache),
            "--out-md", str(md)]
    assert sim.main([*args, "--reps", "2"]) == 0
    out = capsys.readouterr().out
    for row in cov.ROWS:
        assert f"| {row.label} |" in out, row.label
    assert md.read_text(encoding="utf-8").strip() == out.strip()
    assert "(2 reps at 5 articles)" in out
    # A larger --reps reuses the cached reps and runs only the new one.
    assert sim.main([*args, "--reps", "3"]) == 0
    lines = [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["rep"] for r in lines) == [0, 1, 2]
    assert "(3 reps at 5 articles)" in capsys.readouterr().out


def test_the_design_plants_its_truths() -> None:
    design = sim.CoverageDesign()
    truth = sim.coverage_truth(design.spec("pairwise", 10))
    d = truth.diffs.set_index("finetune_task")
    # Controls with no change are null on both scales; always_1 changed only its position bias, which the
    # log-odds score cancels and the paper's score does not.
    assert d.loc[["length", "vowel"], "drec_logodds_mean"].abs().max() == 0.0
    assert d.loc[["length", "vowel"], "drec_paper_mean"].abs().max() < 1e-12
    assert d.loc["always_1", "drec_logodds_mean"].abs().max() == 0.0
    assert d.loc["always_1", "drec_paper_mean"].abs().min() > 0.01
    fits = cov.true_fits(truth)
    for r in fits["specificity"] + fits["interaction"]:  # every arm on one line: the tests' nulls hold
        assert r.ok and abs(r.shift if hasattr(r, "shift") else r.estimate) < 1e-9, r
    individual = sim.coverage_truth(design.spec("individual", 10)).diffs.set_index("finetune_task")
    assert individual.loc["always_1", "drec_paper_mean"].abs().max() < 1e-12  # no order, no position bias


def test_the_in_memory_frame_is_what_the_loader_reads(tmp_path: Path) -> None:
    spec = replace(sim.CoverageDesign().spec("pairwise", 4), n_resamples=20, seed=3)
    drawn = sim.write_sweep(spec, tmp_path / "s")  # draw_items(spec, default_rng(seed)), as coverage_rep draws
    loaded = load_sweeps([tmp_path / "s"])
    assert loaded.problems == [] and len(loaded.items) == len(drawn)
    keys = ["evaluator_variant", "source", "dataset", "article_id"]
    both = drawn.merge(loaded.items, on=keys, suffixes=("_drawn", "_read"))
    assert len(both) == len(drawn)
    for col in ("rec_score", "pref_score", "rec_logodds", "pref_logodds", "is_finetuned", "transfer",
                "finetune_task", "setting", "label"):
        a, b = both[f"{col}_drawn"], both[f"{col}_read"]
        assert (np.allclose(a.astype(float), b.astype(float)) if col.endswith(("score", "logodds"))
                else (a.astype(str) == b.astype(str)).all()), col
    mem, disk = cov.analyse(drawn), cov.analyse(loaded.items)
    key = ["dataset", "evaluator_variant"]
    for a, b in ((mem.units, disk.units), (mem.diffs, disk.diffs)):
        a, b = a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
        num = [c for c in a.columns if c.startswith(("rec_", "pref_", "drec_", "dpref_")) and a[c].dtype.kind == "f"]
        assert num and np.allclose(a[num].to_numpy(float), b[num].to_numpy(float), equal_nan=True)
    for x, y in ((mem.unit_fits, disk.unit_fits), (mem.robustness_fits, disk.robustness_fits),
                 (mem.specificity, disk.specificity), (mem.interactions, disk.interactions), (mem.trends, disk.trends)):
        assert len(x) == len(y) and all(_same(r.to_dict(), s.to_dict()) for r, s in zip(x, y))
    # and the rows it scores are the same
    truth = sim.coverage_truth(spec)
    fits = cov.true_fits(truth)
    assert cov.rep_counts(mem, truth, fits) == cov.rep_counts(disk, truth, fits)


def _same(a: dict, b: dict) -> bool:
    for k, v in a.items():
        w = b[k]
        if isinstance(v, float) and isinstance(w, float):
            if not (math.isclose(v, w, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(v) and math.isnan(w))):
                return False
        elif k != "cov" and v != w:
            return False
    return True


def test_a_too_narrow_interval_shows_low_coverage_and_a_right_one_does_not() -> None:
    rng = np.random.default_rng(0)
    reps: dict[str, list] = {"narrow": [], "right": []}
    for _ in range(2000):
        x = rng.normal(1.0, 2.0, 25)
        se = 2.0 / 5  # known sigma: mean ± 1.96 se covers 95%, ± 1 se about 68%
        for name, z in (("narrow", 1.0), ("right", 1.96)):
            counts: cov.Counts = {}
            cov._add(counts, "row", cov.covers(x.mean() - z * se, x.mean() + z * se, 1.0))
            reps[name].append(counts["row"])
    narrow, right = cov.aggregate(reps["narrow"], "coverage"), cov.aggregate(reps["right"], "coverage")
    assert narrow.rate == pytest.approx(0.683, abs=0.03) and narrow.verdict == cov.FAILS
    assert right.rate == pytest.approx(0.95, abs=0.012) and right.verdict != cov.FAILS
    assert narrow.se == pytest.approx(math.sqrt(0.683 * 0.317 / 2000), rel=0.1)  # one trial per rep: binomial


def test_unit_rows_compare_each_interval_with_its_unit_truth() -> None:
    res = cov.Analysed(*([pd.DataFrame()] * 3), [], [], [], [], [])
    res.units = pd.DataFrame({"dataset": ["d", "d"], "evaluator_variant": ["a", "b"],
                              **{f"{q}_{s}_{k}": [lo, hi]
                                 for q in ("rec", "pref") for s in ("paper", "logodds")
                                 for k, lo, hi in (("mean", 0.55, 0.55), ("ci_low", 0.5, 0.5),
                                                   ("ci_high", 0.6, 0.6))}})
    truth = cov.Truth(units=pd.DataFrame({"dataset": ["d", "d"], "evaluator_variant": ["a", "b"],
                                          **{f"{q}_{s}_mean": [0.55, 0.7] for q in ("rec", "pref")
                                             for s in ("paper", "logodds")}}),
                      points=pd.DataFrame(), diffs=pd.DataFrame())
    counts: cov.Counts = {}
    cov.unit_counts(res, truth, counts)
    assert counts["unit|rec|paper"] == [1, 2, 0]  # a covers 0.55, b misses 0.7


def test_verdicts_against_the_target() -> None:
    assert cov.verdict(0.95, 0.005, "coverage", 200) == cov.HOLDS
    assert cov.verdict(0.80, 0.01, "coverage", 200) == cov.FAILS
    assert cov.verdict(0.93, 0.01, "coverage", 200) == cov.MC_ERROR
    assert cov.verdict(0.05, 0.005, "size", 200) == cov.HOLDS
    assert cov.verdict(0.0, 0.0, "size", 3) == cov.MC_ERROR  # 0 of 3 rules out nothing
    assert cov.verdict(0.0, 0.0, "size", 200) == cov.FAILS  # 0 of 200: below 3%


def test_the_simulators_control_arms_are_every_fine_tune_task_but_recognition() -> None:
    """One home for the task groups (config.py): the simulator's controls are derived from them, in the design's
    order (the control-question tasks, then the recognition-prompt controls)."""
    from selfpref_sweep.config import FinetuneTaskName

    assert sim.CONTROL_ARMS == ("length", "vowel", "readability", "always_1", "random")
    assert set(sim.CONTROL_ARMS) == {t.value for t in FinetuneTaskName} - {"none", "recognition"}
