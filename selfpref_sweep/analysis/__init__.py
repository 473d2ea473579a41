"""The final analysis job: regressions of self-preference on self-recognition over a sweep.

Entry points:
  - ``python -m selfpref_sweep.analysis SWEEP_DIR [SWEEP_DIR ...]`` (see ``cli.py``)
  - ``selfpref_sweep.analysis.callback.AnalysisCallback``, a Hydra callback that runs it at the end of
    every multirun
  - ``run_analysis(...)`` for use from Python

Modules, one concern each: ``discover`` (find cell directories), ``load`` (read them into pandas),
``units`` (the fits' points: the paper's unit and the cells), ``fit`` (statsmodels regressions),
``tables`` (pandas tables and their text rendering), ``plots`` (matplotlib figures), ``report``
(report.md / report.html), ``wandb_log`` (the W&B summary run), ``pipeline`` (ties them together).

This module imports nothing heavy: Hydra imports ``callback`` at the start of every run, and that
must not pull in pandas, statsmodels and matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .pipeline import AnalysisResult, run_analysis

__all__ = ["run_analysis", "AnalysisResult"]


def __getattr__(name: str) -> Any:
    # Lazy re-export so `import selfpref_sweep.analysis.callback` stays cheap.
    if name in __all__:
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
