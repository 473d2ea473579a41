"""The length-controlled self-preference in the report (estimate/length_control.py makes it): its section, its
display table with a verdict per row, the per-source table beneath it, analysis/length_control.csv,
analysis/length_control_by_source.csv and their regressions.json sections, where the sweep's items carry word
counts."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...reporting.formatting import DASH, SCALE_NAMES, est_ci, fmt, fmt_ci, fmt_int, fmt_p
from ...reporting.grouping import LEVEL_SOURCE, LEVEL_UNIT
from ...reporting.method_texts import method_text
from ...reporting.regression import ALPHA
from ..estimate.length_control import EXTRAPOLATION_SHARE
from .result import AnalysisResult

NAME = "length_control"  # the table's key, analysis/length_control.csv and the regressions.json section
SECTION = "Length-controlled self-preference: the preference left once the length difference is regressed out"
BY_SOURCE_NAME = "length_control_by_source"  # its table's key, CSV and regressions.json section
BY_SOURCE_SECTION = "Length-controlled self-preference per other source"
_SCALE_WORDS = {"logodds": "log-odds", "paper": "paper's"}


def _reading(p: float, note: str, what: str, alpha: float) -> str:
    """``what``'s test against no bias in words; without a p, "no verdict" (the note says why) or a dash."""
    if not math.isfinite(p):
        return "no verdict (see note)" if note else DASH
    words = "differs from no bias" if p < alpha else "not shown to differ from no bias"
    return f"{what} {words} (p {'< 0.001' if p < 0.001 else '= ' + fmt_p(p)})"


def verdict(row: pd.Series, alpha: float = ALPHA) -> str:
    """The row's reading, from the test of the controlled preference against no bias only."""
    return _reading(float(row["controlled_p"]), row["note"], "length-controlled preference", alpha)


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


def source_verdict(row: pd.Series, alpha: float = ALPHA) -> str:
    """A source's reading, from the test of its adjusted preference against no bias only; an estimate that
    extrapolates says so first."""
    p = float(row["adjusted_p"])
    reading = _reading(p, row["note"], "adjusted preference", alpha)
    return f"extrapolated: {reading}" if bool(row["extrapolates"]) and math.isfinite(p) else reading


def by_source_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The display table of length_control_frames' per-source rows: per unit, scale and other source."""
    cols = ["setting / label", "dataset", "evaluator", "scale", "other source", "articles", "items",
            "raw [95% CI]", "adjusted at equal length [95% CI]", "own at least as long", "own at most as long",
            "verdict", "note"]
    rows = []
    for _, r in frame.iterrows():
        rows.append([f"{r['setting']} / {r['label']}", r["dataset"], r["evaluator_variant"],
                     SCALE_NAMES.get(r["scale"], r["scale"]), r["source"], fmt_int(r["n_articles"]),
                     fmt_int(r["n_items"]), est_ci(r["raw"], r["raw_ci_low"], r["raw_ci_high"]),
                     est_ci(r["adjusted"], r["adjusted_ci_low"], r["adjusted_ci_high"]),
                     _share(r["share_own_at_least_as_long"]), _share(r["share_own_at_most_as_long"]),
                     source_verdict(r), r["note"] or ""])
    return pd.DataFrame(rows, columns=cols)


def _share(value: float) -> str:
    return f"{value:.0%}" if math.isfinite(float(value)) else DASH


def applies(result: AnalysisResult) -> bool:
    """The sweep's design has word counts (Design.length_control)."""
    return bool(getattr(result.design, "length_control", False))


def table(result: AnalysisResult) -> pd.DataFrame | None:
    """The item's table; None where the design has no word counts (other designs log no empty W&B table)."""
    return length_control_table(result.length_control) if applies(result) else None


def by_source(result: AnalysisResult) -> pd.DataFrame | None:
    """The per-source item's table; None where the design has no word counts."""
    return by_source_table(result.length_control_by_source) if applies(result) else None


def by_source_text(result: AnalysisResult) -> str:
    """The per-source method text, with how many source rows extrapolate."""
    frame = result.length_control_by_source
    n = int(frame["extrapolates"].astype(bool).sum()) if not frame.empty else 0
    return method_text(BY_SOURCE_NAME, __package__, share=f"{EXTRAPOLATION_SHARE:.0%}", n_extrapolated=n,
                       n_rows=len(frame))


def text(result: AnalysisResult) -> str:
    """The method text, with the items left out for a missing or zero word count, per scale."""
    frame = result.length_control
    totals = frame.groupby("scale", sort=False)["n_left_out"].sum() if not frame.empty else pd.Series(dtype=int)
    left_out = "; ".join(f"{int(n)} on the {_SCALE_WORDS.get(s, s)} scale" for s, n in totals.items()) or "none"
    return method_text(NAME, __package__, left_out=left_out)


def data_files(result: AnalysisResult) -> dict[str, tuple[pd.DataFrame, dict[str, str]]]:
    """analysis/length_control.csv where the design has word counts (other designs' files stay as they were)."""
    if not applies(result):
        return {}
    return {f"{NAME}.csv": (result.length_control, {"level": LEVEL_UNIT}),
            f"{BY_SOURCE_NAME}.csv": (result.length_control_by_source, {"level": LEVEL_SOURCE})}


def json_sections(result: AnalysisResult) -> dict[str, tuple[list[dict[str, Any]], dict[str, str]]]:
    """The regressions.json section ``length_control``, beside the CSV."""
    if not applies(result):
        return {}
    return {NAME: (result.length_control.to_dict(orient="records"), {"level": LEVEL_UNIT}),
            BY_SOURCE_NAME: (result.length_control_by_source.to_dict(orient="records"), {"level": LEVEL_SOURCE})}
