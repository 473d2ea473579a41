"""Rows whose interval or test missed its stated rate in the simulator's coverage study are printed with a
label, never bare (analysis/study/calibration.py). The labels are derived from the coverage table as data
(analysis/study/calibration.json, written by `simulate --coverage --out-json`): these tests feed planted tables and
check the shipped one."""

import math

import pytest

from selfpref_sweep.analysis.estimate import resample as RS
from selfpref_sweep.analysis.estimate.finetune_tests import InteractionResult, SpecificityResult
from selfpref_sweep.analysis.estimate.fit import MIXED_BY_VARIANT, OLS_BY_VARIANT, OLS_PLAIN, FitResult
from selfpref_sweep.analysis.report import fit_tables as T
from selfpref_sweep.analysis.study import calibration as C
from selfpref_sweep.reporting.grouping import LEVEL_SOURCE, LEVEL_UNIT

POOLED, PER_DATASET = "setting × label", "setting × label × dataset"
HOLDS, FAILS, MC = "holds", "does not hold", "within MC error"


def rec(key, rate, verdict, kind="coverage", n=10):
    return {"setting": "pairwise", "n_articles": n, "key": key, "kind": kind, "rate": rate, "se": 0.02,
            "verdict": verdict}


PLANTED = [
    rec("slope|all|paper", 0.80, FAILS), rec("slope|all|logodds", 0.88, MC), rec("slope|all|paper", 0.94, HOLDS, n=20),
    rec("slope|dataset|paper", 0.95, HOLDS), rec("slope|dataset|logodds", 0.94, HOLDS),
    rec("src|dataset|paper", 0.82, FAILS), rec("mixed|all|paper", 0.45, FAILS),
    rec("specificity|paper unit|all|paper", 0.20, FAILS, "size"),
    rec("specificity|paper unit|transfer|paper", 0.09, MC, "size"),
    rec("specificity|paper unit|transfer|logodds", 0.10, MC, "size"),
    rec("rs|slope|paper unit|all|paper", 0.99, FAILS, n=20), rec("rs|slope|paper unit|all|paper", 0.96, MC),
    rec("rs|shift|source|all|paper", 0.08, MC, "size"), rec("rs|shift|source|all|logodds", 0.02, MC, "size"),
]


@pytest.fixture
def planted(monkeypatch):
    monkeypatch.setattr(C, "_shipped", lambda adapters=1: tuple(PLANTED))


def fit(group_by, level=LEVEL_UNIT, method=OLS_PLAIN, ok=True):
    return FitResult(level=level, group_by=group_by, group="pairwise / none", n=8, ok=ok, method=method,
                     slope=1.0, slope_ci_low=0.5, slope_ci_high=1.5, slope_p=0.01, r=0.9, r_ci_low=0.5, r_ci_high=0.98)


def labels(table):
    return list(table.get(T.CALIBRATION_COL, [""] * len(table)))


def test_the_pooled_headline_is_labelled_with_the_simulated_figures(planted):
    both = T.regression_table([fit(POOLED), fit(PER_DATASET), fit(PER_DATASET)])
    pooled, *per_dataset = labels(both)
    assert pooled == ("under-covers pooled over datasets: coverage 80-88% at 10 articles, 94% at 20 articles, "
                      "for a nominal 95% (simulated, docs/coverage.md)")
    assert per_dataset == ["", ""]  # per dataset the paper unit's OLS held its coverage
    # One dataset: the pooled row is that dataset's points, which hold, so no label and no column.
    assert T.CALIBRATION_COL not in T.regression_table([fit(POOLED)])


def test_source_level_and_mixed_model_rows_are_labelled_and_unfitted_rows_are_not(planted):
    table = T.regression_table([fit(PER_DATASET, LEVEL_SOURCE, OLS_BY_VARIANT),
                                fit(PER_DATASET, LEVEL_SOURCE, MIXED_BY_VARIANT),
                                fit(PER_DATASET, LEVEL_SOURCE, OLS_BY_VARIANT, ok=False)])
    clustered, mixed, unfitted = labels(table)
    assert clustered.startswith("under-covers:") and "82% at 10 articles" in clustered
    assert mixed.startswith("far too narrow") and "descriptive only" in mixed
    assert unfitted == ""


def test_a_test_is_labelled_when_it_fails_or_most_of_its_figures_miss_on_one_side(planted):
    rows = [SpecificityResult(level=LEVEL_UNIT, group_by=g, group="x", n=7, n_recognition=3, n_control=4, ok=ok,
                              shift=0.01, ci_low=-0.02, ci_high=0.04, p=0.4, margin=0.05)
            for g, ok in ((POOLED, True), (PER_DATASET, True), (PER_DATASET, False))]
    pooled, per_transfer, unfitted = labels(T.specificity_table(rows))
    assert pooled.startswith("over-rejects pooled over datasets: a true null was rejected in 20% of sweeps")
    # Neither figure is wholly off its target, but both miss it upward: labelled.
    assert per_transfer.startswith("over-rejects: a true null was rejected in 9-10% of sweeps") and unfitted == ""
    # One figure above the target and one below, none wholly off: no label.
    assert C.calibration_label("resampled shift", LEVEL_SOURCE, RS.RESAMPLE_CORRECTED, True) == ""
    conservative = C.calibration_label("resampled slope", LEVEL_UNIT, RS.RESAMPLE_CORRECTED, True)
    assert conservative.startswith("over-covers (conservative) pooled over datasets: coverage 96% at 10 articles, "
                                   "99% at 20 articles")


def test_without_the_data_file_nothing_is_labelled(monkeypatch):
    monkeypatch.setattr(C, "_shipped", lambda adapters=1: ())
    assert C.calibration_label("fit", LEVEL_UNIT, OLS_PLAIN, True) == ""


def test_the_shipped_table_labels_every_row_kind_it_shows_off_target():
    records = C._shipped()
    assert records, "selfpref_sweep/analysis/calibration.json is shipped with the package"
    assert {r["kind"] for r in records} == {"coverage", "size"}
    off = 0
    for (what, level, method, pooled), _ in C.SCORED_BY:
        scoring = C.scoring_rows(what, level or LEVEL_UNIT, method or OLS_PLAIN, bool(pooled))
        label = C.calibration_label(what, level or LEVEL_UNIT, method or OLS_PLAIN, bool(pooled))
        wholly_off = [r for r in scoring if r["verdict"] == FAILS]
        if wholly_off:
            off += 1
            assert label and "docs/coverage.md" in label, (what, level, method, pooled)
            # The label quotes the range of its figures.
            assert f"{100 * min(r['rate'] for r in scoring):.0f}" in label
            assert f"{100 * max(r['rate'] for r in scoring):.0f}" in label
    assert off, "the shipped study finds some row off its target (the plain OLS headline, the MixedLM)"


def test_a_replicated_sweep_is_labelled_by_the_designs_of_its_adapter_count():
    """The replicated tables are chosen by the sweep's adapters per arm (the nearest simulated count, both on a
    tie), over every training SD simulated at that count; one adapter per arm reads the one-adapter study."""
    assert C._tables(1)[0]["design"]["adapters_per_arm"] == 1
    shipped = {t["design"]["adapters_per_arm"] for t in C._replicated_tables()}
    assert {2, 3, 5} <= shipped, "the replicated designs ship with the package (study/designs/*.json)"
    for k in (2, 3, 5):
        assert {t["design"]["adapters_per_arm"] for t in C._tables(k)} == {k}
    assert {t["design"]["adapters_per_arm"] for t in C._tables(9)} == {max(shipped)}
    sds = {t["design"]["adapter_sd"] for t in C._tables(3)}
    assert len(sds) > 1, "a count's label reads every training SD simulated at that count"
    assert all(r["design_tag"].startswith("training SD ") for r in C._shipped(3))


ARMS = [rec("arm|dnull|rec|paper", 0.985, FAILS), rec("arm|dalt|rec|paper", 0.972, MC),
        rec("arm|dnull|pref|paper", 0.95, HOLDS), rec("arm|dp|paper", 0.05, HOLDS, "size"),
        rec("holm|paper", 0.012, FAILS, "size"), rec("holm|logodds", 0.02, MC, "size")]


def test_an_arms_pooled_rows_and_holms_family_are_labelled_from_the_study(monkeypatch):
    """The per-arm table labels each arm by the study of its adapter count (here one that finds the Δ recognition
    interval conservative), and the fine-tuned-vs-base section says Holm's family-wise error was under 5%."""
    import pandas as pd

    from selfpref_sweep.analysis.report import unit_tables as U

    monkeypatch.setattr(C, "_shipped", lambda adapters=1: tuple({**r, "design_tag": f"training SD {adapters / 10:g}"}
                                                                  for r in ARMS))
    label = U.arm_label(2)
    assert label.startswith("Δ recognition CI: over-covers (conservative): coverage 97-98% at 10 articles "
                            "(training SD 0.2)")
    assert "Δ preference" not in label and "Δ p" not in label  # those held
    holm = C.calibration_label(C.HOLM_FWER, "", "", False, adapters=2)
    assert holm.startswith("conservative (rejects less often than stated): a true null was rejected in 1-2% of")
    nan = float("nan")
    cols = {f"d{q}_{s}{x}": nan for q in ("rec", "pref") for s in ("paper", "logodds")
            for x in ("_mean", "_ci_low", "_ci_high", "_p", "_p_holm", "_training_sd")}
    arms = pd.DataFrame([{"setting": "pairwise", "label": "none", "dataset": "d", "arm": "a", "transfer": "",
                          "adapters": 3, "n_articles": 10, "note": "", **cols}])
    assert U.arm_deltas_table(arms)[T.CALIBRATION_COL].iloc[0].startswith("Δ recognition CI: over-covers")
    monkeypatch.setattr(C, "_shipped", lambda adapters=1: ())
    assert T.CALIBRATION_COL not in U.arm_deltas_table(arms)  # nothing off target: no column


def interaction(group_by, level=LEVEL_UNIT, p=0.01):
    return InteractionResult(level=level, group_by=group_by, group="pairwise / none", n=12, n_recognition=6,
                             n_control=6, ok=True, estimate=0.3, se=0.1, ci_low=0.1, ci_high=0.5, p=p)


def test_the_interaction_test_is_labelled_by_the_study_of_the_sweeps_design():
    """With one adapter per arm the shipped study finds the pooled paper-unit interaction test at its size (no
    label); with three adapters per arm it over-rejects, and a replicated sweep's row says so, naming that study."""
    rows = [interaction(POOLED), interaction(PER_DATASET)]
    one = labels(T.interaction_table(rows))
    pooled, _ = labels(T.interaction_table(rows, adapters=3))
    assert one == ["", ""]
    assert pooled.startswith("over-rejects pooled over datasets: a true null was rejected in")
    assert "3 adapters per arm" in pooled and "docs/coverage.md (Across designs)" in pooled
    assert "(training SD 0.1)" in pooled  # the figures name the design they came from
    # A row without a test has no label.
    assert labels(T.interaction_table([interaction(POOLED, p=math.nan), interaction(PER_DATASET)],
                                      adapters=3))[0] == ""


def test_a_common_line_reading_carries_the_interaction_tests_label():
    """"One/no common line" rests on the interaction test: where that test is off its size for the sweep's
    design, the corrected shift's row (the one read) says so beside the shift's own label."""
    def fit(what, method, **figures):
        return RS.ResampledFit(what=what, level=LEVEL_UNIT, group_by=PER_DATASET, group="x", scale="paper",
                               method=method, n=12, ok=True, n_resamples=200, **figures)

    shift = fit(RS.SHIFT, RS.RESAMPLE_CORRECTED, estimate=0.0, se=0.01, df=20, ci_low=-0.02, ci_high=0.02, p=0.9)
    rejecting = fit(RS.INTERACTION, RS.RESAMPLE_OLS, estimate=0.4, se=0.1, df=20, ci_low=0.2, ci_high=0.6, p=0.001)
    table = T.resampled_table([shift, rejecting], adapters=3)
    row = table.iloc[0]
    assert row["reading"].startswith("no common line: the shift is within ±0.05 (TOST p = ")
    assert "the interaction test behind this reading" in row[T.CALIBRATION_COL]
    wide = fit(RS.SHIFT, RS.RESAMPLE_CORRECTED, estimate=0.0, se=0.1, df=20, ci_low=-0.2, ci_high=0.2, p=0.9)
    row = T.resampled_table([wide, rejecting], adapters=3).iloc[0]
    assert row["reading"].startswith("inconclusive") and "interaction test" not in row.get(T.CALIBRATION_COL, "")


def test_the_interaction_section_prints_the_reports_one_interaction_test():
    """The interaction section's test is the resampled fit of the same points (the one the specificity reading
    uses), with its training SD; the plain fit gives only the kinds' slopes. Without a resampled row the plain
    test is shown and the row says so."""
    plain = interaction(POOLED, p=0.01)
    test = RS.ResampledFit(what=RS.INTERACTION, level=LEVEL_UNIT, group_by=POOLED, group="pairwise / none",
                           scale="paper", method=RS.RESAMPLE_OLS, n=12, ok=True, n_resamples=200, estimate=0.25,
                           se=0.2, df=18, ci_low=-0.17, ci_high=0.67, p=0.23, n_adapters=21, training_sd=0.31)
    corrected = RS.ResampledFit(**{**test.to_dict(), "method": RS.RESAMPLE_CORRECTED, "p": 0.001})
    row = T.interaction_table([plain], resampled=[test, corrected]).iloc[0]
    assert row["interaction test"] == RS.RESAMPLE_OLS and row["p"] == "0.230"
    assert row["interaction [95% CI]"].startswith("0.250") and row[T.training_sd_column(1)] == "0.310 (21)"
    assert row[T.ESTIMAND_COL] == T.estimand(1) and "not the recipe" in row[T.ESTIMAND_COL]
    assert "p (interaction)" not in row and "0.010" not in " ".join(map(str, row.to_numpy()))
    alone = T.interaction_table([plain]).iloc[0]
    assert "no resampled fit" in alone["interaction test"] and alone["p"] == "0.010"
