"""Whole units and machine keys.

A unit whose cells do not all carry a field gets no value for it (never the mean over the other sources), and
says which cells lack it; the report warns. Every CSV row and regressions.json entry carries plain machine
keys (tables.MACHINE_KEYS) beside its display labels.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from selfpref_sweep.analysis.estimate.units import VARIANT_KEYS
from selfpref_sweep.analysis.job.pipeline import run_analysis, summary_text
from selfpref_sweep.analysis.report.machine_keys import GROUP_KEYS, MACHINE_KEYS
from selfpref_sweep.analysis.study import simulate as sim
from selfpref_sweep.measurements.familiarity.familiarity_report import likelihood_units

from .test_analysis import NO_WANDB, write_cell
from .test_familiarity import _write_cell as write_familiarity_cell


def add_logodds(cell_dir: Path, shift: float = 0.0) -> None:
    """Give a cell written by write_cell (which records no log-odds) a log-odds score per item (logit of the
    paper score, plus ``shift``) and in its summary."""
    lines = []
    for line in (cell_dir / "results.jsonl").read_text().splitlines():
        item = json.loads(line)
        for q in ("recognition", "preference"):
            score = item[q]["score"]
            item[q]["logodds"] = None if score is None else math.log(score / (1 - score)) + shift
        lines.append(json.dumps(item))
    (cell_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
    path = cell_dir / "summary.json"
    summary = json.loads(path.read_text())
    for q in ("recognition", "preference"):
        summary[q]["logodds"] = {"mean": shift, "ci_low": shift - 0.1, "ci_high": shift + 0.1}
    path.write_text(json.dumps(summary))


def partial_logodds_sweep(root: Path) -> Path:
    """Four evaluators × two sources, every cell with log-odds except judge0 against paper_gpt4."""
    sweep = root / "partial"
    job = 0
    for k in range(4):
        for source, shift in (("human", 0.0), ("paper_gpt4", 0.04)):
            cell = write_cell(sweep, job, evaluator=f"judge{k}", source=source, rec=0.55 + 0.05 * k + shift,
                              pref=0.52 + 0.04 * k + shift)
            if (k, source) != (0, "paper_gpt4"):
                add_logodds(cell)
            job += 1
    return sweep


def test_a_unit_missing_logodds_in_one_source_is_flagged_not_averaged(tmp_path: Path) -> None:
    sweep = partial_logodds_sweep(tmp_path)
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    units = result.est.units.set_index("evaluator_variant")
    bad = units.loc["judge0"]
    # Not the human source's log-odds alone: nothing, and the cell is named.
    assert math.isnan(bad["rec_logodds_mean"]) and math.isnan(bad["pref_logodds_mean"])
    assert math.isnan(bad["rec_logodds_ci_low"]) and math.isnan(bad["pref_logodds_ci_high"])
    assert bad["incomplete_fields"] == "logodds"
    assert bad["incomplete"] == "logodds: missing in source=paper_gpt4 (cell partial/1)"
    assert bad["sources"] == "human, paper_gpt4"
    # The paper scale, which every cell carries, is still the mean over both sources.
    assert bad["rec_paper_mean"] == pytest.approx((0.55 + 0.59) / 2)
    assert bad["pref_paper_mean"] == pytest.approx((0.52 + 0.56) / 2)
    for k in (1, 2, 3):
        assert units.loc[f"judge{k}", "incomplete"] == "" and math.isfinite(units.loc[f"judge{k}", "rec_logodds_mean"])
    # The log-odds headline is fitted on the three complete units only.
    logodds_fit, = [f for f in result.est.unit_fits if f.group_by == "setting × label" and f.scale == "logodds"]
    assert logodds_fit.n == 3
    paper_fit, = result.headline_fits()
    assert paper_fit.n == 4

    # The report (its problems section and its header) and the printout warn, naming unit and cell.
    md = result.report_md.read_text()
    warning = "paper unit judge0 on paper_xsum (pairwise, label none): logodds: missing in source=paper_gpt4"
    assert warning in md and md.count(warning) == 2
    assert warning in result.report_html.read_text()
    assert warning in summary_text(result)
    csv = pd.read_csv(sweep / "analysis" / "paper_units.csv", keep_default_na=False).set_index("evaluator_variant")
    assert csv.loc["judge0", "incomplete"].startswith("logodds: missing in source=paper_gpt4")
    assert csv.loc["judge0", "rec_logodds_mean"] == "" and csv.loc["judge1", "incomplete"] == ""


def test_no_unit_is_flagged_when_no_cell_records_the_field(tmp_path: Path) -> None:
    # An older sweep without log-odds: the scale is absent everywhere, not incomplete.
    sweep = tmp_path / "old"
    for job, source in enumerate(("human", "paper_gpt4")):
        write_cell(sweep, job, source=source)
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    assert list(result.est.units["incomplete"]) == [""]
    assert "do not all carry a field" not in result.report_md.read_text()


def test_a_fine_tune_delta_is_not_taken_over_part_of_the_sources(tmp_path: Path) -> None:
    # The base model lacks log-odds against paper_gpt4: Δ log-odds over human alone would be another
    # comparison than Δ over both sources, so there is none; the paper-scale Δ uses both.
    sweep = tmp_path / "ft"
    job = 0
    for task, bump in (("none", 0.0), ("recognition", 0.1)):
        for source in ("human", "paper_gpt4"):
            ft = {} if task == "none" else dict(finetune_task=task, finetune_dataset="paper_xsum",
                                                finetune_n_articles=10)
            cell = write_cell(sweep, job, source=source, rec=0.6 + bump, pref=0.55 + bump / 2, **ft)
            if (task, source) != ("none", "paper_gpt4"):
                add_logodds(cell)
            job += 1
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    row, = result.est.diffs.to_dict(orient="records")
    assert row["drec_paper_mean"] == pytest.approx(0.1) and row["dpref_paper_mean"] == pytest.approx(0.05)
    assert math.isnan(row["drec_logodds_mean"]) and math.isnan(row["dpref_logodds_ci_low"])
    assert row["incomplete"] == "logodds: missing in source=paper_gpt4 (base model)"
    assert "fine-tuned vs base qwen05 [ft recognition on paper_xsum, n=10]" in result.report_md.read_text()


def test_a_unit_missing_familiarity_in_one_cell_is_flagged(tmp_path: Path) -> None:
    sweep = tmp_path / "fam"
    rows = [(f"a{i}", 0.6 + 0.02 * i, 0.55, 0.1 * (i - 2)) for i in range(5)]
    write_familiarity_cell(sweep, 0, "m1", "s1", rows)
    write_familiarity_cell(sweep, 1, "m1", "s2", rows, familiarity=False)
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    unit, = likelihood_units(result.data.items).to_dict(orient="records")
    assert math.isnan(unit["likelihood_recognition"]) and math.isnan(unit["verbal_recognition"])
    assert unit["incomplete"] == "familiarity: missing in source=s2 (cell fam/1)"
    assert "likelihood recognizer, paper unit m1 on demo" in result.report_md.read_text()


# --- machine keys ----------------------------------------------------------------------------------


def keyed_sweeps(root: Path) -> list[Path]:
    """A simulated sweep with fine-tunes on two datasets (in-domain and cross-dataset groups), one failed
    and one partial cell, and a pooled sweep whose cells carry familiarity."""
    spec = sim.SimulationSpec(n_articles=12, recognition_variants=2, control_variants=2, n_resamples=50,
                              datasets=("sim_xsum", "sim_cnn"))
    sweep = root / "sim"
    sim.write_sweep(spec, sweep)
    jobs = len([d for d in sweep.iterdir() if d.is_dir()])
    write_cell(sweep, jobs, source="llama2", status=None, error="boom")
    write_cell(sweep, jobs + 1, source="gemma270", results=False)
    fam = root / "fam"
    for job, (variant, source) in enumerate([("m1", "s1"), ("m2", "s1"), ("m3", "s2")]):
        write_familiarity_cell(fam, job, variant, source,
                               [(f"a{i}", 0.5 + 0.04 * i + 0.02 * job, 0.6 - 0.01 * i, 0.1 * (i - 4))
                                for i in range(9)])
    return [sweep, fam]


def _group_label(row: dict, by: list[str]) -> str:
    return " / ".join(str(row[k]) for k in by)


def test_every_csv_row_and_json_entry_has_machine_keys(tmp_path: Path) -> None:
    sweeps = keyed_sweeps(tmp_path)
    run_analysis(sweeps, out_dir=tmp_path / "out", wandb_cfg=NO_WANDB)
    analysis = tmp_path / "out" / "analysis"
    csvs = sorted(analysis.glob("*.csv"))
    assert {"paper_units.csv", "finetune_vs_base.csv", "cells.csv", "problems.csv", "regression_units.csv",
            "regression_robustness.csv", "interaction.csv", "familiarity.csv"} <= {p.name for p in csvs}
    frames = {p.name: pd.read_csv(p) for p in csvs}
    for name, df in frames.items():
        assert set(MACHINE_KEYS) <= set(df.columns), name
        assert not df.empty, name
    payload = json.loads((analysis / "regressions.json").read_text())
    for section, entries in payload.items():
        assert entries, section
        for entry in entries:
            assert set(MACHINE_KEYS) <= set(entry), section
    _check_fit_keys([r for name in ("regression_units.csv", "regression_robustness.csv", "interaction.csv",
                                    "familiarity.csv") for r in frames[name].to_dict(orient="records")])
    _check_fit_keys([e for s in ("paper_unit", "robustness", "interaction", "familiarity") for e in payload[s]])
    levels = set(frames["regression_robustness.csv"]["level"])
    assert levels == {"source", "item"} and set(frames["paper_units.csv"]["level"]) == {"paper unit"}
    assert frames["regression_robustness.csv"]["method_key"].notna().all()
    _check_variant_keys(frames["paper_units.csv"])
    _check_variant_keys(frames["cells.csv"])
    problems = frames["problems.csv"].set_index("reason")
    partial = problems.loc["no results.jsonl; cell left out of the paper-unit and robustness fits"]
    assert partial["evaluator"] == "qwen05" and partial["source"] == "gemma270" and partial["dataset"] == "paper_xsum"
    assert pd.isna(problems.loc["failed: cell.error.txt present, no summary.json", "evaluator"])  # never recorded


def _check_fit_keys(rows: list[dict]) -> None:
    """A fit's group is recovered from its keys: setting and label always, dataset or transfer in the groupings
    that split by them, None otherwise (checked against the display label, which the keys must reproduce)."""
    seen = set()
    for row in rows:
        row = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        within = {"setting × label": None, "setting × label × dataset": "dataset",
                  "setting × label × transfer": "transfer"}[row["group_by"]]
        assert row["setting"] and row["label"], row
        for key in ("dataset", "transfer"):
            assert (row[key] is not None) == (key == within), (key, row)
        by = ["setting", "label"] + ([within] if within else [])
        assert _group_label(row, by) == row["group"]
        seen.add(row["group_by"])
    assert seen == {"setting × label", "setting × label × dataset", "setting × label × transfer"}


def _check_variant_keys(df: pd.DataFrame) -> None:
    """The variant keys with dataset, setting and label split the rows exactly as the display names do."""
    keys = [*VARIANT_KEYS, "dataset", "setting", "label"]
    by_keys = df.groupby(keys, dropna=False)["evaluator_variant"].nunique()
    assert (by_keys == 1).all()
    assert len(by_keys) == df.groupby(["evaluator_variant", "dataset", "setting", "label"]).ngroups
    assert set(GROUP_KEYS) <= set(df.columns)
