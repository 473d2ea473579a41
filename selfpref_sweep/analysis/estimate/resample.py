"""One joint article resample that refits the fits: the headline slope and intercept, the specificity shift
and the recognition-vs-control interaction, at the paper unit and at the source level, both scales.

Why. Every unit and cell of a sweep is judged on the same articles, and a point's recognition and preference
come from the same items. The fits in fit.py treat their points as independent and their recognition as
known without error. Neither holds: a point's recognition is a mean over about 10-20 articles, so it carries
sampling error, and that error (i) attenuates the slope toward 0 (errors in the regressor), and (ii) is
shared across points through the articles. The coverage study (docs/coverage.md) showed the headline slope
pooled over datasets covering 77-89% at 10 articles; a check on the same design found its OLS standard
error about right (mean SE ≈ the slopes' SD) and the slope biased toward 0 by about 14-16% at 10 articles and
5-6% at 20: the bias, not the width, is what a resample of the same estimator cannot fix.

What. ``article_resample`` draws the articles with replacement within each dataset (one draw for every
unit, cell, source and question, so everything that shares an article moves together), recomputes every
cell's item means and every paper unit's mean over sources from the drawn items, and refits each group on
the drawn points, vectorized over the draws (items pre-summed per cell and article: a draw is a weight per
article). Each group is fitted two ways, both with a dataset term (effects-coded, so the intercept is the
mean of the datasets' intercepts) wherever its points span several datasets, so that a dataset's level
shift is not read as slope:

- ``RESAMPLE_OLS``: the OLS estimate, with the resample's standard error;
- ``RESAMPLE_CORRECTED``: the same regression corrected for the measurement error in recognition
  (the method-of-moments errors-in-variables estimator, Fuller 1987, §2.2: (Z'Z − S_uu)⁻¹(Z'y − S_uy)),
  where S_uu and S_uy sum each point's sampling (co)variance of recognition and preference, estimated from the
  same draws. Only the regressors built from recognition (recognition, and recognition × recognition_finetune in
  the interaction) carry error; the correction also removes the error shared by a point's two questions.
  Where recognition is too noisy to correct (estimated reliability under MIN_RELIABILITY, or more than
  MAX_BAD_DRAWS of the draws leave the corrected moment matrix not positive definite) the row has the
  estimate and no interval, and says why. The threshold is low on purpose: the reliability is estimated from
  the sample's own recognition spread, so a rule that reads it selects sweeps whose errors lean one way. At
  0.5 it kept the sweeps whose measurement error happened to widen recognition's spread, whose slope the
  correction then under-corrects, which shows in the shift as a positive error: among the sweeps that printed
  an interval the shift rejected a true 0 in up to 9% at 10 articles. At 0.2 the printed rows reject at the
  rule-free estimator's rate, within 0.3 points (bench/shift_refusal.py, docs/results/shift_refusal.md).

Interval. With about 10 articles a percentile interval is too short (about ±1.86 SE where t(9) gives
±2.26, units.py); the bootstrap-t was wider and erratic (bench/coverage_means.py). So each interval is the
estimate ± t(G − H) × the resample's SE, G the articles and H the datasets (strata) of the group's points:
the design degrees of freedom of a stratified cluster sample (Korn & Graubard 1999). The draws take n_h − 1
articles from each dataset's n_h (McCarthy & Snowden 1985, the "subbootstrap" of R's survey package), which
makes the resample variance of a mean unbiased (s²/n rather than the plain bootstrap's (n−1)/n · s²/n).
p-values: 2·P(t(G − H) > |estimate / SE|).

Which one the report prints (REPORTED), from the coverage study (docs/coverage.md: 100 simulated dose-run sweeps
per setting and article count; figures ± about 1.5-3 Monte Carlo SE points). The headline slope and intercept:
corrected. Pooled over datasets the corrected paper-unit slope CI covered 93-97% at 10 articles (both settings
and scales) and 91-99% at 20 (99% pairwise: conservative), where the uncorrected one with the same dataset term
and resample SE covered 68-84% at 10 (its interval has about the right width around a slope pulled toward 0) and
the paper's plain OLS 77-89%. The specificity shift: corrected (the uncorrected shift inherits the slope's
attenuation as a shift, since recognition fine-tunes have the higher recognition: it rejected a true null in
10-53% of sweeps); the corrected one rejected 2-10% at the paper unit, 4-13% at the source level, and gave no
interval in up to a third of the groups at 10 articles, under an eighth at 20 (recognition too unreliable to
correct, under the first threshold of 0.5; at 0.2 up to a sixth at 10). The interaction: uncorrected (its
recognition × kind column is too unreliable to correct, so the corrected one mostly refuses); it rejected 5-11%
pooled and 0-5.5% per transfer. With replicated arms the interaction is fitted on each arm's mean over its
adapters (finetune_tests.arm_means, averaged draw by draw), as the plain fit is. It is the report's one
interaction test: the interaction section prints it, and the specificity reading uses it. Every row's variance
also holds training randomness (training_variance.py: adapters within arms, and arms). Rows that miss their
target carry calibration.py's label.

Not here: the Fisher interval of r, the MixedLM and the item-level fit (not refitted), the unit means and the
fine-tuned-vs-base Δs (their t intervals over articles already hold their rates, docs/coverage.md).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from scipy import linalg

from ...reporting.grouping import LEVEL_SOURCE, LEVEL_UNIT, SCALES, UNIT_KEYS, condition_groups, kept_items, key_frame
from ...reporting.regression import ALPHA
from ...stats.replicates import two_part_t
from ..sweep.load import arm_name
from . import training_variance as TV
from .finetune_tests import ARM_MEANS_NOTE, RECOGNITION_TASKS, arm_point_codes

RESAMPLES = 250  # draws per analysis: the SE's own Monte Carlo error is about 1/sqrt(2·250) ≈ 4.5%
# Below this the correction divides by a small, noisy number: no interval. Low, because the rule itself selects
# (module doc): 0.5 made the printed shift intervals reject a true 0 in up to 9% of sweeps, 0.2 does not.
MIN_RELIABILITY = 0.2
MAX_BAD_DRAWS = 0.05  # share of draws whose corrected moment matrix may fail before the interval is refused
RESAMPLE_OLS = "OLS, dataset term, article-resample SE, t(articles − datasets)"
RESAMPLE_CORRECTED = ("OLS corrected for recognition's measurement error, dataset term, article-resample SE, "
                      "t(articles − datasets)")
METHODS = (RESAMPLE_OLS, RESAMPLE_CORRECTED)
# What each row estimates: the column of the design it reads.
SLOPE, INTERCEPT, SHIFT, INTERACTION = "slope", "intercept", "shift", "interaction"
# The method the report prints for each, chosen by the coverage study (docs/coverage.md): the corrected fit for
# the headline slope and intercept (the plain one is biased toward 0 by recognition's noise and under-covers)
# and for the specificity shift (the plain one inherits that bias as a shift); the plain one for the
# interaction (the correction, at the interaction's low reliability, mostly refuses or misses).
REPORTED = {SLOPE: RESAMPLE_CORRECTED, INTERCEPT: RESAMPLE_CORRECTED, SHIFT: RESAMPLE_CORRECTED,
            INTERACTION: RESAMPLE_OLS}


@dataclass
class ResampledFit:
    """One coefficient of one group's fit, with its article-resample interval (or why there is none)."""

    what: str  # SLOPE, INTERCEPT (headline), SHIFT (specificity), INTERACTION
    level: str  # LEVEL_UNIT or LEVEL_SOURCE
    group_by: str
    group: str
    scale: str
    method: str  # RESAMPLE_OLS or RESAMPLE_CORRECTED
    n: int  # points
    ok: bool
    note: str = ""
    n_articles: int = 0  # G: the articles the group's points were judged on
    n_datasets: int = 0  # H: with more than one, the fit has a dataset term
    dataset_term: bool = False
    estimate: float = math.nan
    se: float = math.nan
    df: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p: float = math.nan
    reliability: float = math.nan  # of recognition given the other regressors (1: measured without error)
    n_resamples: int = 0  # draws used
    no_interval: str = ""
    # Training randomness (training_variance.py): the between-adapter SD of preference off the line, on the fit's
    # scale, and its degrees of freedom; its variance is in se, and df is the Welch-Satterthwaite combination.
    n_adapters: int = 0
    training_sd: float = math.nan
    training_df: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- the draws ----------------------------------------------------------------------------------------


def article_weights(articles: pd.DataFrame, n_resamples: int, seed: int) -> np.ndarray:
    """(1 + n_resamples) × articles: row 0 all ones (the sample itself), then per draw how often each article
    was drawn, n_h − 1 draws with replacement within each dataset (``articles`` has a ``dataset`` column, one
    row per article). A dataset with a single article keeps it in every draw (it adds no variance)."""
    rng = np.random.default_rng(seed)
    datasets = articles["dataset"].to_numpy()
    w = np.ones((1 + n_resamples, len(articles)))
    for ds in pd.unique(datasets):
        idx = np.flatnonzero(datasets == ds)
        if idx.size < 2:
            continue
        picks = rng.integers(0, idx.size, size=(n_resamples, idx.size - 1))
        counts = np.zeros((n_resamples, idx.size))
        np.add.at(counts, (np.repeat(np.arange(n_resamples), idx.size - 1), picks.ravel()), 1.0)
        w[1:, idx] = counts
    return w


@dataclass
class _Sweep:
    """The items pre-summed per cell and article, and the points (cells, units) as rows of the frames."""

    cells: pd.DataFrame  # one row per cell: cell keys, finetune_task, transfer
    units: pd.DataFrame  # one row per unit; "_cells": the cell rows it averages
    articles: pd.DataFrame  # one row per article: dataset
    cell_articles: list[np.ndarray]  # per cell: the article rows it judged (kept items)
    sums: dict[tuple[str, str], np.ndarray]  # (question, scale) -> cells × articles sums of item values
    counts: dict[str, np.ndarray]  # scale -> cells × articles item counts


def _prepare(items: pd.DataFrame) -> _Sweep:
    attrs = [*UNIT_KEYS, "source", "finetune_task", "transfer", "evaluator"]
    all_items = key_frame(items, [*UNIT_KEYS, "source"])
    cells = all_items.groupby("cell_id", sort=True)[[c for c in attrs if c in all_items]].first().reset_index()
    kept, _ = kept_items(all_items)
    art_key = kept["dataset"].astype(str) + "\x1f" + kept["article_id"].astype(str)
    a_codes, a_names = pd.factorize(art_key, sort=True)
    articles = pd.DataFrame({"dataset": [k.split("\x1f", 1)[0] for k in a_names]})
    c_codes = cells.set_index("cell_id").index.get_indexer(kept["cell_id"])
    shape = (len(cells), len(articles))
    sums, counts = {}, {}
    for scale, col in SCALES.items():
        rec, pref = kept[f"rec_{col}"].to_numpy(float), kept[f"pref_{col}"].to_numpy(float)
        both = np.isfinite(rec) & np.isfinite(pref)
        n = np.zeros(shape)
        np.add.at(n, (c_codes[both], a_codes[both]), 1.0)
        counts[scale] = n
        for q, values in (("rec", rec), ("pref", pref)):
            s = np.zeros(shape)
            np.add.at(s, (c_codes[both], a_codes[both]), values[both])
            sums[(q, scale)] = s
    cell_articles = [np.flatnonzero(row) for row in (counts["paper"] + counts["logodds"]) > 0]
    unit_rows = cells.groupby(list(UNIT_KEYS), sort=True)
    units = unit_rows.first().reset_index()[[*UNIT_KEYS, *(c for c in ("finetune_task", "transfer", "evaluator")
                                                          if c in cells)]]
    units["_cells"] = [np.asarray(ix) for ix in unit_rows.indices.values()]
    return _Sweep(cells, units, articles, cell_articles, sums, counts)


def _point_values(sweep: _Sweep, w: np.ndarray) -> dict[tuple[str, str, str], np.ndarray]:
    """(level, question, scale) -> points × draws: every cell's item mean and every unit's mean over its
    cells, under each draw's article weights (NaN where a cell has no drawn item, or a unit a cell without a
    value: a unit is whole or has no value)."""
    out = {}
    for scale in SCALES:
        n = sweep.counts[scale] @ w.T
        for q in ("rec", "pref"):
            with np.errstate(invalid="ignore", divide="ignore"):
                cell = (sweep.sums[(q, scale)] @ w.T) / n
            cell[n == 0] = np.nan
            out[(LEVEL_SOURCE, q, scale)] = cell
            out[(LEVEL_UNIT, q, scale)] = np.stack([cell[ix].mean(axis=0) for ix in sweep.units["_cells"]]) \
                if len(sweep.units) else np.zeros((0, w.shape[0]))
    return out


# --- the fits -----------------------------------------------------------------------------------------


def _design(x: np.ndarray, datasets: np.ndarray, kind: np.ndarray | None, interaction: bool
            ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(F, a, names): the design of one group as Z = F + x·a (x: the points' recognition), F the columns
    without error (1, recognition_finetune, effects-coded datasets) and a the columns' derivative in x (1 for
    recognition, recognition_finetune for the interaction)."""
    n = x.shape[0]
    cols_f, cols_a, names = [np.ones(n), np.zeros(n)], [np.zeros(n), np.ones(n)], ["Intercept", "recognition"]
    if kind is not None:
        cols_f.append(kind.astype(float))
        cols_a.append(np.zeros(n))
        names.append("recognition_finetune")
        if interaction:
            cols_f.append(np.zeros(n))
            cols_a.append(kind.astype(float))
            names.append("recognition:recognition_finetune")
    levels = sorted(set(datasets))
    for ds in levels[1:]:  # effects coding: the intercept is the mean of the datasets' intercepts
        cols_f.append((datasets == ds).astype(float) - (datasets == levels[0]).astype(float))
        cols_a.append(np.zeros(n))
        names.append(f"dataset[{ds}]")
    return np.column_stack(cols_f), np.column_stack(cols_a), names


@dataclass
class _Partialled:
    """A group's design split into the columns without error (W: 1, recognition_finetune, the dataset
    term) and those built from recognition (E = x·a_E), with M = I − W(W'W)⁻¹W' partialling W out."""

    W: np.ndarray
    a: np.ndarray  # points × error columns
    M: np.ndarray
    e: np.ndarray  # column numbers of the error columns in the full design
    f: np.ndarray  # ... and of W

    @classmethod
    def of(cls, F: np.ndarray, a: np.ndarray) -> _Partialled:
        e = np.flatnonzero(np.any(a != 0, axis=0))
        f = np.setdiff1d(np.arange(F.shape[1]), e)
        W = F[:, f]
        return cls(W, a[:, e], np.eye(len(F)) - W @ np.linalg.pinv(W), e, f)

    def correction(self, x_draws: np.ndarray, y_draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(C_EE, C_Ey): the expected contribution of recognition's sampling error to E'ME and E'My, from
        the draws' joint covariance of every point's recognition and preference (n × n: the points share
        articles, and the part they share, moved by the dataset term, is not error there):
        C_EE[j,k] = tr(M D_j Σ_xx D_k), C_Ey[j] = tr(D_j M Σ_xy), D_j = diag(a_j)."""
        xc = x_draws - x_draws.mean(axis=1, keepdims=True)
        yc = y_draws - y_draws.mean(axis=1, keepdims=True)
        s_xx = xc @ xc.T / (x_draws.shape[1] - 1)
        s_xy = xc @ yc.T / (x_draws.shape[1] - 1)
        c_ee = np.einsum("il,lj,li,ik->jk", self.M, self.a, s_xx, self.a)
        c_ey = np.einsum("lj,li,li->j", self.a, self.M, s_xy)
        return c_ee, c_ey

    def solve(self, x: np.ndarray, y: np.ndarray, c_ee: np.ndarray | None = None,
              c_ey: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per draw (x, y: points × draws): the error columns' coefficients (draws × k), corrected by C when
        given, the error-free columns' (draws × |W|), and whether the (corrected) E'ME was positive definite."""
        E = x.T[:, :, None] * self.a[None]  # draws × points × k
        ME = np.einsum("il,blk->bik", self.M, E)
        G = np.einsum("bik,bij->bkj", E, ME)
        h = np.einsum("bik,ib->bk", ME, y)
        if c_ee is not None:
            G, h = G - c_ee, h - c_ey
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = np.sqrt(np.abs(np.einsum("bkk->bk", G))) + 1e-300
            ok = np.linalg.eigvalsh(G / scale[:, :, None] / scale[:, None, :]).min(axis=1) > 1e-10
        beta_e = np.full(h.shape, np.nan)
        if ok.any():
            beta_e[ok] = np.linalg.solve(G[ok], h[ok][..., None])[..., 0]
        rest = y.T - np.einsum("bik,bk->bi", E, beta_e)  # what the error-free columns fit
        beta_w = rest @ np.linalg.pinv(self.W).T
        return beta_e, beta_w, ok

    def reliability(self, x: np.ndarray, c_ee: np.ndarray) -> float:
        """The smallest reliability of the recognition columns given the others: the smallest generalized
        eigenvalue of (P − C_EE, P), P = E'ME (1: no error; 0: all error)."""
        E = x[:, None] * self.a
        P = E.T @ self.M @ E
        try:
            return float(linalg.eigh(P - c_ee, P, eigvals_only=True).min())
        except (linalg.LinAlgError, ValueError):
            return math.nan


def _interval(est: float, draws: np.ndarray, df: float, v_train: float = 0.0, df_train: float = math.inf
              ) -> dict[str, float]:
    """est ± t × SE, SE² the draws' variance plus ``v_train`` (training randomness), t on the two parts'
    Welch-Satterthwaite degrees of freedom (df alone when v_train is 0): stats.replicates.two_part_t."""
    return two_part_t(est, float(np.var(draws, ddof=1)), df, float(v_train), float(df_train), 1 - ALPHA)


def _training(coefs: Callable[..., tuple[np.ndarray, np.ndarray]], x: np.ndarray, y: np.ndarray, F: np.ndarray,
              a: np.ndarray, est: np.ndarray, beta: np.ndarray, members: TV.Membership, n_fixed: int, why: str
              ) -> TV.TrainingVariance:
    """One method's training term (training_variance.py), or none where the row has no interval (``why``)."""
    if why:
        return TV.none(F.shape[1], members.n_adapters)
    return TV.training_variance(lambda xs, ys: coefs(xs, ys)[0], x, y, F, a, est, beta, members, n_fixed)


def _no_interval(n_draws: int, df: float, reliability: float | None, ok: np.ndarray) -> str:
    """Why a method's row has no interval ("" when it has one); ``reliability`` None for plain OLS, which
    needs no correction."""
    if n_draws < 2:
        return "no interval: too few usable article draws"
    if df <= 0:
        return "no interval: a single article per dataset"
    if reliability is not None and not (reliability >= MIN_RELIABILITY):
        return (f"no interval: recognition's estimated reliability {reliability:.2f} is under {MIN_RELIABILITY}, "
                "too noisy to correct")
    if reliability is not None and (1 - ok.mean()) > MAX_BAD_DRAWS:
        return f"no interval: the correction failed in {100 * (1 - ok.mean()):.0f}% of the draws"
    return ""


def _fit_group(x: np.ndarray, y: np.ndarray, datasets: np.ndarray, kind: np.ndarray | None, interaction: bool,
               whats: Sequence[str], df: float, base: dict[str, Any], members: TV.Membership) -> list[ResampledFit]:
    """Both methods' rows for one group: x, y are points × (1 + draws), column 0 the sample; ``members`` says
    which points share an adapter's or an arm's training deviation (training_variance.py)."""
    F, a, names = _design(x[:, 0], datasets, kind, interaction)
    col = {SLOPE: names.index("recognition"), INTERCEPT: 0}
    if kind is not None:
        col[SHIFT] = names.index("recognition_finetune")
        if interaction:
            col[INTERACTION] = names.index("recognition:recognition_finetune")
    n, p = F.shape
    rows = []

    def rows_for(method: str, **extra: Any) -> list[ResampledFit]:
        return [ResampledFit(what=w, method=method, n=n, **base, **extra) for w in whats]

    problem = ""
    if n <= p:
        problem = f"not enough points (n={n}) for {p} parameters"
    elif np.linalg.matrix_rank(F + x[:, :1] * a) < p:
        problem = "the design is not of full rank (recognition or a kind does not vary enough)"
    if problem:
        return rows_for(RESAMPLE_OLS, ok=False, note=problem) + rows_for(RESAMPLE_CORRECTED, ok=False, note=problem)
    # Draws with a point without value (a cell with no drawn item) sit out.
    good = np.isfinite(x[:, 1:]).all(axis=0) & np.isfinite(y[:, 1:]).all(axis=0)
    xd, yd = x[:, 1:][:, good], y[:, 1:][:, good]
    n_draws = int(good.sum())
    part = _Partialled.of(F, a)
    c_ee, c_ey = part.correction(xd, yd) if n_draws > 1 else (np.full((part.a.shape[1],) * 2, np.nan), None)
    rel = part.reliability(x[:, 0], c_ee) if n_draws > 1 else math.nan

    def coefs(xs: np.ndarray, ys: np.ndarray, corrected: bool) -> tuple[np.ndarray, np.ndarray]:
        """Draws × all parameters (in the design's order), and which draws solved."""
        b_e, b_w, ok = part.solve(xs, ys, c_ee, c_ey) if corrected else part.solve(xs, ys)
        beta = np.empty((xs.shape[1], p))
        beta[:, part.e], beta[:, part.f] = b_e, b_w
        return beta, ok

    for method in METHODS:
        corrected = method == RESAMPLE_CORRECTED
        if corrected and n_draws < 2:
            rows += rows_for(method, ok=False, note="too few usable article draws to estimate the error")
            continue
        est, _ = coefs(x[:, :1], y[:, :1], corrected)
        beta, ok = coefs(xd, yd, corrected) if n_draws else (np.zeros((0, p)), np.zeros(0, bool))
        why = _no_interval(n_draws, df, rel if corrected else None, ok)
        if not np.isfinite(est).all():
            rows += rows_for(method, ok=False, note="the corrected moment matrix is not positive definite: "
                             "recognition too noisy to correct", reliability=rel)
            continue
        cols = np.r_[0, 1 + np.flatnonzero(good)[ok]]  # the sample, then the draws that solved
        train = _training(partial(coefs, corrected=corrected), x[:, cols], y[:, cols], F, a, est[0], beta[ok],
                          members.columns(cols), p - (len(set(datasets)) - 1), why)
        for w in whats:
            e = float(est[0, col[w]])
            fields = {} if why else _interval(e, beta[ok, col[w]], df, train.v[col[w]], train.df[col[w]])
            rows.append(ResampledFit(what=w, method=method, n=n, **base, ok=True, estimate=e, reliability=rel,
                                     n_resamples=int(ok.sum()), no_interval=why, **train.fields(), **fields))
    return rows


def _groups(frame: pd.DataFrame, within: str) -> list[tuple[str, str, np.ndarray]]:
    """condition_groups over a point frame: (grouping, group, the frame's row numbers)."""
    frame = frame.assign(_row=np.arange(len(frame)))
    return [(name, group, sub["_row"].to_numpy()) for name, group, sub in condition_groups(frame, within=within)]


def article_resample(items: pd.DataFrame, recognition_tasks: Sequence[str] = RECOGNITION_TASKS, *,
                     n_resamples: int = RESAMPLES, seed: int = 0) -> list[ResampledFit]:
    """The headline (slope, intercept), specificity (shift) and interaction fits, at the paper unit and the
    source level, per setting × label (all datasets, and per dataset or transfer condition), both scales, each
    by RESAMPLE_OLS and RESAMPLE_CORRECTED, with intervals from one joint article resample (module doc).
    ``n_resamples=0`` gives no rows."""
    if items.empty or n_resamples <= 0:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # means of empty draws: NaN, handled
        sweep = _prepare(items)
        w = article_weights(sweep.articles, n_resamples, seed)
        values = _point_values(sweep, w)
        unit_articles = [np.unique(np.concatenate([sweep.cell_articles[c] for c in ix]))
                         for ix in sweep.units["_cells"]]
        frames = {LEVEL_UNIT: (sweep.units, unit_articles), LEVEL_SOURCE: (sweep.cells, sweep.cell_articles)}
        return fit_levels(frames, values, recognition_tasks)


def fit_levels(frames: Mapping[str, tuple[pd.DataFrame, Sequence[np.ndarray]]],
               values: Mapping[tuple[str, str, str], np.ndarray],
               recognition_tasks: Sequence[str] = RECOGNITION_TASKS) -> list[ResampledFit]:
    """Every group's rows: ``frames`` level -> (points with setting, label, dataset, finetune_task, transfer;
    per point the article numbers it was judged on), ``values`` (level, "rec"/"pref", scale) -> points ×
    (1 + draws), column 0 the sample."""
    out: list[ResampledFit] = []
    for level, (frame, frame_articles) in frames.items():
        tuned = _trained(frame)
        for within, comparison in (("dataset", False), ("transfer", True)):
            for name, group, rows in _groups(frame, within):
                rows = rows[tuned[rows]] if comparison else rows
                for scale in SCALES:
                    x, y = values[(level, "rec", scale)][rows], values[(level, "pref", scale)][rows]
                    usable = np.isfinite(x[:, 0]) & np.isfinite(y[:, 0])
                    if usable.any():
                        out += _fit_points(frame, frame_articles, rows[usable], x[usable], y[usable], comparison,
                                           recognition_tasks, dict(level=level, group_by=name, group=group,
                                                                   scale=scale))
    return out


def _fit_points(frame: pd.DataFrame, frame_articles: Sequence[np.ndarray], pts: np.ndarray, x: np.ndarray,
                y: np.ndarray, comparison: bool, recognition_tasks: Sequence[str],
                base: dict[str, Any]) -> list[ResampledFit]:
    """One group's rows: the headline (slope, intercept; slope only at the source level) or, over fine-tuned
    points (``comparison``), the specificity shift and the interaction."""
    datasets = frame["dataset"].astype(str).to_numpy()[pts]
    arts = np.unique(np.concatenate([np.asarray(frame_articles[r], dtype=int) for r in pts]))
    n_h = len(set(datasets))
    base = dict(base, n_articles=int(arts.size), n_datasets=n_h, dataset_term=n_h > 1)
    df = float(arts.size - n_h)
    points = frame.iloc[pts]
    adapters = points["evaluator_variant"].astype(str).to_numpy()
    found = arm_point_codes(points)
    members = TV.Membership.of_points(adapters, np.asarray([arm_name(v) for v in adapters]),
                                      _trained(points), found[0] if found is not None else None, x, y)
    if comparison:
        kind = points["finetune_task"].astype(str).isin(list(recognition_tasks)).to_numpy()
        return (_fit_group(x, y, datasets, kind, False, (SHIFT,), df, base, members)
                + _interaction_rows(points, x, y, datasets, kind, df, base, members))
    whats = (SLOPE, INTERCEPT) if base["level"] == LEVEL_UNIT else (SLOPE,)
    return _fit_group(x, y, datasets, None, False, whats, df, base, members)


def _trained(frame: pd.DataFrame) -> np.ndarray:
    """Per row whether it is a fine-tuned evaluator's (the base model carries no training deviation)."""
    return (frame["finetune_task"].notna() & ~frame["finetune_task"].astype(str).isin(["none", "null"])).to_numpy()


def _interaction_rows(frame: pd.DataFrame, x: np.ndarray, y: np.ndarray, datasets: np.ndarray, kind: np.ndarray,
                     df: float, base: dict[str, Any], members: TV.Membership) -> list[ResampledFit]:
    """The interaction's rows, on each arm's mean over its adapters where arms are replicated
    (finetune_tests.arm_means: the same points in every draw, averaged draw by draw)."""
    found = arm_point_codes(frame)
    if found is None:
        return _fit_group(x, y, datasets, kind, True, (INTERACTION,), df, base, members)
    codes, arms = found
    pool = np.zeros((len(arms), len(codes)))
    pool[codes, np.arange(len(codes))] = 1.0
    first = pool.argmax(axis=1)  # each arm point's first row: its dataset and kind
    pool /= pool.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        xm, ym = pool @ x, pool @ y  # a draw where one adapter has no value gives NaN and sits out
    pooled = TV.Membership.of_arm_means(pool, np.asarray(arms), codes,
                                        frame["evaluator_variant"].astype(str).to_numpy(), x, y)
    rows = _fit_group(xm, ym, datasets[first], kind[first], True, (INTERACTION,), df, base, pooled)
    note = ARM_MEANS_NOTE.format(n=len(arms), m=len(codes))
    for r in rows:
        r.note = "; ".join(t for t in (note, r.note) if t)
    return rows


def true_resampled(units: pd.DataFrame, points: pd.DataFrame,
                   recognition_tasks: Sequence[str] = RECOGNITION_TASKS) -> list[ResampledFit]:
    """The same fits (RESAMPLE_OLS's estimate) on true points: what the estimates aim at. ``units`` has
    ``{rec,pref}_{scale}_mean``, ``points`` ``{rec,pref}_{scale}``, both setting, label, dataset,
    finetune_task and transfer (the coverage study's Truth)."""
    frames, values = {}, {}
    for level, frame, template in ((LEVEL_UNIT, units, "{q}_{s}_mean"), (LEVEL_SOURCE, points, "{q}_{s}")):
        frame = frame.reset_index(drop=True)
        frames[level] = (frame, [np.zeros(1, dtype=int)] * len(frame))
        for scale in SCALES:
            for q in ("rec", "pref"):
                values[(level, q, scale)] = frame[template.format(q=q, s=scale)].to_numpy(float)[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return [f for f in fit_levels(frames, values, recognition_tasks) if f.method == RESAMPLE_OLS]


def reported(fits: Sequence[ResampledFit]) -> list[ResampledFit]:
    """The rows the report prints: each coefficient by its REPORTED method."""
    return [f for f in fits if REPORTED.get(f.what) == f.method]


def resampled_frame(fits: Sequence[ResampledFit]) -> pd.DataFrame:
    """Numeric version of the rows (CSV, W&B)."""
    return pd.DataFrame([f.to_dict() for f in fits])


def find(fits: Sequence[ResampledFit], what: str, level: str, group_by: str, group: str, scale: str,
         method: str = RESAMPLE_CORRECTED) -> ResampledFit | None:
    """The row of one coefficient, group, scale and method (None if absent)."""
    for f in fits:
        if (f.what, f.level, f.group_by, f.group, f.scale, f.method) == (what, level, group_by, group, scale, method):
            return f
    return None
