"""What every figure of the report shares: PNGs drawn headless (matplotlib's Agg backend), their resolution, the
file a figure is written to with its title (PlotFile), a grid of panels, and the figure that says there is
nothing to plot."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: sweeps run on servers and in CI

from matplotlib.figure import Figure  # noqa: E402

DPI = 110  # every PNG's resolution


@dataclass
class PlotFile:
    """A figure written to ``path``, with the title the report shows under it."""

    title: str
    path: Path


def grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    """(rows, columns) of a grid of ``n`` panels, at most ``max_cols`` wide."""
    cols = max(1, min(max_cols, n))
    return int(math.ceil(n / cols)), cols


def empty_figure(path: Path, message: str) -> None:
    """A figure that says, in ``message``, why there is nothing to plot."""
    fig = Figure(figsize=(6, 3))
    ax = fig.add_subplot(1, 1, 1)
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    fig.savefig(path, dpi=DPI)
