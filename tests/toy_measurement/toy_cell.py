"""The toy measurement's cell side: "which summary is longer?" on the cell's pairs, in both orders, with the
longer summary in the "own" slot, so its score is the judge's P(correct).

Registered with SELFPREF_MEASUREMENTS="toy=tests.toy_measurement.toy_cell:ToyMeasurement", its settings with
SELFPREF_MEASUREMENT_SETTINGS="toy=tests.toy_measurement.toy_settings:ToySettings" (as a built-in's are in
measurements.MEASUREMENT_SETTINGS); configured with `+judge.measurements.toy.mode=on`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from selfpref_sweep.cell.judging import ItemRequests, pairwise_requests
from selfpref_sweep.cell.pairs import Pair
from selfpref_sweep.cell.scoring import score_items, summarize_question
from selfpref_sweep.config import SettingName
from selfpref_sweep.measurements import CI_FIELDS, Measurement, Stage, numbers, settings

QUESTION = "length"  # the paper's length prompt (prompts.pairwise.length)


class ToyMeasurement(Measurement):
    name = item_key = summary_key = prefix = "toy"
    omit_missing = True
    report_module = ".toy_report"
    cell_column_names = ("toy_mean", "toy_ci_low", "toy_ci_high")
    item_column_names = ("toy_score",)

    def prepare(self, inputs, judge, judge_cfg) -> Stage:
        toy = settings(inputs.spec.judge, self.name)
        if toy.mode != "on":
            return Stage(False, f"judge.measurements.toy.mode={toy.mode}")
        items = []
        for p in inputs.pairs.pairs:
            if abs(len(p.own.split()) - len(p.other.split())) < max(1, toy.min_word_gap):
                continue  # no right answer
            longer, shorter = sorted((p.own, p.other), key=lambda t: len(t.split()), reverse=True)
            items.append(ItemRequests(p.article_id, {QUESTION: pairwise_requests(
                judge, inputs.spec.prompts, QUESTION, Pair(p.article_id, p.article, longer, shorter))}))
        return Stage(True, "judge.measurements.toy.mode=on", items)

    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> dict[str, Any]:
        scored = score_items(stage.answer_items, dists, SettingName.pairwise, min_mass)
        return {item.article_id: s[QUESTION] for item, s in zip(stage.answer_items, scored, strict=True)}

    def summarize(self, stage: Stage, inputs, n_items: int) -> dict[str, Any]:
        rows = [{"article_id": aid, QUESTION: v} for aid, v in stage.records.items()]
        return {"enabled": True, **summarize_question(rows, QUESTION, 0, 0.95, 0)}

    def format(self, block) -> str:
        return f"  toy               {block.get('mean')}"

    def cell_columns(self, block: dict[str, Any]) -> dict[str, Any]:
        return numbers(block, "toy", CI_FIELDS)

    def item_columns(self, record: Any) -> dict[str, Any]:
        return numbers(record if isinstance(record, dict) else {}, "toy", {"score": "score"})

    def view(self, record: Any):
        return None if not isinstance(record, dict) else {"P(longer)": record.get("score")}
