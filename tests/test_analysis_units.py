"""The paper's unit as the headline, robustness fits, the per-cell quality columns (log-odds, smallest
detectable effect, judge competence), no pooling across conditions, and the planted-bias simulator.

Sweeps are synthetic: hand-built cells (tests.test_analysis.write_cell) or the simulator's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfpref_sweep.analysis.estimate.units import paper_units
from selfpref_sweep.analysis.job.pipeline import run_analysis, summary_text
from selfpref_sweep.analysis.report.items_view import collect_items
from selfpref_sweep.analysis.study import simulate as sim
from selfpref_sweep.analysis.sweep.load import load_sweeps
from selfpref_sweep.measurements.competence.competence_report import COMPETENCE_COLUMN, JUDGE_FAILED, quality_table
from selfpref_sweep.reporting.grouping import LEVEL_ITEM, LEVEL_SOURCE, LEVEL_UNIT

from .test_analysis import NO_WANDB, write_cell

# A small, fast simulated design: base + 2 recognition + 2 control fine-tunes, 2 sources.
SMALL = dict(n_articles=20, recognition_variants=2, control_variants=2, n_resamples=100)


def patch_summary(cell_dir: Path, change: Callable[[dict], None]) -> None:
    path = cell_dir / "summary.json"
    summary = json.loads(path.read_text())
    change(summary)
    path.write_text(json.dumps(summary))


# --- (a) the headline recovers a known line to 3 decimals -----------------------------------------

# Paper-unit points with a hand-computed OLS line: x̄ = 0.7, Sxx = 0.1; y = 0.2 + 0.5x + e with
# e ⟂ x (Σ dx·e = 0), so slope 0.5 and intercept 0.2 exactly; Syy = 0.25·0.1 + Σe² = 0.026 and
# Sxy = 0.05, so r = 0.05 / √(0.1 · 0.026) = 0.98058.
UNIT_X = (0.5, 0.6, 0.7, 0.8, 0.9)
UNIT_E = (0.01, -0.02, 0.0, 0.02, -0.01)


def known_line_sweep(root: Path) -> Path:
    """Five evaluators (paper units), two sources each. Source a's items average x + 0.01 (4 items), source
    b's x - 0.01 (2 items): the mean over sources is x, the pooled item mean is not. Source a also has an
    item excluded in recognition (its preference is extreme) and one excluded in preference: both must be
    left out of both means."""
    sweep = root / "known"
    job = 0
    for k, (x, e) in enumerate(zip(UNIT_X, UNIT_E, strict=True)):
        y = 0.2 + 0.5 * x + e
        for source, shift, spreads in (("a", 0.01, (-0.03, 0.03, -0.01, 0.01)), ("b", -0.01, (-0.02, 0.02))):
            items = [(f"art{i}", x + shift + d, y + shift + d) for i, d in enumerate(spreads)]
            if source == "a":
                items += [("art8", None, 0.99), ("art9", 0.01, None)]
            write_cell(sweep, job, evaluator=f"judge{k}", source=source, items=items, rec=x, pref=y)
            job += 1
    return sweep


def test_headline_recovers_a_known_slope_intercept_and_r(tmp_path: Path) -> None:
    sweep = known_line_sweep(tmp_path)
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    fit, = [f for f in result.headline_fits()]
    assert fit.ok and fit.n == 5 and fit.level == LEVEL_UNIT
    assert round(fit.slope, 3) == 0.500
    assert round(fit.intercept, 3) == 0.200
    assert round(fit.r, 3) == round(0.05 / math.sqrt(0.1 * 0.026), 3) == 0.981
    units = result.est.units.set_index("evaluator_variant")
    for k, x in enumerate(UNIT_X):
        assert units.loc[f"judge{k}", "rec_paper_mean"] == pytest.approx(x, abs=1e-12)
        assert units.loc[f"judge{k}", "n_items"] == 6 and units.loc[f"judge{k}", "n_items_excluded"] == 2
        assert units.loc[f"judge{k}", "sources"] == "a, b" and units.loc[f"judge{k}", "n_articles"] == 4
    row = next(line for line in result.report_md.read_text().splitlines()
               if line.startswith("| setting × label | pairwise / none | paper | 5 |"))
    assert "| 0.500 |" in row and "| 0.200 |" in row and "| 0.981 |" in row


def test_unit_cis_resample_whole_articles(tmp_path: Path) -> None:
    units = paper_units(load_sweeps([known_line_sweep(tmp_path)]).items, n_resamples=300)
    for _, u in units.iterrows():
        for q in ("rec", "pref"):
            assert u[f"{q}_paper_ci_low"] < u[f"{q}_paper_mean"] < u[f"{q}_paper_ci_high"]
    # One article: nothing to resample, so no interval (not a zero-width one).
    sweep = tmp_path / "one"
    write_cell(sweep, 0, items=[("only", 0.6, 0.7)])
    one = paper_units(load_sweeps([sweep]).items).iloc[0]
    assert one["rec_paper_mean"] == pytest.approx(0.6) and math.isnan(one["rec_paper_ci_low"])


# --- (b) the simulator: a planted effect is recovered within its CI --------------------------------


def test_simulator_recovers_the_planted_effects(tmp_path: Path) -> None:
    spec = sim.SimulationSpec(n_articles=30, recognition_variants=3, control_variants=3, recognition_high=1.5,
                              slope=0.6, item_slope=0.4, exclusion_rate=0.05, n_resamples=200, seed=7)
    sim.write_sweep(spec, tmp_path / "s")
    result = run_analysis([tmp_path / "s"], wandb_cfg=NO_WANDB)
    planted = sim.planted_effects(spec)
    assert planted["logodds"]["slope"] == pytest.approx(0.6)  # exact on the log-odds scale
    for f in result.headline_fits("paper") + result.headline_fits("logodds"):
        assert f.ok and f.n == 7
        assert f.slope_ci_low < planted[f.scale]["slope"] < f.slope_ci_high, f
        assert f.slope_ci_low > 0  # and detected
    item, = [f for f in result.est.robustness_fits if f.level == LEVEL_ITEM and f.scale == "logodds"]
    assert item.slope_ci_low < 0.4 < item.slope_ci_high and item.n_clusters == 30
    interaction = next(r for r in result.est.interactions if r.level == LEVEL_UNIT and r.scale == "logodds")
    assert planted["logodds"]["interaction"] == pytest.approx(0.0, abs=1e-12)  # controls on the same line
    assert interaction.ok and interaction.ci_low < 0.0 < interaction.ci_high
    text = sim.comparison_text(spec, result)
    assert "headline slope" in text and "NO" not in text.split("(intercept")[0]


def test_simulated_cells_are_what_the_scoring_stage_writes(tmp_path: Path) -> None:
    spec = sim.SimulationSpec(**SMALL, exclusion_rate=0.2, position_bias=2.0)
    drawn = sim.write_sweep(spec, tmp_path / "s")
    loaded = load_sweeps([tmp_path / "s"])
    assert loaded.problems == [] and len(loaded.cells) == 5 * 2
    keys = ["evaluator_variant", "source", "dataset", "article_id"]
    both = drawn.merge(loaded.items, on=keys, suffixes=("_drawn", "_read"))
    assert len(both) == len(drawn) == len(loaded.items)
    for col in ("rec_score", "pref_score", "rec_logodds", "pref_logodds"):
        assert np.allclose(both[f"{col}_drawn"], both[f"{col}_read"], equal_nan=True), col
    assert (both["rec_excluded_drawn"] == both["rec_excluded_read"]).all() and both["rec_excluded_read"].any()
    # A large position bias squashes the paper's score toward 0.5; the log-odds score keeps the signal.
    kept = loaded.items[~loaded.items["rec_excluded"]]
    assert abs(kept["rec_score"].mean() - 0.5) < abs(kept["rec_logodds"].mean()) / 4


def test_power_curve_rises_with_articles_and_stays_near_alpha_under_the_null() -> None:
    strong = sim.SimulationSpec(**SMALL, slope=1.0, recognition_high=2.0)
    curve = sim.power_curve(strong, [3, 40], reps=15).set_index("n_articles")
    assert curve.loc[40, "power_logodds"] == 1.0 and curve.loc[3, "power_logodds"] < curve.loc[40, "power_logodds"]
    null = sim.power_curve(sim.SimulationSpec(**SMALL, slope=0.0), [20], reps=30)
    assert null["power_paper"].iloc[0] <= 0.2 and null["power_logodds"].iloc[0] <= 0.2


def test_simulate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    args = ["--out", str(out), "--n-articles", "10", "--recognition-variants", "2", "--control-variants", "2",
            "--bootstrap", "50", "--power-articles", "5,10", "--power-reps", "3", "--failing-judges", "1"]
    assert sim.main(args) == 0
    stdout = capsys.readouterr().out
    for text in ("Planted vs recovered", "headline slope", "interaction (paper unit)", "Power:", "articles per cell",
                 str(out / "report.html")):
        assert text in stdout
    assert json.loads((out / "simulation.json").read_text())["effects"]["logodds"]["slope"] == pytest.approx(0.5)
    assert sim.main(args) == 2 and "not empty" in capsys.readouterr().err  # never writes into an old sweep
    assert sim.main(["--out", str(tmp_path / "x"), "--exclusion-rate", "1.5"]) == 2
    assert "exclusion_rate" in capsys.readouterr().err


# --- (c) the report names the cells whose judge failed the control ---------------------------------


def test_report_names_cells_whose_judge_failed_the_control(tmp_path: Path) -> None:
    sim.write_sweep(sim.SimulationSpec(**SMALL, failing_judges=1), tmp_path / "s")
    result = run_analysis([tmp_path / "s"], wandb_cfg=NO_WANDB)
    failed = result.data.cells[result.data.cells["jc_passed"].map(lambda v: v is False)]
    assert sorted(failed["source"]) == ["human", "paper_gpt4"] and set(failed["evaluator_variant"]) == {"simllm"}
    md, html = result.report_md.read_text(), result.report_html.read_text()
    section = md.split("## Judges that failed the competence control")[1].split("\n## ")[0]
    for cell_id in failed["cell_id"]:
        assert cell_id in section and cell_id in html and cell_id in summary_text(result)
    assert JUDGE_FAILED in section and JUDGE_FAILED in html and JUDGE_FAILED in summary_text(result)
    assert JUDGE_FAILED == "the judge could not do this task; a null here is uninformative"
    passed = result.data.cells[result.data.cells["jc_passed"].map(lambda v: v is True)]
    assert not any(f"| {c} |" in section for c in passed["cell_id"])
    units = result.est.units.set_index("evaluator_variant")["judge_competence"]
    assert units["simllm"] == "failed" and set(units.drop("simllm")) == {"passed"}


def test_quality_columns_read_defensively(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    new = write_cell(sweep, 0)
    patch_summary(new, lambda s: s["recognition"].update(
        mde={"value": 0.04, "n_articles": 14, "sd": 0.05, "alpha": 0.05, "power": 0.8, "scale": "paper"},
        logodds={"mean": 0.8, "ci_low": 0.5, "ci_high": 1.1}))
    patch_summary(new, lambda s: s.update(judge_competence={
        "enabled": True, "mean": 0.91, "ci_low": 0.85, "ci_high": 0.95, "n": 14, "n_excluded": 0, "exclusions": {},
        "threshold": 0.6, "passed": True, "calls_sampled": 28}))
    logodds = write_cell(sweep, 3, source="paper_claude")
    patch_summary(logodds, lambda s: s.update(judge_competence={
        "enabled": True, "setting": "individual", "mean": 0.62, "ci_low": 0.55, "ci_high": 0.69, "n": 10,
        "n_excluded": 0, "exclusions": {}, "logodds": {"mean": 0.94, "ci_low": 0.6, "ci_high": 1.28},
        "threshold": 0.405, "passed": True, "calls_sampled": 20}))
    off = write_cell(sweep, 1, source="paper_gpt4")
    patch_summary(off, lambda s: s.update(judge_competence={"enabled": False, "reason": "off for API models"},
                                          recognition={**s["recognition"], "mde": {"value": None, "n_articles": 1}}))
    write_cell(sweep, 2, source="gemma270")  # an older cell: none of the new blocks
    cells = load_sweeps([sweep]).cells
    table = quality_table(cells).set_index("source")
    assert table.loc["human", "recognition: smallest detectable effect"] == (
        "with n=14 articles, effects smaller than ±0.040 could not be seen")
    assert table.loc["human", COMPETENCE_COLUMN] == "paper scale 0.910 [0.850, 0.950] (n=14)"
    assert table.loc["human", "judge"] == "passed"
    assert table.loc["paper_claude", COMPETENCE_COLUMN] == (
        "log-odds 0.940 [0.600, 1.280]; paper scale 0.620 [0.550, 0.690] (n=10)")
    assert table.loc["paper_gpt4", COMPETENCE_COLUMN] == "off (off for API models)"
    assert "n=1 articles: too few" in table.loc["paper_gpt4", "recognition: smallest detectable effect"]
    assert table.loc["gemma270", COMPETENCE_COLUMN] == "— (not recorded)"
    assert table.loc["gemma270", "recognition: smallest detectable effect"] == "—"
    assert cells.set_index("source").loc["human", "rec_logodds_mean"] == 0.8
    # Older cells without log-odds: only the paper's scale is fitted, and the report says why.
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    assert {f.scale for f in result.est.unit_fits} == {"paper"}
    assert "older sweep" in result.report_md.read_text()


def test_items_view_shows_the_competence_verdict(tmp_path: Path) -> None:
    sim.write_sweep(sim.SimulationSpec(**SMALL), tmp_path / "s")
    items = collect_items([tmp_path / "s"])["items"]
    competence = items[0]["measurements"]["competence"]
    assert set(competence) == {"P(correct)", "forward P(correct)", "backward P(correct)"}
    assert 0.5 < competence["P(correct)"] < 1.0


# --- (d) never pooled across settings or label conditions -----------------------------------------


def test_settings_and_label_conditions_are_never_pooled(tmp_path: Path) -> None:
    # Opposite slopes in two label conditions, and a third setting: pooled, they would cancel.
    conditions = {("pairwise", "none"): 1.0, ("pairwise", "wrong"): -1.0, ("individual", "none"): 1.0}
    dirs = []
    for k, ((setting, label), slope) in enumerate(conditions.items()):
        spec = sim.SimulationSpec(**SMALL, setting=setting, label=label, slope=slope, recognition_high=2.0, seed=k)
        sim.write_sweep(spec, tmp_path / f"s{k}")
        dirs.append(tmp_path / f"s{k}")
    result = run_analysis(dirs, wandb_cfg=NO_WANDB)
    groups = {f"{s} / {lab}" for s, lab in conditions}
    for scale in ("paper", "logodds"):
        fits = {f.group: f for f in result.headline_fits(scale)}
        assert set(fits) == groups
        for (setting, label), slope in conditions.items():
            f = fits[f"{setting} / {label}"]
            assert f.ok and f.n == 5 and np.sign(f.slope) == np.sign(slope) and f.slope_ci_low * f.slope_ci_high > 0
    for f in result.est.unit_fits + result.est.robustness_fits:
        assert " / ".join(f.group.split(" / ")[:2]) in groups, f.group
    for f in result.est.robustness_fits:
        if f.level == LEVEL_SOURCE:
            assert f.n == 10 and f.n_clusters == 5  # one condition's cells, clustered by its 5 variants
    for r in result.est.interactions:
        # the fine-tuned points of one condition only
        assert " / ".join(r.group.split(" / ")[:2]) in groups and r.n in (4, 8)
    # Each unit belongs to one condition; the same variant appears once per condition.
    assert len(result.est.units) == 15 and result.est.units.groupby(["setting", "label"]).size().tolist() == [5, 5, 5]


def test_base_and_finetuned_meet_only_through_the_variant_factor(tmp_path: Path) -> None:
    sim.write_sweep(sim.SimulationSpec(**SMALL), tmp_path / "s")
    result = run_analysis([tmp_path / "s"], wandb_cfg=NO_WANDB)
    for f in result.est.robustness_fits:
        if f.level == LEVEL_ITEM:
            assert "slope within 5 evaluator variants" in f.note and math.isnan(f.intercept)
        else:
            assert f.cluster_by == "evaluator variant" and f.n_clusters == 5
    variants = set(result.est.units["evaluator_variant"])
    assert "simllm" in variants and "simllm [ft recognition on sim_xsum, n=2]" in variants
    assert isinstance(result.est.units, pd.DataFrame) and result.est.units["is_finetuned"].tolist().count(False) == 1


def test_own_summaries_from_a_dataset_make_another_variant(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_cell(sweep, 0, evaluator="gpt35")
    patch_summary(write_cell(sweep, 1, evaluator="gpt35", source="paper_gpt4"),
                  lambda s: s.update(own_summaries={"kind": "dataset", "name": "paper_gpt35"}))
    variants = sorted(load_sweeps([sweep]).cells["evaluator_variant"])
    assert variants == ["gpt35", "gpt35 [own: dataset paper_gpt35]"]
