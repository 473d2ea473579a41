"""Recognition read as a classifier: accuracy per order, AUROC and calibration from hand-built verdicts, the
switch, and the block in a real (fake-judge) cell's summary.json and the analysis' cell frame."""

from __future__ import annotations

import json

import numpy as np
import pytest

from selfpref_sweep.cell.scoring import individual_verdict, unjudged_verdict
from selfpref_sweep.config import JudgeConfig, Switch
from selfpref_sweep.measurements.recognition_classifier.classifier_cell import (
    NO_VERDICT,
    RecognitionClassifierMeasurement,
    classifier_enabled,
    format_classifier,
    summarize_classifier,
)
from selfpref_sweep.records.schema import Item, OrderReading, SummaryReading
from selfpref_sweep.records.scores import pair_verdict
from selfpref_sweep.stats.classifier_metrics import auroc, proportion, reliability

BINS = 10


def _order(p_one: float, own_position: int) -> OrderReading:
    """A reading whose P(answer "1") is p_one (mass 1)."""
    p_own = p_one if own_position == 1 else 1.0 - p_one
    return OrderReading({"1": p_one, "2": 1.0 - p_one}, 1.0, p_own, own_position, None, "full_distribution")


def _pair_item(aid: str, p_one_forward: float, p_one_backward: float) -> Item:
    verdict = pair_verdict(_order(p_one_forward, 1), _order(p_one_backward, 2), 0.5)
    return Item(aid, verdicts={"recognition": verdict})


def _individual_item(aid: str, own_yes: float, other_yes: float) -> Item:
    reading = lambda p: SummaryReading({"Yes": p, "No": 1.0 - p}, 1.0, p, "full_distribution")  # noqa: E731
    return Item(aid, verdicts={"recognition": individual_verdict(reading(own_yes), reading(other_yes), 0.5)})


def _pairwise(items):
    return summarize_classifier(items, "pairwise", BINS, 0.95, "test")


def test_an_always_one_judge_is_right_forward_wrong_backward_and_at_chance_overall():
    block = _pairwise([_pair_item(f"a{i}", 0.99, 0.99) for i in range(20)])
    assert block["accuracy_forward"]["value"] == 1.0 and block["accuracy_backward"]["value"] == 0.0
    assert block["accuracy"]["value"] == 0.5 and block["accuracy"]["n"] == 20  # one unit per item, not per reading
    assert block["auroc"]["value"] == pytest.approx(0.5)  # P("1") is the same whichever position own holds
    assert block["calibration"]["ece"] == pytest.approx(0.49)  # predicts 0.99 for a label that is true half the time


def test_a_perfect_judge_scores_one_with_small_calibration_error():
    block = _pairwise([_pair_item(f"a{i}", 0.99, 0.01) for i in range(20)])
    assert block["accuracy"]["value"] == 1.0 and block["accuracy"]["ci_low"] < 1.0  # Wilson: never [1, 1]
    assert block["auroc"]["value"] == 1.0
    assert block["calibration"]["ece"] < 0.02


def test_a_miscalibrated_judge_has_a_large_calibration_error():
    rng = np.random.default_rng(0)
    # Ranks own first above own second, but at 0.9 / 0.1 for a truth that holds 6 times in 10.
    items = [_pair_item(f"a{i}", *((0.9, 0.1) if rng.random() < 0.6 else (0.1, 0.9))) for i in range(50)]
    block = _pairwise(items)
    assert block["calibration"]["ece"] > 0.2
    bins = [b for b in block["calibration"]["bins"] if b["count"]]
    assert sum(b["count"] for b in block["calibration"]["bins"]) == 100 and len(bins) == 2
    assert all(b["low"] - 1e-9 <= b["mean_predicted"] <= b["high"] + 1e-9 for b in bins)


def test_ties_count_half_and_excluded_items_are_counted_not_used():
    items = [_pair_item("a", 0.5, 0.5), _pair_item("b", 0.99, 0.01),
             Item("c", verdicts={"recognition": unjudged_verdict("low_answer_mass")}), Item("d")]
    block = _pairwise(items)
    assert block["accuracy"]["value"] == pytest.approx(0.75)  # (1/2 + 1/2 + 1 + 1) / 4 readings
    assert block["n"] == 2 and block["n_excluded"] == 2
    assert block["exclusions"] == {"low_answer_mass": 1, NO_VERDICT: 1}


def test_individual_accuracy_is_paired_and_auroc_ranks_own_against_other():
    items = [_individual_item(f"a{i}", 0.8, 0.3) for i in range(5)] + [_individual_item("b", 0.4, 0.6)]
    block = summarize_classifier(items, "individual", BINS, 0.95, "test")
    assert block["accuracy"]["value"] == pytest.approx(5 / 6)
    assert block["accuracy_own"]["value"] == pytest.approx(5 / 6)  # P(Yes | own) > 0.5
    assert block["accuracy_other"]["value"] == pytest.approx(5 / 6)  # P(Yes | other) < 0.5
    assert block["auroc"]["value"] == pytest.approx(35 / 36)  # only own 0.4 below other 0.6 is misranked
    assert block["calibration"]["n"] == 12


def test_auroc_is_null_with_a_reason_when_a_class_is_missing_or_too_small():
    assert auroc([True, True], [0.2, 0.9]) == {"value": None, "n_positive": 2, "n_negative": 0,
                                                "reason": "only one class among the readings"}
    assert auroc([True, False], [0.9, 0.1])["reason"].startswith("too few readings")
    assert auroc([], [])["reason"] == "no readings"
    assert _pairwise([])["auroc"]["value"] is None


def test_metrics_helpers():
    assert proportion([], 0.95)["value"] is None
    low, high = proportion([1.0] * 10, 0.95)["ci_low"], proportion([1.0] * 10, 0.95)["ci_high"]
    assert low == pytest.approx(0.7225, abs=1e-3) and high == pytest.approx(1.0)
    rel = reliability([0.0, 1.0, 0.55], [False, True, True], 10)
    assert [b["count"] for b in rel["bins"]] == [1, 0, 0, 0, 0, 1, 0, 0, 0, 1]
    assert rel["ece"] == pytest.approx(0.45 / 3)


def test_the_switch_auto_is_on_unless_the_cell_does_not_ask_recognition():
    assert classifier_enabled(JudgeConfig(), ("recognition", "preference"))[0]
    assert not classifier_enabled(JudgeConfig(recognition_classifier=Switch.off), ("recognition",))[0]
    on, why = classifier_enabled(JudgeConfig(), ("preference",))
    assert not on and "does not ask the recognition question" in why


def test_format_is_one_line():
    line = format_classifier(_pairwise([_pair_item(f"a{i}", 0.99, 0.99) for i in range(4)]))
    assert "\n" not in line and "forward 1.000, backward 0.000" in line and "AUROC 0.500" in line
    assert format_classifier({"enabled": False, "reason": "judge.recognition_classifier=off"}).endswith("=off)")


def test_a_fake_judge_cell_records_the_block_and_the_analysis_reads_it(compose_cfg, tmp_path):
    from selfpref_sweep.analysis.sweep.load import load_sweeps
    from selfpref_sweep.config.spec import resolve_cell
    from selfpref_sweep.run.runner import run_cell
    from tests.conftest import FAKE_EVALUATOR

    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=6", "judge.competence=off"])
    summary = run_cell(resolve_cell(cfg), tmp_path / "sweep" / "0")
    block = summary["recognition_classifier"]
    assert block["enabled"] and block["n"] + block["n_excluded"] == summary["n_items"]
    assert json.loads((tmp_path / "sweep" / "0" / "summary.json").read_text())["recognition_classifier"] == block
    row = load_sweeps([tmp_path / "sweep"]).cells.iloc[0]
    assert bool(row["rc_enabled"]) and row["rc_accuracy"] == pytest.approx(block["accuracy"]["value"])
    assert row["rc_accuracy_forward"] == pytest.approx(block["accuracy_forward"]["value"])
    assert row["rc_n"] == block["n"] and len(row["rc_reliability"]) == BINS
    assert RecognitionClassifierMeasurement().cell_columns({})["rc_enabled"] is None  # an older cell
