"""`python -m selfpref_sweep.design`: what a planned sweep can detect. Its arm-Δ power is checked against the
analysis' own test (stats/replicates.pooled_delta) on simulated adapters at three designs, and its words say
what the figures speak for (a training run, or the recipe)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from selfpref_sweep.design.__main__ import main
from selfpref_sweep.design.detectable import Design, arm_delta_test, interaction_test, smallest_design
from selfpref_sweep.stats.replicates import pooled_delta


def _simulated_power(d: Design, effect: float, reps: int, seed: int) -> float:
    """How often the analysis' arm test rejects at ``effect``: K adapters, each Δ = effect + its training
    deviation + the articles' shared effect."""
    rng = np.random.default_rng(seed)
    articles = [f"a{j}" for j in range(d.articles)]
    hits = 0
    for _ in range(reps):
        shared = rng.normal(0.0, d.article_sd, d.articles)
        dev = rng.normal(0.0, d.training_sd or 0.0, d.adapters)
        frames = [pd.DataFrame({"source": "s", "article_id": articles, "v": effect + dev[i] + shared})
                  for i in range(d.adapters)]
        hits += pooled_delta(frames)["p"] < 0.05
    return hits / reps


@pytest.mark.parametrize("design", [Design(1, 20), Design(3, 20, 0.4), Design(5, 50, 0.2)],
                         ids=["1 adapter", "3 adapters, SD 0.4", "5 adapters, SD 0.2"])
def test_the_detectable_arm_delta_is_detected_80_percent_of_the_time(design):
    test = arm_delta_test(design)
    effect = test.detectable()
    assert test.power(effect) == pytest.approx(0.8, abs=1e-6)
    # 600 draws: Monte Carlo SE about 0.016; fixed seeds, so the check is deterministic
    assert _simulated_power(design, effect, 600, seed=3) == pytest.approx(0.8, abs=0.05)


def test_one_adapter_speaks_for_its_training_run_unless_a_training_sd_is_stated(capsys):
    assert main(["--adapters", "1", "--articles", "20"]) == 0
    out = capsys.readouterr().out
    assert "this training run only" in out and "the recipe's arm" not in out
    assert main(["--adapters", "1", "--articles", "20", "--training-sd", "0.3", "--training-sd-source",
                 "three seeds of a pilot"]) == 0
    out = capsys.readouterr().out
    assert "stated training SD 0.3, three seeds of a pilot" in out and "the recipe's arm Δ" in out
    # a stated SD makes the recipe's Δ harder to detect than the one run's
    run, recipe = arm_delta_test(Design(1, 20)), arm_delta_test(Design(1, 20, 0.3))
    assert recipe.detectable() > run.detectable()


def test_the_interaction_and_the_smallest_design():
    few = interaction_test(Design(1, 20, recognition_arms=2, control_arms=2))
    assert few is None  # 4 arms leave no df for two slopes
    more = interaction_test(Design(3, 20, 0.2, recognition_arms=4, control_arms=6, datasets=2))
    assert more is not None and more.df == 6 and more.equivalence_chance(0.25) < 0.5
    best = smallest_design(0.5, Design(1, 10))
    assert best is not None and arm_delta_test(best).detectable() <= 0.5
    assert arm_delta_test(Design(best.adapters, best.articles - 1)).detectable() > 0.5
    assert main(["--adapters", "0", "--articles", "20"]) == 2


def test_plan_mode_says_what_the_grids_fine_tune_design_can_detect():
    from selfpref_sweep.run.plan import design_lines

    def plan(task, n, seed_fp, dataset="paper_xsum"):
        return {"cell": {"setting": "pairwise", "dataset": dataset}, "n_articles": 20,
                "finetune": {"evaluator": "qwen05", "task": task, "n_articles": n, "finetune_dataset": "paper_xsum",
                             "fingerprint": seed_fp}}

    plans = [plan("recognition", n, f"r{n}s{s}") for n in (2, 10, 50) for s in (0, 1)]
    plans += [plan(t, 10, f"{t}s{s}") for t in ("length", "vowel", "readability") for s in (0, 1)]
    plans.append({"cell": {"setting": "pairwise", "dataset": "paper_xsum"}, "n_articles": 20})  # the base model
    lines = design_lines(plans)
    assert "2 adapter(s) per arm, 20 articles" in lines[1] and "the recipe (2 adapters per arm" in lines[2]
    assert any("interaction" in line and "df 2" in line for line in lines)
    assert design_lines([plans[-1]]) == []  # no fine-tuned arm: nothing to say
