"""The simulator's coverage mode (python -m selfpref_sweep.analysis.study.simulate --coverage): rows, data path,
arithmetic."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from selfpref_sweep.analysis.study import coverage as cov
from selfpref_sweep.analysis.study import coverage_mode as cm
from selfpref_sweep.analysis.study import design
from selfpref_sweep.analysis.study import simulate as sim
from selfpref_sweep.analysis.sweep.load import load_sweeps


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
    design = cm.CoverageDesign()
    truth = cm.coverage_truth(design.spec("pairwise", 10))
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
    individual = cm.coverage_truth(design.spec("individual", 10)).diffs.set_index("finetune_task")
    assert individual.loc["always_1", "drec_paper_mean"].abs().max() < 1e-12  # no order, no position bias


def test_the_in_memory_frame_is_what_the_loader_reads(tmp_path: Path) -> None:
    spec = replace(cm.CoverageDesign().spec("pairwise", 4), n_resamples=20, seed=3)
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
        assert len(x) == len(y) and all(_same(r.to_dict(), s.to_dict()) for r, s in zip(x, y, strict=True))
    # and the rows it scores are the same
    truth = cm.coverage_truth(spec)
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
            cov.add_trial(counts, "row", cov.covers(x.mean() - z * se, x.mean() + z * se, 1.0))
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
    assert cov.verdict(0.93, 0.01, "coverage", 200) == cov.HOLDS  # the rate on the edge is inside
    assert cov.verdict(0.925, 0.01, "coverage", 200) == cov.UNDECIDED  # outside, its MC interval reaching in
    assert cov.verdict(0.05, 0.005, "size", 200) == cov.HOLDS
    # 13.0% ± 3.4 SE at 100 reps once read "within MC error", as if it passed: undecided, it needs more reps
    assert cov.verdict(0.13, 0.034, "size", 100) == cov.UNDECIDED
    assert cov.verdict(0.13, 0.02, "size", 400) == cov.FAILS  # its whole MC interval above 7%
    assert cov.verdict(0.075, 0.01, "size", 100) == cov.UNDECIDED
    assert cov.verdict(0.0, 0.0, "size", 3) == cov.UNDECIDED  # 0 of 3 rules out nothing
    assert cov.verdict(0.0, 0.0, "size", 200) == cov.FAILS  # 0 of 200: below 3%


def test_undecided_rows_get_more_reps_until_decided(monkeypatch) -> None:
    """--until-decided doubles the reps of a setting x article count with an undecided row and scores again."""
    from selfpref_sweep.analysis.study import coverage_mode as S

    def fake_rep(task):  # a size row whose rate is 7.5% at first, then settles at 5% with more reps
        _, setting, n, rep, seed = task
        return {"setting": setting, "n_articles": n, "rep": rep, "seed": seed, "design": {},
                "counts": {"slope|all|paper|p": [int(rep % 20 == 0 or rep == 1), 1, 0]}}

    monkeypatch.setattr(S, "coverage_rep", fake_rep)
    monkeypatch.setattr(cov, "ROWS", [cov.Row("slope|all|paper|p", "size", "a size row")])
    args = SimpleNamespace(reps=40, until_decided=160, seed=0, workers=1, cache=None)
    records = S.run_coverage(S.CoverageDesign(), ["pairwise"], [10], 40)
    tables = cov.coverage_table(records)
    assert cov.undecided(tables) == [("pairwise", 10)]  # 3/40 = 7.5%
    records, tables = S._until_decided(S.CoverageDesign(), args, records, tables)
    assert len(records) == 80 and cov.undecided(tables) == []  # 5/80 = 6.25%: holds
    assert tables["pairwise"].iloc[0]["10 articles"].verdict == cov.HOLDS


def test_the_simulators_control_arms_are_every_fine_tune_task_but_recognition() -> None:
    """One home for the task groups (config/__init__.py): the simulator's controls are derived from them, in the
    design's order (the control-question tasks, then the recognition-prompt controls). The positive control is no
    control arm: it moves preference by construction, and the analysis keeps it out of the fits."""
    from selfpref_sweep.config import POSITIVE_CONTROL_TASKS, FinetuneTaskName

    assert design.CONTROL_ARMS == ("length", "vowel", "readability", "always_1", "random")
    assert set(design.CONTROL_ARMS) == ({t.value for t in FinetuneTaskName} - {"none", "recognition"}
                                     - {t.value for t in POSITIVE_CONTROL_TASKS})


def _one_cell(setting: str = "pairwise", n: int = 10, seed: int = 5) -> tuple[pd.DataFrame, list]:
    """The drawn items of one simulated cell, and the same items as the cell writes them (record.Item)."""
    from selfpref_sweep.records.schema import CELL_KEYS, CellCoordinates

    items = design.draw_items(cm.CoverageDesign().spec(setting, n), np.random.default_rng(seed))
    cell = items[items["cell_id"] == items["cell_id"].iloc[0]]
    coords = CellCoordinates(**{k: sim._plain(cell.iloc[0][k]) for k in CELL_KEYS})
    return cell, sim._cell_items(cell, coords)


def _truth_row(cell: pd.DataFrame, **values: float) -> cov.Truth:
    first = cell.iloc[0]
    row = {"dataset": first["dataset"], "evaluator_variant": first["evaluator_variant"], "source": first["source"],
           **{f"{q}_{s}": 0.0 for q in ("rec", "pref") for s in ("paper", "logodds")},
           "rec_acc": 0.5, "rec_acc_forward": 0.5, "rec_acc_backward": 0.5, **values}
    return cov.Truth(units=pd.DataFrame(), points=pd.DataFrame([row]), diffs=pd.DataFrame())


def test_cell_rows_score_the_intervals_the_cell_prints() -> None:
    """A truth just inside the printed interval counts as covered, one just outside as missed: the rows score
    the cell's own CI (scores.question_stats) and the classifier's own Wilson interval (pairwise_metrics)."""
    from selfpref_sweep.measurements.recognition_classifier.classifier_cell import pairwise_metrics
    from selfpref_sweep.records.scores import question_stats

    cell, items = _one_cell()
    printed_mean = question_stats(items, "recognition", 0.95).logodds
    printed_acc = pairwise_metrics([it.verdicts["recognition"] for it in items], 10, 0.95)["accuracy_forward"]
    eps = 1e-9
    for shift, expected in ((+eps, 1), (-eps, 0)):
        counts: cov.Counts = {}
        truth = _truth_row(cell, rec_logodds=printed_mean["ci_low"] + shift,
                           rec_acc_forward=printed_acc["ci_low"] + shift)
        cov.cell_counts(cell, truth, counts)
        assert counts["cell|rec|logodds"] == [expected, 1, 0]
        assert counts["acc|forward"] == [expected, 1, 0]
    assert 0.0 < printed_acc["ci_low"] < printed_acc["value"]  # a real interval, not a degenerate one


def test_the_per_source_test_rejects_a_false_truth_and_holm_counts_families() -> None:
    cell, _ = _one_cell()
    mean = float(cell["rec_logodds"].mean())
    other = cell.assign(source="other", cell_id=cell["cell_id"] + "|other")
    both = pd.concat([cell, other])
    points = pd.concat([_truth_row(cell, rec_logodds=mean).points,
                        _truth_row(other, rec_logodds=mean + 10.0).points])
    counts: cov.Counts = {}
    cov.cell_counts(both, cov.Truth(units=pd.DataFrame(), points=points, diffs=pd.DataFrame()), counts)
    assert counts["srcp|logodds"] == [1, 2, 0]  # the true mean is not rejected, a mean 10 away is
    assert counts["srcholm|logodds"] == [1, 1, 0]  # one family of two sources, and it made an error


@pytest.mark.parametrize("setting", ["pairwise", "individual"])
def test_the_true_accuracy_is_what_many_articles_give(setting: str) -> None:
    spec = cm.CoverageDesign().spec(setting, 4000)
    items = design.draw_items(spec, np.random.default_rng(11))
    truth = cm.coverage_truth(spec).points.set_index(["dataset", "evaluator_variant", "source"])
    for key, sub in items.groupby(["dataset", "evaluator_variant", "source"]):
        t = truth.loc[key]
        forward, backward = sub["rec_p_forward"] > 0.5, sub["rec_p_backward"] > 0.5
        assert 0.5 * (forward.mean() + backward.mean()) == pytest.approx(t["rec_acc"], abs=0.025)
        if setting == "pairwise":
            assert forward.mean() == pytest.approx(t["rec_acc_forward"], abs=0.025)
            assert backward.mean() == pytest.approx(t["rec_acc_backward"], abs=0.025)
        else:
            assert math.isnan(t["rec_acc_forward"])


def test_the_harder_design_plants_article_effects_an_arm_shares():
    """Arm-by-article effects are shared by an arm's adapters and differ between arms, variant-by-article ones
    differ between adapters too; both hit recognition and preference alike, and widen the item SD the paper-scale
    truths are computed with. Unplanted, the random stream is the plain design's."""
    harder = cm.CoverageDesign(adapters_per_arm=2, adapter_sd=0.0, arm_article_sd=1.0).spec("pairwise", 10)
    items = design.draw_items(harder, np.random.default_rng(0))
    one = items[(items["source"] == "human") & (items["dataset"] == "sim_xsum")]
    by_variant = {name: g.set_index("article_id")["rec_logodds"] for name, g in one.groupby("evaluator_variant")}
    seeds = [name for name in by_variant if name.endswith("[seed=0]") or name.endswith("[seed=1]")]
    arm = seeds[0].rsplit(" [seed=", 1)[0]
    a, b = by_variant[f"{arm} [seed=0]"], by_variant[f"{arm} [seed=1]"]
    other = next(by_variant[n] for n in seeds if not n.startswith(arm))
    # adapters of one arm move together over articles (shared effect SD 1 against item noise SD 1)
    assert np.corrcoef(a, b)[0, 1] > np.corrcoef(a, other)[0, 1] + 0.2
    assert harder.item_sd == pytest.approx(math.sqrt(1.0 + 0.25 + 1.0))
    plain = cm.CoverageDesign(adapters_per_arm=2).spec("pairwise", 10)
    same = design.draw_items(replace(plain, variant_article_sd=0.0), np.random.default_rng(0))
    assert same.equals(design.draw_items(plain, np.random.default_rng(0)))


def test_each_adapter_s_own_rows_are_scored_against_its_own_truth():
    """Replicated arms with training randomness: the deviations coverage_rep draws first are the ones draw_items
    would draw (same stream), and the truth it scores an adapter's own rows by carries that adapter's deviation,
    while the arms' population truth does not."""
    spec = cm.CoverageDesign(adapters_per_arm=2, adapter_sd=0.4).spec("pairwise", 4)
    plain = design.draw_items(spec, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    deviations = design.draw_adapter_deviations(spec, rng)
    assert plain.equals(design.draw_items(spec, rng, adapter_deviations=deviations))
    name, shift = next(iter(deviations.items()))
    population, own = cm.coverage_truth(spec), cm.coverage_truth(spec, deviations)
    at = {t: frame.set_index(["dataset", "evaluator_variant"]) for t, frame in (("p", population.units),
                                                                                ("o", own.units))}
    row = (spec.datasets[0], name)
    assert at["o"].loc[row, "pref_logodds_mean"] == pytest.approx(at["p"].loc[row, "pref_logodds_mean"] + shift)
    assert at["o"].loc[row, "rec_logodds_mean"] == at["p"].loc[row, "rec_logodds_mean"]
    base = population.units[population.units["finetune_task"] == "none"]["evaluator_variant"].iloc[0]
    assert at["o"].loc[(spec.datasets[0], base), "pref_paper_mean"] == at["p"].loc[(spec.datasets[0], base),
                                                                                     "pref_paper_mean"]


def test_an_arms_paper_scale_truth_averages_over_its_adapters_deviations():
    """An arm's population value on the paper scale is the mean over training deviations of each adapter's own
    expected score (here by Monte Carlo over many drawn deviations), not the score at the mean deviation; the
    log-odds value and the base model (no adapters) are unchanged."""
    spec = cm.CoverageDesign(adapters_per_arm=3, adapter_sd=1.6).spec("pairwise", 10)
    population = cm.coverage_truth(spec).units.set_index(["dataset", "evaluator_variant"])
    at_mean = cm.coverage_truth(spec, {}).units.set_index(["dataset", "evaluator_variant"])
    arm = next(v.name(spec) for v in design.variants(spec) if v.finetune_task == "length")
    row = (spec.datasets[0], arm)
    draws = np.random.default_rng(0).normal(0.0, spec.adapter_sd, 400)
    own = [cm.coverage_truth(spec, {arm: float(d)}).units.set_index(["dataset", "evaluator_variant"]).loc[
        row, "pref_paper_mean"] for d in draws]
    assert population.loc[row, "pref_paper_mean"] == pytest.approx(np.mean(own), abs=3 * np.std(own) / 20)
    assert abs(population.loc[row, "pref_paper_mean"] - at_mean.loc[row, "pref_paper_mean"]) > 0.01  # the gap
    assert population.loc[row, "pref_logodds_mean"] == at_mean.loc[row, "pref_logodds_mean"]
    base = next(v.name(spec) for v in design.variants(spec) if v.finetune_task == "none")
    assert population.loc[(spec.datasets[0], base), "pref_paper_mean"] == at_mean.loc[(spec.datasets[0], base),
                                                                                       "pref_paper_mean"]


def test_each_direction_of_the_corrected_shift_is_scored_apart() -> None:
    """The report's "positive shift" and "negative shift" are two words, each promised at 2.5%: an interval wholly
    above the true shift fires the first only; one without an interval fires neither and is counted as such."""
    from selfpref_sweep.analysis.estimate import resample as RS
    from selfpref_sweep.reporting.grouping import LEVEL_UNIT

    group_by, group = cov._ALL, "pairwise / none"
    truth = RS.ResampledFit(what="shift", level=LEVEL_UNIT, group_by=group_by, group=group, scale="logodds",
                            method=RS.RESAMPLE_OLS, n=8, ok=True, estimate=0.0)

    def counts(ci: tuple[float, float]) -> cov.Counts:
        row = RS.ResampledFit(what="shift", level=LEVEL_UNIT, group_by=group_by, group=group, scale="logodds",
                              method=RS.RESAMPLE_CORRECTED, n=8, ok=True, estimate=sum(ci) / 2, ci_low=ci[0],
                              ci_high=ci[1])
        out: cov.Counts = {}
        cov.resampled_counts(SimpleNamespace(resampled=[row]), {"resampled": [truth]}, out)
        return out

    key = f"|shift|{LEVEL_UNIT}|all|logodds"
    above = counts((0.1, 0.5))
    assert above["rs+" + key] == [1, 1, 0] and above["rs-" + key] == [0, 1, 0] and above["rs" + key] == [1, 1, 0]
    assert counts((-0.5, -0.1))["rs-" + key] == [1, 1, 0]
    refused = counts((math.nan, math.nan))
    assert refused["rs+" + key] == [0, 1, 1] and refused["rs-" + key] == [0, 1, 1]
    rows = {r.key: r for r in cov.ROWS}
    assert rows["rs+" + key].kind == "one-sided size" and cov.TARGETS["one-sided size"] == (0.015, 0.035)
