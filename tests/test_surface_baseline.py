"""The surface-feature authorship baseline: features, article-grouped folds, accuracy on synthetic summaries
(own always longer: near 1; random texts: chance), the switch and its reasons, and the block in a real
(fake-judge) cell's summary.json and the analysis' frames."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from selfpref_sweep.cell.pairs import Pair
from selfpref_sweep.config import JudgeConfig, Switch
from selfpref_sweep.measurements.surface_baseline.surface_cell import (
    FEATURES,
    TOO_FEW,
    article_folds,
    baseline_stage,
    design,
    format_baseline,
    run_baseline,
    summarize_baseline,
    surface_features,
)

VOCAB = ["the", "council", "said", "on", "monday", "that", "its", "plan", "for", "new", "homes", "would", "go", "ahead",
         "despite", "local", "protests", "and", "a", "legal", "challenge", "from", "residents", "who", "fear",
         "traffic", "noise", "and", "the", "loss", "of", "green", "space", "near", "the", "river"]


def _sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n_words)).capitalize() + "."


def _pairs(n: int, seed: int = 0, own_longer: bool = False):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        own = " ".join(_sentence(rng, rng.randint(8, 14)) for _ in range(3 if own_longer else rng.randint(1, 3)))
        other = " ".join(_sentence(rng, rng.randint(8, 14)) for _ in range(1 if own_longer else rng.randint(1, 3)))
        out.append(Pair(f"art{i}", "article text", own, other))
    return out


def _run(pairs, folds: int = 5, mode: Switch = Switch.on):
    enabled, reason, stage = baseline_stage(JudgeConfig(surface_baseline=mode, surface_folds=folds), pairs)
    records = run_baseline(stage) if enabled else {}
    return enabled, summarize_baseline(stage, records, reason, 0.95) if enabled else reason, records


def test_features_are_what_they_say():
    f = dict(zip(FEATURES, surface_features('The cat sat. "Did it?" Yes, in 2024 (twice)!'), strict=True))
    assert len(FEATURES) == len(surface_features("x.")) == 20
    assert f["words"] == 9 and f["sentences"] == 3
    assert f["comma_per_char"] == pytest.approx(1 / 44) and f["double_quote_per_char"] == pytest.approx(2 / 44)
    assert f["digit_share"] == pytest.approx(4 / 44) and f["type_token_ratio"] == 1.0
    assert 0 < f["stopword_share"] < 1 and np.isfinite(f["flesch_reading_ease"])


def test_own_always_longer_is_told_apart_on_held_out_articles():
    enabled, block, records = _run(_pairs(30, own_longer=True))
    assert enabled and block["accuracy"]["value"] > 0.95 and block["auroc"]["value"] > 0.95
    assert block["n"] == 30 and block["folds"] == 5 and set(records) == {f"art{i}" for i in range(30)}
    assert block["top_coefficients"][0]["coefficient"] > 0  # own has more of its leading feature
    assert {c["feature"] for c in block["top_coefficients"]} & {"words", "characters", "sentences"}


def test_random_texts_leave_the_interval_on_chance():
    enabled, block, _ = _run(_pairs(60, seed=3))
    acc = block["accuracy"]
    assert acc["ci_low"] <= 0.5 <= acc["ci_high"]


def test_the_folds_never_put_one_article_in_training_and_held_out():
    X, y, groups = design(_pairs(12))
    assert X.shape == (24, len(FEATURES)) and np.allclose(X[:12], -X[12:])
    for train, test in article_folds(4).split(X, y, groups):
        assert not set(groups[train]) & set(groups[test])
        assert set(y[test]) == {0, 1}  # an article's two presentations stay together


def test_the_baseline_is_deterministic():
    assert _run(_pairs(15, seed=1))[2] == _run(_pairs(15, seed=1))[2]


def test_too_few_articles_turn_auto_off_with_the_reason_and_on_records_it():
    enabled, reason, _ = _run(_pairs(9), mode=Switch.auto)
    assert not enabled and reason.startswith(TOO_FEW)
    enabled, block, records = _run(_pairs(3), mode=Switch.on)
    assert enabled and records == {} and block["reason"].startswith(TOO_FEW)
    assert block["accuracy"]["value"] is None and "not run" in format_baseline(block)
    assert _run(_pairs(10), mode=Switch.auto)[0]  # 2 x folds is enough
    assert not _run(_pairs(30), mode=Switch.off)[0]


def test_an_empty_summary_is_counted_not_used():
    pairs = _pairs(10) + [Pair("blank", "article", "  ", "Some other summary.")]
    enabled, block, records = _run(pairs)
    assert block["n"] == 10 and block["exclusions"] == {"empty_summary": 1} and "blank" not in records


def test_a_fake_judge_cell_records_the_block_and_the_analysis_reads_it(compose_cfg, tmp_path):
    from selfpref_sweep.analysis.sweep.load import load_sweeps
    from selfpref_sweep.config.spec import resolve_cell
    from selfpref_sweep.run.runner import run_cell
    from tests.conftest import FAKE_EVALUATOR

    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=6", "judge.competence=off",
                       "judge.surface_baseline=on", "judge.surface_folds=3"])
    cell_dir = tmp_path / "sweep" / "0"
    summary = run_cell(resolve_cell(cfg), cell_dir)
    block = summary["surface_baseline"]
    assert block["enabled"] and block["folds"] == 3 and block["n"] + block["n_excluded"] == summary["n_items"]
    assert json.loads((cell_dir / "summary.json").read_text())["surface_baseline"] == block
    items = [json.loads(line) for line in (cell_dir / "results.jsonl").read_text().splitlines()]
    assert sum("surface_baseline" in it for it in items) == block["n"]
    data = load_sweeps([tmp_path / "sweep"])
    row = data.cells.iloc[0]
    assert bool(row["sb_enabled"]) and row["sb_accuracy"] == pytest.approx(block["accuracy"]["value"])
    assert row["sb_n"] == block["n"] and row["sb_reason"] == block["reason"]
    assert data.items["sb_p_own"].notna().sum() == block["n"]


def test_the_report_shows_both_sections_and_the_reliability_figure(compose_cfg, tmp_path):
    from selfpref_sweep.analysis.job.pipeline import run_analysis
    from selfpref_sweep.config.spec import resolve_cell
    from selfpref_sweep.measurements.recognition_classifier.classifier_report import classifier_table
    from selfpref_sweep.measurements.surface_baseline.surface_report import surface_table
    from selfpref_sweep.run.runner import run_cell
    from tests.conftest import FAKE_EVALUATOR

    for i, setting in enumerate(("pairwise", "individual")):
        cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=6", "judge.competence=off", f"setting={setting}",
                           "judge.surface_baseline=on", "judge.surface_folds=3"])
        run_cell(resolve_cell(cfg), tmp_path / "sweep" / str(i))
    result = run_analysis([tmp_path / "sweep"], wandb_cfg={"mode": "disabled"})
    assert {"recognition_classifier", "surface_baseline"} <= result.design.measured
    table = result.tables["recognition_classifier"]
    assert len(table) == 2 and table["AUROC"].str.match(r"^\d\.\d{3}$").all()
    assert classifier_table(result.data.cells).equals(table)
    assert len(surface_table(result.data.cells)) == 2 and "surface_baseline" in result.tables
    report = result.report_md.read_text()
    assert "Recognition as a classifier" in report and "Authorship without asking a model" in report
    assert "recognition_reliability.png" in report
    assert any(p.path.name == "recognition_reliability.png" and p.path.is_file() for p in result.plots)
