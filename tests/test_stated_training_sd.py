"""A training SD the user states for one-adapter arms (analysis.training_sd with its source): the arm rows add it
to their variance and speak for the recipe; without it they speak for the training run; half-stated or invalid
input fails with the reason; replicated arms ignore it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from selfpref_sweep.analysis.estimate.arms import StatedTrainingSD, arm_deltas, stated_variance
from selfpref_sweep.analysis.job.command import main as analysis_main
from selfpref_sweep.analysis.study.coverage_mode import CoverageDesign
from selfpref_sweep.analysis.study.design import draw_items
from selfpref_sweep.stats.replicates import pooled_delta
from tests.test_replicates import frames

STATED = StatedTrainingSD(0.4, "3 seeds of this recipe in an earlier sweep")


def test_a_stated_variance_joins_a_single_adapters_interval_as_known():
    one = frames(np.random.default_rng(0), 1, 0.0)
    bare, stated = pooled_delta(one), pooled_delta(one, stated_var=0.16)
    assert stated["mean"] == bare["mean"] and stated["training_sd"] == pytest.approx(0.4)
    se_bare = (bare["ci_high"] - bare["ci_low"]) / 2 / stats.t.ppf(0.975, bare["df"])
    total = se_bare ** 2 + 0.16
    df = total ** 2 / (se_bare ** 4 / bare["df"])  # Welch-Satterthwaite with the stated part known
    half = stats.t.ppf(0.975, df) * math.sqrt(total)
    assert (stated["ci_low"], stated["ci_high"]) == pytest.approx((stated["mean"] - half, stated["mean"] + half))
    assert stated["p"] > bare["p"]


def test_replicates_win_over_a_stated_sd():
    three = frames(np.random.default_rng(1), 3, 0.3)
    assert pooled_delta(three, stated_var=4.0) == pooled_delta(three)


@pytest.mark.parametrize("sd,source,words", [
    (0.4, "", "needs analysis.training_sd_source"), (-0.1, "x", ">= 0"), (math.nan, "x", "finite"),
    (None, "seeds", "training_sd_source is set but analysis.training_sd is not")])
def test_a_half_stated_or_invalid_sd_is_refused_naming_why(sd, source, words):
    with pytest.raises(ValueError, match=words):
        StatedTrainingSD.of(sd, source)


def test_nothing_stated_is_none():
    assert StatedTrainingSD.of(None, "") is None and StatedTrainingSD.of(None, None) is None


def test_the_paper_scale_takes_the_steeper_judges_slope():
    import pandas as pd

    frame = pd.DataFrame({"v": [0.1, 0.2], "tuned": [0.9, 0.9], "base": [0.5, 0.7]})
    slope = max(0.9 * 0.1, (0.25 + 0.21) / 2)
    assert stated_variance(STATED, 1, "paper", frame) == pytest.approx((slope * 0.4) ** 2)
    assert stated_variance(STATED, 1, "logodds", frame) == pytest.approx(0.16)
    assert stated_variance(STATED, 3, "logodds", frame) is None and stated_variance(None, 1, "paper", frame) is None


def test_one_adapter_arms_speak_for_the_recipe_only_with_a_stated_sd():
    items = draw_items(CoverageDesign().spec("pairwise", 10), np.random.default_rng(0))
    run, recipe = arm_deltas(items), arm_deltas(items, STATED)
    assert run["speaks_for"].str.startswith("this training run only").all()
    assert recipe["speaks_for"].str.contains("the recipe (one adapter; stated training SD 0.4 log-odds (3 seeds",
                                             regex=False).all()
    assert (recipe["note"] == "").all() and run["note"].str.contains("not training randomness").all()
    for col in ("dpref_logodds", "drec_paper"):
        assert np.allclose(recipe[f"{col}_mean"], run[f"{col}_mean"])
        assert ((recipe[f"{col}_ci_high"] - recipe[f"{col}_ci_low"])
                > (run[f"{col}_ci_high"] - run[f"{col}_ci_low"])).all()
    assert np.allclose(recipe["dpref_logodds_training_sd"], 0.4) and run["dpref_logodds_training_sd"].isna().all()
    replicated = draw_items(CoverageDesign(adapters_per_arm=3, adapter_sd=0.1).spec("pairwise", 10),
                            np.random.default_rng(0))
    assert arm_deltas(replicated, STATED).equals(arm_deltas(replicated))  # its own adapters' spread, not the SD


def test_the_command_refuses_an_sd_without_its_source(tmp_path, capsys):
    (tmp_path / "cell").mkdir()
    with pytest.raises(SystemExit, match="needs analysis.training_sd_source"):
        analysis_main([str(tmp_path), "--training-sd", "0.3"])


def test_the_report_prints_the_stated_sd_with_the_recipe_rows(tmp_path, monkeypatch):
    """A one-adapter sweep on disk, analysed with --training-sd and its source: the per-arm table appears, its rows
    speak for the recipe naming the SD and its source, and the summary says what the verdict rests on."""
    from selfpref_sweep.analysis.study import heldout

    monkeypatch.setenv("WANDB_MODE", "disabled")
    design = heldout.HeldoutDesign(n_articles=4, adapters_per_arm=1)
    heldout.write_sweep(design, heldout.draw_sweep(design, np.random.default_rng(0)), tmp_path)
    assert analysis_main([str(tmp_path), "--wandb-mode", "disabled", "--training-sd", "0.3",
                          "--training-sd-source", "two seeds, 2026-11 sweep"]) == 0
    report = (tmp_path / "report.md").read_text()
    words = "the recipe (one adapter; stated training SD 0.3 log-odds (two seeds, 2026-11 sweep))"
    assert "per arm: its adapters pooled" in report and words in report
    assert "rests on the stated training SD 0.3 log-odds (two seeds, 2026-11 sweep)" in report
    assert analysis_main([str(tmp_path), "--wandb-mode", "disabled"]) == 0  # nothing stated: the run only
    report = (tmp_path / "report.md").read_text()
    assert "per arm: its adapters pooled" not in report and "stated training SD" not in report
