"""The final analysis job: regressions of self-preference on self-recognition over a sweep.

Entry points:
  - ``python -m selfpref_sweep.analysis SWEEP_DIR [SWEEP_DIR ...]`` (see ``job/command.py``)
  - ``selfpref_sweep.analysis.job.callback.AnalysisCallback``, a Hydra callback that runs it at the end of
    every multirun
  - ``run_analysis(...)`` for use from Python

Subpackages, one concern each: ``sweep`` (a sweep's cells and items read from disk, and each measurement's report
side), ``estimate`` (the fits' points, the regressions, the fine-tune comparisons, the resample: every estimate
the report prints), ``report`` (the report's items, tables, figures, summary box and report.md / report.html),
``study`` (the planted-bias simulator, its coverage study and the calibration labels read from it),
``tracking`` (the W&B summary run and the workspace and report specifications) and ``job`` (the pipeline that
ties them together, its command line and the Hydra callback). What the analysis shares with the measurements'
report sides (report items, table formatting, method texts, figures) is the report kit, ``selfpref_sweep.reporting``.

This module imports nothing heavy: Hydra imports ``job.callback`` at the start of every run, and that
must not pull in pandas, statsmodels and matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .job.pipeline import run_analysis
    from .report.result import AnalysisResult

__all__ = ["run_analysis", "AnalysisResult"]


def __getattr__(name: str) -> Any:
    # Lazy re-export so `import selfpref_sweep.analysis.job.callback` stays cheap.
    if name == "run_analysis":
        from .job import pipeline

        return pipeline.run_analysis
    if name == "AnalysisResult":
        from .report import result

        return result.AnalysisResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
