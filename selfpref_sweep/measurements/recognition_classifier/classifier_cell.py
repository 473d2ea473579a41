"""Self-recognition read as a classifier: how often the judge's recognition answer names its own summary,
how well its probabilities rank own above other (AUROC), and whether they mean what they say (calibration).

No judge calls: everything is read from the cell's recognition verdicts (record.Item.verdicts["recognition"]).

- pairwise: each order is one reading. Accuracy per order is the share of readings with P(own) > 1/2 (a tie
  counts 1/2), forward (own shown first), backward (own shown second) and over both. A judge that always answers
  "1" scores 1 forward and 0 backward: the per-order split shows position bias the pooled score hides. AUROC
  and calibration read P(answer "1") renormalized against "own is in position 1", which is free of the
  position: a judge that always answers "1" has AUROC 1/2.
- individual: accuracy is the share of items with P(Yes | own) > P(Yes | other), the paired reading; AUROC
  ranks P(Yes) of own summaries against other summaries; the accuracy at 1/2 is given for own (Yes) and other
  (No) apart. Calibration reads P(Yes) against "the summary is own".

The Wilson intervals treat readings as independent; a pairwise item's two orders share an article, so the
interval over both orders is somewhat narrower than an article-clustered one would be. Excluded items are
counted by reason and not used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...config import SettingName, Switch
from ...records.schema import OrderReading, Verdict, verdict_of
from ...stats.classifier_metrics import auroc, hit, proportion, reliability
from .. import Measurement, Stage, block, number, settings

QUESTION = "recognition"
NAME = "recognition_classifier"
NO_VERDICT = "no_recognition_verdict"  # the item holds no recognition verdict (counted)
NO_READINGS = "no_readings"  # a scored verdict without the readings of its setting (a damaged record; counted)


def classifier_enabled(judge_settings: Any, questions: Sequence[str]) -> tuple[bool, str]:
    """(on?, why): judge.recognition_classifier; auto is on (it makes no calls), but only where the cell asks
    the recognition question."""
    mode = Switch(settings(judge_settings, NAME) or Switch.auto)
    if mode == Switch.off:
        return False, f"judge.{NAME}=off"
    if QUESTION not in questions:
        return False, f"judge.{NAME}={mode.value}, but the cell does not ask the recognition question"
    return True, f"judge.{NAME}={mode.value}: read from the cell's recognition answers, no extra calls"


def position_one_probability(order: OrderReading) -> float:
    """P(answer "1") renormalized over the two answers, from the reading's P(own)."""
    return order.p_own if order.own_position == 1 else 1.0 - order.p_own


def usable_verdicts(items: Sequence[Any], readings: str) -> tuple[list[Verdict], dict[str, int]]:
    """The scored recognition verdicts that hold their `readings` ("orders" or "summaries"), and the count
    of every other item by reason."""
    kept: list[Verdict] = []
    reasons: dict[str, int] = {}
    for item in items:
        v = verdict_of(item, QUESTION)  # None when the item holds none
        why = (NO_VERDICT if v is None else (v.exclusion_reason or "excluded") if v.excluded
               else NO_READINGS if not getattr(v, readings) else None)
        if why:
            reasons[why] = reasons.get(why, 0) + 1
        else:
            kept.append(v)
    return kept, reasons


def pairwise_metrics(verdicts: Sequence[Verdict], n_bins: int, confidence: float) -> dict[str, Any]:
    """Accuracy per order and over both, AUROC and calibration of P(answer "1") (see the module's docstring)."""
    forward = [v.orders["forward"] for v in verdicts]
    backward = [v.orders["backward"] for v in verdicts]
    hits_f = [hit(o.p_own, 0.5) for o in forward]
    hits_b = [hit(o.p_own, 0.5) for o in backward]
    readings = forward + backward
    p_one = [position_one_probability(o) for o in readings]
    own_first = [o.own_position == 1 for o in readings]
    return {
        # Over both orders, each item counts once (the mean of its two hits: 0, 1/2 or 1), so the Wilson
        # interval has one unit per item; the two readings of an item share its article and are not independent.
        "accuracy": proportion([0.5 * (f + b) for f, b in zip(hits_f, hits_b, strict=True)], confidence),
        "accuracy_forward": proportion(hits_f, confidence),
        "accuracy_backward": proportion(hits_b, confidence),
        "auroc": {**auroc(own_first, p_one), "score": "P(answer '1')", "positive": "own summary in position 1"},
        "calibration": {**reliability(p_one, own_first, n_bins), "predicted": "P(answer '1')",
                        "label": "own summary in position 1"},
    }


def individual_metrics(verdicts: Sequence[Verdict], n_bins: int, confidence: float) -> dict[str, Any]:
    """Paired accuracy (own above other), accuracy at 1/2 for own and other apart, AUROC and calibration of
    P(Yes) against "own"."""
    own = [v.summaries["own"].value for v in verdicts]
    other = [v.summaries["other"].value for v in verdicts]
    scores, is_own = own + other, [True] * len(own) + [False] * len(other)
    return {
        "accuracy": proportion([hit(a, b) for a, b in zip(own, other, strict=True)], confidence),
        "accuracy_own": proportion([hit(a, 0.5) for a in own], confidence),
        "accuracy_other": proportion([hit(0.5, b) for b in other], confidence),
        "auroc": {**auroc(is_own, scores), "score": "P(Yes)", "positive": "own summary"},
        "calibration": {**reliability(scores, is_own, n_bins), "predicted": "P(Yes)", "label": "own summary"},
    }


def summarize_classifier(items: Sequence[Any], setting: str, n_bins: int, confidence: float,
                         reason: str) -> dict[str, Any]:
    """summary.json's block: the setting's metrics over the cell's scored recognition verdicts, with the
    excluded items counted by reason."""
    pairwise = setting == SettingName.pairwise.value
    verdicts, exclusions = usable_verdicts(items, "orders" if pairwise else "summaries")
    metrics = (pairwise_metrics if pairwise else individual_metrics)(verdicts, n_bins, confidence)
    return {"enabled": True, "reason": reason, "setting": setting, "n": len(verdicts),
            "n_excluded": sum(exclusions.values()), "exclusions": exclusions, "confidence": confidence, **metrics}


def _number_text(value: Any, digits: int = 3) -> str:
    v = number(value)
    return "n/a" if v != v else f"{v:.{digits}f}"


def format_classifier(summary_block: dict[str, Any] | None) -> str | None:
    """The block's one line in the printed cell result."""
    if not summary_block:
        return None
    head = "  recognition as a classifier"
    if not summary_block.get("enabled"):
        return f"{head}  off ({summary_block.get('reason')})"
    acc = block(summary_block, "accuracy")
    ci = "" if acc.get("ci_low") is None else f" [{acc['ci_low']:.3f}, {acc['ci_high']:.3f}]"
    split = ("forward", "backward") if summary_block.get("setting") == SettingName.pairwise.value else ("own", "other")
    parts = ", ".join(f"{s} {_number_text(block(summary_block, f'accuracy_{s}').get('value'))}" for s in split)
    auc = block(summary_block, "auroc")
    auc_text = _number_text(auc.get("value")) if auc.get("value") is not None else f"n/a ({auc.get('reason')})"
    return (f"{head}  accuracy {_number_text(acc.get('value'))}{ci} ({parts}), AUROC {auc_text}, "
            f"ECE {_number_text(block(summary_block, 'calibration').get('ece'))}  "
            f"(n={summary_block.get('n')}, excluded {summary_block.get('n_excluded')})")


def _proportion_columns(summary_block: Mapping[str, Any], key: str) -> dict[str, float]:
    part = block(dict(summary_block), key)
    return {f"rc_{key}": number(part.get("value")), f"rc_{key}_ci_low": number(part.get("ci_low")),
            f"rc_{key}_ci_high": number(part.get("ci_high"))}


class RecognitionClassifierMeasurement(Measurement):
    """Recognition as a classifier, as a measurement plug-in: no requests and no item records; its summary.json
    block is read off the cell's recognition verdicts (summarize_items)."""

    report_module = ".classifier_report"  # its report side (the analysis imports it)

    name = summary_key = NAME
    item_key = NAME
    prefix = "rc"
    omit_missing = True  # no item records: the verdicts are already in each item
    cell_column_names = ("rc_enabled", "rc_accuracy", "rc_accuracy_ci_low", "rc_accuracy_ci_high",
                         "rc_accuracy_forward", "rc_accuracy_forward_ci_low", "rc_accuracy_forward_ci_high",
                         "rc_accuracy_backward", "rc_accuracy_backward_ci_low", "rc_accuracy_backward_ci_high",
                         "rc_accuracy_own", "rc_accuracy_own_ci_low", "rc_accuracy_own_ci_high",
                         "rc_accuracy_other", "rc_accuracy_other_ci_low", "rc_accuracy_other_ci_high",
                         "rc_auroc", "rc_auroc_reason", "rc_ece", "rc_reliability", "rc_n", "rc_n_excluded",
                         "rc_reason")

    def prepare(self, inputs, judge, judge_cfg) -> Stage:
        enabled, reason = classifier_enabled(inputs.spec.judge, inputs.spec.questions)
        return Stage(enabled, reason)

    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> dict[str, Any]:
        return {}

    def summarize(self, stage: Stage, inputs, n_items: int) -> dict[str, Any]:
        raise TypeError(f"{NAME} reads the cell's recognition verdicts: call summarize_items with the items")

    def summarize_items(self, stage: Stage, inputs, items: Sequence[Any]) -> dict[str, Any]:
        spec = inputs.spec
        return summarize_classifier(items, SettingName(spec.setting).value, int(spec.judge.calibration_bins),
                                    float(spec.bootstrap.confidence), stage.reason)

    def format(self, summary_block: dict[str, Any] | None) -> str | None:
        return format_classifier(summary_block)

    def cell_columns(self, summary_block: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"rc_enabled": None if not summary_block else bool(summary_block.get("enabled"))}
        for key in ("accuracy", "accuracy_forward", "accuracy_backward", "accuracy_own", "accuracy_other"):
            out.update(_proportion_columns(summary_block, key))
        auc, calibration = block(summary_block, "auroc"), block(summary_block, "calibration")
        bins = calibration.get("bins")
        return {**out, "rc_auroc": number(auc.get("value")), "rc_auroc_reason": str(auc.get("reason") or ""),
                "rc_ece": number(calibration.get("ece")), "rc_reliability": bins if isinstance(bins, list) else None,
                "rc_n": number(summary_block.get("n")), "rc_n_excluded": number(summary_block.get("n_excluded")),
                "rc_reason": str(summary_block.get("reason") or "")}
