"""Run one cell, or a grid of cells with -m:

    python run.py                                   # qwen05 vs human summaries on the demo data
    python run.py -m source=human,smollm135 dataset=paper_xsum dataset.root=../shared/paper-data
"""

import logging
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from selfpref_sweep.config import register_configs
from selfpref_sweep.errors import SelfprefError

register_configs()
log = logging.getLogger("selfpref_sweep")
logging.getLogger("httpx2").setLevel(logging.WARNING)  # one INFO line per API request is noise
logging.getLogger("httpx").setLevel(logging.WARNING)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from selfpref_sweep.cell import run_cell  # after Hydra has parsed the command line: keeps --help fast
    from selfpref_sweep.plan import plan_cell
    from selfpref_sweep.record import ERROR_FILE, wandb_group_name
    from selfpref_sweep.spec import resolve_cell
    from selfpref_sweep.validation import validate_config

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    sweeping = hc.mode == RunMode.MULTIRUN
    group = wandb_group_name(hc.sweep.dir) if sweeping else None
    try:
        validate_config(cfg)  # ranges and unknown keys, before anything is loaded or spent
        spec = resolve_cell(cfg)  # the config, resolved once into typed facts
        if spec.plan:
            plan_cell(spec, run_dir)
        else:
            run_cell(spec, run_dir, wandb_group=spec.wandb.group or group)
    except Exception as exc:  # noqa: BLE001 - recorded for the analysis job, then reported
        clear = isinstance(exc, SelfprefError)
        detail = f"{type(exc).__name__}: {exc}\n" + ("" if clear else "\n" + traceback.format_exc())
        (run_dir / ERROR_FILE).write_text(detail)
        log.error("cell failed: %s", detail)
        if sweeping:
            # One bad cell must not stop a long sweep; the analysis job lists it as failed.
            print(f"\nerror in cell {run_dir}: {exc}\n", file=sys.stderr)
            return
        if clear:
            print(f"\nerror: {exc}\n", file=sys.stderr)
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
