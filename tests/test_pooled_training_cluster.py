"""Pooled over datasets, one training run (adapter) is one cluster. Its preference deviation is the
same on every dataset it was judged on, so pooling two datasets halves the articles' variance of a fit but not
the training part: the pooled fits' training term (training_variance.py) must weigh an adapter by the sum of its
points' weights, not count its two dataset points as two independent draws."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from selfpref_sweep.analysis.estimate import resample as RS
from selfpref_sweep.analysis.estimate import training_variance as TV
from selfpref_sweep.reporting.grouping import GROUPINGS, LEVEL_UNIT, SCALES

POOLED = GROUPINGS[0][0]
ARMS = (("recognition", 2, 0.8), ("recognition", 10, 1.4), ("recognition", 50, 2.0),
        ("length", 10, 0.6), ("vowel", 10, 1.2), ("readability", 10, 1.8))
DATASETS = ("ds_a", "ds_b")
DEVIATIONS = (0.25, -0.15, 0.05, -0.3, 0.2, 0.1)  # per seed, cycled over the arms: no arm's adapters agree


def _points(k: int, article_noise: float) -> tuple[dict, dict]:
    """Fine-tuned paper units (adapter × dataset) whose recognition is the arm's, the same on both datasets, and
    whose preference is recognition plus the adapter's own deviation, also the same on both: every arm on one line
    but for training randomness. The draws move each point by a tiny article noise (independent by dataset)."""
    rows, rec, pref = [], [], []
    for a, (task, n, x) in enumerate(ARMS):
        for seed in range(k):
            u = DEVIATIONS[(a + 2 * seed) % len(DEVIATIONS)]
            for ds in DATASETS:
                rows.append(dict(setting="pairwise", label="none", dataset=ds, finetune_task=task,
                                 transfer="in_domain" if ds == DATASETS[0] else "cross_dataset",
                                 evaluator_variant=f"judge [ft {task} on {DATASETS[0]}, n={n}] [seed={seed}]"))
                rec.append(x)
                pref.append(x + u)
    frame = pd.DataFrame(rows)
    rng = np.random.default_rng(7)
    draws = 200
    values = {}
    for scale in SCALES:
        for q, sample in (("rec", rec), ("pref", pref)):
            base = np.asarray(sample, float)[:, None]
            values[(LEVEL_UNIT, q, scale)] = np.hstack([base, base + article_noise * rng.standard_normal((len(base),
                                                                                                         draws))])
    articles = [np.arange(10) + (10 if ds == DATASETS[1] else 0) for ds in frame["dataset"]]
    return {LEVEL_UNIT: (frame, articles)}, values


def _row(fits, group_by: str, group_end: str, method: str):
    rows = [f for f in fits if f.what == RS.SHIFT and f.scale == "logodds" and f.method == method
            and f.group_by == group_by and f.group.endswith(group_end)]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.mark.parametrize("method", [RS.RESAMPLE_OLS, RS.RESAMPLE_CORRECTED])
@pytest.mark.parametrize("k", [1, 3])
def test_pooling_two_datasets_does_not_halve_an_adapters_training_variance(method: str, k: int) -> None:
    """With both datasets' points alike, the pooled shift is each dataset's, and so is its training variance
    (each adapter's deviation counted once, its weight summed over its two points) and its df (Σ(k − 1) with
    replicated arms, arms − 3 without). Counted as independent points it would come out half, on twice the df."""
    frames, values = _points(k, article_noise=1e-4)
    fits = RS.fit_levels(frames, values)
    pooled = _row(fits, POOLED, "none", method)
    in_domain = _row(fits, "setting × label × transfer", "in_domain", method)
    assert pooled.ok and in_domain.ok and math.isfinite(pooled.se) and math.isfinite(in_domain.se)
    assert pooled.estimate == pytest.approx(in_domain.estimate, abs=1e-6)
    assert pooled.se == pytest.approx(in_domain.se, rel=0.02)  # training dominates: the articles add ~nothing
    assert pooled.training_df == in_domain.training_df == (len(ARMS) * (k - 1) if k > 1 else len(ARMS) - 3)
    assert pooled.n_adapters == in_domain.n_adapters == len(ARMS) * k  # adapters, not adapter × dataset points


def test_the_membership_weighs_an_adapter_once_across_datasets() -> None:
    """Membership.of_points: one column per adapter, 1 in each of its points, whatever dataset they are on."""
    adapters = np.array(["a [seed=0]", "a [seed=0]", "a [seed=1]", "a [seed=1]", "base", "base"])
    arms = np.array(["a", "a", "a", "a", "base", "base"])
    trained = np.array([True, True, True, True, False, False])
    x = y = np.zeros((6, 3))
    m = TV.Membership.of_points(adapters, arms, trained, np.array([0, 1, 0, 1, 2, 3]), x, y)
    assert m.adapters.shape == (6, 2) and m.n_adapters == 2
    np.testing.assert_array_equal(m.adapters, [[1, 0], [1, 0], [0, 1], [0, 1], [0, 0], [0, 0]])


def test_the_coverage_study_scores_pooled_in_domain_and_cross_dataset_rows_apart() -> None:
    """coverage.py: a transfer group's shift counts in its grouping's row (which calibration.py reads) and in its
    own condition's, so that the pooled row can be set beside the in-domain and the cross-dataset ones."""
    from types import SimpleNamespace

    from selfpref_sweep.analysis.study import coverage as cov

    def fit(group_by: str, group: str, low: float) -> RS.ResampledFit:
        return RS.ResampledFit(what=RS.SHIFT, level=LEVEL_UNIT, group_by=group_by, group=group, scale="logodds",
                               method=RS.RESAMPLE_CORRECTED, n=10, ok=True, estimate=low + 0.5, ci_low=low,
                               ci_high=low + 1.0)

    transfer = "setting × label × transfer"
    fits = [fit(POOLED, "pairwise / none", 0.1), fit(transfer, "pairwise / none / in_domain", -0.5),
            fit(transfer, "pairwise / none / cross_dataset", 0.2)]
    truths = [SimpleNamespace(what=f.what, level=f.level, group_by=f.group_by, group=f.group, scale=f.scale,
                              estimate=0.0) for f in fits]
    counts: dict = {}
    cov.resampled_counts(SimpleNamespace(resampled=fits), {"resampled": truths}, counts)
    assert counts["rs|shift|paper unit|all|logodds"] == [1, 1, 0]  # [rejections, trials, no interval]
    assert counts["rs|shift|paper unit|transfer|logodds"] == [1, 2, 0]
    assert counts["rs|shift|paper unit|in|logodds"] == [0, 1, 0]
    assert counts["rs|shift|paper unit|cross|logodds"] == [1, 1, 0]
    keys = {r.key for r in cov.ROWS}
    assert {"rs|shift|paper unit|in|logodds", "rsols|interaction|source|cross|paper",
            "specificity|paper unit|in|paper"} <= keys


def test_a_rows_rate_among_the_trials_with_an_interval_is_kept_beside_its_rate() -> None:
    """A refusal counts as a miss in the size (the word does not fire); an outside scorer that drops refusals reads
    the rate among the trials with an interval, which the table now prints beside it."""
    from selfpref_sweep.analysis.study import coverage as cov

    cell = cov.aggregate([[1, 2, 1], [0, 2, 1], [1, 2, 0], [0, 2, 0]], "size")  # 2 rejections, 8 trials, 2 refusals
    assert cell.rate == pytest.approx(2 / 8) and cell.given_interval == pytest.approx(2 / 6)
    assert "no interval in 2, 33.3% of those with one" in cell.text()


def test_the_issue_71_design_knobs_plant_what_they_say() -> None:
    """CoverageDesign's knobs for the independent simulator's process: a fine-tune shows cross_transfer of its
    change off its own dataset (the truth too, each adapter's deviation whole on both), source-by-article effects
    are shared by every variant, and the position biases spread over ±position_bias_spread."""
    from selfpref_sweep.analysis.study import coverage_mode as cm
    from selfpref_sweep.analysis.study.design import draw_adapter_deviations, draw_items

    plain = cm.CoverageDesign(adapters_per_arm=2, adapter_sd=0.3)
    design = replace_design(plain, cross_transfer=0.25, source_article_sd=0.8, position_bias_spread=0.5)
    spec = design.spec("pairwise", 8)
    spread = np.asarray(spec.position_biases) - np.asarray(plain.spec("pairwise", 8).position_biases)
    np.testing.assert_allclose(spread, np.linspace(-0.5, 0.5, spread.size))
    deviations = draw_adapter_deviations(spec, np.random.default_rng(1))
    units = cm.coverage_truth(spec, deviations).units.set_index(["dataset", "evaluator_variant"])
    base = units[units["finetune_task"] == "none"]["rec_logodds_mean"].groupby(level="dataset").first()
    own, cross = spec.datasets
    for name, dev in deviations.items():
        rec_in, rec_cross = units.loc[(own, name), "rec_logodds_mean"], units.loc[(cross, name), "rec_logodds_mean"]
        assert rec_cross - base[cross] == pytest.approx(0.25 * (rec_in - base[own]))
        assert units.loc[(cross, name), "pref_logodds_mean"] - rec_cross == pytest.approx(dev)  # whole on both
    items = draw_items(design.spec("pairwise", 40), np.random.default_rng(2), adapter_deviations=deviations)
    by = items.pivot_table(index=["dataset", "article_id"], columns=["source", "evaluator_variant"],
                           values="rec_logodds")
    first, second = spec.sources
    contrast = (by[first] - by[second]).to_numpy(float)  # the article effect shared by sources cancels
    r = np.corrcoef(contrast.T)
    assert r[np.triu_indices_from(r, 1)].mean() > 0.2  # about 0.39 with the source effects shared, 0 without


def replace_design(design, **changes):
    from dataclasses import replace

    return replace(design, **changes)
