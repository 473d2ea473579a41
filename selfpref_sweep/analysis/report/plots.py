"""matplotlib figures of the report (PNG, Agg backend, no display needed).

- scatter (the headline): paper-unit preference vs recognition, one panel per setting × label condition,
  points coloured by finetune_task and shaped by dataset, with the OLS line and its 95% confidence band.
- heatmaps: evaluator x source matrices of mean recognition and of mean preference.
- fine-tuned vs base: each fine-tuned variant's change in recognition and in preference over its base model on
  the same items, with 95% CIs (a dose-response reads down a panel).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: sweeps run on servers and in CI

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from ...reporting.figures import DPI, PlotFile, empty_figure, grid  # noqa: E402
from ...reporting.formatting import DASH, fmt, fmt_ci  # noqa: E402
from ...reporting.grouping import GROUPINGS  # noqa: E402
from ..estimate.fit import FitResult, confidence_band  # noqa: E402

_MARKERS = ("o", "s", "^", "D", "v", "P")


def _colours(tasks: Sequence[str]) -> dict[str, tuple]:
    # Stable colours: "none" (base models) always first and grey-free tab10 order for the rest.
    ordered = sorted(set(tasks), key=lambda t: (t != "none", t))
    cmap = matplotlib.colormaps["tab10"]
    return {t: cmap(i % 10) for i, t in enumerate(ordered)}


def _fit_label(fit: FitResult) -> str:
    if not fit.ok:
        return fit.note
    if fit.no_interval:  # e.g. a perfect fit: say so once rather than print [b, b]
        return f"slope {fmt(fit.slope, 2)}, r {fmt(fit.r, 2)}, n={fit.n}\n{fit.no_interval}"
    r_ci = fmt_ci(fit.r_ci_low, fit.r_ci_high, 2)
    r_txt = f"r {fmt(fit.r, 2)}" + ("" if r_ci == DASH else f" {r_ci}")
    return f"slope {fmt(fit.slope, 2)} {fmt_ci(fit.slope_ci_low, fit.slope_ci_high, 2)}\n{r_txt}, n={fit.n}"


def _yerr(sub: pd.DataFrame, prefix: str) -> np.ndarray:
    # Asymmetric bootstrap CIs; a null bound draws no bar rather than failing.
    mean = sub[f"{prefix}_mean"].to_numpy(float)
    lo = np.nan_to_num(mean - sub[f"{prefix}_ci_low"].to_numpy(float), nan=0.0).clip(min=0)
    hi = np.nan_to_num(sub[f"{prefix}_ci_high"].to_numpy(float) - mean, nan=0.0).clip(min=0)
    return np.vstack([lo, hi])


def scatter_plot(units: pd.DataFrame, fits: Sequence[FitResult], path: Path) -> PlotFile:
    """Paper-unit preference vs recognition (paper's scale), one panel per setting × label condition."""
    title = ("Self-preference vs self-recognition at the paper's unit\n(evaluator variant × dataset, mean over "
             "sources)\nOLS fit with its 95% CI band")
    usable = units.dropna(subset=["rec_paper_mean", "pref_paper_mean"]) if not units.empty else units
    if usable.empty:
        empty_figure(path, "No paper unit has both a recognition and a preference mean:\nnothing to plot.")
        return PlotFile(title, path)
    headline = {f.group: f for f in fits if f.group_by == GROUPINGS[0][0] and f.scale == "paper"}
    facets = sorted(usable.groupby(["setting", "label"]).groups.keys())
    rows, cols = grid(len(facets))
    fig = Figure(figsize=(max(4.8 * cols, 7.5), 4.3 * rows + 1.4), layout="constrained")
    colours = _colours(usable["finetune_task"].fillna("none").astype(str))
    datasets = sorted(usable["dataset"].astype(str).unique())
    markers = {d: _MARKERS[i % len(_MARKERS)] for i, d in enumerate(datasets)}
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.ravel()[len(facets):]:
        ax.axis("off")
    for ax, (setting, label) in zip(axes.ravel(), facets, strict=False):
        sub = usable[(usable["setting"] == setting) & (usable["label"] == label)]
        ax.axhline(0.5, color="0.75", lw=0.8, ls="--", zorder=0)
        ax.axvline(0.5, color="0.75", lw=0.8, ls="--", zorder=0)
        for (task, dataset), pts in sub.groupby([sub["finetune_task"].fillna("none").astype(str), sub["dataset"]]):
            ax.errorbar(
                pts["rec_paper_mean"], pts["pref_paper_mean"], xerr=_yerr(pts, "rec_paper"),
                yerr=_yerr(pts, "pref_paper"), fmt=markers[dataset], color=colours[task], ecolor=colours[task],
                elinewidth=0.6, alpha=0.85, capsize=0, markersize=6, markeredgecolor="white",
            )
        fit = headline.get(f"{setting} / {label}")
        if fit is not None and fit.ok:
            xs = np.linspace(sub["rec_paper_mean"].min(), sub["rec_paper_mean"].max(), 60)
            pred, lo, hi = confidence_band(fit, xs)
            ax.fill_between(xs, lo, hi, color="0.3", alpha=0.15, lw=0, label="95% CI")
            ax.plot(xs, pred, color="0.15", lw=1.5)
        ax.text(
            0.02, 0.98, _fit_label(fit) if fit is not None else "", transform=ax.transAxes, va="top", ha="left",
            fontsize=8, bbox=dict(boxstyle="round", fc="white", ec="0.8", alpha=0.9),
        )
        ax.set_title(f"setting={setting} · label={label}", fontsize=10)
        ax.set_xlabel("self-recognition (mean over sources)")
        ax.set_ylabel("self-preference (mean over sources)")
    handles = [Line2D([], [], marker="o", ls="", color=c, label=f"finetune_task={t}") for t, c in colours.items()]
    handles += [Line2D([], [], marker=markers[d], ls="", color="0.3", label=f"dataset={d}") for d in datasets]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=DPI)
    return PlotFile(title, path)


def heatmap_plot(cells: pd.DataFrame, prefix: str, path: Path) -> PlotFile:
    """Evaluator x source heatmap of one metric, one panel per (dataset, setting, label)."""
    metric = {"rec": "recognition", "pref": "preference"}[prefix]
    title = f"Self-{metric}: evaluator × source (cell means)"
    usable = cells.dropna(subset=[f"{prefix}_mean"]) if not cells.empty else cells
    if usable.empty:
        empty_figure(path, f"No complete cell has a {metric} mean: nothing to plot.")
        return PlotFile(title, path)
    keys = ["dataset", "setting", "label", "evaluator_variant", "source"]
    usable = usable.copy()
    usable[keys] = usable[keys].astype(object).where(usable[keys].notna(), "null").astype(str)
    facets = sorted(usable.groupby(["dataset", "setting", "label"]).groups.keys())
    n_rows_max = max(usable.groupby(["dataset", "setting", "label"])["evaluator_variant"].nunique())
    n_cols_max = max(usable.groupby(["dataset", "setting", "label"])["source"].nunique())
    rows, cols = grid(len(facets), max_cols=2)
    fig = Figure(
        figsize=(cols * (2.8 + 1.0 * n_cols_max), rows * (1.6 + 0.45 * n_rows_max) + 0.6), layout="constrained"
    )
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.ravel()[len(facets):]:
        ax.axis("off")
    image = None
    for ax, (ds, setting, label) in zip(axes.ravel(), facets, strict=False):
        sub = usable[(usable["dataset"] == ds) & (usable["setting"] == setting) & (usable["label"] == label)]
        grouped = sub.groupby(["evaluator_variant", "source"])[f"{prefix}_mean"]
        matrix = grouped.mean().unstack("source")
        counts = grouped.size().unstack("source")
        data = matrix.to_numpy(dtype=float)
        # Diverging around 0.5 (no bias); grey where an evaluator never met that source.
        image = ax.imshow(np.ma.masked_invalid(data), cmap="RdBu_r", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_facecolor("0.9")
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                if math.isfinite(data[i, j]):
                    k = counts.iat[i, j]
                    text = f"{data[i, j]:.2f}" + (f"\n(mean of {int(k)})" if k and k > 1 else "")
                    ax.text(j, i, text, ha="center", va="center", fontsize=8,
                            color="white" if abs(data[i, j] - 0.5) > 0.3 else "black")
        ax.set_xticks(range(data.shape[1]), [str(c) for c in matrix.columns], rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(data.shape[0]), [str(r) for r in matrix.index], fontsize=8)
        ax.set_xlabel("source")
        ax.set_ylabel("evaluator")
        ax.set_title(f"{ds} · {setting} · label={label}", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label=f"mean self-{metric}")
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=DPI)
    return PlotFile(title, path)


def finetune_vs_base_plot(diffs: pd.DataFrame, path: Path, scale: str = "logodds") -> PlotFile:
    """Fine-tuned minus base (same items) per variant: recognition and preference side by side with their 95%
    CIs, one panel per dataset × setting × label. The log-odds scale by default: the paper's scale squashes a
    change toward 0 by the judge's position bias."""
    scale_name = {"paper": "paper's scale", "logodds": "log-odds scale"}[scale]
    title = f"Fine-tuned minus base model on the same items ({scale_name}), 95% article-clustered CIs"
    usable = diffs.dropna(subset=[f"drec_{scale}_mean", f"dpref_{scale}_mean"]) if not diffs.empty else diffs
    if usable.empty:
        empty_figure(path, "No fine-tuned evaluator shares items with its base model: nothing to plot.")
        return PlotFile(title, path)
    facets = list(dict.fromkeys(zip(usable["dataset"], usable["setting"], usable["label"], strict=True)))
    n_max = max(len(usable[(usable["dataset"] == d) & (usable["setting"] == s) & (usable["label"] == lab)])
                for d, s, lab in facets)
    rows, cols = grid(len(facets), max_cols=2)
    fig = Figure(figsize=(6.4 * cols, rows * (1.2 + 0.42 * n_max) + 0.9), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.ravel()[len(facets):]:
        ax.axis("off")
    styles = {"rec": ("recognition", "tab:blue", -0.17), "pref": ("preference", "tab:orange", 0.17)}
    for ax, (ds, setting, label) in zip(axes.ravel(), facets, strict=False):
        sub = usable[(usable["dataset"] == ds) & (usable["setting"] == setting) & (usable["label"] == label)]
        y = np.arange(len(sub))[::-1]
        for q, (name, colour, shift) in styles.items():
            ax.errorbar(sub[f"d{q}_{scale}_mean"], y + shift, xerr=_yerr(sub, f"d{q}_{scale}"), fmt="o",
                        color=colour, elinewidth=1.0, capsize=2, markersize=5, label=f"Δ {name}")
        ax.axvline(0.0, color="0.6", lw=0.8, ls="--", zorder=0)
        ax.set_yticks(y, [str(v).replace(" [", "\n[", 1) for v in sub["evaluator_variant"]], fontsize=7)
        ax.set_xlabel(f"fine-tuned − base ({scale_name})")
        ax.set_title(f"{ds} · {setting} · label={label}", fontsize=9)
    handles = [Line2D([], [], marker="o", ls="", color=c, label=f"Δ {n}") for n, c, _ in styles.values()]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=DPI)
    return PlotFile(title, path)


def make_plots(cells: pd.DataFrame, units: pd.DataFrame, unit_fits: Sequence[FitResult], out_dir: Path,
               diffs: pd.DataFrame | None = None, only: Collection[str] | None = None,
               extra: dict[str, Callable[[pd.DataFrame, Path], PlotFile]] | None = None) -> list[PlotFile]:
    """Write every figure into ``out_dir`` (fixed names, so a re-run replaces them); ``only``: the stems of the
    figures the report shows (report_items.plot_stems), the rest not drawn and an earlier run's copy removed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Callable[[Path], PlotFile]] = {
        "preference_vs_recognition": lambda p: scatter_plot(units, unit_fits, p),
        "heatmap_recognition": lambda p: heatmap_plot(cells, "rec", p),
        "heatmap_preference": lambda p: heatmap_plot(cells, "pref", p),
    }
    if diffs is not None and not diffs.empty:
        figures["finetune_vs_base"] = lambda p: finetune_vs_base_plot(diffs, p)
    for stem, draw in (extra or {}).items():  # a measurement's figures (its report module's PLOTS)
        figures[stem] = lambda p, draw=draw: draw(cells, p)
    plots = []
    for stem, draw in figures.items():
        path = out_dir / f"{stem}.png"
        if only is None or stem in only:
            plots.append(draw(path))
        else:  # a stale figure of another design would sit beside the report as if it were this sweep's
            path.unlink(missing_ok=True)
    return plots
