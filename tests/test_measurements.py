"""Measurement plug-ins: a toy measurement, added as one folder (tests/toy_measurement: its cell side and its
report side), one registry entry and its config, reaches every place a measurement goes: results.jsonl,
summary.json, the printed result, plan mode's counts, the analysis frames, report.md / report.html and
items.html."""

from __future__ import annotations

import json

import pytest

from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.analysis.report.items_view import write_items_html
from selfpref_sweep.analysis.sweep.load import load_sweeps
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.measurements import MEASUREMENTS, registered, settings
from selfpref_sweep.run.plan import plan_cell
from selfpref_sweep.run.runner import run_cell
from tests.conftest import FAKE_EVALUATOR
from tests.toy_measurement.toy_settings import ToySettings

TOY = "toy=tests.toy_measurement.toy_cell:ToyMeasurement"  # the registry entry
TOY_SETTINGS = "toy=tests.toy_measurement.toy_settings:ToySettings"  # its settings' entry
ON = "+judge.measurements.toy.mode=on"  # its config


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setenv("SELFPREF_MEASUREMENTS", TOY)
    monkeypatch.setenv("SELFPREF_MEASUREMENT_SETTINGS", TOY_SETTINGS)


def test_the_registry_holds_the_built_ins_then_the_added_ones(toy):
    assert [m.name for m in registered()] == [*MEASUREMENTS, "toy"]


def test_the_toy_reaches_the_record_the_print_and_the_analysis(toy, compose_cfg, tmp_path, capsys):
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=4", ON, "verbose=true"])
    assert settings(cfg.judge, "toy") == ToySettings(mode="on", min_word_gap=1)  # its defaults filled in
    cell_dir = tmp_path / "sweep" / "0"
    summary = run_cell(resolve_cell(cfg), cell_dir)
    items = [json.loads(line) for line in (cell_dir / "results.jsonl").read_text().splitlines()]
    scored = [it["toy"] for it in items if "toy" in it]
    assert scored and all(0.0 <= v["score"] <= 1.0 for v in scored if not v["excluded"])
    assert summary["toy"]["enabled"] and summary["toy"]["n"] == sum(not v["excluded"] for v in scored)
    assert json.loads((cell_dir / "summary.json").read_text())["toy"] == summary["toy"]
    assert "  toy  " in capsys.readouterr().out

    data = load_sweeps([tmp_path / "sweep"])
    assert data.cells.loc[0, "toy_mean"] == pytest.approx(summary["toy"]["mean"])
    assert data.items["toy_score"].notna().sum() == len(scored)
    page = write_items_html([tmp_path / "sweep"], tmp_path / "report").read_text()
    assert "P(longer)" in page

    from tests.toy_measurement.toy_report import SECTION

    result = run_analysis([tmp_path / "sweep"], wandb_cfg={"mode": "disabled"})
    assert "toy" in result.design.measured
    assert result.tables["toy"]["P(longer) [95% CI]"].iloc[0].startswith(f"{summary['toy']['mean']:.3f}")
    assert SECTION in result.report_md.read_text() and SECTION in result.report_html.read_text()
    assert "P(longer)" in (result.out_dir / "items.html").read_text()


def test_without_the_toy_its_report_section_is_absent(compose_cfg, tmp_path):
    from tests.toy_measurement.toy_report import SECTION

    run_cell(resolve_cell(compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=4"])), tmp_path / "sweep" / "0")
    result = run_analysis([tmp_path / "sweep"], wandb_cfg={"mode": "disabled"})
    assert "toy" not in result.tables and SECTION not in result.report_md.read_text()


def test_plan_mode_counts_the_toy_calls(toy, compose_cfg, tmp_path):
    base = [*FAKE_EVALUATOR, "dataset.n_articles=4", "judge.competence=off"]
    off = plan_cell(resolve_cell(compose_cfg(base, store=tmp_path / "a.sqlite")), tmp_path / "off")
    on = plan_cell(resolve_cell(compose_cfg([*base, ON], store=tmp_path / "b.sqlite")), tmp_path / "on")
    assert off["toy"] == {"enabled": False, "requests": 0, "reason": "judge.measurements.toy.mode=off"}
    assert on["toy"]["enabled"] and on["toy"]["requests"] > 0
    assert on["uncached_calls"] - off["uncached_calls"] == on["toy"]["requests"]  # the toy's calls, none else


def test_an_unknown_measurement_is_a_clear_error(monkeypatch):
    from selfpref_sweep.errors import ConfigError

    monkeypatch.setenv("SELFPREF_MEASUREMENTS", "nope=tests.no_such_module:Nope")
    with pytest.raises(ConfigError, match="measurement 'nope' names 'tests.no_such_module:Nope', which cannot be"):
        registered()
    monkeypatch.setenv("SELFPREF_MEASUREMENTS", "")
    with pytest.raises(ConfigError, match="Unknown measurement 'nope'"):
        from selfpref_sweep.measurements import measurement

        measurement("nope")


def test_the_toy_settings_are_checked_against_its_own_dataclass(toy, compose_cfg):
    from selfpref_sweep.config.validation import validate_config
    from selfpref_sweep.errors import ConfigError

    validate_config(compose_cfg([*FAKE_EVALUATOR, ON, "+judge.measurements.toy.min_word_gap=3"]))
    for override, says in (("+judge.measurements.toy.mode=maybe", "must be one of on, off"),
                           ("+judge.measurements.toy.min_word_gap=-1", "an integer >= 0"),
                           ("+judge.measurements.toy.min_gap=2", "Did you mean judge.measurements.toy.min_word_gap"),
                           ("+judge.measurements.toy.min_word_gap=abc", "does not fit ToySettings")):
        with pytest.raises(ConfigError, match=says):
            validate_config(compose_cfg([*FAKE_EVALUATOR, override]))


def test_settings_of_an_unregistered_measurement_are_an_error(compose_cfg):
    from selfpref_sweep.config.validation import validate_config
    from selfpref_sweep.errors import ConfigError

    with pytest.raises(ConfigError, match="judge.measurements.toy names no registered measurement"):
        validate_config(compose_cfg([*FAKE_EVALUATOR, ON]))
