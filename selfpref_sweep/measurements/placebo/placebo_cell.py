"""Question sensitivity: a placebo question on the cell's own pairs.

Does the judge read the question? A third pairwise question is asked of the cell's same pairs, in both orders,
whose right answer is computable from the text and has nothing to do with who wrote it: by default the paper's
length control, "which summary is longer in terms of word count?" (`judge.placebo_question` names any prompt
under prompts.pairwise that has a truth in TRUTHS below). The requests are built by the pairwise request builder
and scored by the pairwise scoring of the cell's own questions, with the cell's own summary in the "own" slot,
so the verdict's score and log-odds say how much the judge picks OWN on the placebo, the same orientation as
recognition and preference.

Individual-setting cells ask it in their own format where the prompts have one (prompts.individual.<question>;
the paper set has `length`): each summary alone, "does this summary have more than {words} words?", {words}
the median word count of the cell's judged summaries, scored as individual recognition is (P(Yes) of each
summary, own / (own + other), log-odds log(own / other)), so a judge that reads the question gives the longer
summary the higher P(Yes). Where the prompts have no individual form, it is asked pairwise on the same pairs.

Two readings per cell (summary.json's `placebo` block):
- accuracy: mean P(correct) over the items whose summaries differ on the feature (ties have no right answer);
  a judge that reads the question answers it right.
- agreement: how often the placebo's choice (the sign of its log-odds: own or other) agrees with the
  recognition choice, next to how often the preference choice agrees with the recognition choice, on the same
  items. If the placebo follows recognition as closely as preference does, the recognition-preference link is
  the judge answering every question alike (e.g. by position or by one feature of the text), not preference
  following recognition.

`judge.placebo`: auto is on where the judge's calls cost nothing (as the competence control), on asks it
anyway, off skips it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...cell.judging import OTHER as OTHER_SLOT
from ...cell.judging import OWN as OWN_SLOT
from ...cell.judging import ItemRequests, individual_request, pairwise_requests
from ...cell.pairs import Pair
from ...cell.scoring import score_items
from ...config import JudgeConfig, ModelConfig, SettingName, Switch
from ...errors import ConfigError
from ...finetune import labels as L
from ...records.schema import Item, verdict_of
from ...stats.article_means import article_mean
from ...stats.classifier_metrics import wilson
from .. import CI_FIELDS, Measurement, Stage, block, estimate_text, number, numbers
from . import placebo_rule

FIELD = "placebo"  # the item's and summary.json's key
OWN, OTHER, TIE = "own", "other", "tie"  # which summary the placebo question's right answer names
_TOL = 1e-9  # feature values closer than this are a tie


@dataclass(frozen=True)
class PlaceboTruth:
    """How a placebo question's right answer is computed: the feature it asks about, measured on each text;
    the summary with the higher value is the right answer."""

    feature: str  # what is measured, as the record and the printed result name it
    measure: Callable[[str], float]


# question name (a prompt under prompts.pairwise) -> its truth; the measures are the fine-tuning controls' own.
TRUTHS: dict[str, PlaceboTruth] = {
    "length": PlaceboTruth("word count", L.word_count),
    "vowel": PlaceboTruth("vowel count", L.vowel_count),
    "readability": PlaceboTruth("Flesch reading ease", L.reading_ease),
}


def truth_of(question: str, own: str, other: str) -> tuple[str, float, float]:
    """(which summary the right answer names: own, other or tie; own's value; other's value)."""
    measure = TRUTHS[question].measure
    a, b = float(measure(own)), float(measure(other))
    return (TIE if abs(a - b) <= _TOL else OWN if a > b else OTHER), a, b


def asked_format(setting: SettingName | str, prompts: Mapping, question: str) -> SettingName:
    """How the placebo is asked: in the individual format in an individual-setting cell whose prompts have
    the question's individual form, else pairwise."""
    individual = SettingName(setting) == SettingName.individual and question in (prompts.get("individual") or {}) \
        and question in (prompts.get("individual_answers") or {})
    return SettingName.individual if individual else SettingName.pairwise


def placebo_enabled(cfg: JudgeConfig, judge_cfg: ModelConfig, prompts: Mapping,
                    setting: SettingName | str = SettingName.pairwise) -> tuple[bool, str]:
    """(on?, why): judge.placebo, with auto on where the judge's calls cost nothing (the backend contract's
    costs_money, as the competence control) and where the prompt set has the question (in the format the cell
    asks it: asked_format). An unknown question, or a missing prompt with judge.placebo=on, is a ConfigError."""
    from ...models import backend_class

    mode, question = Switch(cfg.placebo), str(cfg.placebo_question)
    if mode == Switch.off:
        return False, "judge.placebo=off"
    if question not in TRUTHS:
        raise ConfigError(f"judge.placebo_question={question!r} has no computable right answer; known placebo "
                          f"questions: {', '.join(TRUTHS)} (or set judge.placebo=off).")
    where = f"{judge_cfg.backend} judge {judge_cfg.name!r}"
    if mode == Switch.auto and backend_class(judge_cfg.backend).costs_money(judge_cfg):
        return False, (f"judge.placebo=auto is off for the {where}, whose calls may cost; judge.placebo=on "
                       f"turns it on")
    if asked_format(setting, prompts, question) == SettingName.pairwise and question not in (prompts.get("pairwise")
                                                                                            or {}):
        missing = (f"the prompt prompts.pairwise.{question}, which prompts={prompts.get('name')} does not have")
        if mode == Switch.on:
            raise ConfigError(f"judge.placebo=on needs {missing}: add it, set judge.placebo_question to one it "
                              f"has, or set judge.placebo=off.")
        return False, f"judge.placebo=auto is off: it needs {missing}"
    if mode == Switch.on:
        return True, "judge.placebo=on"
    return True, f"judge.placebo=auto, {where} whose calls cost nothing"


@dataclass
class PlaceboState:
    """The stage's question, how it is asked, the individual form's word threshold (None when pairwise), and
    each asked article's truth: article id -> (truth, own value, other value)."""

    question: str
    asked: SettingName = SettingName.pairwise
    words: int | None = None
    truths: dict[str, tuple[str, float, float]] = field(default_factory=dict)


def placebo_stage(judge, cfg: JudgeConfig, judge_cfg: ModelConfig, prompts: Mapping, pairs: Sequence[Pair],
                  setting: SettingName | str = SettingName.pairwise) -> Stage:
    """The placebo's requests for every judged pair, the own summary in the "own" slot (pairwise forward: own
    first; individual: own and other each alone). `judge` is the cell's judge (a CachedModel or plan mode's
    stand-in), `judge_cfg` its model config."""
    enabled, reason = placebo_enabled(cfg, judge_cfg, prompts, setting)
    if not enabled:
        return Stage(False, reason)
    question = str(cfg.placebo_question)
    state = PlaceboState(question, asked_format(setting, prompts, question))
    if state.asked == SettingName.individual:
        state.words = median_words([text for p in pairs for text in (p.own, p.other)])
    items = []
    for p in pairs:
        state.truths[p.article_id] = truth_of(question, p.own, p.other)
        if state.asked == SettingName.individual:
            by_slot = {slot: individual_request(judge, prompts, question, p.article, text, words=str(state.words))
                       for slot, text in ((OWN_SLOT, p.own), (OTHER_SLOT, p.other))}
        else:
            by_slot = pairwise_requests(judge, prompts, question, p)
        items.append(ItemRequests(p.article_id, {question: by_slot}))
    return Stage(True, reason, items, state=state)


def median_words(texts: Sequence[str]) -> int:
    """The median word count of the texts, rounded down (0 without texts): the individual form's threshold."""
    return int(statistics.median(L.word_count(t) for t in texts)) if texts else 0


def correct_probability(p_own: float | None, truth: str) -> float | None:
    """P(the right answer) from P(own): None for a tie (no right answer) or an excluded verdict."""
    if p_own is None or truth == TIE:
        return None
    return p_own if truth == OWN else 1.0 - p_own


def correct_logodds(logodds: float | None, truth: str) -> float | None:
    """The log-odds of the right answer (the verdict's own-vs-other log-odds, signed by the truth)."""
    if logodds is None or truth == TIE:
        return None
    return logodds if truth == OWN else -logodds


def score_placebo(stage: Stage, dists: Mapping, min_mass: float) -> dict[str, dict]:
    """article id -> the placebo's record: the pairwise verdict (score = P(own), logodds own vs other, orders)
    with the question, the feature's values, the truth and P(correct)."""
    state: PlaceboState = stage.state
    truth = TRUTHS[state.question]
    out: dict[str, dict] = {}
    scored_items = score_items(stage.answer_items, dists, state.asked, min_mass)
    for item, scored in zip(stage.answer_items, scored_items, strict=True):
        verdict = scored[state.question]
        which, own_value, other_value = state.truths[item.article_id]
        out[item.article_id] = {**verdict, "question": state.question, "feature": truth.feature,
                                "values": {OWN: own_value, OTHER: other_value}, "truth": which,
                                "correct": correct_probability(verdict["score"], which),
                                "correct_logodds": correct_logodds(verdict["logodds"], which)}
    return out


# ---------------------------------------------------------------------------------------- summary.json
def proportion(successes: int, n: int, confidence: float) -> dict[str, Any]:
    """A proportion of n with its Wilson interval (classifier_metrics.wilson); nulls without items."""
    if n <= 0:
        return {"rate": None, "ci_low": None, "ci_high": None, "count": 0}
    low, high = wilson(successes, n, confidence)
    return {"rate": successes / n, "ci_low": low, "ci_high": high, "count": int(successes)}


def choice(logodds: float | None) -> int:
    """+1: own picked, -1: other picked, 0: no choice (an even answer, or no verdict)."""
    value = number(logodds)
    return 0 if math.isnan(value) or value == 0 else (1 if value > 0 else -1)


def _item_choices(record: Any, item: Item | None, questions: Sequence[str]) -> list[int] | None:
    """[placebo, recognition, preference?] choices of one item; None where any verdict is absent or excluded."""
    if not isinstance(record, dict) or record.get("excluded") or item is None:
        return None
    verdicts = [verdict_of(item, q) for q in questions]
    if any(v is None or v.excluded for v in verdicts):
        return None
    return [choice(record.get("logodds")), *(choice(v.logodds) for v in verdicts)]


def _finite(value: float) -> float | None:
    """A float for summary.json: null where it is not finite (JSON has no NaN)."""
    return value if math.isfinite(value) else None


def agreement(records: Mapping[str, Any], items: Sequence[Item], confidence: float) -> dict[str, Any]:
    """How often the placebo's choice agrees with the recognition choice, and the preference choice with the
    recognition choice, on the same items: those with all three verdicts and a choice in each (an even answer
    is no choice; such items are counted in n_no_choice). Without a recognition verdict there is nothing to
    agree with; without a preference verdict, its rate is null."""
    by_id = {it.article_id: it for it in items}
    asked = [q for q in ("recognition", "preference") if any(q in it.verdicts for it in items)]
    if "recognition" not in asked:
        return {"n_agreement": 0, "n_no_choice": 0, "placebo_recognition": proportion(0, 0, confidence),
                "preference_recognition": proportion(0, 0, confidence), "preference_only": 0, "placebo_only": 0,
                "mcnemar_p": None}
    rows = [c for aid, r in records.items() for c in [_item_choices(r, by_id.get(aid), asked)] if c is not None]
    chosen = [c for c in rows if 0 not in c]
    placebo = sum(c[0] == c[1] for c in chosen)
    preference = sum(c[2] == c[1] for c in chosen) if "preference" in asked else 0
    # The discordant items, for McNemar's paired test (placebo_rule): one of the two agrees, the other not.
    pref_only = sum(c[2] == c[1] and c[0] != c[1] for c in chosen) if "preference" in asked else 0
    placebo_only = sum(c[0] == c[1] and c[2] != c[1] for c in chosen) if "preference" in asked else 0
    return {"n_agreement": len(chosen), "n_no_choice": len(rows) - len(chosen),
            "placebo_recognition": proportion(placebo, len(chosen), confidence),
            "preference_recognition": proportion(preference, len(chosen) if "preference" in asked else 0,
                                                 confidence),
            "preference_only": pref_only, "placebo_only": placebo_only,
            "mcnemar_p": _finite(placebo_rule.mcnemar_p(pref_only, placebo_only)) if "preference" in asked else None}


def placebo_reading(agree: Mapping[str, Any]) -> placebo_rule.PlaceboReading | None:
    """placebo_rule's reading of the agreement block (told apart, alike, undetermined or no link, with its test
    figures); None where a rate is missing (no recognition or no preference verdict)."""
    pl, pref = block(agree, "placebo_recognition").get("rate"), block(agree, "preference_recognition").get("rate")
    if pl is None or pref is None or "preference_only" not in agree:
        return None
    return placebo_rule.read(int(agree["n_agreement"]), int(agree["preference_recognition"]["count"]),
                             int(agree["preference_only"]), int(agree["placebo_only"]))


def summarize_placebo(stage: Stage, items: Sequence[Item], setting: str, confidence: float) -> dict[str, Any]:
    """summary.json's placebo block: accuracy (mean P(correct), article-clustered t CI on the logit scale) and
    the mean log-odds of the right answer over the items with a right answer; P(own) on the placebo over every
    scored item; the agreement rates with Wilson intervals; counts of excluded and tied items."""
    records = stage.records
    scored = {aid: r for aid, r in records.items() if not r.get("excluded")}
    graded = [(aid, r) for aid, r in scored.items() if r.get("truth") != TIE]
    ids = [aid for aid, _ in graded]
    reasons: dict[str, int] = {}
    for r in records.values():
        if r.get("excluded"):
            reasons[str(r.get("exclusion_reason"))] = reasons.get(str(r.get("exclusion_reason")), 0) + 1
    agree = agreement(records, items, confidence)
    question = stage.state.question
    return {"enabled": True, "reason": stage.reason, "question": question, "feature": TRUTHS[question].feature,
            "asked": stage.state.asked.value, "setting": setting,
            **({"words": stage.state.words} if stage.state.words is not None else {}),
            "accuracy": article_mean([r["correct"] for _, r in graded], ids, confidence, bounded=True),
            "accuracy_logodds": article_mean([r["correct_logodds"] for _, r in graded], ids, confidence),
            "own": article_mean([r["score"] for r in scored.values()], list(scored), confidence, bounded=True),
            "n": len(graded), "n_ties": len(scored) - len(graded), "n_excluded": len(records) - len(scored),
            "exclusions": reasons, "agreement": agree, "reading": _reading_dict(placebo_reading(agree)),
            "calls": sum(len(s) for it in stage.answer_items for s in it.by_question.values())}


def _reading_dict(reading: placebo_rule.PlaceboReading | None) -> dict[str, Any] | None:
    return reading.to_dict() if reading is not None else None


# ------------------------------------------------------------------------------------------- read back
def format_placebo(summary_block: dict[str, Any] | None) -> str | None:
    """The placebo's line in the printed cell result."""
    if not summary_block:
        return None
    if not summary_block.get("enabled"):
        return f"  placebo question  off ({summary_block.get('reason')})"
    agree = block(summary_block, "agreement")
    asked = summary_block.get("asked")
    how = f" (one summary at a time, more than {summary_block.get('words')} words?)" if asked == "individual" else ""
    head = (f"  placebo question  {summary_block.get('question')}{how}: accuracy "
            f"{estimate_text(block(summary_block, 'accuracy'))} "
            f"(n={summary_block.get('n')}, ties {summary_block.get('n_ties')}, excluded "
            f"{summary_block.get('n_excluded')})")
    if not agree.get("n_agreement"):
        return head + "; no item to set against recognition"
    line = (f"{head}; agrees with recognition {estimate_text(block(agree, 'placebo_recognition'), 'rate')}, preference "
            f"agrees with recognition {estimate_text(block(agree, 'preference_recognition'), 'rate')} "
            f"(n={agree['n_agreement']})")
    reading = placebo_reading(agree)
    if reading is not None and reading.outcome in _LINE:
        line += f": {_LINE[reading.outcome]} ({reading.evidence()})"
    return line


_LINE = {placebo_rule.APART: "preference follows recognition more closely than the placebo does",
         placebo_rule.ALIKE: "alike, the judge may answer these questions alike",
         placebo_rule.UNDETERMINED: "undetermined, the data tell neither apart nor alike"}


def view_placebo(record: Any) -> dict[str, Any] | None:
    """The item's placebo as the item viewer shows it."""
    if not isinstance(record, dict):
        return None
    values = record.get("values") or {}
    out: dict[str, Any] = {"question": record.get("question"),
                           "right answer": f"{record.get('truth')} ({record.get('feature')}: own "
                                           f"{values.get(OWN)}, other {values.get(OTHER)})",
                           "P(own)": record.get("score"), "P(correct)": record.get("correct")}
    if record.get("excluded"):
        out["excluded"] = record.get("exclusion_reason")
    for name, part in (record.get("orders") or {}).items():
        if isinstance(part, dict):
            out[f"{name} P(own)"] = part.get("p_own")
    for name, part in (record.get("summaries") or {}).items():  # asked in the individual format
        if isinstance(part, dict):
            out[f"{name}: P(Yes)"] = part.get("value")
    return out


# cell column stem -> the agreement block's key
_AGREE = {"pl_agree_recognition": "placebo_recognition", "pl_pref_agree_recognition": "preference_recognition"}


def _rate_columns(stats: dict[str, Any], column: str) -> dict[str, float]:
    """{column: rate, column_ci_low, column_ci_high} of a proportion block (NaN when absent)."""
    return {column: number(stats.get("rate")), f"{column}_ci_low": number(stats.get("ci_low")),
            f"{column}_ci_high": number(stats.get("ci_high"))}


def placebo_cell_columns(summary_block: dict[str, Any]) -> dict[str, Any]:
    """summary.json's block flattened into the analysis' cell frame (pl_*; {} block: an older cell)."""
    agree = block(summary_block, "agreement")
    # read again from the counts, so a sweep written under an older rule gets this one's reading
    reading = placebo_reading(agree) if agree.get("n_agreement") is not None else None
    return {"pl_enabled": None if not summary_block else bool(summary_block.get("enabled", False)),
            "pl_question": summary_block.get("question"),
            "pl_asked": summary_block.get("asked"),  # pairwise, or individual (one summary at a time)
            **numbers(block(summary_block, "accuracy"), "pl_accuracy", CI_FIELDS),
            **numbers(block(summary_block, "accuracy_logodds"), "pl_accuracy_logodds", CI_FIELDS),
            **{k: v for column, key in _AGREE.items() for k, v in _rate_columns(block(agree, key), column).items()},
            "pl_n_agreement": number(agree.get("n_agreement")),
            "pl_reading": reading.outcome if reading is not None else None,
            "pl_reading_evidence": reading.evidence() if reading is not None else "",
            **numbers(summary_block, "pl", {"n": "n", "n_excluded": "n_excluded"}),
            "pl_reason": str(summary_block.get("reason") or "")}


class PlaceboMeasurement(Measurement):
    """The placebo question as a measurement plug-in: its requests join the cell's judge batch; per item its
    pairwise verdict with the truth, in summary.json accuracy and agreement with recognition."""

    report_module = ".placebo_report"  # its report side (the analysis imports it)

    name = item_key = summary_key = FIELD
    prefix = "pl"
    omit_missing = True  # only judged pairs get the question
    cell_column_names = ("pl_enabled", "pl_question", "pl_asked", *(f"pl_accuracy_{k}" for k in CI_FIELDS),
                         *(f"pl_accuracy_logodds_{k}" for k in CI_FIELDS),
                         *(f"{column}{k}" for column in _AGREE for k in ("", "_ci_low", "_ci_high")),
                         "pl_n_agreement", "pl_reading", "pl_reading_evidence", "pl_n", "pl_n_excluded", "pl_reason")
    item_column_names = ("pl_score", "pl_logodds", "pl_truth", "pl_correct")

    def prepare(self, inputs, judge, judge_cfg) -> Stage:
        spec = inputs.spec
        return placebo_stage(judge, spec.judge, judge_cfg, spec.prompts, inputs.pairs.pairs, spec.setting)

    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> dict[str, dict]:
        return score_placebo(stage, dists, min_mass)

    def summarize(self, stage: Stage, inputs, n_items: int) -> dict[str, Any]:
        """Without the cell's items: accuracy only, no agreement (the cell calls summarize_items)."""
        return self.summarize_items(stage, inputs, ())

    def summarize_items(self, stage: Stage, inputs, items: Sequence[Item]) -> dict[str, Any]:
        spec = inputs.spec
        return summarize_placebo(stage, items, SettingName(spec.setting).value, float(spec.bootstrap.confidence))

    def format(self, summary_block: dict[str, Any] | None) -> str | None:
        return format_placebo(summary_block)

    def cell_columns(self, summary_block: dict[str, Any]) -> dict[str, Any]:
        return placebo_cell_columns(summary_block)

    def item_columns(self, record: Any) -> dict[str, Any]:
        record = record if isinstance(record, dict) else {}
        return {**numbers(record, "pl", {"score": "score", "logodds": "logodds", "correct": "correct"}),
                "pl_truth": record.get("truth")}

    def view(self, record: Any) -> dict[str, Any] | None:
        return view_placebo(record)
