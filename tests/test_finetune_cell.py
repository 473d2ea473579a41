"""Fine-tuned cells end to end through run.py (fake backend, weight-free trainer): a sweep trains each
distinct fine-tune once, evaluates in-domain on held-out articles and cross-dataset on the other dataset,
and records the fine-tune in summary.json. Skipped until run/runner.py calls the fine-tuning machinery."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import FAKE_BACKEND, REPO
from tests.finetune_fakes import FAKE_TRAINER


def _sweep(tmp_path, *overrides, name="sweep"):
    sweep = tmp_path / name
    env = {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "SELFPREF_TRAINERS": FAKE_TRAINER, "WANDB_MODE": "offline",
           "WANDB_SILENT": "true", "SELFPREF_STORE": str(tmp_path / "calls.sqlite")}
    cmd = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
           f"finetune_task.cache_dir={tmp_path / 'finetunes'}", "show_progress=false", f"hydra.sweep.dir={sweep}",
           *overrides]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = sorted((p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    for c in cells:
        assert not (c / "cell.error.txt").exists(), (c / "cell.error.txt").read_text()
    return [json.loads((c / "summary.json").read_text()) for c in cells], cells


def test_a_sweep_trains_once_and_evaluates_in_domain_and_across(tmp_path, paper_data):
    summaries, cells = _sweep(tmp_path, "finetune_task=recognition", "finetune_task.n_articles=2",
                              "finetune_dataset=paper_xsum", "dataset=paper_xsum,paper_cnn",
                              f"dataset.root={paper_data}",
                              "dataset.n_articles=5", "source=paper_gpt4", "finetune_task.inverse_check=true")
    in_domain, transfer = summaries
    assert in_domain["cell"]["transfer"] == "in_domain" and transfer["cell"]["transfer"] == "cross_dataset"
    for s in summaries:
        assert s["cell"]["finetune_dataset"] == "paper_xsum" and s["cell"]["finetune_n_articles"] == 2
        ft = s["finetune"]
        assert ft["task"] == "recognition" and ft["dataset"] == "paper_xsum" and ft["n_articles"] == 2
        assert ft["n_examples"] == 20 and ft["label_balance"] == {"1": 10, "2": 10} and ft["loss_curve"]
        assert "seconds" in ft and ft["n_ties_dropped"] == 0
        assert s["inverse_check"]["preference"]["n"] == 5
    assert in_domain["finetune"]["trained_in_this_cell"] and not transfer["finetune"]["trained_in_this_cell"]
    assert in_domain["finetune"]["fingerprint"] == transfer["finetune"]["fingerprint"]
    ids = [json.loads(x)["article_id"] for x in (cells[0] / "results.jsonl").read_text().splitlines()]
    train_ids = json.loads(next((tmp_path / "finetunes").glob("*/finetune.json")).read_text())["train_article_ids"]
    assert len(ids) == 5 and not set(ids) & set(train_ids)  # held out: the paper's keys[N:]
    cnn_ids = [json.loads(x)["article_id"] for x in (cells[1] / "results.jsonl").read_text().splitlines()]
    assert cnn_ids[0].startswith("42c027e4")  # cross-dataset: the CNN set from its first article


def test_control_tasks_sweep_on_demo(tmp_path):
    summaries, _ = _sweep(tmp_path, "finetune_task=length,always_1", "finetune_task.n_articles=3",
                          "dataset.n_articles=4", "source=human")
    by_task = {s["cell"]["finetune_task"]: s for s in summaries}
    assert by_task["always_1"]["finetune"]["label_balance"] == {"1": 6, "2": 0}
    length = by_task["length"]["finetune"]
    assert length["label_balance"]["1"] == length["label_balance"]["2"]
    assert length["n_examples"] + length["n_ties_dropped"] == 6
    for s in summaries:
        assert s["cell"]["transfer"] == "in_domain" and s["cell"]["finetune_dataset"] == "demo"
        assert s["n_articles"] == 4  # demo-04 .. demo-07, after the 3 training articles


def test_a_seed_sweep_gives_one_cached_adapter_per_seed(tmp_path):
    """Replicated fine-tunes: finetune_task.seed as a sweep axis trains one adapter per seed (example order,
    LoRA init and dropout all follow it), each cached under its own key, and the analysis keeps them apart as
    evaluator variants. A second launch of the same sweep trains nothing."""
    from selfpref_sweep.analysis.sweep.load import load_sweeps

    args = ("finetune_task=recognition", "finetune_task.n_articles=3", "finetune_task.seed=0,1,2",
            "dataset.n_articles=4", "source=human")
    summaries, _ = _sweep(tmp_path, *args)
    fingerprints = [s["finetune"]["fingerprint"] for s in summaries]
    assert len(summaries) == 3 and len(set(fingerprints)) == 3
    assert all(s["finetune"]["trained_in_this_cell"] for s in summaries)
    entries = sorted(e.parent.name for e in (tmp_path / "finetunes").glob("*/finetune.json"))
    assert len(entries) == 3 and [e.split("-n3-")[1][:2] for e in entries] == ["s0", "s1", "s2"]
    variants = load_sweeps([tmp_path / "sweep"]).cells["evaluator_variant"]
    assert variants.nunique() == 3

    again, _ = _sweep(tmp_path, *args, name="again")
    assert [s["finetune"]["fingerprint"] for s in again] == fingerprints
    assert not any(s["finetune"]["trained_in_this_cell"] for s in again)
