"""Labels for the report's rows whose interval or test does not hold its stated rate at the sizes sweeps run.

The planted-bias simulator's coverage mode (`python -m selfpref_sweep.analysis.simulate --coverage`, its table in
docs/coverage.md) measures every interval and test the report prints on sweeps with a known truth: the
dose-response design, 10 and 20 articles per dataset, article effects shared by every variant, source and
question. Where a row missed its target there (95% intervals covering 93-97%, 5% tests rejecting 3-7%), the
report prints it with the label below instead of bare, so no reader takes it at its stated rate. Each label
names what the simulation found, in words; the figures are in docs/coverage.md. Re-run the coverage mode after
changing a method, and update this table with what it shows.
"""

from __future__ import annotations

from typing import Iterable

from .fit import GROUPINGS, LEVEL_SOURCE, LEVEL_UNIT, MIXED_BY_VARIANT, OLS_BY_VARIANT, OLS_PLAIN
from .resample import RESAMPLE_CORRECTED, RESAMPLE_OLS

POOLED = GROUPINGS[0][0]  # "setting × label": every dataset (or transfer condition) of a condition together
SEE = "docs/coverage.md"

# (what, level, method, pooled over datasets) -> label; None matches either.
_FOUND: tuple[tuple[tuple[str, str | None, str | None, bool | None], str], ...] = (
    (("fit", LEVEL_UNIT, OLS_PLAIN, True),
     f"under-covers pooled over datasets: about 77-89% at 10 articles, 88-95% at 20, for a nominal 95% "
     f"(simulated, {SEE})"),
    (("fit", LEVEL_SOURCE, OLS_BY_VARIANT, None),
     f"under-covers: about 68-89% at 10 articles, 82-96% at 20, for a nominal 95% (simulated, {SEE})"),
    (("fit", LEVEL_SOURCE, MIXED_BY_VARIANT, None),
     f"far too narrow: about 35-50% coverage at 10 articles, 65-75% at 20, for a nominal 95%; descriptive only "
     f"(simulated, {SEE})"),
    (("specificity", None, None, True),
     f"over-rejects pooled over datasets: a true 'one common line' was rejected in about 1 sweep in 5 at 10 "
     f"articles, 1 in 6 to 1 in 10 at 20, for a nominal 1 in 20; read p and CI as descriptive (simulated, {SEE})"),
    (("specificity", None, None, False),
     f"over-rejects: a true 'one common line' was rejected in about 1 sweep in 10 at 10 and 20 articles, for a "
     f"nominal 1 in 20 (simulated, {SEE})"),
    # The joint article resample (resample.py), kind "resampled <coefficient>".
    (("resampled slope", LEVEL_UNIT, RESAMPLE_CORRECTED, True),
     f"over-covers in the pairwise setting at 20 articles (99%, conservative); 93-97% at 10 articles and 91-92% "
     f"in the individual setting at 20, for a nominal 95% (simulated, {SEE})"),
    (("resampled intercept", LEVEL_UNIT, RESAMPLE_CORRECTED, True),
     f"over-covers in the pairwise setting at 20 articles (95-99%, conservative); 91-97% otherwise, for a "
     f"nominal 95% (simulated, {SEE})"),
    (("resampled slope", LEVEL_SOURCE, RESAMPLE_CORRECTED, True),
     f"under-covers pooled over datasets in the individual setting: about 85-88% at 10 articles, 91% at 20 "
     f"(92-95% pairwise), for a nominal 95% (simulated, {SEE})"),
    (("resampled shift", LEVEL_SOURCE, RESAMPLE_CORRECTED, True),
     f"over-rejects pooled over datasets: a true 'one common line' was rejected in 5-13% of sweeps at 10 "
     f"articles, 8-12% at 20, for a nominal 5% (simulated, {SEE})"),
    (("resampled shift", LEVEL_UNIT, RESAMPLE_CORRECTED, True),
     f"may over-reject pooled over datasets: a true 'one common line' was rejected in 7-10% of sweeps at 10 "
     f"articles (2-7% at 20), for a nominal 5% (simulated, {SEE})"),
    (("resampled interaction", None, RESAMPLE_OLS, False),
     f"conservative per transfer condition: a true null was rejected in 0-5.5% of sweeps, for a nominal 5% "
     f"(simulated, {SEE})"),
)


def pooled_over_datasets(group_by: str, groupings: Iterable[str]) -> bool:
    """Whether a row of grouping ``group_by`` pools several datasets (or transfer conditions): the pooled
    grouping, in a sweep that also has per-dataset rows (with one dataset they are the same points)."""
    return group_by == POOLED and any(g != POOLED for g in groupings)


def calibration_label(what: str, level: str, method: str, pooled: bool) -> str:
    """The label of a row of kind ``what`` ("fit", "specificity" or "resampled <coefficient>", e.g. "resampled
    slope"), or "" where the simulation found it at its
    stated rate (or did not measure it)."""
    for (kind, lvl, meth, pool), label in _FOUND:
        if kind == what and lvl in (None, level) and meth in (None, method) and pool in (None, pooled):
            return label
    return ""
