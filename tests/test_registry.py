"""The registries (selfpref_sweep/registry.py) of backends, trainers and measurements: an entry that is not of the
registry's kind and a name declared twice are clear ConfigErrors, plug-ins load only when resolved, and a plug-in
installed as a distribution (tests/entry_point_plugin: entry points, no environment variable) is listed, resolved,
accepted by config validation and run in a cell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import tomllib

from selfpref_sweep import measurements, models
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.config.validation import validate_config
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.finetune import trainer as trainer_module
from selfpref_sweep.measurements import MEASUREMENTS, registered
from selfpref_sweep.models import BACKENDS, backend_class
from selfpref_sweep.run.runner import run_cell
from tests.conftest import FAKE_BACKEND

PLUGIN = Path(__file__).parent / "entry_point_plugin"
REGISTRIES = {"backends": models.REGISTRY, "trainers": trainer_module.REGISTRY, "measurements": measurements.REGISTRY}


def write_dist_info(site: Path, dist: str, groups: dict[str, dict[str, str]]) -> None:
    """What pip installs for a distribution's entry points: a dist-info directory (METADATA, entry_points.txt),
    which importlib.metadata finds on sys.path."""
    info = site / f"{dist.replace('-', '_')}-0.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items()) + "\n"
        for group, entries in groups.items()))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An empty site directory on sys.path, for distributions the test installs."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    return path


@pytest.fixture
def plugin(site, monkeypatch):
    """tests/entry_point_plugin installed as its pyproject.toml declares it; no environment variable names it."""
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    write_dist_info(site, project["name"], project["entry-points"])
    monkeypatch.delenv("SELFPREF_MEASUREMENTS", raising=False)
    monkeypatch.delenv("SELFPREF_MEASUREMENT_SETTINGS", raising=False)
    monkeypatch.setenv("SELFPREF_BACKENDS", "")


@pytest.mark.parametrize("kind, env_var, target, expected", [
    ("backends", "SELFPREF_BACKENDS", "tests.fakes:RequestBuilder", "selfpref_sweep.models.base.ModelAPI"),
    ("trainers", "SELFPREF_TRAINERS", "tests.fakes:FakeModel", "selfpref_sweep.finetune.trainer.Trainer"),
    ("measurements", "SELFPREF_MEASUREMENTS", "tests.fakes:pairwise_parts", "selfpref_sweep.measurements.Measurement"),
])
def test_an_entry_of_the_wrong_kind_names_the_entry_the_class_found_and_the_class_expected(
        monkeypatch, kind, env_var, target, expected):
    monkeypatch.setenv(env_var, f"wrong={target}")
    with pytest.raises(ConfigError) as err:
        REGISTRIES[kind].resolve("wrong")
    message = str(err.value)
    assert f"'wrong' names '{target}' (${env_var})" in message
    assert f"{target.replace(':', '.')}" in message and f"not a subclass of {expected}." in message


def test_a_backend_of_the_wrong_kind_fails_as_a_config_error_when_the_cell_asks_for_it(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", f"{FAKE_BACKEND},builder=tests.fakes:RequestBuilder")
    assert backend_class("fake").__name__ == "FakeModel"
    with pytest.raises(ConfigError, match="which is class tests.fakes.RequestBuilder, not a subclass of"):
        backend_class("builder")


def test_a_measurement_of_the_wrong_kind_stops_the_listing(monkeypatch):
    monkeypatch.setenv("SELFPREF_MEASUREMENTS", "fake=tests.fakes:FakeModel")
    with pytest.raises(ConfigError, match="measurement 'fake' names 'tests.fakes:FakeModel'.*not a subclass"):
        registered()


@pytest.mark.parametrize("kind, env_var, builtins", [("backends", "SELFPREF_BACKENDS", BACKENDS),
                                                      ("measurements", "SELFPREF_MEASUREMENTS", MEASUREMENTS),
                                                      ("trainers", "SELFPREF_TRAINERS", trainer_module.TRAINERS)])
def test_the_environment_may_not_reuse_a_built_in_name(monkeypatch, kind, env_var, builtins):
    name = next(iter(builtins))
    monkeypatch.setenv(env_var, f"{name}=tests.fakes:FakeModel")
    with pytest.raises(ConfigError) as err:
        REGISTRIES[kind].names()
    assert f"{name!r} is declared twice with different targets: {builtins[name]!r} (built in) and " \
           f"'tests.fakes:FakeModel' (${env_var})" in str(err.value)


def test_an_entry_point_may_not_reuse_a_built_in_name(site):
    write_dist_info(site, "squatter", {"selfpref_sweep.backends": {"local": "tests.fakes:FakeModel"}})
    with pytest.raises(ConfigError, match=r"'selfpref_sweep.models.local:LocalModel' \(built in\) and "
                                          r"'tests.fakes:FakeModel' \(entry point 'local' of squatter"):
        backend_class("fake")


def test_two_plugins_with_one_name_clash_unless_they_name_one_target(site, monkeypatch):
    write_dist_info(site, "judges", {"selfpref_sweep.backends": {"fake": "tests.fakes:OracleJudge"}})
    with pytest.raises(ConfigError, match=r"'fake' is declared twice with different targets: 'tests.fakes:Oracle"
                                          r"Judge' \(entry point 'fake' of judges, group selfpref_sweep.backends\)"
                                          r" and 'tests.fakes:FakeModel' \(\$SELFPREF_BACKENDS\)"):
        backend_class("fake")
    monkeypatch.setenv("SELFPREF_BACKENDS", "oracle=tests.fakes:OracleJudge,oracle=tests.fakes:CoinJudge")
    with pytest.raises(ConfigError, match="'tests.fakes:OracleJudge' .* and 'tests.fakes:CoinJudge'"):
        backend_class("oracle")
    # the same target declared again is one entry: the tests register the built-in openai backend that way
    openai = BACKENDS["openai"]
    monkeypatch.setenv("SELFPREF_BACKENDS", f"fake=tests.fakes:OracleJudge,openai={openai},openai={openai}")
    assert models.REGISTRY.names() == [*BACKENDS, "fake"]
    assert backend_class("fake").__name__ == "OracleJudge"


def test_a_malformed_entry_is_a_config_error(site, monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", "fake")
    with pytest.raises(ConfigError, match=r"\$SELFPREF_BACKENDS holds 'fake', which is not name=module:Class"):
        backend_class("fake")
    monkeypatch.setenv("SELFPREF_BACKENDS", "fake=tests.fakes")
    with pytest.raises(ConfigError, match=r"'fake' -> 'tests.fakes' \(\$SELFPREF_BACKENDS\) is not"):
        backend_class("fake")


def test_plugins_are_imported_only_when_resolved(site, monkeypatch):
    write_dist_info(site, "ghosts", {"selfpref_sweep.backends": {"ghost": "tests.no_such_module:Ghost"}})
    monkeypatch.delitem(sys.modules, "tests.entry_point_plugin.longer_judge", raising=False)
    write_dist_info(site, "longer", {"selfpref_sweep.backends": {
        "longer": "tests.entry_point_plugin.longer_judge:LongerJudge"}})
    assert models.REGISTRY.names() == [*BACKENDS, "ghost", "longer", "fake"]  # entry points by name, then $...
    assert "tests.entry_point_plugin.longer_judge" not in sys.modules
    assert backend_class("fake").__name__ == "FakeModel"  # a broken plug-in harms only its own name
    with pytest.raises(ConfigError, match="'ghost' names 'tests.no_such_module:Ghost', which cannot be loaded: .*"
                                          "entry point 'ghost' of ghosts"):
        backend_class("ghost")


def test_a_measurement_installed_through_an_entry_point_is_found_without_the_environment(plugin, compose_cfg):
    assert measurements.REGISTRY.names() == [*MEASUREMENTS, "toy"]
    assert [m.name for m in registered()] == [*MEASUREMENTS, "toy"]
    validate_config(compose_cfg(["evaluator.backend=longer", "evaluator.name=longer_eval",
                                 "+judge.measurements.toy.mode=on"]))
    with pytest.raises(ConfigError, match="judge.measurements.toy.mode='maybe' is not valid"):
        validate_config(compose_cfg(["+judge.measurements.toy.mode=maybe"]))


def test_a_backend_installed_through_an_entry_point_runs_a_cell(plugin, compose_cfg, tmp_path):
    assert models.REGISTRY.names() == [*BACKENDS, "longer"]  # no $SELFPREF_BACKENDS: the fake is not there
    cfg = compose_cfg(["evaluator.backend=longer", "evaluator.name=longer_eval", "dataset.n_articles=4",
                       "+judge.measurements.toy.mode=on"])
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert summary["toy"]["enabled"] and summary["toy"]["n"] > 0
    assert summary["toy"]["mean"] > 0.95  # the plug-in judge names the longer summary: the plug-in toy scores it
    items = [json.loads(line) for line in (tmp_path / "cell" / "results.jsonl").read_text().splitlines()]
    assert items and all(item["own_summary"].startswith("Longer_eval says:") for item in items)
