"""Hydra callback: run the analysis at the end of every multirun.

Wired in conf/config.yaml::

    hydra:
      callbacks:
        analysis:
          _target_: selfpref_sweep.analysis.job.callback.AnalysisCallback
          enabled: true

Hydra skips ``on_multirun_end`` when a cell raised (the sweeper re-raises the job's exception), which
is exactly when the list of failed cells matters most. So ``on_multirun_start`` also registers an
exit handler that runs the analysis on what is on disk if the sweep ends without reaching
``on_multirun_end``; it runs the analysis command in a fresh interpreter, because an interpreter
that is shutting down can no longer import modules that start threads. The analysis never raises
past Hydra: an error goes to ``<sweep_dir>/analysis/error.txt`` with its traceback and is printed.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ...records.schema import ANALYSIS_ERROR_FILE
from ...records.sweep_dirs import find_cell_dirs
from .command import specificity_margin_of, training_sd_of

log = logging.getLogger(__name__)


def _sweep_dir(config: DictConfig) -> Path:
    return Path(str(config.hydra.sweep.dir))


def _wandb_cfg(config: DictConfig) -> dict[str, Any]:
    """The sweep's wandb settings; group defaults to the one run.py gives the cells."""
    node = config.get("wandb") if hasattr(config, "get") else None
    data: Any = {}
    if node is not None:
        try:
            data = OmegaConf.to_container(node, resolve=True)
        except Exception as exc:  # noqa: BLE001 - an unresolvable setting costs only the W&B defaults
            log.warning("analysis: could not resolve the wandb config (%s); using defaults", exc)
    cfg = dict(data) if isinstance(data, dict) else {}
    if not cfg.get("group"):
        from ...records.schema import wandb_group_name

        cfg["group"] = wandb_group_name(str(config.hydra.sweep.dir))
    return cfg


class AnalysisCallback(Callback):
    """Runs ``selfpref_sweep.analysis.run_analysis`` on the sweep directory after a multirun.

    Args:
        enabled: turn the automatic analysis off without removing the callback.
        min_cells: do nothing when the sweep has fewer cell directories than this.
        run_if_sweep_fails: also analyse (at interpreter exit) a sweep that stopped with an error.
    """

    def __init__(self, enabled: bool = True, min_cells: int = 1, run_if_sweep_fails: bool = True) -> None:
        self.enabled = bool(enabled)
        self.min_cells = int(min_cells)
        self.run_if_sweep_fails = bool(run_if_sweep_fails)
        self._pending: tuple[Path, dict[str, Any]] | None = None

    # --- Hydra hooks -----------------------------------------------------------------------------

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not (self.enabled and self.run_if_sweep_fails) or config.get("plan"):
            return
        try:
            # ${now:...} in sweep.dir is cached by Hydra, so this is the directory the cells use.
            self._pending = (_sweep_dir(config), _wandb_cfg(config))
            atexit.register(self._at_exit)
        except Exception:  # noqa: BLE001 - the safety net must not break the sweep
            log.warning("analysis: could not arm the exit-time analysis:\n%s", traceback.format_exc())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._disarm()
        if config.get("plan") or not self.enabled:  # a plan=true grid ran nothing (its callback prints the plan)
            return
        try:
            sweep_dir, wandb_cfg = _sweep_dir(config), _wandb_cfg(config)
        except Exception:  # noqa: BLE001
            print(f"analysis: cannot read hydra.sweep.dir:\n{traceback.format_exc()}", file=sys.stderr)
            return
        self.analyse(sweep_dir, wandb_cfg, specificity_margin_of(config), training_sd_of(config))

    # --- work ------------------------------------------------------------------------------------

    def _disarm(self) -> None:
        if self._pending is not None:
            atexit.unregister(self._at_exit)
            self._pending = None

    def _at_exit(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        sweep_dir, wandb_cfg = pending
        n = len(find_cell_dirs(sweep_dir)) if sweep_dir.is_dir() else 0
        if n == 0 or n < self.min_cells:
            return  # the sweep failed before any cell started: nothing to analyse
        print(
            f"analysis: the sweep ended with an error before Hydra's on_multirun_end; "
            f"analysing what is on disk in {sweep_dir}",
            file=sys.stderr,
        )
        try:
            self._analyse_in_subprocess(sweep_dir, wandb_cfg)
        except Exception as exc:  # noqa: BLE001
            self._report_error(sweep_dir, exc)

    def _analyse_in_subprocess(self, sweep_dir: Path, wandb_cfg: dict[str, Any]) -> None:
        cmd = [sys.executable, "-m", "selfpref_sweep.analysis", str(sweep_dir)]
        for key in ("mode", "project", "entity", "group"):
            if wandb_cfg.get(key) not in (None, ""):
                cmd += [f"--wandb-{key}", str(wandb_cfg[key])]
        # The package may be importable here only through the sweep's cwd / sys.path.
        root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            where = sweep_dir / "analysis" / ANALYSIS_ERROR_FILE
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(f"$ {' '.join(cmd)}\nexit status {proc.returncode}\n{proc.stderr}", encoding="utf-8")
            print(f"analysis: FAILED (exit status {proc.returncode}); details in {where}", file=sys.stderr)

    def analyse(self, sweep_dir: Path, wandb_cfg: dict[str, Any] | None = None,
                specificity_margin: dict[str, float] | None = None,
                training_sd: tuple[float | None, str] = (None, "")) -> bool:
        """Run the analysis; returns False (after writing analysis/error.txt) if it failed (a half-stated
        training SD among the reasons: the error names it)."""
        try:
            from ..estimate.arms import StatedTrainingSD
            from .pipeline import run_analysis, summary_text

            n = len(find_cell_dirs(sweep_dir)) if sweep_dir.is_dir() else 0
            if n < self.min_cells:
                print(f"analysis: skipped, {n} cell director{'y' if n == 1 else 'ies'} in {sweep_dir} "
                      f"(min_cells={self.min_cells})")
                return True
            result = run_analysis([sweep_dir], wandb_cfg=wandb_cfg, specificity_margin=specificity_margin,
                                  training_sd=StatedTrainingSD.of(*training_sd))
            print(summary_text(result))
            return True
        except Exception as exc:  # noqa: BLE001 - never lose the sweep's results to the analysis
            self._report_error(sweep_dir, exc)
            return False

    @staticmethod
    def _report_error(sweep_dir: Path, exc: BaseException) -> None:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        where = sweep_dir / "analysis" / ANALYSIS_ERROR_FILE
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(text, encoding="utf-8")
            saved = f" (saved to {where})"
        except OSError as write_exc:
            saved = f" (could not save it to {where}: {write_exc})"
        message = (
            f"analysis: FAILED for {sweep_dir}{saved}. The cells' results are untouched; re-run with\n"
            f"  python -m selfpref_sweep.analysis {sweep_dir}\n{text}"
        )
        log.error(message)
        print(message, file=sys.stderr)
