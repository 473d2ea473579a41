"""The sweep's command line, shared by ``python run.py`` and the ``selfpref-sweep`` console script.

    selfpref-sweep                                   # one cell: qwen05 vs human summaries on the demo data
    selfpref-sweep -m experiment=smoke               # a preset grid (conf/experiment/)
    selfpref-sweep -m source=human,smollm135 dataset=paper_xsum dataset.root=../shared/paper-data

The configuration is the repository's conf/ in a source checkout or an editable install, and the copy
shipped in the package (selfpref_sweep/_conf) in a wheel; $SELFPREF_CONF points at another one.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from .config import register_configs
from .errors import SelfprefError

log = logging.getLogger("selfpref_sweep")
PACKAGED_CONF = "pkg://selfpref_sweep._conf"


def threads_per_job(n_jobs: object) -> str:
    """OMP_NUM_THREADS for one of n_jobs parallel cells: this machine's cores shared out, at least 1."""
    return str(max(1, (os.cpu_count() or 1) // max(1, int(n_jobs))))


# Used by conf/hydra/launcher/parallel.yaml (hydra.job.env_set); registered at import, because Hydra
# resolves env_set inside each job process.
OmegaConf.register_new_resolver("threads_per_job", threads_per_job, replace=True)


def config_path() -> str:
    """Where conf/ is: $SELFPREF_CONF, else the checkout's conf/ beside the package, else the packaged copy."""
    if os.environ.get("SELFPREF_CONF"):
        return str(Path(os.environ["SELFPREF_CONF"]).resolve())
    checkout = Path(__file__).resolve().parents[1] / "conf"
    if (checkout / "config.yaml").is_file():
        return str(checkout)
    return PACKAGED_CONF


def run_job(cfg: DictConfig) -> None:
    """One Hydra job: a cell, or its plan with plan=true. Errors are recorded in the cell directory."""
    from .config.spec import resolve_cell
    from .config.validation import validate_config
    from .records.schema import ERROR_FILE, wandb_group_name
    from .run.plan import plan_cell
    from .run.runner import run_cell  # after Hydra has parsed the command line: keeps --help fast

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    sweeping = hc.mode == RunMode.MULTIRUN
    group = wandb_group_name(hc.sweep.dir) if sweeping else None
    (run_dir / ERROR_FILE).unlink(missing_ok=True)  # a failure of an earlier run in this directory
    spec = None
    try:
        validate_config(cfg)  # ranges and unknown keys, before anything is loaded or spent
        spec = resolve_cell(cfg, sweeping)  # the config, resolved once into typed facts
        if spec.plan:
            plan_cell(spec, run_dir)
        else:
            run_cell(spec, run_dir, wandb_group=spec.wandb.group or group)
    except Exception as exc:  # noqa: BLE001 - recorded for the analysis job, then reported
        clear = isinstance(exc, SelfprefError)
        detail = f"{type(exc).__name__}: {exc}\n" + ("" if clear else "\n" + traceback.format_exc())
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / ERROR_FILE).write_text(detail)
        log.error("cell failed: %s", detail)
        if not cfg.get("plan"):
            _track_failure(cfg, spec, run_dir, group, detail)
        if sweeping:
            # One bad cell must not stop a long sweep; the sweep's end lists it and exits non-zero.
            print(f"\nerror in cell {run_dir}: {exc}\n", file=sys.stderr)
            return
        if clear:
            print(f"\nerror: {exc}\n", file=sys.stderr)
            sys.exit(2)
        raise


def _track_failure(cfg: DictConfig, spec, run_dir: Path, group: str | None, detail: str) -> None:
    """The failed cell's W&B run, marked failed; from the resolved spec when the failure came after it."""
    from .tracking import track_failed_cell

    if spec is not None:
        track_failed_cell(spec.wandb, run_dir, spec.coordinates.run_name, spec.wandb.group or group or run_dir.name,
                          dict(spec.config), detail)
        return
    try:  # the config itself may be what failed to resolve
        config = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001
        config = OmegaConf.to_container(cfg, resolve=False)
    wandb_cfg = cfg.get("wandb") or OmegaConf.create({"mode": "disabled"})
    track_failed_cell(wandb_cfg, run_dir, run_dir.name, (wandb_cfg.get("group") or group or run_dir.name),
                      config, detail)


def main() -> None:
    from . import sweep_outcome

    register_configs()
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one INFO line per API request is noise
    logging.getLogger("httpx").setLevel(logging.WARNING)
    hydra.main(version_base="1.3", config_path=config_path(), config_name="config")(run_job)()
    if sweep_outcome.failed_cells():
        sys.exit(sweep_outcome.exit_status())  # the sweep's summary paragraph has said which cells failed and why


if __name__ == "__main__":
    main()
