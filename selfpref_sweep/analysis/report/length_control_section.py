"""The length-controlled self-preference in the report (estimate/length_control.py makes it): its section, its
display table with a verdict per row, analysis/length_control.csv and the regressions.json section, where the
sweep's items carry word counts."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...reporting.formatting import DASH, SCALE_NAMES, est_ci, fmt, fmt_ci, fmt_int, fmt_p
from ...reporting.grouping import LEVEL_UNIT
from ...reporting.method_texts import method_text
from ...reporting.regression import ALPHA
from .result import AnalysisResult

NAME = "length_control"  # the table's key, analysis/length_control.csv and the regressions.json section
SECTION = "Length-controlled self-preference: the preference left once the length difference is regressed out"
_SCALE_WORDS = {"logodds": "log-odds", "paper": "paper's"}


def verdict(row: pd.Series, alpha: float = ALPHA) -> str:
    """The row's reading, from the test of the controlled preference against no bias only."""
    p = float(row["controlled_p"])
    if not math.isfinite(p):
        return "no verdict (see note)" if row["note"] else DASH
    words = "differs from no bias" if p < alpha else "not shown to differ from no bias"
    return f"length-controlled preference {words} (p {'< 0.001' if p < 0.001 else '= ' + fmt_p(p)})"


def length_control_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The display table of length_controlled: one row per unit and scale, the log-odds scale first."""
    cols = ["setting / label", "dataset", "evaluator", "scale", "articles", "items (left out)", "raw [95% CI]",
            "length-controlled [95% CI]", "Δ controlled − raw", "length coefficient [95% CI]",
            "mean log(own/other words)", "verdict", "note"]
    rows = []
    for _, r in frame.iterrows():
        rows.append([f"{r['setting']} / {r['label']}", r["dataset"], r["evaluator_variant"],
                     SCALE_NAMES.get(r["scale"], r["scale"]), fmt_int(r["n_articles"]),
                     f"{fmt_int(r['n_items'])} ({fmt_int(r['n_left_out'])})",
                     est_ci(r["raw"], r["raw_ci_low"], r["raw_ci_high"]),
                     est_ci(r["controlled"], r["controlled_ci_low"], r["controlled_ci_high"]), fmt(r["delta"]),
                     f"{fmt(r['length_coef'])} {fmt_ci(r['length_coef_ci_low'], r['length_coef_ci_high'])}"
                     if fmt(r["length_coef"]) != DASH else DASH,
                     fmt(r["mean_log_length_ratio"]), verdict(r), r["note"] or ""])
    return pd.DataFrame(rows, columns=cols)


def applies(result: AnalysisResult) -> bool:
    """The sweep's design has word counts (Design.length_control)."""
    return bool(getattr(result.design, "length_control", False))


def table(result: AnalysisResult) -> pd.DataFrame | None:
    """The item's table; None where the design has no word counts (other designs log no empty W&B table)."""
    return length_control_table(result.length_control) if applies(result) else None


def text(result: AnalysisResult) -> str:
    """The method text, with the items left out for a missing or zero word count, per scale."""
    frame = result.length_control
    totals = frame.groupby("scale", sort=False)["n_left_out"].sum() if not frame.empty else pd.Series(dtype=int)
    left_out = "; ".join(f"{int(n)} on the {_SCALE_WORDS.get(s, s)} scale" for s, n in totals.items()) or "none"
    return method_text(NAME, __package__, left_out=left_out)


def data_files(result: AnalysisResult) -> dict[str, tuple[pd.DataFrame, dict[str, str]]]:
    """analysis/length_control.csv where the design has word counts (other designs' files stay as they were)."""
    return {f"{NAME}.csv": (result.length_control, {"level": LEVEL_UNIT})} if applies(result) else {}


def json_sections(result: AnalysisResult) -> dict[str, tuple[list[dict[str, Any]], dict[str, str]]]:
    """The regressions.json section ``length_control``, beside the CSV."""
    if not applies(result):
        return {}
    return {NAME: (result.length_control.to_dict(orient="records"), {"level": LEVEL_UNIT})}
