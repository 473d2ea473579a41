"""Rows whose interval or test missed its stated rate in the simulator's coverage study are printed with a
label, never bare (analysis/calibration.py; the figures are in docs/coverage.md)."""

from selfpref_sweep.analysis import tables as T
from selfpref_sweep.analysis.fit import (LEVEL_SOURCE, LEVEL_UNIT, MIXED_BY_VARIANT, OLS_BY_VARIANT, OLS_PLAIN,
                                         FitResult, SpecificityResult)

POOLED, PER_DATASET = "setting × label", "setting × label × dataset"


def fit(group_by, level=LEVEL_UNIT, method=OLS_PLAIN, ok=True):
    return FitResult(level=level, group_by=group_by, group="pairwise / none", n=8, ok=ok, method=method,
                     slope=1.0, slope_ci_low=0.5, slope_ci_high=1.5, slope_p=0.01, r=0.9, r_ci_low=0.5, r_ci_high=0.98)


def labels(table):
    return list(table.get(T.CALIBRATION_COL, [""] * len(table)))


def test_the_pooled_headline_is_labelled_where_it_pools_datasets():
    both = T.regression_table([fit(POOLED), fit(PER_DATASET), fit(PER_DATASET)])
    pooled, *per_dataset = labels(both)
    assert "under-covers pooled over datasets" in pooled and "docs/coverage.md" in pooled
    assert per_dataset == ["", ""]  # per dataset the paper unit's OLS held its coverage
    # One dataset: the pooled row is that dataset's points, which hold, so no label and no column.
    assert T.CALIBRATION_COL not in T.regression_table([fit(POOLED)])


def test_source_level_and_mixed_model_rows_are_labelled_and_unfitted_rows_are_not():
    table = T.regression_table([fit(PER_DATASET, LEVEL_SOURCE, OLS_BY_VARIANT),
                                fit(PER_DATASET, LEVEL_SOURCE, MIXED_BY_VARIANT),
                                fit(PER_DATASET, LEVEL_SOURCE, OLS_BY_VARIANT, ok=False)])
    clustered, mixed, unfitted = labels(table)
    assert clustered.startswith("under-covers:") and "at 10 articles" in clustered
    assert "far too narrow" in mixed and "descriptive only" in mixed
    assert unfitted == ""


def test_every_fitted_specificity_row_is_labelled():
    rows = [SpecificityResult(level=LEVEL_UNIT, group_by=g, group="x", n=7, n_recognition=3, n_control=4, ok=ok,
                              shift=0.01, ci_low=-0.02, ci_high=0.04, p=0.4, margin=0.05)
            for g, ok in ((POOLED, True), (PER_DATASET, True), (PER_DATASET, False))]
    pooled, per_transfer, unfitted = labels(T.specificity_table(rows))
    assert "over-rejects pooled over datasets" in pooled
    assert per_transfer.startswith("over-rejects:") and unfitted == ""
