"""Self-preference net of quality in the report (analysis/self_bias/ makes it): its section, display table,
analysis/self_bias.csv, the regressions.json section and the summary box's line, where the sweep's design allows it
(two or more base judges over shared authors, anchored outputs, or outputs marked correct)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...reporting.formatting import DASH, SCALE_NAMES, est_ci, fmt, fmt_int, fmt_p
from ...reporting.grouping import LEVEL_UNIT
from ...reporting.method_texts import method_text
from ..self_bias import cross_judge
from ..self_bias.net_bias import CROSS_JUDGE
from .result import AnalysisResult

NAME = "self_bias"  # the table's key, analysis/self_bias.csv and the regressions.json section
SECTION = "Self-preference net of quality: judges × authors, third-party anchors, verifiable answers"
MAX_SUMMARY_GROUPS = 6  # the summary box names this many groups, then counts the rest


def self_bias_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One display row per row of self_bias.csv, the log-odds scale first."""
    cols = ["setting / label", "dataset", "question", "judge", "estimator", "scale", "term", "reference",
            "estimate [95% CI]", "no bias", "Holm p", "items (own)", "articles", "fit test", "verdict", "note"]
    rows = []
    for _, r in frame.iterrows():
        fit = DASH if not isinstance(r["fit_p"], float) or math.isnan(r["fit_p"]) else \
            f"F({fmt_int(r['fit_df1'])}, {fmt_int(r['fit_df2'])}) p {fmt_p(r['fit_p'])}"
        rows.append([f"{r['setting']} / {r['label']}", r["dataset"], r["question"], r["judge"], r["estimator"],
                     SCALE_NAMES.get(r["scale"], r["scale"]), r["term"], r["reference"] or DASH,
                     est_ci(r["estimate"], r["ci_low"], r["ci_high"]), fmt(r["null"]), fmt_p(r["p_holm"]),
                     f"{fmt_int(r['n_items'])} ({fmt_int(r['n_own'])})", fmt_int(r["n_articles"]),
                     fit if r["estimator"] == CROSS_JUDGE else DASH, r["verdict"] or DASH,
                     "; ".join(n for n in (r["note"], r["fit_note"]) if isinstance(n, str) and n)])
    return pd.DataFrame(rows, columns=cols)


def applies(result: AnalysisResult) -> bool:
    return bool(getattr(result.design, "self_bias", False))


def table(result: AnalysisResult) -> pd.DataFrame | None:
    return self_bias_table(result.self_bias) if applies(result) else None


def text(result: AnalysisResult) -> str:
    notes = "; ".join(result.self_bias_notes) or "none"
    return method_text(NAME, __package__, notes=notes)


def data_files(result: AnalysisResult) -> dict[str, tuple[pd.DataFrame, dict[str, str]]]:
    return {f"{NAME}.csv": (result.self_bias, {"level": LEVEL_UNIT})} if applies(result) else {}


def json_sections(result: AnalysisResult) -> dict[str, tuple[list[dict[str, Any]], dict[str, str]]]:
    return {NAME: (result.self_bias.to_dict(orient="records"), {"level": LEVEL_UNIT})} if applies(result) else {}


def _group_sentence(sub: pd.DataFrame) -> str:
    """One group's pooled cross-judge self terms, on the log-odds scale where they exist, else the paper's."""
    scale = "logodds" if sub.loc[sub["scale"] == "logodds", "estimate"].notna().any() else "paper"
    rows = sub[sub["scale"] == scale]
    first = rows.iloc[0]
    where = f"{first['dataset']}, {first['question']} ({first['setting']} / {first['label']}, {SCALE_NAMES[scale]})"
    terms = ", ".join(f"{r.judge} {est_ci(r.estimate, r.ci_low, r.ci_high)}" for r in rows.itertuples()
                      if isinstance(r.estimate, float) and math.isfinite(r.estimate))
    if not terms:
        return f"{where}: not identified ({rows.iloc[0]['note']})."
    fit_p = first["fit_p"]
    if isinstance(fit_p, float) and math.isfinite(fit_p) and fit_p < 0.05:
        tail = f"the additive model does not fit (p {fmt_p(fit_p)}): the references disagree, no single verdict"
    elif scale == "paper":
        tail = "no verdict: the paper's scale is not additive, and these records have no log-odds"
    else:
        words = [f"{r.judge} {r.verdict}" for r in rows.itertuples() if r.verdict]
        tail = "; ".join(words) or "no verdict"
    return f"{where}: κ {terms}; {tail}."


def summary_line(result: AnalysisResult) -> str:
    """The summary box's "net of quality" line: each group's pooled cross-judge self terms ("" where none)."""
    frame = result.self_bias if applies(result) else pd.DataFrame()
    if frame.empty:
        return ""
    pooled = frame[(frame["estimator"] == CROSS_JUDGE) & (frame["reference"] == cross_judge.POOLED_REFERENCE)]
    groups = [sub for _, sub in pooled.groupby(["setting", "label", "dataset", "question"], sort=False)]
    if not groups:
        return ""
    shown = " ".join(_group_sentence(g) for g in groups[:MAX_SUMMARY_GROUPS])
    more = f" ({len(groups) - MAX_SUMMARY_GROUPS} more groups in the section)" if len(groups) > MAX_SUMMARY_GROUPS \
        else ""
    return f"Net of quality (each judge's self term κ, cross-judge, pooled over references): {shown}{more}"
