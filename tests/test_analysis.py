"""Tests of the final analysis job (selfpref_sweep.analysis): fits, report, CLI, Hydra callback, W&B.

Every sweep here is synthetic, written into tmp_path in the layout the core writes: <sweep>/<job>/
with .hydra/overrides.yaml, summary.json and results.jsonl.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf

from selfpref_sweep.analysis.estimate.finetune_tests import fit_interactions
from selfpref_sweep.analysis.estimate.fit import OLS_BY_VARIANT, fit_ols, fit_paper_units, fit_robustness
from selfpref_sweep.analysis.estimate.units import paper_units, source_points
from selfpref_sweep.analysis.job import callback as callback_mod
from selfpref_sweep.analysis.job import pipeline
from selfpref_sweep.analysis.job.callback import AnalysisCallback
from selfpref_sweep.analysis.job.command import main as cli_main
from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.analysis.sweep.load import load_sweeps
from selfpref_sweep.reporting.formatting import to_markdown
from selfpref_sweep.reporting.grouping import LEVEL_ITEM, LEVEL_SOURCE

REPO = Path(__file__).resolve().parents[1]
NO_WANDB = {"mode": "disabled"}


# --- fixture writers -----------------------------------------------------------------------------


def _metric(mean: float | None, n: int, half: float = 0.05) -> dict[str, Any]:
    if mean is None:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0, "n_excluded": n}
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n, "n_excluded": 0}


def write_cell(
    sweep: Path,
    job: int,
    *,
    evaluator: str = "qwen05",
    source: str = "human",
    dataset: str = "paper_xsum",
    setting: str = "pairwise",
    label: str = "none",
    finetune_task: str = "none",
    finetune_dataset: str | None = None,
    finetune_n_articles: int | None = None,
    rec: float | None = 0.6,
    pref: float | None = 0.55,
    items: list[tuple[str, float | None, float | None]] | None = None,
    status: str | None = "complete",
    error: str | None = None,
    results: bool = True,
    extra_overrides: tuple[str, ...] = (),
) -> Path:
    """One cell directory. status=None writes no summary.json (a cell that never finished)."""
    cell_dir = sweep / str(job)
    (cell_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    overrides = [f"evaluator={evaluator}", f"source={source}", f"dataset={dataset}", *extra_overrides]
    if finetune_task != "none":
        overrides.append(f"finetune_task={finetune_task}")
    (cell_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (cell_dir / ".hydra" / "config.yaml").write_text(f"seed: 0\ndataset:\n  name: {dataset}\n")
    if error is not None:
        (cell_dir / "cell.error.txt").write_text(error)
    if status is None:
        return cell_dir
    transfer = "none" if finetune_task == "none" else "in_domain" if finetune_dataset == dataset else "cross_dataset"
    if items is None:  # five articles scattered around the cell means (same means)
        jitter_r, jitter_p = (-0.04, -0.02, 0.0, 0.02, 0.04), (0.02, -0.04, 0.04, 0.0, -0.02)
        items = [(f"a{i}", None if rec is None else rec + jitter_r[i], None if pref is None else pref + jitter_p[i])
                 for i in range(5)]
    n = len(items)
    summary = {
        "status": status,
        "cell": {
            "evaluator": evaluator, "source": source, "dataset": dataset, "setting": setting, "label": label,
            "finetune_task": finetune_task, "finetune_dataset": finetune_dataset,
            "finetune_n_articles": finetune_n_articles, "transfer": transfer,
        },
        "n_articles": n, "n_items": n, "n_excluded": 1,
        "exclusions": {"low_answer_mass": 1},
        "recognition": _metric(rec, n),
        "preference": _metric(pref, n),
        "position_consistency": {"recognition": 0.4, "preference": 0.8},
        "model_calls": 4 * n, "elapsed_s": 1.5,
        "some_future_key": {"ignored": True},
    }
    (cell_dir / "summary.json").write_text(json.dumps(summary))
    if results:
        with (cell_dir / "results.jsonl").open("w") as fh:
            for article_id, r, p in items:
                fh.write(json.dumps({
                    "article_id": article_id, "evaluator": evaluator, "source": source,
                    "recognition": {"score": r, "excluded": r is None,
                                    "exclusion_reason": "low_answer_mass" if r is None else None, "orders": {}},
                    "preference": {"score": p, "excluded": p is None, "exclusion_reason": None, "orders": {}},
                }) + "\n")
    return cell_dir


def planted_sweep(root: Path, slope: float, n_cells: int = 40, noise: float = 0.02, seed: int = 0,
                  intercept: float = 0.2) -> Path:
    """Cells whose mean preference = intercept + slope * mean recognition + N(0, noise)."""
    rng = np.random.default_rng(seed)
    sweep = root / "sweep"
    tasks = ["none", "recognition", "length", "vowel"]
    for j in range(n_cells):
        rec = float(rng.uniform(0.3, 0.9))
        pref = float(intercept + slope * rec + rng.normal(0, noise))
        task = tasks[j % len(tasks)]
        write_cell(
            sweep, j, source=f"src{j % 3}", dataset=("paper_xsum", "paper_cnn")[j % 2], rec=rec, pref=pref,
            finetune_task=task, finetune_dataset=None if task == "none" else "paper_xsum",
            finetune_n_articles=None if task == "none" else 10,
        )
    (sweep / "multirun.yaml").write_text("wandb:\n  mode: disabled\n  project: selfpref_sweep\n")
    return sweep


def small_sweep(root: Path) -> Path:
    """A fixture sweep: 6 complete cells over two evaluators and datasets, one failed, one unfinished."""
    sweep = root / "2026-11-21" / "20-30-00"
    values = [(0.55, 0.52), (0.62, 0.58), (0.71, 0.66), (0.80, 0.71), (0.48, 0.50), (0.66, 0.60)]
    for j, (rec, pref) in enumerate(values):
        write_cell(sweep, j, evaluator=("qwen05", "smollm135")[j % 2],
                   source=("human", "paper_gpt4", "gemma270")[j % 3],
                   dataset=("paper_xsum", "paper_cnn")[j // 3], rec=rec, pref=pref)
    write_cell(sweep, 6, source="llama2", status=None, error="ModelUnavailableError: weights for llama2 are missing")
    write_cell(sweep, 7, source="qwen15", status=None)
    (sweep / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    return sweep


# --- fits ----------------------------------------------------------------------------------------


def _fits(sweep: Path) -> tuple[Any, Any, list, list]:
    data = load_sweeps([sweep])
    units, points = paper_units(data.items, data.cells, n_resamples=200), source_points(data.items)
    return units, points, fit_paper_units(units), fit_robustness(points, data.items)


def test_null_effect_gives_a_slope_ci_containing_zero(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    sweep = tmp_path / "s"
    for j in range(12):  # 12 evaluators, one source each: 12 paper units, preference unrelated to recognition
        rec = float(rng.uniform(0.3, 0.9))
        write_cell(sweep, j, evaluator=f"e{j}", rec=rec, pref=float(0.55 + rng.normal(0, 0.05)))
    _, _, unit_fits, _ = _fits(sweep)
    headline = next(f for f in unit_fits if f.scale == "paper")
    assert headline.ok and headline.n == 12 and headline.slope_ci_low < 0 < headline.slope_ci_high
    assert headline.r_ci_low < 0 < headline.r_ci_high


def test_too_few_points_and_zero_variance_are_reported_not_fitted() -> None:
    two = fit_ols([0.5, 0.6], [0.5, 0.7])
    assert not two.ok and two.note == "not enough paper units (n=2)" and math.isnan(two.slope)
    flat = fit_ols([0.6, 0.6, 0.6, 0.6], [0.5, 0.6, 0.7, 0.4])
    assert not flat.ok and flat.note.startswith("not enough paper units (n=4") and "zero variance" in flat.note
    with_nan = fit_ols([0.5, float("nan"), 0.7], [0.5, 0.6, float("nan")])
    assert not with_nan.ok and with_nan.note == "not enough paper units (n=1)"
    exact = fit_ols([0.4, 0.5, 0.6], [0.5, 0.5, 0.5])  # n=3 with flat preference: fitted, r undefined
    assert exact.ok and exact.slope == pytest.approx(0.0, abs=1e-12) and "r undefined" in exact.note


def test_item_level_fit_clusters_by_dataset_and_article(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    sweep = tmp_path / "sweep"
    # 30 articles per dataset, with the same ids in both datasets; each article appears in 4 cells
    # and carries a shared random effect, so clustering matters.
    effects = {(ds, a): rng.normal(0, 0.05) for ds in ("x", "c") for a in range(30)}
    job = 0
    for ds in ("x", "c"):
        for src in ("s1", "s2", "s3", "s4"):
            items = []
            for a in range(30):
                r = float(rng.uniform(0.2, 0.9))
                items.append((str(a), r, float(0.1 + 0.5 * r + effects[(ds, a)] + rng.normal(0, 0.03))))
            items.append(("excluded", None, 0.5))  # excluded items never enter the fit
            write_cell(sweep, job, dataset=ds, source=src, items=items)
            job += 1
    _, _, _, robust = _fits(sweep)
    item_fits = {f.group: f for f in robust if f.level == LEVEL_ITEM}
    pooled = item_fits["pairwise / none"]
    assert pooled.ok and pooled.n == 2 * 4 * 30
    assert pooled.n_clusters == 2 * 30  # article "0" of x and "0" of c are different clusters
    assert pooled.slope_ci_low < 0.5 < pooled.slope_ci_high
    assert math.isnan(pooled.r_ci_low)  # no naive r interval for clustered items
    assert {"pairwise / none / x", "pairwise / none / c"} <= set(item_fits)


def test_single_article_item_fit_is_not_enough(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_cell(sweep, 0, items=[("a", 0.2, 0.3), ("a", 0.5, 0.6), ("a", 0.8, 0.7)])
    _, _, _, robust = _fits(sweep)
    fit = next(f for f in robust if f.level == LEVEL_ITEM)
    assert not fit.ok and "not enough items (n=3" in fit.note and "article cluster" in fit.note


def test_source_level_fits_cluster_by_evaluator_variant(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    sweep = tmp_path / "s"
    job = 0
    for v in range(6):  # 6 variants × 3 sources; each variant has its own preference offset
        offset = rng.normal(0, 0.03)
        for src in ("a", "b", "c"):
            rec = float(rng.uniform(0.4, 0.9))
            write_cell(sweep, job, evaluator=f"e{v}", source=src, rec=rec,
                       pref=float(0.2 + 0.5 * rec + offset + rng.normal(0, 0.01)))
            job += 1
    _, points, _, robust = _fits(sweep)
    assert len(points) == 18
    source_fits = [f for f in robust if f.level == LEVEL_SOURCE and f.scale == "paper"]
    clustered = next(f for f in source_fits if f.method == OLS_BY_VARIANT)
    mixed = next(f for f in source_fits if f.method.startswith("MixedLM"))
    for f in (clustered, mixed):
        assert f.ok and f.n == 18 and f.n_clusters == 6 and f.slope_ci_low < 0.5 < f.slope_ci_high, f


def test_source_level_fits_need_enough_variants(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    for j, (rec, pref) in enumerate([(0.5, 0.5), (0.6, 0.55), (0.7, 0.6), (0.8, 0.62)]):
        write_cell(sweep, j, evaluator=f"e{j % 2}", source=f"s{j}", rec=rec, pref=pref)
    _, _, _, robust = _fits(sweep)
    by_method = {f.method: f for f in robust if f.level == LEVEL_SOURCE}
    assert not by_method[OLS_BY_VARIANT].ok and "2 evaluator variant cluster(s)" in by_method[OLS_BY_VARIANT].note
    mixed = next(f for m, f in by_method.items() if m.startswith("MixedLM"))
    assert not mixed.ok and "needs at least 3" in mixed.note


def _ft_cells(root: Path, slope_rec: float, slope_ctl: float, seed: int = 0) -> Path:
    """Fine-tuned variants (distinct N), one source each, so each cell is its own paper unit."""
    rng = np.random.default_rng(seed)
    sweep = root / "ft"
    job = 0
    for task, slope in (("recognition", slope_rec), ("length", slope_ctl), ("vowel", slope_ctl)):
        for k in range(12 if task == "recognition" else 6):
            rec = float(rng.uniform(0.3, 0.9))
            write_cell(sweep, job, finetune_task=task, finetune_dataset="paper_xsum", finetune_n_articles=k + 1,
                       rec=rec, pref=float(0.3 + slope * rec + rng.normal(0, 0.02)))
            job += 1
    write_cell(sweep, job, rec=0.95, pref=0.05)  # a base-model cell: must not enter the interaction fit
    return sweep


def _interaction(sweep: Path, level: str = "paper unit") -> Any:
    units, points, _, _ = _fits(sweep)
    return next(r for r in fit_interactions(units, points) if r.level == level and r.scale == "paper")


def test_interaction_detects_a_slope_difference(tmp_path: Path) -> None:
    res = _interaction(_ft_cells(tmp_path, slope_rec=0.8, slope_ctl=0.1))
    assert res.ok and (res.n, res.n_recognition, res.n_control) == (24, 12, 12)
    assert res.ci_low < 0.7 < res.ci_high and res.p < 0.001
    assert res.slope_control_ci_low < 0.1 < res.slope_control_ci_high
    assert res.slope_recognition_ci_low < 0.8 < res.slope_recognition_ci_high


def test_interaction_null_when_slopes_are_equal(tmp_path: Path) -> None:
    res = _interaction(_ft_cells(tmp_path, slope_rec=0.5, slope_ctl=0.5, seed=2))
    assert res.ok and res.ci_low < 0 < res.ci_high


def test_interaction_flags_a_kind_that_rests_on_two_points(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    cells = [("recognition", 0.55, 0.56), ("recognition", 0.70, 0.71)]
    cells += [("length", 0.45 + k / 20, 0.45 + k / 20 + 0.01 * (-1) ** k) for k in range(5)]
    for j, (task, rec, pref) in enumerate(cells):
        write_cell(sweep, j, finetune_task=task, finetune_dataset="paper_xsum", finetune_n_articles=j + 1,
                   rec=rec, pref=pref)
    res = _interaction(sweep)
    assert res.ok and (res.n_recognition, res.n_control) == (2, 5)
    assert "recognition fine-tunes' slope rests on 2 paper units" in res.note
    assert "control fine-tunes' slope" not in res.note
    assert _interaction(_ft_cells(tmp_path, slope_rec=0.8, slope_ctl=0.1)).note == ""


def test_interaction_without_controls_is_not_enough(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    for j in range(4):
        write_cell(sweep, j, finetune_task="recognition", finetune_dataset="paper_xsum", finetune_n_articles=j + 1,
                   rec=0.5 + j / 10, pref=0.5)
    res = _interaction(sweep)
    assert not res.ok and res.note.startswith("not enough paper units (n=4")
    assert "control fine-tunes need at least 2 paper units" in res.note


# --- loading: failed and incomplete cells --------------------------------------------------------


def test_failed_incomplete_and_partial_cells_are_listed(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_cell(sweep, 0)
    write_cell(sweep, 1, status=None, error="RuntimeError: out of memory", extra_overrides=("seed=7",))
    write_cell(sweep, 2, status=None)
    write_cell(sweep, 3, status="running")
    write_cell(sweep, 4)
    (sweep / "4" / "summary.json").write_text("{not json")
    write_cell(sweep, 5, results=False)
    write_cell(sweep, 6, rec=None)
    write_cell(sweep, 10)  # natural order: 10 after 6
    (sweep / "6" / "results.jsonl").open("a").write("garbage\n")
    (sweep / "wandb" / "run-x" / ".hydra").mkdir(parents=True)  # never a cell
    data = load_sweeps([sweep])
    assert data.n_cell_dirs == 8
    assert list(data.cells["cell_id"]) == ["sweep/0", "sweep/5", "sweep/6", "sweep/10"]
    by = {(p.cell, p.status): p for p in data.problems}
    failed = by[("sweep/1", "failed")]
    assert failed.overrides == "evaluator=qwen05 source=human dataset=paper_xsum seed=7"
    assert failed.error == "RuntimeError: out of memory"
    assert "no summary.json" in by[("sweep/2", "incomplete")].reason
    assert "'running'" in by[("sweep/3", "incomplete")].reason
    assert "unreadable summary.json" in by[("sweep/4", "failed")].reason
    assert "no results.jsonl" in by[("sweep/5", "warning")].reason
    warnings6 = [p.reason for p in data.problems if p.cell == "sweep/6"]
    assert any("recognition mean is null" in w for w in warnings6)
    assert any("1 malformed line" in w for w in warnings6)
    # Points come from the items: cell 5 has none, cell 6's items are all excluded (and counted).
    points = source_points(data.items).set_index("cell_id")
    assert sorted(points.index) == ["sweep/0", "sweep/10", "sweep/6"]
    assert points.loc["sweep/6", "n_items"] == 0 and points.loc["sweep/6", "n_items_excluded"] == 5
    assert math.isnan(points.loc["sweep/6", "rec_paper"]) and points.loc["sweep/0", "n_items"] == 5


def test_missing_sweep_dir_raises_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="sweep directory not found"):
        load_sweeps([tmp_path / "nope"])


# --- report --------------------------------------------------------------------------------------


def test_report_renders_from_a_small_fixture_sweep(tmp_path: Path) -> None:
    sweep = small_sweep(tmp_path)
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    md_path, html_path = sweep / "report.md", sweep / "report.html"
    assert result.report_md == md_path and result.report_html == html_path
    pngs = sorted(p.name for p in (sweep / "analysis").glob("*.png"))
    assert pngs == ["heatmap_preference.png", "heatmap_recognition.png", "preference_vs_recognition.png"]
    for p in (sweep / "analysis").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    md, html = md_path.read_text(), html_path.read_text()

    headline = result.headline_fits()
    assert [f.group for f in headline] == ["pairwise / none"]
    fit = headline[0]  # 2 evaluators × 2 datasets = 4 paper units, each averaging its sources
    assert fit.ok and fit.n == 4
    slope_txt, r_txt = f"{fit.slope:.3f}", f"{fit.r:.3f}"
    ci_txt = f"[{fit.slope_ci_low:.3f}, {fit.slope_ci_high:.3f}]"
    header = next(line for line in md.splitlines() if line.startswith("| grouping | group | scale | n paper units"))
    for col in ("slope", "slope 95% CI", "r", "r 95% CI", "R²"):
        assert f"| {col} |" in header
    headline_row = next(line for line in md.splitlines()
                        if line.startswith("| setting × label | pairwise / none | paper | 4 |"))
    assert slope_txt in headline_row and ci_txt in headline_row and r_txt in headline_row
    for text in (slope_txt, ci_txt, r_txt):
        assert text in html

    # The failed and the unfinished cell are listed, with overrides and the error message.
    for doc in (md, html):
        assert "20-30-00/6" in doc and "ModelUnavailableError: weights for llama2 are missing" in doc
        assert "20-30-00/7" in doc and "no summary.json" in doc
        assert "source=llama2" in doc and "source=qwen15" in doc

    # Per-dataset groups with 3 cells are fitted; everything else is there too.
    for title in ("Position consistency", "Exclusions", "Per fine-tune task", "Self-recognition by evaluator × source",
                  "Headline: self-preference on self-recognition at the paper", "The paper-unit points",
                  "Robustness: source-level and item-level fits", "clustered by article",
                  "Recognition vs control fine-tunes: the interaction test",
                  "smallest detectable effect", "What it means:"):
        assert title in md and title in html
    # No fine-tuned cell here: the interaction section says so in one line instead of a table of dashes.
    interaction = md.split("## Recognition vs control fine-tunes")[1].split("\n## ")[0]
    assert "**Too small for this table:** none of its" in interaction
    assert "| recognition × recognition_finetune" not in interaction
    assert "0.550 [0.500, 0.600]" in md  # an evaluator × source entry with its CI

    # report.md links the PNGs relatively; report.html embeds them.
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(links) == 3 and all((sweep / link).is_file() for link in links)
    assert html.count('src="data:image/png;base64,') == 3 and 'src="analysis/' not in html
    assert (sweep / "analysis" / "regressions.json").is_file() and (sweep / "analysis" / "cells.csv").is_file()
    assert "not enough paper units (n=0; recognition fine-tunes n=0" in md  # no fine-tuned cells here


def test_report_with_no_complete_cell_still_renders(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_cell(sweep, 0, status=None, error="boom")
    write_cell(sweep, 1, status="failed")
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    md = result.report_md.read_text()
    assert "not enough paper units (n=0)" in md and "boom" in md
    assert len(list((sweep / "analysis").glob("*.png"))) == 3


def test_markdown_escapes_pipes() -> None:
    import pandas as pd

    out = to_markdown(pd.DataFrame({"a|b": ["x|y"], "c": [float("nan")]}))
    assert out.splitlines()[0] == "| a\\|b | c |" and out.splitlines()[2] == "| x\\|y | — |"


# --- command line --------------------------------------------------------------------------------


def test_cli_pools_sweeps_and_reproduces_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = small_sweep(tmp_path / "a")
    b = planted_sweep(tmp_path / "b", slope=0.6, n_cells=8)
    out = tmp_path / "out"
    assert cli_main([str(a), str(b), "--out", str(out), "--wandb-mode", "disabled"]) == 0
    stdout = capsys.readouterr().out
    assert f"Report: {out / 'report.html'}" in stdout and str(out / "report.md") in stdout
    assert "slope 95% CI" in stdout and "r 95% CI" in stdout and "Headline: the paper's unit" in stdout
    assert "20-30-00/6" in stdout  # failed cells are named on stdout too
    md = (out / "report.md").read_text()
    # 4 paper units in a, 4 in b, and b's base qwen05 on paper_xsum is the same unit as a's: 7
    assert "| setting × label | pairwise / none | paper | 7 |" in md
    assert not (a / "report.md").exists()  # --out honoured (without it: the first sweep dir, see the callback tests)


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main([str(tmp_path / "missing"), "--wandb-mode", "disabled"]) == 1
    assert "sweep directory not found" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli_main([str(tmp_path / "empty"), "--wandb-mode", "disabled"]) == 1
    assert "no cell directories" in capsys.readouterr().err


def test_cli_help_runs_as_a_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "selfpref_sweep.analysis", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "SWEEP_DIR" in proc.stdout and "--out" in proc.stdout


# --- Hydra callback ------------------------------------------------------------------------------


def _hydra_cfg(sweep: Path, wandb: dict[str, Any] | None = None) -> Any:
    cfg: dict[str, Any] = {"hydra": {"sweep": {"dir": str(sweep)}}}
    if wandb is not None:
        cfg["wandb"] = wandb
    return OmegaConf.create(cfg)


def test_callback_writes_the_report_even_if_wandb_fails(tmp_path: Path) -> None:
    sweep = small_sweep(tmp_path)
    AnalysisCallback(enabled=True).on_multirun_end(_hydra_cfg(sweep, {"mode": "sideways", "project": "p"}))
    assert (sweep / "report.html").is_file() and (sweep / "report.md").is_file()
    assert not (sweep / "analysis" / "error.txt").exists()
    # A W&B problem is recorded next to the report, which is still written.
    assert "sideways" in (sweep / "analysis" / "wandb_error.txt").read_text()


def test_callback_disabled_does_nothing(tmp_path: Path) -> None:
    sweep = small_sweep(tmp_path)
    AnalysisCallback(enabled=False).on_multirun_end(_hydra_cfg(sweep))
    assert not (sweep / "report.html").exists()


def test_callback_never_raises_and_records_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = small_sweep(tmp_path)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr(pipeline, "run_analysis", broken)
    AnalysisCallback().on_multirun_end(_hydra_cfg(sweep))  # must not raise
    error = (sweep / "analysis" / "error.txt").read_text()
    assert "RuntimeError: analysis exploded" in error and "Traceback" in error
    assert "analysis exploded" in capsys.readouterr().err
    assert (sweep / "0" / "summary.json").is_file()  # results untouched


def test_callback_exit_handler_covers_a_sweep_that_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[Any] = []
    monkeypatch.setattr(callback_mod.atexit, "register", registered.append)
    monkeypatch.setattr(callback_mod.atexit, "unregister", registered.remove)
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 3, stdout="", stderr="Traceback ...\nKeyError: 'x'\n")

    # The real command runs end to end in test_hydra_multirun_runs_the_analysis_at_the_end.
    monkeypatch.setattr(callback_mod.subprocess, "run", fake_run)
    sweep = small_sweep(tmp_path)
    cb = AnalysisCallback()
    cb.on_multirun_start(_hydra_cfg(sweep, {"mode": "disabled", "project": "p", "entity": None}))
    assert len(registered) == 1
    registered.pop()()  # what the interpreter does at exit when on_multirun_end never came
    assert calls == [[sys.executable, "-m", "selfpref_sweep.analysis", str(sweep),
                      "--wandb-mode", "disabled", "--wandb-project", "p",
                      "--wandb-group", sweep.as_posix().replace("/", "_")]]
    assert "KeyError: 'x'" in (sweep / "analysis" / "error.txt").read_text()  # a failed analysis is recorded
    # After a normal end the handler is unregistered (min_cells: skip the analysis itself here).
    cb.min_cells = 100
    cb.on_multirun_start(_hydra_cfg(sweep, {"mode": "disabled"}))
    cb.on_multirun_end(_hydra_cfg(sweep, {"mode": "disabled"}))
    assert registered == [] and len(calls) == 1 and not (sweep / "report.html").exists()


_APP = textwrap.dedent(
    """
    import json, os
    from pathlib import Path
    import hydra
    from hydra.core.hydra_config import HydraConfig

    @hydra.main(version_base=None, config_path="conf", config_name="config")
    def main(cfg):
        out = Path(HydraConfig.get().runtime.output_dir)
        if cfg.x == cfg.fail_at:
            (out / "cell.error.txt").write_text("ValueError: planted failure")
            raise ValueError("planted failure")
        rec = 0.4 + 0.1 * cfg.x
        pref = 0.2 + 0.5 * rec + 0.01 * (-1) ** cfg.x
        summary = {"status": "complete",
                   "cell": {"evaluator": f"e{cfg.x}", "source": "s", "dataset": "d", "setting": "pairwise",
                            "label": "none", "finetune_task": "none", "finetune_dataset": None,
                            "finetune_n_articles": None, "transfer": "none"},
                   "recognition": {"mean": rec, "ci_low": rec - 0.05, "ci_high": rec + 0.05, "n": 3},
                   "preference": {"mean": pref, "ci_low": None, "ci_high": None, "n": 3}}
        (out / "summary.json").write_text(json.dumps(summary))
        items = [{"article_id": f"a{i}", "recognition": {"score": rec + d, "excluded": False},
                  "preference": {"score": pref + d, "excluded": False}} for i, d in enumerate((-0.01, 0, 0.01))]
        (out / "results.jsonl").write_text("".join(json.dumps(it) + "\\n" for it in items))

    if __name__ == "__main__":
        main()
    """
)
_APP_CONF = textwrap.dedent(
    """
    x: 0
    fail_at: -1
    wandb:
      mode: disabled
      project: selfpref_sweep
      entity: null
      group: null
    hydra:
      sweep:
        dir: multirun/sweep
        subdir: ${hydra.job.num}
      callbacks:
        analysis:
          _target_: selfpref_sweep.analysis.job.callback.AnalysisCallback
          enabled: true
    """
)


def test_hydra_multirun_runs_the_analysis_at_the_end(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(_APP_CONF)
    (tmp_path / "app.py").write_text(_APP)
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    # A sweep whose last cell raises: Hydra skips on_multirun_end, the exit handler still reports.
    proc = subprocess.run(
        [sys.executable, "app.py", "-m", "x=1,2,3,4,5", "fail_at=5", "hydra.sweep.dir=multirun/failing"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0, proc.stderr  # the sweep itself failed...
    failing = tmp_path / "multirun" / "failing"
    md = (failing / "report.md").read_text()  # ...but the report is there
    assert "| setting × label | pairwise / none | paper | 4 |" in md and "planted failure" in md
    assert "x=5 fail_at=5" in md
    # A clean 4-cell sweep: the report comes from on_multirun_end.
    proc = subprocess.run([sys.executable, "app.py", "-m", "x=1,2,3,4"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    sweep = tmp_path / "multirun" / "sweep"
    assert (sweep / "report.html").is_file() and "Report:" in proc.stdout
    md = (sweep / "report.md").read_text()
    assert "| setting × label | pairwise / none | paper | 4 |" in md and "slope 95% CI" in md
    assert len(list((sweep / "analysis").glob("*.png"))) == 3


# --- W&B -----------------------------------------------------------------------------------------


def test_wandb_offline_summary_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    sweep = small_sweep(tmp_path)
    result = run_analysis([sweep], wandb_cfg={"mode": "offline", "project": "selfpref_test"})
    assert result.wandb_status.startswith("W&B (offline): logged run 'analysis'"), result.wandb_status
    assert "20-30-00" in result.wandb_status  # group = the sweep dir's name
    runs = list(tmp_path.rglob("offline-run-*"))
    assert runs, "no offline W&B run written"
    logged = {p.name for run in runs for p in run.rglob("*")}
    assert any(n.endswith(".wandb") for n in logged)
    assert any(n.startswith("regression_units") and n.endswith(".table.json") for n in logged)  # wandb.Table
    assert any(n.startswith("preference_vs_recognition") and n.endswith(".png") for n in logged)  # wandb.Image
    # A re-run does not mistake the W&B run directory for a cell.
    assert load_sweeps([sweep]).n_cell_dirs == 8
    assert not (sweep / "analysis" / "wandb_error.txt").exists()


def test_wandb_group_defaults_to_the_cells_group(tmp_path: Path) -> None:
    from selfpref_sweep.analysis.job.callback import _wandb_cfg
    from selfpref_sweep.analysis.tracking.wandb_log import resolve_wandb_cfg

    sweep = tmp_path / "outputs" / "multirun" / "2026-11-21" / "20-30-00"
    cell = write_cell(sweep, 0)
    # Hydra stores the sweep dir unresolved; run.py names the cells' group after the resolved one.
    (cell / ".hydra" / "hydra.yaml").write_text(
        "hydra:\n  sweep:\n    dir: outputs/multirun/${now:%Y-%m-%d}/${now:%H-%M-%S}\n"
        f"  runtime:\n    cwd: {tmp_path}\n"
    )
    assert resolve_wandb_cfg({"mode": "disabled"}, sweep)["group"] == "outputs_multirun_2026-11-21_20-30-00"
    assert resolve_wandb_cfg({"group": "mine"}, sweep)["group"] == "mine"
    assert resolve_wandb_cfg(None, tmp_path / "no_cells")["group"] == "no_cells"  # fallback: the dir's name
    cfg = _wandb_cfg(OmegaConf.create({"hydra": {"sweep": {"dir": "outputs/multirun/d/t"}},
                                       "wandb": {"mode": "offline", "group": None}}))
    assert cfg == {"mode": "offline", "group": "outputs_multirun_d_t"}


def test_importing_the_callback_stays_light() -> None:
    # Hydra imports the callback at the start of every run: no pandas / matplotlib / wandb there.
    code = ("import sys, selfpref_sweep.analysis.job.callback as c; "
            "print(sorted(m for m in ('pandas', 'matplotlib', 'statsmodels', 'wandb') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr
