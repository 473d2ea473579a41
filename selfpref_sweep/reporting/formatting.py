"""Numbers as the report prints them: the formatting helpers of every table, the analysis' and each
measurement's, and the Markdown and text renderers of a display table.

Numbers are formatted here once, so report.md, report.html, W&B and stdout show the same text. Every interval is
printed by ``fmt_ci``, which never prints a zero-width one: "[1.000, 1.000]" looks like certainty and is none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from ..stats.classifier_metrics import wilson
from .regression import ALPHA

DASH = "—"  # shown for a number that does not exist (null metric, unfitted group)


def fmt(x: Any, digits: int = 3) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return DASH
    return DASH if not math.isfinite(v) else f"{v:.{digits}f}"


ZERO_WIDTH = "no interval: zero width"
# An interval over articles has zero width only when every article gives the same value.
FLAT_ARTICLES = "no interval: every article gives the same value"
_MAX_DIGITS = 6  # a narrow interval gets more digits until its ends differ, up to this many


def fmt_ci(lo: Any, hi: Any, digits: int = 3, why: str = "") -> str:
    """"[lo, hi]", or, where there is no interval, ``why`` (or "—"). A zero-width interval is refused: it is
    shown as ``why`` (or ZERO_WIDTH), and one that only rounds to equal ends gets more digits."""
    a, b = fmt(lo, digits), fmt(hi, digits)
    if a == DASH or b == DASH:
        return why or DASH
    for d in range(digits, _MAX_DIGITS + 1):
        a, b = fmt(lo, d), fmt(hi, d)
        if a != b:
            return f"[{a}, {b}]"
    return why or ZERO_WIDTH


def fmt_p(p: Any, why: str = "") -> str:
    """The p-value, or ``why`` there is none (e.g. too few clusters for a clustered test)."""
    try:
        v = float(p)
    except (TypeError, ValueError):
        return why or DASH
    if not math.isfinite(v):
        return why or DASH
    return "<0.001" if v < 0.001 else f"{v:.3f}"


def wilson_ci(successes: float, n: float) -> tuple[float, float]:
    """Wilson 95% interval of a proportion of n items (NaN without items). Unlike a bootstrap or Wald
    interval it is not [1, 1] at n of n: 10 of 10 gives [0.722, 1]."""
    try:
        k, m = float(successes), float(n)
    except (TypeError, ValueError):
        return math.nan, math.nan
    if not (math.isfinite(k) and math.isfinite(m) and m > 0):
        return math.nan, math.nan
    return wilson(k, m, 1 - ALPHA)


def fmt_proportion(successes: Any, n: Any) -> str:
    """A proportion's Wilson interval with its count, e.g. "all 10 of 10: [0.722, 1.000]"."""
    lo, hi = wilson_ci(successes, n)
    if math.isnan(lo):
        return DASH
    k, m = float(successes), int(round(float(n)))
    count = f"{k:g}"
    where = f"all {m} of {m}" if k >= m else f"none of {m}" if k <= 0 else f"{count} of {m}"
    return f"{where}: {fmt_ci(lo, hi)}"


def fmt_int(x: Any) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return DASH
    return DASH if not math.isfinite(v) else str(int(round(v)))


# --- table cells -------------------------------------------------------------------------------

SCALE_NAMES = {"paper": "paper", "logodds": "log-odds"}


def rows_table(frame: pd.DataFrame, cols: Sequence[str], row: Any) -> pd.DataFrame:
    """A display table with one row per row of ``frame``: ``row(series)`` gives the values of ``cols``."""
    return pd.DataFrame([dict(zip(cols, row(r), strict=True)) for _, r in frame.iterrows()], columns=list(cols))


def ci_cell(d: pd.Series, col: str) -> str:
    """``{col}_mean`` with its ``_ci_low``/``_ci_high`` (a mean over articles: a flat interval says why)."""
    return est_ci(d[f"{col}_mean"], d[f"{col}_ci_low"], d[f"{col}_ci_high"], FLAT_ARTICLES)


def holm_cell(d: pd.Series, col: str) -> str:
    """"p (Holm p)" of ``{col}_p`` and ``{col}_p_holm``; a dash without a p."""
    p = fmt_p(d.get(f"{col}_p"))
    return f"{p} ({fmt_p(d.get(f'{col}_p_holm'))})" if p != DASH else DASH


def est_ci(est: float, lo: float, hi: float, why: str = "") -> str:
    """"estimate [lo, hi]"; where there is no interval, "estimate —" or "estimate (why)"."""
    if fmt(est) == DASH:
        return DASH
    ci = fmt_ci(lo, hi, why=why)
    return f"{fmt(est)} {ci}" if ci.startswith("[") or ci == DASH else f"{fmt(est)} ({ci})"


def mde_sentence(value: Any, n_articles: Any, scale: Any = "paper") -> str:
    """The smallest detectable effect in words, e.g. "with n=14 articles, effects smaller than ±0.040 could
    not be seen"."""
    v, n = fmt(value), fmt_int(n_articles)
    if v == DASH:
        return DASH if n == DASH else f"{DASH} (n={n} articles: too few to tell)"
    unit = "" if scale in (None, "paper") else f" ({SCALE_NAMES.get(scale, scale)} scale)"
    return f"with n={n} articles, effects smaller than ±{v}{unit} could not be seen"


# --- rendering -----------------------------------------------------------------------------------


def _md_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    if isinstance(value, float) and math.isnan(value):
        text = DASH
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table: pandas' to_markdown (tabulate), cells escaped for Markdown first.

    Cells are display strings already, so no number parsing or alignment (which would also pad them).
    """
    if df.columns.empty:
        return "_(empty)_"
    if df.empty:
        df = pd.DataFrame([["_(none)_"] + [""] * (len(df.columns) - 1)], columns=df.columns)
    escaped = df.astype(object).map(_md_cell)
    escaped.columns = [_md_cell(c) for c in df.columns]
    return escaped.to_markdown(index=False, tablefmt="github", stralign=None, numalign=None, disable_numparse=True)


def to_text(df: pd.DataFrame, columns: Iterable[str] | None = None) -> str:
    """Fixed-width text for stdout."""
    view = df if columns is None else df[[c for c in columns if c in df.columns]]
    if view.empty:
        return "(none)"
    return view.to_string(index=False)
