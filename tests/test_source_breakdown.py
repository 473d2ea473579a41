"""The per-source breakdown (analysis/estimate/per_source.py, report/per_source_section.py): each other source's cell
tested on its own, the p-values Holm-adjusted across the sources of a group, and the section shown only where a group
has two or more sources."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests

from selfpref_sweep.analysis.estimate import per_source as S
from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.analysis.report import per_source_section as section
from selfpref_sweep.analysis.sweep.load import load_sweeps

from .test_analysis import NO_WANDB, write_cell

SOURCES = ("human", "paper_gpt4", "paper_claude")


def _sweep(root: Path, sources=SOURCES) -> Path:
    """One evaluator against each source; recognition well above chance against human, near it elsewhere."""
    sweep = root / "s"
    rng = np.random.default_rng(0)
    for j, source in enumerate(sources):
        shift = 0.15 if source == "human" else 0.0
        items = [(f"a{i}", float(np.clip(0.5 + shift + rng.normal(0, 0.05), 0.01, 0.99)),
                  float(np.clip(0.5 + rng.normal(0, 0.05), 0.01, 0.99))) for i in range(10)]
        write_cell(sweep, j, source=source, items=items)
    (sweep / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    return sweep


def test_holm_is_applied_across_the_sources_of_each_group_and_question(tmp_path: Path) -> None:
    data = load_sweeps([_sweep(tmp_path)])
    frame = S.per_source_frame(data.cells, data.items)
    assert len(frame) == len(SOURCES) * 2  # one row per source and question
    assert set(frame["test_scale"]) == {"paper"}  # these fixture cells carry no log-odds: the paper score vs 0.5
    for _question, sub in frame.groupby("question"):
        assert set(sub["source"]) == set(SOURCES) and (sub["family_size"] == len(SOURCES)).all()
        expected = multipletests(sub["p"], method="holm")[1]
        assert np.allclose(sub["p_holm"], expected)
        assert (sub["p_holm"] >= sub["p"] - 1e-12).all()
    rec = frame[frame["question"] == "recognition"].set_index("source")
    assert rec.loc["human", "p_holm"] < 0.01  # the planted effect survives the adjustment


def test_the_raw_test_is_a_t_test_over_articles_on_the_log_odds_scale() -> None:
    values = [0.3, -0.1, 0.2, 0.4, 0.0, 0.25]
    out = S.article_test(values)
    from scipy import stats
    assert out["p"] == pytest.approx(stats.ttest_1samp(values, 0.0).pvalue) and out["df"] == 5
    assert np.isnan(S.article_test([0.2])["p"]) and np.isnan(S.article_test([0.1, 0.1, 0.1])["p"])


def test_a_single_source_design_has_no_family_and_no_section(tmp_path: Path) -> None:
    data = load_sweeps([_sweep(tmp_path, sources=("human",))])
    assert not S.has_sources(data.cells)
    table = section.per_source_table(data.cells, data.items)
    assert table["p (Holm, across sources)"].str.contains("nothing to adjust").all()
    result = run_analysis([tmp_path / "s"], wandb_cfg=NO_WANDB)
    assert section.SECTION not in result.report_md.read_text()


def test_the_section_shows_with_machine_keys_in_a_multi_source_sweep(tmp_path: Path) -> None:
    result = run_analysis([_sweep(tmp_path)], wandb_cfg=NO_WANDB)
    assert f"## {section.SECTION}" in result.report_md.read_text()
    table = pd.read_csv(result.out_dir / "analysis" / f"{section.NAME}.csv")
    for key in ("evaluator_variant", "setting", "dataset", "source", "question", "test_scale", "p", "p_holm", "family"):
        assert key in table.columns
