"""The report as a declarative list of items (analysis/report/report_items.py): a sweep's design decides which
sections it shows. A label sweep (cells that differ only by label, conf/label/) gets the label conditions
compared on the same items instead of empty headline rows and one-point scatter plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from selfpref_sweep.analysis.estimate.paired import has_label_pairs, label_vs_reference
from selfpref_sweep.analysis.job.pipeline import run_analysis, summary_text
from selfpref_sweep.analysis.report import report_items as R
from selfpref_sweep.analysis.sweep.load import load_sweeps
from selfpref_sweep.reporting.items import NOT_LOGGED, REPORT_TABLE, RUN_TABLE, Design, ReportItem

from .test_analysis import NO_WANDB, small_sweep, write_cell

LABELS = ("none", "correct", "wrong")
SHIFT = {"none": 0.0, "correct": 0.05, "wrong": -0.04}  # each label's planted change in preference
N_ARTICLES = 8


def _preference(label: str, i: int) -> float:
    # An article effect shared by every condition, plus the label's shift and a little per-item noise.
    noise = np.random.default_rng(100 * LABELS.index(label) + i).normal(0, 0.02)
    return float(0.55 + 0.03 * (i % 4) + SHIFT[label] + noise)


def label_sweep(root: Path, evaluators: tuple[str, ...] = ("qwen05",)) -> Path:
    """One cell per evaluator × label condition: the same source, dataset and articles in every cell."""
    sweep = root / "labels"
    job = 0
    for k, evaluator in enumerate(evaluators):
        for label in LABELS:
            items = [(f"a{i}", 0.6 + 0.05 * k + 0.01 * i, _preference(label, i) + 0.05 * k) for i in range(N_ARTICLES)]
            write_cell(sweep, job, evaluator=evaluator, label=label, extra_overrides=(f"label={label}",), items=items)
            job += 1
    return sweep


def test_a_three_cell_label_sweep_gets_the_label_comparison_not_an_empty_headline(tmp_path: Path) -> None:
    result = run_analysis([label_sweep(tmp_path)], wandb_cfg=NO_WANDB)
    md, html, printed = result.report_md.read_text(), result.report_html.read_text(), summary_text(result)
    # No headline (one paper unit per condition cannot give a line): no section, rows, sentences or scatter.
    for doc in (md, html, printed):
        assert "Headline" not in doc and "not enough paper units (n=1)" not in doc
    assert not (result.out_dir / "analysis" / "preference_vs_recognition.png").exists()
    assert all("preference_vs_recognition" not in str(p.path) for p in result.plots)
    # Nor the fine-tune tests: the sweep has no fine-tuned evaluator.
    assert "## Specificity" not in md and "interaction test" not in md
    # The label comparison instead, in the report, on stdout and in the data files.
    assert "## Label conditions on the same items" in md and "Label conditions on the same items" in html
    assert "Label conditions on the same items" in printed
    rows = result.labels.set_index("label")
    assert sorted(rows.index) == ["correct", "wrong"] and set(rows["reference"]) == {"none"}
    assert (result.out_dir / "analysis" / "label_comparison.csv").is_file()
    payload = json.loads((result.out_dir / "analysis" / "regressions.json").read_text())
    assert sorted(r["label"] for r in payload["label_comparison"]) == ["correct", "wrong"]
    for label in ("correct", "wrong"):
        row = rows.loc[label]
        diffs = np.array([_preference(label, i) - _preference("none", i) for i in range(N_ARTICLES)])
        assert row["n_articles"] == N_ARTICLES and row["n_items"] == N_ARTICLES
        assert row["dpref_paper_mean"] == pytest.approx(diffs.mean())
        # One item per article and one source: the article-clustered t interval is the plain one over articles.
        half = stats.t.ppf(0.975, N_ARTICLES - 1) * diffs.std(ddof=1) / np.sqrt(N_ARTICLES)
        assert row["dpref_paper_ci_low"] == pytest.approx(diffs.mean() - half, rel=1e-6)
        assert row["dpref_paper_ci_high"] == pytest.approx(diffs.mean() + half, rel=1e-6)
        assert row["dpref_paper_ci_low"] < SHIFT[label] < row["dpref_paper_ci_high"]
        # Each condition's preference is its paper unit's, CI included: the same items, the same interval.
        unit = result.est.units[result.est.units["label"] == label].iloc[0]
        for k in ("mean", "ci_low", "ci_high"):
            assert row[f"pref_paper_{k}"] == pytest.approx(unit[f"pref_paper_{k}"])
        line = next(x for x in md.splitlines() if x.startswith(f"| pairwise | paper_xsum | qwen05 | {label} | none |"))
        assert (f"{row['dpref_paper_mean']:.3f} [{row['dpref_paper_ci_low']:.3f}, "
                f"{row['dpref_paper_ci_high']:.3f}]") in line
    # The planted shifts are far from 0 against this noise: both changes are found.
    assert rows.loc["correct", "dpref_paper_ci_low"] > 0 > rows.loc["wrong", "dpref_paper_ci_high"]


def test_a_label_sweep_that_supports_the_headline_keeps_it(tmp_path: Path) -> None:
    # Three evaluators per condition: three paper units, enough for a line in every label condition.
    result = run_analysis([label_sweep(tmp_path, ("e1", "e2", "e3"))], wandb_cfg=NO_WANDB)
    md = result.report_md.read_text()
    assert "## Headline: self-preference on self-recognition at the paper's unit" in md
    assert [f.group for f in result.headline_fits()] == ["pairwise / correct", "pairwise / none", "pairwise / wrong"]
    assert all(f.ok and f.n == 3 for f in result.headline_fits())
    assert "Headline: the paper's unit" in summary_text(result)
    assert (result.out_dir / "analysis" / "preference_vs_recognition.png").is_file()
    assert "## Label conditions on the same items" in md and len(result.labels) == 2 * 3


def test_a_sweep_without_label_pairs_has_no_label_comparison(tmp_path: Path) -> None:
    result = run_analysis([small_sweep(tmp_path)], wandb_cfg=NO_WANDB)
    md = result.report_md.read_text()
    assert "Label conditions" not in md and "Label conditions" not in summary_text(result)
    assert "## Headline: self-preference on self-recognition at the paper's unit" in md
    assert not (result.out_dir / "analysis" / "label_comparison.csv").exists()
    assert "label_comparison" not in result.tables  # nor a W&B table
    assert "label_comparison" not in json.loads((result.out_dir / "analysis" / "regressions.json").read_text())


def test_labels_are_compared_only_on_the_items_both_conditions_judged(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_cell(sweep, 0, label="none", items=[(f"a{i}", 0.6, 0.50 + 0.01 * i) for i in range(6)])
    # Two articles the unlabelled cell never judged: left out of the comparison, not averaged in.
    write_cell(sweep, 1, label="correct", items=[(f"a{i}", 0.6, 0.60 + 0.01 * i) for i in range(4)]
               + [("b0", 0.6, 0.99), ("b1", 0.6, 0.99)])
    items = load_sweeps([sweep]).items
    assert has_label_pairs(items)
    row = label_vs_reference(items).iloc[0]
    assert row["n_articles"] == 4 and row["dpref_paper_mean"] == pytest.approx(0.10)
    assert row["pref_paper_mean"] == pytest.approx(np.mean([0.60 + 0.01 * i for i in range(4)]))
    # Without the reference condition a label has nothing to be compared with, and says so.
    only_labelled = items[items["label"] != "none"]
    assert not has_label_pairs(only_labelled) and label_vs_reference(only_labelled).empty


def test_the_item_list_is_declarative_and_complete() -> None:
    items = R.report_items()
    names = [item.name for item in items]
    assert len(names) == len(set(names))
    assert {item.to_wandb for item in items} <= {NOT_LOGGED, RUN_TABLE, REPORT_TABLE}
    # The W&B report holds the regression tables (and the label comparison where the design has it), and the
    # judge controls' verdicts, which say which of those results mean something.
    assert [i.name for i in items if i.to_wandb == REPORT_TABLE] == [
        "label_comparison", "regression_units", "regression_resampled", "paper_trend", "regression_robustness",
        "specificity", "interaction", "judge_controls"]
    everything = Design(label_pairs=False, max_condition_units=0, finetuned=True, diffs=True, trends=True,
                          logodds_cells=True, measured=frozenset({"familiarity"}))
    assert R.plot_stems(everything) == {"preference_vs_recognition", "finetune_vs_base", "heatmap_recognition",
                                        "heatmap_preference"}
    # A label design with one unit per condition and no fine-tunes: no headline, no fine-tune tests.
    labels_only = Design(label_pairs=True, max_condition_units=1, finetuned=False, diffs=False, trends=False,
                           logodds_cells=False)
    shown = {i.name for i in items if i.applies(labels_only)}
    assert "label_comparison" in shown and not shown & {"regression_units", "specificity", "interaction"}
    assert "preference_vs_recognition" not in R.plot_stems(labels_only)


def test_every_report_table_builds_from_an_empty_frame_without_error() -> None:
    # The label table takes paired.label_vs_reference's columns even when there is nothing to compare.
    from selfpref_sweep.analysis.report.unit_tables import label_comparison_table

    table = label_comparison_table(label_vs_reference(pd.DataFrame()))
    assert table.empty and "Δ preference [95% CI]" in table.columns


def test_a_section_with_nothing_fitted_says_why_in_one_line() -> None:
    from types import SimpleNamespace as NS

    from selfpref_sweep.reporting.items import unfitted_line

    assert unfitted_line([NS(ok=True, note=""), NS(ok=False, note="not enough cells (n=2)")]) == ""
    line = unfitted_line([NS(ok=False, note="not enough cells (n=2)."), NS(ok=False, note="not enough cells (n=2)"),
                          NS(ok=False, note="no fine-tuned points")])
    assert line == ("**Too small for this table:** none of its 3 row(s) could be fitted (not enough cells (n=2); "
                    "no fine-tuned points).")
    many = unfitted_line([NS(ok=False, note=f"reason {i}") for i in range(5)])
    assert "reason 0; reason 1; reason 2 (and 2 other reason(s))" in many
    assert "nothing to fit" in unfitted_line([])


def test_every_method_text_is_used_and_reads_as_paragraphs() -> None:
    """The report's prose lives in texts/*.md files beside the code that shows it; each is named by that code."""
    from pathlib import Path

    package = Path(R.__file__).resolve().parents[2]
    files = sorted(package.rglob("texts/*.md"))
    code = "\n".join(p.read_text(encoding="utf-8") for p in package.rglob("*.py"))
    assert len(files) >= 19
    for f in files:
        assert f'"{f.stem}"' in code, f"{f} is named by no code"
        text = f.read_text(encoding="utf-8")
        assert text.strip() and "\n\n\n" not in text and not any(line != line.rstrip() for line in text.splitlines())


def test_a_measurement_item_following_no_item_is_a_clear_error(monkeypatch) -> None:
    import types

    stray = types.SimpleNamespace(ITEMS=(ReportItem("stray", "Stray", after="no_such_item"),))
    monkeypatch.setattr(R, "measurement_reports", lambda: [(None, stray)])
    with pytest.raises(ValueError, match="'stray' is to follow 'no_such_item', but no report item has that name"):
        R.report_items()


def test_the_judge_controls_table_opens_for_the_placebo_and_the_classifier_alike() -> None:
    """By the measurement's registered name: a sweep that ran only the placebo shows the table too (its report
    module's NAME names its item, "question_sensitivity", not the measurement)."""
    from selfpref_sweep.analysis.report import judge_controls

    def design(measured):
        return Design(label_pairs=False, max_condition_units=3, finetuned=False, diffs=False, trends=False,
                      logodds_cells=True, measured=frozenset(measured))

    assert judge_controls.applies(design({"placebo"}))
    assert judge_controls.applies(design({"recognition_classifier"}))
    assert not judge_controls.applies(design({"competence", "familiarity"}))
