"""Run one cell, or a grid of cells with -m:

    python run.py                                   # qwen05 vs human summaries on the demo data
    python run.py -m source=human,smollm135 dataset=paper_xsum dataset.root=../shared/paper-data
"""

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from selfpref_sweep.config import register_configs
from selfpref_sweep.errors import SelfprefError

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from selfpref_sweep.cell import run_cell  # after Hydra has parsed the command line: keeps --help fast

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    group = Path(hc.sweep.dir).as_posix().replace("/", "_") if hc.mode == RunMode.MULTIRUN else None
    try:
        run_cell(cfg, run_dir, wandb_group=cfg.wandb.group or group)
    except SelfprefError as exc:
        (run_dir / "cell.error.txt").write_text(f"{type(exc).__name__}: {exc}\n")
        print(f"\nerror: {exc}\n", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
