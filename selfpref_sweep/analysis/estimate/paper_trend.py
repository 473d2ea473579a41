"""The paper's fine-tune trend, per base evaluator: preference on recognition over that evaluator's
self-recognition fine-tunes alone (every N, trained on either dataset, evaluated on both: in-domain and
transfer together), at the paper unit and on the paper's scale. The paper reports this line for GPT-3.5
(slope about 1.21, r about 0.99 over 12 points). The headline fits pool every evaluator, base models and
controls of a condition; this one keeps one base model's recognition fine-tunes, as the paper's figure does.

Two fits, as for the headline: the paper's statistic (plain OLS over the points, its t interval and Fisher's r
interval), which treats each point as known and the points as independent; and beside it the corrected slope
(resample.py: one joint article resample, recognition's measurement error corrected, a dataset term), whose
interval is the one to read. A base needs MIN_POINTS recognition fine-tune units for a line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from ...reporting.grouping import GROUPINGS, LEVEL_UNIT
from ...reporting.regression import MIN_POINTS
from .finetune_tests import RECOGNITION_TASKS
from .fit import fit_formula
from .resample import REPORTED, SLOPE, article_resample, find

GROUP_BY = "setting × label × base evaluator (recognition fine-tunes)"
COLUMNS = ["setting", "label", "evaluator", "transfer", "n_points", "slope", "slope_ci_low", "slope_ci_high",
           "intercept", "r", "r_ci_low", "r_ci_high", "corrected_slope", "corrected_ci_low", "corrected_ci_high",
           "corrected_p", "corrected_note", "note"]
TRANSFERS = ("all", "in_domain", "cross_dataset")


def _recognition_units(units: pd.DataFrame, recognition_tasks: Sequence[str]) -> pd.DataFrame:
    if units.empty or "finetune_task" not in units:
        return units.iloc[0:0]
    rec = units[units["finetune_task"].astype(str).isin(list(recognition_tasks))]
    return rec[rec["rec_paper_mean"].notna() & rec["pref_paper_mean"].notna()]


RISES, FALLS, NOT_SHOWN, NO_INTERVAL = "rises", "falls", "not shown", "no interval"


def direction(corrected_ci_low: float, corrected_ci_high: float) -> str:
    """What the corrected slope's 95% interval says: preference RISES or FALLS with recognition (the interval
    clear of 0), NOT_SHOWN to do either (it includes 0), or NO_INTERVAL."""
    if pd.notna(corrected_ci_low) and corrected_ci_low > 0:
        return RISES
    if pd.notna(corrected_ci_high) and corrected_ci_high < 0:
        return FALLS
    return NOT_SHOWN if pd.notna(corrected_ci_low) else NO_INTERVAL


def applies(units: pd.DataFrame, recognition_tasks: Sequence[str] = RECOGNITION_TASKS) -> bool:
    """Some base evaluator has a line's worth of recognition fine-tune units in one condition."""
    rec = _recognition_units(units, recognition_tasks)
    return bool(not rec.empty and rec.groupby(["setting", "label", "evaluator"]).size().max() >= MIN_POINTS)


def _corrected(items: pd.DataFrame, key: tuple, recognition_tasks: Sequence[str]) -> dict[str, Any]:
    """The corrected slope over the same units' items (their own article resample)."""
    setting, label, evaluator = key
    sub = items[(items["setting"].astype(str) == setting) & (items["label"].astype(str) == label)
                & (items["evaluator"].astype(str) == evaluator)
                & items["finetune_task"].astype(str).isin(list(recognition_tasks))]
    fits = article_resample(sub, recognition_tasks, seed=0)
    f = find(fits, SLOPE, LEVEL_UNIT, GROUPINGS[0][0], f"{setting} / {label}", "paper", REPORTED[SLOPE])
    if f is None:
        return {"corrected_note": "not fitted"}
    return {"corrected_slope": f.estimate, "corrected_ci_low": f.ci_low, "corrected_ci_high": f.ci_high,
            "corrected_p": f.p, "corrected_note": f.no_interval or ""}


def paper_trends(units: pd.DataFrame, items: pd.DataFrame,
                 recognition_tasks: Sequence[str] = RECOGNITION_TASKS) -> pd.DataFrame:
    """One row per setting × label × base evaluator × transfer (all, in-domain, cross-dataset) with a line."""
    rec = _recognition_units(units, recognition_tasks)
    rows = []
    for key, sub in rec.groupby(["setting", "label", "evaluator"], sort=True):
        key = tuple(str(k) for k in key)
        if len(sub) < MIN_POINTS:
            continue
        for transfer in TRANSFERS:
            pts = sub if transfer == "all" else sub[sub["transfer"].astype(str) == transfer]
            if len(pts) < MIN_POINTS:
                continue
            fit = fit_formula(pd.DataFrame({"recognition": pts["rec_paper_mean"].to_numpy(float),
                                            "preference": pts["pref_paper_mean"].to_numpy(float)}),
                              level=LEVEL_UNIT, group_by=GROUP_BY, group=" / ".join((*key, transfer)),
                              scale="paper")
            row = dict(zip(("setting", "label", "evaluator"), key, strict=True), transfer=transfer, n_points=len(pts),
                       **{k: getattr(fit, k) for k in ("slope", "slope_ci_low", "slope_ci_high", "intercept", "r",
                                                        "r_ci_low", "r_ci_high")}, note=fit.note or "")
            if transfer == "all":
                row.update(_corrected(items, key, recognition_tasks))
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)
