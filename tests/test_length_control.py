"""Length-controlled self-preference (analysis/estimate/length_control.py, report/length_control_section.py):
planted items where preference follows length only, or own-preference only, word counts missing, too few articles;
and the report section, CSV and regressions.json section where the items carry word counts (and none where they do
not)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from selfpref_sweep.analysis.estimate.length_control import has_word_counts, length_controlled
from selfpref_sweep.analysis.estimate.units import paper_units
from selfpref_sweep.analysis.report.length_control_section import NAME, SECTION, length_control_table, verdict

from .test_analysis import NO_WANDB, write_cell


def planted(n_articles: int = 40, sources: tuple[str, ...] = ("human", "gpt4"), length_effect: float = 1.0,
            own_effect: float = 0.0, mean_log_ratio: float = 0.4, noise: float = 0.3, seed: int = 0) -> pd.DataFrame:
    """Items of one paper unit: log-odds preference = own_effect + length_effect · log(own/other words) + noise,
    own summaries on average exp(mean_log_ratio) times as long; the paper's score is its expit."""
    rng = np.random.default_rng(seed)
    n = n_articles * len(sources)
    other = rng.integers(20, 60, n).astype(float)
    own = np.maximum(1.0, np.round(other * np.exp(rng.normal(mean_log_ratio, 0.4, n))))
    logodds = own_effect + length_effect * np.log(own / other) + rng.normal(0, noise, n)
    source = np.repeat(sources, n_articles)
    return pd.DataFrame({
        "cell_id": [f"c/{s}" for s in source], "evaluator_variant": "m", "evaluator": "m", "is_finetuned": False,
        "source": source, "dataset": "xsum", "setting": "pairwise", "label": "none", "finetune_task": "none",
        "finetune_dataset": None, "finetune_n_articles": np.nan, "transfer": "none", "own_summaries": "",
        "finetune_fingerprint": "", "article_id": [f"a{i}" for i in np.tile(np.arange(n_articles), len(sources))],
        "own_words": own, "other_words": other, "rec_score": 0.6, "rec_logodds": 0.4, "rec_excluded": False,
        "pref_score": expit(logodds), "pref_logodds": logodds, "pref_excluded": False})


def _row(frame: pd.DataFrame, scale: str = "logodds") -> pd.Series:
    rows = frame[frame["scale"] == scale]
    assert len(rows) == 1
    return rows.iloc[0]


def test_a_preference_for_length_alone_is_controlled_away() -> None:
    frame = length_controlled(planted(length_effect=1.0, own_effect=0.0))
    r = _row(frame)
    # Raw: own summaries are longer, so a judge that likes length "prefers its own" (about 0.4 log-odds).
    assert r["raw"] > 0.25 and r["raw_ci_low"] > 0
    # Controlled: read at equal length, nothing is left; without the length term it would stay at the raw value.
    assert abs(r["controlled"]) < 0.1 and r["controlled_ci_low"] < 0 < r["controlled_ci_high"]
    assert r["controlled_p"] > 0.05 and "not shown to differ from no bias" in verdict(r)
    assert r["length_coef_ci_low"] < 1.0 < r["length_coef_ci_high"]
    assert r["delta"] == pytest.approx(r["controlled"] - r["raw"])
    assert r["delta"] == pytest.approx(-r["length_coef"] * r["mean_log_length_ratio"])
    paper = _row(frame, "paper")  # the paper's scale, around 0.5
    assert paper["raw_ci_low"] > 0.5 and paper["controlled_ci_low"] < 0.5 < paper["controlled_ci_high"]


def test_an_own_preference_without_length_stays() -> None:
    r = _row(length_controlled(planted(length_effect=0.0, own_effect=0.5, seed=1)))
    assert r["raw"] == pytest.approx(0.5, abs=0.1)
    assert r["controlled"] == pytest.approx(r["raw"], abs=0.1)
    assert r["length_coef_ci_low"] < 0 < r["length_coef_ci_high"]
    assert r["controlled_p"] < 0.05 and verdict(r).startswith("length-controlled preference differs from no bias (p")


def test_raw_is_the_paper_units_mean_on_the_same_items() -> None:
    items = planted(own_effect=0.3, seed=2)
    r, unit = _row(length_controlled(items)), paper_units(items).iloc[0]
    assert r["raw"] == pytest.approx(unit["pref_logodds_mean"])
    assert _row(length_controlled(items), "paper")["raw"] == pytest.approx(unit["pref_paper_mean"])
    assert r["n_items"] == unit["n_items"] and r["n_articles"] == unit["n_articles"] and r["n_left_out"] == 0


def test_items_without_both_word_counts_are_left_out_and_counted() -> None:
    items = planted(seed=3)
    items.loc[[0, 1], "own_words"] = np.nan
    items.loc[[2], "other_words"] = 0.0
    items.loc[[3], "pref_excluded"] = True  # excluded upstream: not the length control's to count
    r = _row(length_controlled(items))
    assert r["n_left_out"] == 3 and r["n_items"] == len(items) - 4
    assert np.isfinite(r["controlled"])
    # A source with no word count at all: the unit has no value, never the mean over its other source.
    items.loc[items["source"] == "gpt4", "own_words"] = np.nan
    r = _row(length_controlled(items))
    assert np.isnan(r["controlled"]) and np.isnan(r["raw"]) and "source=gpt4" in r["note"]


def test_too_few_articles_give_no_interval_and_no_verdict() -> None:
    frame = length_controlled(planted(n_articles=3, seed=4))
    for _, r in frame.iterrows():
        assert "too few clusters" in r["note"] and np.isnan(r["controlled_p"]) and np.isnan(r["controlled_ci_low"])
        assert np.isfinite(r["controlled"]) and verdict(r) == "no verdict (see note)"
    table = length_control_table(frame)
    assert not table["verdict"].str.contains("differ").any()


def test_no_word_counts_no_design() -> None:
    items = planted(seed=5).assign(own_words=np.nan)
    assert not has_word_counts(items) and has_word_counts(planted(seed=5))


def _with_summaries(cell_dir: Path, own_words: list[int], other_words: int = 20) -> None:
    path = cell_dir / "results.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line, n in zip(lines, own_words, strict=True):
        line["own_summary"], line["other_summary"] = " ".join(["w"] * n), " ".join(["x"] * other_words)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_report_shows_it_only_where_the_items_carry_word_counts(tmp_path: Path) -> None:
    from selfpref_sweep.analysis.job.pipeline import run_analysis

    plain = tmp_path / "plain"
    write_cell(plain, 0, source="human")
    result = run_analysis([plain], wandb_cfg=NO_WANDB)
    assert SECTION not in result.report_md.read_text() and NAME not in result.tables
    assert not (plain / "analysis" / f"{NAME}.csv").exists()
    assert NAME not in json.loads((plain / "analysis" / "regressions.json").read_text())

    sweep = tmp_path / "words"
    _with_summaries(write_cell(sweep, 0, source="human"), [18, 25, 30, 22, 27])
    _with_summaries(write_cell(sweep, 1, source="paper_gpt4"), [20, 24, 31, 19, 26])
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    md = result.report_md.read_text()
    assert f"## {SECTION}" in md and "length-controlled preference" in md
    csv = pd.read_csv(sweep / "analysis" / f"{NAME}.csv")
    assert set(csv["scale"]) == {"paper"} and csv["level"].eq("paper unit").all()  # no log-odds in these cells
    entries = json.loads((sweep / "analysis" / "regressions.json").read_text())[NAME]
    assert len(entries) == 1 and entries[0]["n_items"] == 10 and entries[0]["evaluator"] == "qwen05"
