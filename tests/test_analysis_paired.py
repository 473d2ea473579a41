"""Fine-tuned vs base on the same items (analysis/estimate/paired.py), and fine-tunes that the readable variant name
would merge (a learning-rate sweep) kept apart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from selfpref_sweep.analysis.estimate.paired import finetune_vs_base
from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.analysis.study import simulate as sim
from selfpref_sweep.analysis.sweep.load import evaluator_variant, load_sweeps

from .test_analysis import NO_WANDB, write_cell


def test_paired_differences_recover_the_planted_changes(tmp_path: Path) -> None:
    # Every simulated variant judges the same articles, with article effects shared across variants: the
    # item differences cancel them, and each fine-tune's change over the base is its planted signal minus
    # the base's (exact on the log-odds scale).
    spec = sim.SimulationSpec(n_articles=40, recognition_variants=3, control_variants=2, recognition_high=1.2,
                              slope=0.5, noise=0.3, article_sd=1.0, n_resamples=200, seed=3)
    sim.write_sweep(spec, tmp_path / "s")
    diffs = finetune_vs_base(load_sweeps([tmp_path / "s"]).items, n_resamples=400)
    planted = {evaluator_variant({**vars(v.coordinates(spec, "", "")), "own_summaries": ""}): v
               for v in sim.variants(spec)}
    base = planted.pop(sim.EVALUATOR)
    assert len(diffs) == len(planted) == 5
    for _, row in diffs.iterrows():
        v = planted[row["evaluator_variant"]]
        assert row["n_items"] == 2 * 40 and row["n_articles"] == 40 and row["note"] == ""
        for q, want in (("rec", v.recognition - base.recognition), ("pref", v.preference - base.preference)):
            got, low, high = (row[f"d{q}_logodds_{k}"] for k in ("mean", "ci_low", "ci_high"))
            assert low < want < high, (row["evaluator_variant"], q, got, want)
            assert got == pytest.approx(want, abs=0.12)
            # The article effect (SD 1.0) cancels: the interval is far narrower than it would be without pairing.
            assert high - low < 0.35
    # Rows read as a dose-response: recognition arms in increasing N.
    rec = diffs[diffs["finetune_task"] == "recognition"]
    assert list(rec["finetune_n_articles"].astype(int)) == [2, 10, 50]


def test_no_shared_items_is_said_not_compared(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_cell(sweep, 0, items=[(f"a{i}", 0.5, 0.5) for i in range(4)])
    write_cell(sweep, 1, finetune_task="recognition", finetune_dataset="paper_xsum", finetune_n_articles=10,
               items=[(f"b{i}", 0.7, 0.6) for i in range(4)])
    write_cell(sweep, 2, evaluator="other", finetune_task="recognition", finetune_dataset="paper_xsum",
               finetune_n_articles=10, items=[(f"a{i}", 0.7, 0.6) for i in range(4)])
    diffs = finetune_vs_base(load_sweeps([sweep]).items).set_index("evaluator")
    assert diffs.loc["qwen05", "n_items"] == 0 and "no items in common" in diffs.loc["qwen05", "note"]
    assert math.isnan(diffs.loc["qwen05", "drec_paper_mean"])
    assert diffs.loc["other", "n_items"] == 0 and "no base-model cells" in diffs.loc["other", "note"]


def test_report_has_the_section_only_with_finetuned_cells(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_cell(sweep, 0, items=[(f"a{i}", 0.50 + 0.01 * i, 0.5) for i in range(5)])
    assert "Fine-tuned vs base model" not in run_analysis([sweep], wandb_cfg=NO_WANDB).report_md.read_text()
    write_cell(sweep, 1, finetune_task="length", finetune_dataset="paper_xsum", finetune_n_articles=10,
               items=[(f"a{i}", 0.60 + 0.01 * i, 0.5) for i in range(5)])
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    report = result.report_md.read_text()
    assert "## Fine-tuned vs base model on the same items" in report
    assert (result.out_dir / "analysis" / "finetune_vs_base.png").is_file()
    assert (result.out_dir / "analysis" / "finetune_vs_base.csv").is_file()
    row, = result.est.diffs.itertuples()
    assert row.drec_paper_mean == pytest.approx(0.10) and row.dpref_paper_mean == pytest.approx(0.0)


def _add_finetune_block(cell_dir: Path, fingerprint: str, lr: float, seed: int = 0) -> None:
    path = cell_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary["finetune"] = {"fingerprint": fingerprint, "seed": seed,
                           "hyperparameters": {"lr": lr, "epochs": 1, "lora": {"r": 8}}}
    path.write_text(json.dumps(summary))


def test_finetunes_differing_only_in_hyperparameters_are_separate_variants(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    ft = dict(finetune_task="recognition", finetune_dataset="paper_xsum", finetune_n_articles=10)
    for job, (lr, source) in enumerate([(1e-4, "human"), (1e-4, "paper_gpt4"), (1e-3, "human")]):
        _add_finetune_block(write_cell(sweep, job, source=source, **ft), f"fp-{lr}", lr)
    write_cell(sweep, 3, finetune_task="length", finetune_dataset="paper_xsum", finetune_n_articles=10)
    write_cell(sweep, 4, **ft)  # an older record without a fine-tune block: read as it is
    data = load_sweeps([sweep])
    names = dict(zip(data.cells["cell_id"].str.rsplit("/", n=1).str[-1], data.cells["evaluator_variant"], strict=True))
    assert names["0"] == names["1"] == "qwen05 [ft recognition on paper_xsum, n=10] [lr=0.0001]"
    assert names["2"] == "qwen05 [ft recognition on paper_xsum, n=10] [lr=0.001]"
    assert names["3"] == "qwen05 [ft length on paper_xsum, n=10]"  # nothing to tell apart: unchanged
    assert names["4"] == "qwen05 [ft recognition on paper_xsum, n=10]"
    assert set(data.items["evaluator_variant"]) == set(names.values())
    # Two adapters with the same hyperparameters (e.g. other training data): told apart by fingerprint.
    sweep2 = tmp_path / "s2"
    for job, fp in enumerate(("aaaaaaaa11", "bbbbbbbb22")):
        _add_finetune_block(write_cell(sweep2, job, **ft), fp, 1e-4)
    assert sorted(load_sweeps([sweep2]).cells["evaluator_variant"]) == [
        "qwen05 [ft recognition on paper_xsum, n=10] [adapter aaaaaaaa]",
        "qwen05 [ft recognition on paper_xsum, n=10] [adapter bbbbbbbb]"]
