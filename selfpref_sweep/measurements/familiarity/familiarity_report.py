"""Familiarity, a rival explanation: does recognition predict preference beyond how likely the judge finds
its own summary?

Cells that ran the familiarity stage record, per item, the judge's mean token log-likelihood of each summary
given the article and the summarization prompt. Two things are read from them:

- the likelihood recognizer: "own is the summary the judge finds likelier", whose accuracy is a baseline for
  verbal recognition (per cell from summary.json, per paper unit from the items, averaged over sources as the
  paper unit is);
- item-level OLS of preference on recognition, then on recognition + familiarity (own - other
  log-likelihood per token), CIs clustered by article (CR2 with Bell–McCaffrey degrees of freedom, as
  everywhere in the analysis), per setting × label (never pooled across them), with
  evaluator-variant fixed effects when a group holds several variants. If recognition's coefficient shrinks
  toward 0 once familiarity is in, the recognition-preference link is (in part) familiarity.

Older sweeps, API judges and cells with judge.familiarity=off have no familiarity: the fits say so.

The report's "Verbal recognition next to authorship baselines" puts, per cell, verbal recognition beside the
likelihood recognizer, the self-specific familiarity (the judge's own - other difference minus a reference
model's, judge.familiarity_reference) and the surface-feature baseline, each "not measured" where absent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...reporting.formatting import DASH, FLAT_ARTICLES, SCALE_NAMES, fmt, fmt_ci, fmt_int, fmt_p, fmt_proportion
from ...reporting.grouping import (
    LEVEL_ITEM,
    SCALES,
    UNIT_KEYS,
    condition_groups,
    incomplete_note,
    kept_items,
    key_frame,
    missing_in,
)
from ...reporting.items import ReportItem
from ...reporting.method_texts import method_text
from ...reporting.regression import ALPHA, clustered_ols
from ...stats.clustered import ClusteredOLS, too_few_clusters
from ..recognition_classifier.classifier_report import ACCURACY_COLUMNS
from ..surface_baseline.surface_report import SURFACE_COLUMNS

PACKAGE = __package__  # its texts/ folder holds its method prose
FAMILIARITY = "familiarity"  # the regressor: own - other mean log-likelihood per token


@dataclass
class FamiliarityFit:
    """Recognition's item-level coefficient before and after adding familiarity, in one group."""

    group_by: str
    group: str
    scale: str
    n: int
    ok: bool
    note: str = ""
    n_clusters: int | None = None
    n_variants: int = 0
    rec_before: float = math.nan
    rec_before_ci_low: float = math.nan
    rec_before_ci_high: float = math.nan
    rec_after: float = math.nan
    rec_after_ci_low: float = math.nan
    rec_after_ci_high: float = math.nan
    familiarity: float = math.nan
    familiarity_ci_low: float = math.nan
    familiarity_ci_high: float = math.nan
    familiarity_p: float = math.nan
    corr_recognition_familiarity: float = math.nan
    no_interval: str = ""  # why the CIs and p-value are absent although the estimates exist

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def familiarity_items(items: pd.DataFrame) -> pd.DataFrame:
    """Items scored in both questions that carry a familiarity difference, with an article cluster key."""
    if items.empty or "fam_difference" not in items:
        return items.iloc[0:0]
    kept, _ = kept_items(items)
    kept = kept[np.isfinite(kept["fam_difference"].to_numpy(float))]
    return kept.assign(_article=kept["dataset"].astype(str) + "\x1f" + kept["article_id"].astype(str))


def _coef(res: ClusteredOLS, term: str, with_ci: bool) -> tuple[float, float, float]:
    est = res.coef(term, ALPHA)
    return (est.estimate, est.ci_low, est.ci_high) if with_ci else (est.estimate, math.nan, math.nan)


def fit_familiarity_group(data: pd.DataFrame, *, group_by: str = "", group: str = "all",
                          scale: str = "paper") -> FamiliarityFit:
    """``preference ~ recognition`` and ``preference ~ recognition + familiarity`` on the same items
    (columns recognition, preference, familiarity, evaluator_variant, _article), CIs clustered by article."""
    cols = ["recognition", "preference", FAMILIARITY]
    df = data[np.isfinite(data[cols].to_numpy(float)).all(axis=1)].reset_index(drop=True)
    n = len(df)
    n_variants = int(df["evaluator_variant"].nunique()) if n else 0
    n_clusters = int(df["_article"].nunique()) if n else 0
    base = dict(group_by=group_by, group=group, scale=scale, n=n, n_clusters=n_clusters, n_variants=n_variants)
    effects = " + C(evaluator_variant)" if n_variants > 1 else ""
    n_params = 2 + max(n_variants, 1)  # intercept / variant effects, recognition, familiarity
    problems = []
    if n <= n_params:
        problems.append(f"{n_params} parameters need more items")
    elif n_clusters <= n_params:
        problems.append(f"{n_clusters} article cluster(s); clustered CIs need more than {n_params}")
    for col in ("recognition", FAMILIARITY):
        if n and np.ptp(df[col].to_numpy(float)) == 0:
            problems.append(f"{col} has zero variance")
    if problems:
        return FamiliarityFit(**base, ok=False, note=f"not enough items (n={n}): " + "; ".join(problems))
    clusters = df["_article"]
    before = clustered_ols(df, "preference ~ recognition" + effects, clusters)
    after = clustered_ols(df, "preference ~ recognition + familiarity" + effects, clusters)
    why = too_few_clusters(clusters)
    rb, rb_lo, rb_hi = _coef(before, "recognition", not why)
    ra, ra_lo, ra_hi = _coef(after, "recognition", not why)
    f, f_lo, f_hi = _coef(after, FAMILIARITY, not why)
    note = f"within {n_variants} evaluator variants" if n_variants > 1 else ""
    return FamiliarityFit(
        **base, ok=True, note=note, rec_before=rb, rec_before_ci_low=rb_lo, rec_before_ci_high=rb_hi,
        rec_after=ra, rec_after_ci_low=ra_lo, rec_after_ci_high=ra_hi, familiarity=f, familiarity_ci_low=f_lo,
        familiarity_ci_high=f_hi, familiarity_p=math.nan if why else after.coef(FAMILIARITY, ALPHA).p,
        corr_recognition_familiarity=float(np.corrcoef(df["recognition"], df[FAMILIARITY])[0, 1]), no_interval=why)


def fit_familiarity(items: pd.DataFrame) -> list[FamiliarityFit]:
    """The fits per setting × label (and per dataset where there are several), on both scales where recorded.
    Empty when no item carries familiarity."""
    fam = familiarity_items(items)
    if fam.empty:
        return []
    out = []
    for name, group, sub in condition_groups(fam):
        for scale, col in SCALES.items():
            if not sub[f"rec_{col}"].notna().any():
                continue  # an older sweep without log-odds scores
            data = pd.DataFrame({"recognition": sub[f"rec_{col}"].to_numpy(float),
                                 "preference": sub[f"pref_{col}"].to_numpy(float),
                                 FAMILIARITY: sub["fam_difference"].to_numpy(float),
                                 "evaluator_variant": sub["evaluator_variant"].to_numpy(),
                                 "_article": sub["_article"].to_numpy()})
            out.append(fit_familiarity_group(data, group_by=name, group=group, scale=scale))
    return out


def likelihood_units(items: pd.DataFrame) -> pd.DataFrame:
    """Per paper unit (evaluator variant × dataset × setting × label): the likelihood recognizer's accuracy
    and verbal recognition (paper scale) over the same items, each a mean over the unit's sources of the
    cell means, as the paper unit averages; and the mean familiarity difference. A unit with a cell that has
    no familiarity gets NaN, and ``incomplete`` names the cell, never the mean over the other sources."""
    cols = [*UNIT_KEYS, "n_sources", "n_items", "likelihood_recognition", "verbal_recognition", "mean_difference",
            "incomplete"]
    items = key_frame(items, UNIT_KEYS) if not items.empty else items
    fam = familiarity_items(items)
    if fam.empty:
        return pd.DataFrame(columns=cols)
    d = fam["fam_difference"].to_numpy(float)
    fam = fam.assign(_win=np.where(d > 0, 1.0, np.where(d == 0, 0.5, 0.0)))
    per_cell = fam.groupby([*UNIT_KEYS, "cell_id"], dropna=False).agg(
        n_items=("_win", "size"), lr=("_win", "mean"), rec=("rec_score", "mean"), diff=("fam_difference", "mean"))
    units = per_cell.groupby(level=list(range(len(UNIT_KEYS))), dropna=False).agg(
        n_sources=("lr", "size"), n_items=("n_items", "sum"), likelihood_recognition=("lr", "mean"),
        verbal_recognition=("rec", "mean"), mean_difference=("diff", "mean")).reset_index()
    has = pd.Series(items.index.isin(fam.index), index=items.index)
    notes = {key: incomplete_note({FAMILIARITY: missing_in(sub, has)})[0]
             for key, sub in items.groupby(list(UNIT_KEYS), sort=True)}
    units["incomplete"] = [notes.get(tuple(k), "") for k in units[list(UNIT_KEYS)].itertuples(index=False)]
    units.loc[units["incomplete"] != "", ["likelihood_recognition", "verbal_recognition", "mean_difference"]] = math.nan
    return units[cols]


def recorded(cells: pd.DataFrame) -> bool:
    return bool(not cells.empty and "fam_enabled" in cells and cells["fam_enabled"].map(lambda v: v is True).any())


def familiarity_note(cells: pd.DataFrame, fits: Sequence[FamiliarityFit]) -> str:
    """The section's plain-language note, including why there is nothing to show where there is nothing."""
    what = method_text("familiarity", PACKAGE)
    if not recorded(cells):
        reasons = sorted({r for r in cells.get("fam_reason", pd.Series(dtype=str)) if r}) if not cells.empty else []
        why = f" ({'; '.join(reasons)})" if reasons else " (an older sweep, or no complete cell)"
        return what + f"\n\nNo cell recorded familiarity{why}, so this section is empty."
    if not any(f.ok for f in fits):
        return what + "\n\nNo group had enough items with familiarity for the fits (each says why below)."
    return what


def fits_table(fits: Sequence[FamiliarityFit]) -> pd.DataFrame:
    rows = [{
        "grouping": f.group_by, "group": f.group, "scale": SCALE_NAMES.get(f.scale, f.scale), "n items": f.n,
        "clusters": DASH if f.n_clusters is None else f"{f.n_clusters} articles",
        "recognition (alone)": fmt(f.rec_before),
        "95% CI (alone)": fmt_ci(f.rec_before_ci_low, f.rec_before_ci_high, why=f.no_interval),
        "recognition (+ familiarity)": fmt(f.rec_after),
        "95% CI (+ familiarity)": fmt_ci(f.rec_after_ci_low, f.rec_after_ci_high, why=f.no_interval),
        "familiarity": fmt(f.familiarity),
        "familiarity 95% CI": fmt_ci(f.familiarity_ci_low, f.familiarity_ci_high, why=f.no_interval),
        "p (familiarity)": fmt_p(f.familiarity_p, why=f.no_interval),
        "r(recognition, familiarity)": fmt(f.corr_recognition_familiarity),
        "note": f.note,
    } for f in fits]
    return pd.DataFrame(rows)


def likelihood_cells_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell that ran the stage: verbal recognition next to the likelihood recognizer, both with CIs. The
    recognizer's accuracy is a proportion of the cell's items (one per article), so it gets a Wilson interval,
    which stays inside [0, 1] and is not zero-width at 10 of 10 as the bootstrap's [1, 1] was."""
    if not recorded(cells):
        return pd.DataFrame()
    on = cells[cells["fam_enabled"].map(lambda v: v is True)]
    return pd.DataFrame([{
        "evaluator variant": c.evaluator_variant, "source": c.source, "dataset": c.dataset, "setting": c.setting,
        "label": c.label, "verbal recognition": fmt(c.rec_mean),
        "verbal 95% CI": fmt_ci(c.rec_ci_low, c.rec_ci_high, why=FLAT_ARTICLES),
        "likelihood recognizer": fmt(c.fam_lr_mean),
        "recognizer 95% CI (Wilson)": fmt_proportion(c.fam_lr_mean * c.fam_n, c.fam_n),
        "own − other log-lik/token": fmt(c.fam_diff_mean),
        "difference 95% CI": fmt_ci(c.fam_diff_ci_low, c.fam_diff_ci_high, why=FLAT_ARTICLES),
        "n": fmt_int(c.fam_n),
    } for c in on.itertuples()])


def likelihood_units_table(units: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([{
        "evaluator variant": u.evaluator_variant, "dataset": u.dataset, "setting": u.setting, "label": u.label,
        "sources": int(u.n_sources), "items": int(u.n_items), "verbal recognition": fmt(u.verbal_recognition),
        "likelihood recognizer": fmt(u.likelihood_recognition), "own − other log-lik/token": fmt(u.mean_difference),
        "incomplete": u.incomplete,
    } for u in units.itertuples()])


def fits_frame(fits: Sequence[FamiliarityFit]) -> pd.DataFrame:
    return pd.DataFrame([f.to_dict() for f in fits])


# --- verbal recognition next to the authorship baselines --------------------------------------------------
NOT_MEASURED = "not measured"
# (label, mean column, CI low column, CI high column) of each number the comparison shows, per cell
_BASELINE_COLUMNS = (
    ("verbal recognition (paper score)", "rec_mean", "rec_ci_low", "rec_ci_high"),
    ("verbal recognition (log-odds)", "rec_logodds_mean", "rec_logodds_ci_low", "rec_logodds_ci_high"),
    ("verbal recognition (accuracy)", *ACCURACY_COLUMNS),
    ("likelihood recognizer (accuracy)", "fam_lr_mean", "fam_lr_ci_low", "fam_lr_ci_high"),
    ("self-specific familiarity", "fam_self_specific_mean", "fam_self_specific_ci_low", "fam_self_specific_ci_high"),
    ("surface baseline (accuracy)", *SURFACE_COLUMNS),
)


def _value(row: Any, column: str) -> float:
    """A cell's number, NaN where the column is absent (a measurement this sweep's code does not have)."""
    try:
        v = float(row.get(column, math.nan))
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _with_ci(row: Any, mean: str, low: str, high: str) -> str:
    value = _value(row, mean)
    if math.isnan(value):
        return NOT_MEASURED
    return f"{fmt(value)} {fmt_ci(_value(row, low), _value(row, high), why='(no interval)')}"


def _compare(a: tuple, b: tuple) -> str:
    """'above' / 'below' when the two (mean, low, high) intervals do not overlap, else 'indistinguishable'."""
    if a[1] > b[2]:
        return "above"
    if a[2] < b[1]:
        return "below"
    return "indistinguishable from"


def baseline_reading(row: Any) -> str:
    """The cell's comparisons in plain words: verbal recognition (its accuracy where the recognition classifier
    ran, else the paper score) against the surface baseline and the likelihood recognizer (by whether their CIs
    overlap), and the sign of the self-specific familiarity (by its CI)."""
    def est(mean: str, low: str, high: str) -> tuple:
        return _value(row, mean), _value(row, low), _value(row, high)

    verbal = est(*ACCURACY_COLUMNS)
    if math.isnan(verbal[0]):
        verbal = est("rec_mean", "rec_ci_low", "rec_ci_high")
    parts = []
    for name, other in (("surface baseline", est(*SURFACE_COLUMNS)),
                        ("likelihood recognizer", est("fam_lr_mean", "fam_lr_ci_low", "fam_lr_ci_high"))):
        if not any(math.isnan(v) for v in (*verbal, *other)):
            parts.append(f"verbal {_compare(verbal, other)} the {name}")
    ss = est("fam_self_specific_mean", "fam_self_specific_ci_low", "fam_self_specific_ci_high")
    if not any(math.isnan(v) for v in ss):
        sign = "> 0" if ss[1] > 0 else "< 0" if ss[2] < 0 else "not distinguishable from 0"
        parts.append(f"self-specific familiarity {sign}")
    return "; ".join(parts) or DASH


def authorship_baselines_table(cells: pd.DataFrame) -> pd.DataFrame | None:
    """Per cell: verbal recognition (paper score, log-odds, and accuracy where the recognition classifier ran)
    next to the authorship baselines (the likelihood recognizer, the self-specific familiarity against the
    reference model, the surface-feature baseline), each with its 95% CI or "not measured", and a reading.
    None without cells."""
    if cells.empty:
        return None
    rows = []
    for c in cells.to_dict("records"):
        row = {"evaluator variant": c.get("evaluator_variant"), "source": c.get("source"),
               "dataset": c.get("dataset"), "setting": c.get("setting"), "label": c.get("label")}
        row.update({label: _with_ci(c, *cols) for label, *cols in _BASELINE_COLUMNS})
        why = c.get("fam_ref_reason") or ""
        row["reference model"] = c.get("fam_ref_model") or (f"none: {why}" if why else DASH)
        row["reading"] = baseline_reading(c)
        rows.append(row)
    return pd.DataFrame(rows)


def authorship_baselines_note(cells: pd.DataFrame) -> str:
    """The section's plain-language note, and what no cell measured (and why, where cells say)."""
    what = method_text("authorship_baselines", PACKAGE)
    return what + _not_measured_note(cells)


def _not_measured_note(cells: pd.DataFrame) -> str:
    if cells.empty:
        return "\n\nNo complete cell, so this section is empty."
    notes = []
    for label, column in (("the surface baseline", SURFACE_COLUMNS[0]), ("the likelihood recognizer", "fam_lr_mean"),
                          ("a reference model's familiarity", "fam_self_specific_mean")):
        if column not in cells or not np.isfinite(cells[column].to_numpy(float)).any():
            notes.append(label)
    if not notes:
        return ""
    reasons = sorted({r for r in cells.get("fam_ref_reason", pd.Series(dtype=str)) if r}) \
        if "a reference model's familiarity" in notes else []
    why = f" Why no reference model: {'; '.join(reasons)}." if reasons else ""
    return f"\n\nNo cell measured {'; '.join(notes)}: those columns say 'not measured'.{why}"


# --- what the analysis writes and shows -------------------------------------------------------------------------
NAME = "familiarity"
_last: dict[str, tuple[pd.DataFrame, Any]] = {}  # what -> (the items frame, its result): computed once per sweep


def _once(what: str, items: pd.DataFrame, compute: Any) -> Any:
    if what not in _last or _last[what][0] is not items:
        _last[what] = (items, compute(items))
    return _last[what][1]


def fits_of(items: pd.DataFrame) -> list[FamiliarityFit]:
    """The familiarity fits of these items (the note, the table and the data files share one fit)."""
    return _once("fits", items, fit_familiarity)


def units_of(items: pd.DataFrame) -> pd.DataFrame:
    """The likelihood recognizer per paper unit (its table and the report's incomplete-units warning)."""
    return _once("units", items, likelihood_units)


ITEMS = (
    ReportItem(NAME, "Familiarity: a rival explanation",
               lambda r: familiarity_note(r.data.cells, fits_of(r.data.items)),
               lambda r: fits_table(fits_of(r.data.items)), after="dose_trend",
               fitted=lambda r: fits_of(r.data.items)),
    ReportItem("familiarity_units", "The likelihood recognizer next to verbal recognition, per paper unit",
               "Means over the unit's sources of the cell means, on the items scored in both questions that "
               "carry familiarity (paper scale).", lambda r: likelihood_units_table(units_of(r.data.items)),
               applies=lambda d: NAME in d.measured, level=3, after=NAME),
    ReportItem("familiarity_cells", "The likelihood recognizer next to verbal recognition, per cell",
               "From summary.json: means with 95% article-level bootstrap CIs (verbal recognition over the "
               "cell's scored items; the own − other difference over the items with both summaries scored). "
               "The likelihood recognizer's accuracy is a proportion of those items (a tie counts ½), so it "
               "gets a Wilson interval, which is honest at 10 of 10 where a bootstrap gives [1, 1].",
               lambda r: likelihood_cells_table(r.data.cells), applies=lambda d: NAME in d.measured, level=3,
               after="familiarity_units"),
    ReportItem("authorship_baselines", "Verbal recognition next to authorship baselines",
               lambda r: authorship_baselines_note(r.data.cells),
               lambda r: authorship_baselines_table(r.data.cells)),
)


def data_files(result: Any) -> dict[str, tuple[pd.DataFrame, dict[str, str]]]:
    """The analysis' CSV files of this measurement: name -> (frame, the keys its rows share)."""
    return {"familiarity.csv": (fits_frame(fits_of(result.data.items)), {"level": LEVEL_ITEM})}


def json_sections(result: Any) -> dict[str, tuple[list[dict[str, Any]], dict[str, str]]]:
    """regressions.json's sections of this measurement: name -> (records, the keys its rows share)."""
    return {"familiarity": ([f.to_dict() for f in fits_of(result.data.items)], {"level": LEVEL_ITEM})}


def incomplete_frames(result: Any) -> dict[str, pd.DataFrame]:
    """Per-unit frames whose incomplete units the report's warning names."""
    return {"likelihood recognizer, paper unit": units_of(result.data.items)}
