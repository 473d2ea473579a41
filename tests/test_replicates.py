"""Replicated fine-tunes (stats/replicates.py, analysis/estimate/arms.py): an arm's adapters pooled with training
randomness in the interval, and the resampled fits' between-adapter variance (analysis/estimate/resample.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from selfpref_sweep.analysis.estimate import resample as RS
from selfpref_sweep.analysis.estimate.arms import arm_deltas
from selfpref_sweep.analysis.study.coverage_mode import CoverageDesign
from selfpref_sweep.analysis.study.design import draw_items, variants
from selfpref_sweep.analysis.sweep.load import arm_name
from selfpref_sweep.stats.replicates import pooled_delta, replicate_contrast


def frames(rng, k, tau, n_articles=10, sources=("human", "gpt4"), noise=1.0, article_sd=0.5):
    """k adapters' item differences on the same articles: a shared article effect, each adapter's own training
    deviation N(0, tau²), item noise."""
    article = rng.normal(0, article_sd, n_articles)
    out = []
    for _ in range(k):
        dev = rng.normal(0, tau)
        rows = [{"source": s, "article_id": f"a{i}", "v": dev + article[i] + rng.normal(0, noise)}
                for s in sources for i in range(n_articles)]
        out.append(pd.DataFrame(rows))
    return out


def test_the_arm_name_drops_only_the_seed():
    assert arm_name("q [ft recognition on xsum, n=10] [seed=2]") == "q [ft recognition on xsum, n=10]"
    assert (arm_name("q [ft recognition on xsum, n=10] [lr=0.001, seed=2]")
            == "q [ft recognition on xsum, n=10] [lr=0.001]")
    assert (arm_name("q [ft recognition on xsum, n=10] [adapter 1a2b3c4d]")
            == "q [ft recognition on xsum, n=10] [adapter 1a2b3c4d]")
    assert arm_name("q") == "q"


def test_one_adapter_keeps_the_article_interval_and_says_nothing_of_training():
    rng = np.random.default_rng(0)
    one = frames(rng, 1, 0.0)
    fit = pooled_delta(one)
    assert math.isnan(fit["training_sd"]) and fit["df"] == pytest.approx(9.0)
    twice = pooled_delta(one + one)  # the same adapter twice: no spread, nothing added
    assert twice["training_sd"] == 0.0
    assert (twice["ci_low"], twice["ci_high"]) == pytest.approx((fit["ci_low"], fit["ci_high"]))


@pytest.mark.parametrize("tau", [0.0, 0.6])
def test_the_pooled_interval_covers_the_arms_mean_with_training_randomness(tau):
    """400 arms of 3 adapters at 10 articles: the pooled CI covers the population mean (0) at about 95%,
    where the articles-only interval falls short once training randomness is large."""
    rng = np.random.default_rng(11)
    pooled, articles_only = [], []
    for _ in range(400):
        fit = pooled_delta(frames(rng, 3, tau))
        pooled.append(fit["ci_low"] <= 0 <= fit["ci_high"])
        bare = replicate_contrast(frames(rng, 3, tau), [0, 1, 2], [1 / 3] * 3)  # three arms: no τ² estimable
        articles_only.append(bare["ci_low"] <= 0 <= bare["ci_high"])
    assert 0.925 <= np.mean(pooled) <= 0.985, np.mean(pooled)
    if tau > 0:
        assert np.mean(articles_only) < 0.88, np.mean(articles_only)


def test_the_arms_table_pools_an_arms_seeds():
    spec = CoverageDesign(adapters_per_arm=3, adapter_sd=0.1).spec("pairwise", 10)
    names = [v.name(spec) for v in variants(spec)]
    assert len(names) == len(set(names)) == 1 + 7 * 3 and names[1].endswith("[seed=0]")
    arms = arm_deltas(draw_items(spec, np.random.default_rng(0)))
    assert len(arms) == 7 * 2 and set(arms["adapters"]) == {3} and (arms["note"] == "").all()
    assert arms["dpref_logodds_training_sd"].notna().all()
    # An adapter without the log-odds scale: the arm's log-odds Δ comes from the other two, and the row says so.
    items = draw_items(spec, np.random.default_rng(0))
    items.loc[items["evaluator_variant"].str.endswith("n=10] [seed=2]"), ["rec_logodds", "pref_logodds"]] = np.nan
    partial = arm_deltas(items)
    noted = partial[partial["arm"].str.endswith("n=10]")]
    assert noted["note"].str.contains("Δrec logodds from 2 of 3 adapters").all()
    # ... and its mean is the other two adapters' mean, not pulled toward 0 by the missing one.
    two = arm_deltas(items[~items["evaluator_variant"].str.endswith("n=10] [seed=2]")])
    assert np.allclose(noted["drec_logodds_mean"].to_numpy(),
                       two[two["arm"].str.endswith("n=10]")]["drec_logodds_mean"].to_numpy())
    assert not partial.loc[~partial["arm"].str.endswith("n=10]"), "note"].str.contains("of 3 adapters").any()
    single = arm_deltas(draw_items(CoverageDesign().spec("pairwise", 10), np.random.default_rng(0)))
    assert set(single["adapters"]) == {1} and single["note"].str.contains("not training randomness").all()


def test_the_resampled_fits_see_training_randomness():
    """With each adapter's preference off the line by N(0, 0.4²), the fits' between-adapter SD is found from the
    spread of each arm's 3 adapters (7 arms: 21 adapters on 14 df; the base model is not an adapter) and
    widens the interval; the slope's own point estimate does not depend on it."""
    found = {}
    for sd in (0.0, 0.4):
        spec = CoverageDesign(adapters_per_arm=3, adapter_sd=sd).spec("pairwise", 10)
        sds = []
        for rep in range(3):
            fits = RS.article_resample(draw_items(spec, np.random.default_rng(rep)), n_resamples=100)
            row = RS.find(fits, RS.SLOPE, RS.LEVEL_UNIT, "setting × label", "pairwise / none", "logodds")
            assert row is not None and row.n_adapters == 21 and row.training_df == 14
            sds.append(row.training_sd)
        found[sd] = np.mean(sds)
    assert found[0.4] > found[0.0] and 0.2 < found[0.4] < 0.7, found


def test_a_positive_control_is_read_toward_its_trained_direction_and_kept_out_of_the_fits():
    """A prefer_longer arm moves preference toward the longer summary on every item. The judge's own summary is
    the longer one on half the articles, so its Δ self-preference cancels; the analysis reads the Δ toward the
    longer summary (positive_control.py), which shows the move, leaves out and counts the tied items, and fits
    preference on recognition without the arm."""
    from selfpref_sweep.analysis.estimate.estimates import estimate
    from selfpref_sweep.analysis.estimate.positive_control import TRAINED_TOWARD
    from selfpref_sweep.analysis.report import unit_tables as T
    from selfpref_sweep.config import POSITIVE_CONTROL_TASKS

    assert set(TRAINED_TOWARD) == {t.value for t in POSITIVE_CONTROL_TASKS}  # every control has a direction
    items = draw_items(CoverageDesign().spec("pairwise", 10), np.random.default_rng(5))
    vowel = items["finetune_task"] == "vowel"
    for col in ("evaluator_variant", "cell_id"):
        items.loc[vowel, col] = items.loc[vowel, col].str.replace("ft vowel", "ft prefer_longer")
    items.loc[vowel, "finetune_task"] = "prefer_longer"
    article = items["article_id"].astype(str).str.extract(r"(\d+)$")[0].astype(int)
    own_longer = np.where(article % 2 == 0, 1.0, -1.0)
    items["own_words"] = np.where(own_longer > 0, 30.0, 15.0)
    items["other_words"] = np.where(article == 8, 30.0, 20.0)  # article 8: 30 words each, no direction
    items.loc[vowel, "pref_logodds"] += 2.0 * own_longer[vowel]
    items.loc[vowel, "pref_score"] = np.clip(items.loc[vowel, "pref_score"] + 0.3 * own_longer[vowel], 0, 1)
    est = estimate(items)
    assert (est.units["finetune_task"] == "prefer_longer").sum() == 2  # its units are shown
    headline = [f for f in est.unit_fits if f.group_by == "setting × label"][0]
    assert headline.n == len(est.units) - 2  # ... and left out of the fit
    toward = est.positive_controls
    assert len(toward) == 2 and (toward["toward"] == "the longer summary").all()
    assert (toward["dpref_logodds_mean"] > 1.5).all() and (toward["dpref_logodds_ci_low"] > 0).all()
    assert (toward["drec_logodds_mean"].abs() < 0.5).all()  # recognition was not trained: it did not follow
    n_sources = items["source"].nunique()
    assert (toward["n_items_tied"] == n_sources).all()  # article 8 in each source of the arm
    self_pref = est.arms[est.arms["finetune_task"] == "prefer_longer"]
    assert (self_pref["dpref_logodds_mean"].abs() < 0.5).all()  # cancels: not the readout
    table = T.positive_control_table(est.arms, ["prefer_longer"], toward)
    assert len(table) == 2 and table["reading"].str.startswith("preference moved the trained way").all()
    # Without the summaries' word counts there is no direction to read, and the table says so.
    blind = T.positive_control_table(est.arms, ["prefer_longer"], estimate(items.drop(
        columns=["own_words", "other_words"])).positive_controls)
    assert blind["reading"].str.startswith("no trained direction").all()
    assert T.positive_control_table(est.arms[est.arms["finetune_task"] != "prefer_longer"], ["prefer_longer"],
                                    toward).empty


def test_with_replicated_arms_the_interaction_is_fitted_on_arm_means():
    """Each arm's adapters averaged into one point per dataset (and source): the plain and the resampled
    interaction then have one point per arm, as a one-adapter sweep has, and say so; the plain fit's estimate is
    OLS on those means. One adapter per arm: the points are left alone."""
    from selfpref_sweep.analysis.estimate.finetune_tests import fit_interactions
    from selfpref_sweep.analysis.estimate.units import paper_units, source_points
    items = draw_items(CoverageDesign(adapters_per_arm=3, adapter_sd=0.1).spec("pairwise", 10),
                       np.random.default_rng(4))
    units, points = paper_units(items, None, seed=0), source_points(items)
    fits = {(f.level, f.group, f.scale): f for f in fit_interactions(units, points)
            if f.group_by == "setting × label"}
    unit = fits[(RS.LEVEL_UNIT, "pairwise / none", "logodds")]
    # 7 fine-tuned arms (3 recognition, 4 controls) on 2 datasets, from 21 adapters' points
    assert (unit.n, unit.n_recognition, unit.n_control) == (14, 6, 8)
    assert "each arm's adapters averaged into one point (14 points from 42)" in unit.note
    source = fits[(RS.LEVEL_SOURCE, "pairwise / none", "logodds")]
    assert source.n == 28 and source.n_clusters == 7 and "(28 points from 84)" in source.note

    tuned = units[units["finetune_task"].astype(str) != "none"].assign(
        arm=lambda d: d["evaluator_variant"].map(arm_name))
    means = tuned.groupby(["arm", "dataset"]).agg(x=("rec_logodds_mean", "mean"), y=("pref_logodds_mean", "mean"),
                                                  task=("finetune_task", "first"))
    k = means["task"].isin(["recognition"]).to_numpy(float)
    X = np.column_stack([np.ones(len(means)), means["x"], k, means["x"] * k])
    beta = np.linalg.lstsq(X, means["y"].to_numpy(float), rcond=None)[0]
    assert unit.estimate == pytest.approx(beta[3])

    resampled = RS.find(RS.article_resample(items, n_resamples=50), RS.INTERACTION, RS.LEVEL_UNIT,
                        "setting × label", "pairwise / none", "logodds", RS.RESAMPLE_OLS)
    assert resampled.n == 14 and "14 points from 42" in resampled.note
    assert resampled.n_adapters == 21 and resampled.training_df == 14  # τ² from the spread within the 7 arms
    # the resample's fit has a dataset term (resample.py)
    ds = (means.index.get_level_values("dataset") == means.index.get_level_values("dataset")[0]).astype(float)
    beta_ds = np.linalg.lstsq(np.column_stack([X, 2 * ds - 1]), means["y"].to_numpy(float), rcond=None)[0]
    assert resampled.estimate == pytest.approx(beta_ds[3])

    single = draw_items(CoverageDesign().spec("pairwise", 10), np.random.default_rng(4))
    one = [f for f in fit_interactions(paper_units(single, None, seed=0), source_points(single))
           if f.group_by == "setting × label" and f.level == RS.LEVEL_UNIT]
    assert one and all(f.n == 14 and "averaged" not in f.note for f in one)


def test_the_interval_uses_the_median_unbiased_training_variance():
    """The moment τ² is truncated at 0 and its plug-in df rises where it comes out small (under-coverage with few
    adapters, bench/arm_interval_coverage.py); the interval scales the spread by its chi-square's median."""
    from scipy import stats

    from selfpref_sweep.stats.replicates import median_unbiased_tau2

    assert median_unbiased_tau2(2.0, 0.5, 1) == pytest.approx(2.0 / stats.chi2.ppf(0.5, 1) - 0.5)
    assert median_unbiased_tau2(0.1, 0.5, 2) == 0.0
    fit = pooled_delta(frames(np.random.default_rng(0), 2, 1.0))
    assert fit["training_sd"] > 0 and fit["df"] < 9  # training variance in the interval, on few df


def test_a_spread_that_shows_training_reads_each_adapters_own_part_on_its_df():
    """Hartung and Knapp's idea (stats.replicates.few_replicate_split): the total variance is the median-unbiased
    rule's, but where the spread exceeds what the articles give it, each replicate's whole own part goes on k − 1
    df and only the shared part keeps the articles' df; the interval is then never narrower, and where the spread
    shows nothing beyond the articles it is the articles' alone."""
    from scipy import stats

    from selfpref_sweep.stats.replicates import few_replicate_split, median_unbiased_tau2, two_part_t

    v_art, spread, noise, d, sum_w2 = 0.02, 0.9, 0.06, 2, 1 / 3  # 3 adapters, weights 1/3
    shared, train, df = few_replicate_split(v_art, spread, noise, d, sum_w2)
    assert df == d and train == pytest.approx(spread / stats.chi2.ppf(0.5, d) * sum_w2)
    assert shared == pytest.approx(v_art - noise / d * sum_w2)
    assert shared + train == pytest.approx(v_art + median_unbiased_tau2(spread, noise, d) * sum_w2)
    new = two_part_t(0.1, shared, 9, train, df)
    old = two_part_t(0.1, v_art, 9, median_unbiased_tau2(spread, noise, d) * sum_w2, d)
    assert new["se"] == pytest.approx(old["se"]) and new["df"] < old["df"]
    assert new["ci_high"] - new["ci_low"] > old["ci_high"] - old["ci_low"]
    assert few_replicate_split(v_art, 0.03, noise, d, sum_w2) == (v_art, 0.0, math.inf)  # within the noise


def test_an_arm_of_two_adapters_carries_its_measured_coverage():
    """With 2 adapters τ² rests on 1 df: the shipped 2-adapter designs find the preference interval under-covering
    at large training SD, and each such arm's row carries those figures, named by SD."""
    from selfpref_sweep.analysis.report.fit_tables import CALIBRATION_COL
    from selfpref_sweep.analysis.report.unit_tables import arm_deltas_table

    spec = CoverageDesign(adapters_per_arm=2, adapter_sd=0.4).spec("pairwise", 10)
    table = arm_deltas_table(arm_deltas(draw_items(spec, np.random.default_rng(0))))
    labels = table[CALIBRATION_COL]
    assert len(table) and labels.str.contains("Δ preference CI: under-covers", regex=False).all()
    assert labels.str.contains("(training SD 1.6)", regex=False).all()