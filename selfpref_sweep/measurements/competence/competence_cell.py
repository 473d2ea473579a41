"""The judge-competence control: a positive control for the judge of a cell, asked in the cell's setting.

Pairwise cells: "which summary is of this article?", each article's summary against another article's summary
from the same source (a derangement seeded by the cell's seed), in both orders, built by the pairwise request
builder and scored as the cell's pairwise questions, with the article's true summary in the "own" slot, so
`p_own` and the score are P(correct). Individual cells: "is this a summary of this article?" (Yes/No), asked of
the article's own summary and of the other article's, scored as individual recognition (own = the true
summary: score P(Yes | true) / (P(Yes | true) + P(Yes | other)), log-odds log of that ratio). The requests go to
the judge in the same batch as the cell's judge requests.

The pass rule is read on the log-odds scale, the content signal beyond any position bias (records/scores.pair_logodds:
a judge with position bias 3 and content signal 1 scores 0.55 on the paper's scale, log-odds 1): the mean
log-odds must reach judge.competence_threshold, its article-clustered CI must lie above 0, and at most
judge.competence_max_excluded of the control's sampled articles may be excluded. A judge that fails cannot
tell an article's summary from another's, so a null self-recognition or self-preference result of its cell
says nothing.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...cell.dataset_loaders import Article, Dataset
from ...cell.judging import OTHER, OWN, ItemRequests, individual_request, pairwise_requests
from ...cell.pairs import Pair
from ...cell.scoring import individual_reading, individual_verdict, score_items, unjudged
from ...cell.summaries import HUMAN, SummarySet, dataset_summaries
from ...config import JudgeConfig, ModelConfig, SettingName
from ...models.base import AnswerRequest
from ...records.scores import competence_block
from .. import CI_FIELDS, Measurement, Stage, estimate_text, number, numbers
from .. import block as sub_block
from .competence_settings import CompetenceMode, CompetenceSummaries

QUESTION = "competence"  # prompts.pairwise.competence / prompts.individual.competence, and the verdict's key
NO_DISTRACTOR = "no_distractor"  # fewer than two articles with a summary: no other article to pair with
IDENTICAL_SUMMARIES = "identical_summaries"  # the two articles' summaries are the same text: no right answer
# individual_reading reads a Yes/No question as P(first answer, "Yes") renormalized under this question's name.
YES_NO_READING = "recognition"
QUESTION_TEXT = {SettingName.pairwise.value: "which summary is of this article?",
                 SettingName.individual.value: "is this a summary of this article?"}


@dataclass
class CompetenceControl:
    """The control's requests for a cell, or why it is off."""

    enabled: bool
    reason: str  # why it is on or off (the setting that decided)
    summaries: str | None = None  # the source whose summaries it shows
    items: list[ItemRequests] = field(default_factory=list)
    distractors: dict[str, str] = field(default_factory=dict)  # article id -> the other article's id
    excluded: dict[str, str] = field(default_factory=dict)  # sampled article id -> why it has no question
    setting: SettingName = SettingName.pairwise  # the cell's setting, which the question follows

    @property
    def n_requests(self) -> int:
        return sum(len(slots) for item in self.items for slots in item.by_question.values())


def competence_enabled(cfg: JudgeConfig, judge_cfg: ModelConfig) -> tuple[bool, str]:
    """(on?, why): judge.competence, with auto on where the judge's calls cost nothing (the backend contract's
    costs_money for the judge's model config: a local judge, or a server its config marks `free: true`) and off
    where they may cost."""
    from ...models import backend_class

    mode = CompetenceMode(cfg.competence)
    if mode != CompetenceMode.auto:
        return mode == CompetenceMode.on, f"judge.competence={mode.value}"
    where = f"{judge_cfg.backend} judge {judge_cfg.name!r}"
    if not backend_class(judge_cfg.backend).costs_money(judge_cfg):
        return True, f"judge.competence=auto, {where} whose calls cost nothing"
    return False, (f"judge.competence=auto is off for the {where}, whose calls may cost; "
                   f"judge.competence=on turns it on (judge.competence_sample=N caps its articles)")


def control_summaries(cfg: JudgeConfig, own: SummarySet, other: SummarySet, dataset: Dataset,
                      articles: Sequence[Article], rules) -> SummarySet:
    """The summary set the control shows: the cell's other source's, the evaluator's own, or the reference."""
    which = CompetenceSummaries(cfg.competence_summaries)
    if which == CompetenceSummaries.own:
        return own
    if which == CompetenceSummaries.human and other.source != HUMAN:
        return dataset_summaries(dataset, HUMAN, articles, rules)
    return other


def derangement(ids: Sequence[str], seed: Any) -> dict[str, str]:
    """id -> another id, a single random cycle over all of them (Sattolo's algorithm), so no id maps to
    itself; the same ids and seed give the same mapping."""
    order = list(range(len(ids)))
    rng = random.Random(f"{seed}:competence")
    for i in range(len(order) - 1, 0, -1):
        j = rng.randrange(i)
        order[i], order[j] = order[j], order[i]
    return {ids[i]: ids[order[i]] for i in range(len(ids))} if len(ids) > 1 else {}


def sampled_pairs(pairs: Sequence[Pair], cfg: JudgeConfig, seed: int) -> list[Pair]:
    """The cell's pairs the control asks about: at most judge.competence_sample of them (seeded), else all."""
    n = int(cfg.competence_sample)
    if not 0 < n < len(pairs):
        return list(pairs)
    keep = set(random.Random(f"{seed}:competence-sample").sample([p.article_id for p in pairs], n))
    return [p for p in pairs if p.article_id in keep]


def question_requests(judge, prompts: Mapping, setting: SettingName, question: Pair) -> dict[str, AnswerRequest]:
    """One article's control requests, the true summary in `question.own` and the other article's in
    `question.other`: both orders of the pair (pairwise), or each summary alone (individual)."""
    if SettingName(setting) == SettingName.individual:
        return {OWN: individual_request(judge, prompts, QUESTION, question.article, question.own),
                OTHER: individual_request(judge, prompts, QUESTION, question.article, question.other)}
    return pairwise_requests(judge, prompts, QUESTION, question)


def competence_requests(judge, cfg: JudgeConfig, judge_cfg: ModelConfig, prompts: Mapping,
                        pairs: Sequence[Pair], summaries: SummarySet, seed: int,
                        setting: SettingName = SettingName.pairwise) -> CompetenceControl:
    """The control's requests over the cell's judged articles (at most `competence_sample` of them, seeded).
    `judge` is the model that judges the cell (a fine-tuned one when the cell fine-tunes), or plan mode's
    stand-in; `judge_cfg` its model config; `setting` the cell's, which picks the question."""
    enabled, reason = competence_enabled(cfg, judge_cfg)
    if not enabled:
        return CompetenceControl(False, reason, setting=SettingName(setting))
    control = CompetenceControl(True, reason, summaries.source, setting=SettingName(setting))
    texts = summaries.texts
    distractor_of = derangement([p.article_id for p in pairs if texts.get(p.article_id)], seed)
    for p in sampled_pairs(pairs, cfg, seed):
        aid = p.article_id
        if not texts.get(aid):
            control.excluded[aid] = f"{summaries.problems.get(aid) or 'missing_summary'}:{summaries.source}"
        elif aid not in distractor_of:
            control.excluded[aid] = NO_DISTRACTOR
        elif texts[distractor_of[aid]] == texts[aid]:
            control.excluded[aid] = IDENTICAL_SUMMARIES
        else:
            control.distractors[aid] = distractor_of[aid]
            question = Pair(aid, p.article, texts[aid], texts[distractor_of[aid]])  # the true one in "own"
            control.items.append(ItemRequests(aid, {QUESTION: question_requests(judge, prompts, setting, question)}))
    return control


def control_verdicts(control: CompetenceControl, dists: Mapping, min_mass: float) -> list[dict]:
    """The record form of each asked article's verdict, in control.items' order: pairwise as the cell's pairwise
    questions; individual as individual recognition, P(Yes) of the true summary in "own"."""
    if control.setting != SettingName.individual:
        return [scored[QUESTION] for scored in score_items(control.items, dists, SettingName.pairwise, min_mass)]
    out = []
    for item in control.items:
        own, other = (individual_reading(dists[req], YES_NO_READING, req.answers)
                      for req in (item.by_question[QUESTION][OWN], item.by_question[QUESTION][OTHER]))
        out.append(individual_verdict(own, other, min_mass).to_json())
    return out


def score_competence(control: CompetenceControl, dists: Mapping, min_mass: float) -> dict[str, dict]:
    """article id -> the control's verdict, with the distractor article; excluded articles keep their reason.
    The name of the summaries shown goes under "summaries" in a pairwise verdict (as it always has) and under
    "summary_source" in an individual one, whose "summaries" holds its two readings."""
    verdicts = {aid: unjudged(why) for aid, why in control.excluded.items()}
    for item, verdict in zip(control.items, control_verdicts(control, dists, min_mass), strict=True):
        verdicts[item.article_id] = {**verdict, "distractor_article_id": control.distractors[item.article_id]}
    name_key = "summary_source" if control.setting == SettingName.individual else "summaries"
    for verdict in verdicts.values():
        verdict[name_key] = control.summaries
    return verdicts


def summarize_competence(control: CompetenceControl, verdicts: Mapping[str, dict], cfg: JudgeConfig,
                         n_resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    """summary.json's judge_competence (competence_block), with the calls it made and the summaries it showed.
    ``n_resamples`` and ``seed`` no longer change the CIs (t intervals over articles)."""
    if not control.enabled:
        return {"enabled": False, "reason": control.reason}
    rows = [{"article_id": aid, QUESTION: v} for aid, v in verdicts.items()]
    block = competence_block(rows, QUESTION, control.setting, cfg.competence_threshold, cfg.competence_max_excluded,
                             confidence)
    return {**block, "calls_sampled": control.n_requests, "summaries": control.summaries}


def format_competence(block: dict[str, Any] | None) -> str | None:
    """The control's line in the printed cell result (an older block, without log-odds, on the paper's scale)."""
    if not block:
        return None
    if not block.get("enabled"):
        return f"  judge competence  off ({block.get('reason')})"
    if block.get("mean") is None:
        return f"  judge competence  n/a (no scored articles; excluded {block['n_excluded']} {block['exclusions']})"
    logodds = block.get("logodds") or {}
    paper = f"P(correct) {estimate_text(block)}"
    scores = (f"log-odds {estimate_text(logodds)}, {paper}"
              if logodds.get("mean") is not None else paper)
    setting = block.get("setting") or SettingName.pairwise.value
    question = QUESTION_TEXT.get(setting, QUESTION_TEXT[SettingName.pairwise.value])
    head = f"  judge competence  {scores}  ({setting}, n={block['n']}, excluded {block['n_excluded']})"
    if block["passed"] is None:
        return f"{head}: too few articles to tell whether the judge can do this task"
    if block["passed"]:
        return f"{head}: the judge can tell ({question})"
    why = "; ".join(block.get("failed_because") or [f"threshold {block['threshold']:g}"])
    return (f"{head}\n  warning: the judge could not do this task ({question} {why}); "
            f"a null here is uninformative")


class CompetenceMeasurement(Measurement):
    """The control as a measurement plug-in: its requests join the cell's judge batch; per item its verdict
    (P(correct) per order, or P(Yes) per summary), in summary.json its pass/fail block."""

    report_module = ".competence_report"  # its report side (the analysis imports it)

    name = QUESTION
    item_key = QUESTION
    summary_key = "judge_competence"
    prefix = "jc"
    brief = True  # whether a null means anything: said with every result
    omit_missing = True  # only sampled articles get the control
    cell_column_names = ("jc_enabled", "jc_mean", "jc_ci_low", "jc_ci_high", "jc_n", "jc_threshold", "jc_passed",
                         "jc_reason", "jc_logodds_mean", "jc_logodds_ci_low", "jc_logodds_ci_high", "jc_setting",
                         "jc_excluded_share")

    def prepare(self, inputs, judge, judge_cfg) -> Stage:
        spec = inputs.spec
        shown = control_summaries(spec.judge, inputs.own, inputs.other, inputs.dataset, inputs.selection.usable,
                                  spec.summaries)
        control = competence_requests(judge, spec.judge, judge_cfg, spec.prompts, inputs.pairs.pairs,
                                      shown, spec.seed, spec.setting)
        return Stage(control.enabled, control.reason, control.items, state=(control, shown))

    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> dict[str, dict]:
        return score_competence(stage.state[0], dists, min_mass)

    def summarize(self, stage: Stage, inputs, n_items: int) -> dict[str, Any]:
        spec = inputs.spec
        return summarize_competence(stage.state[0], stage.records, spec.judge, int(spec.bootstrap.n_resamples),
                                    float(spec.bootstrap.confidence), spec.seed)

    def shown_summaries(self, stage: Stage) -> Sequence[SummarySet]:
        return [stage.state[1]]

    def format(self, block: dict[str, Any] | None) -> str | None:
        return format_competence(block)

    def cell_columns(self, summary_block: dict[str, Any]) -> dict[str, Any]:
        """An older block (no log-odds, setting or excluded share) gives NaN / None there; `passed` is read as
        recorded, whatever rule recorded it."""
        passed, setting = summary_block.get("passed"), summary_block.get("setting")
        return {"jc_enabled": None if not summary_block else bool(summary_block.get("enabled", False)),
                **numbers(summary_block, "jc", {**CI_FIELDS, "n": "n", "threshold": "threshold"}),
                "jc_passed": passed if isinstance(passed, bool) else None,
                "jc_reason": str(summary_block.get("reason") or ""),
                **numbers(sub_block(summary_block, "logodds"), "jc_logodds", CI_FIELDS),
                "jc_setting": str(setting) if setting else None,
                "jc_excluded_share": number(summary_block.get("excluded_share"))}

    def table_columns(self, record: Any) -> dict[str, Any]:
        return {"competence_score": (record or {}).get("score")}  # None: no control for this item

    def view(self, record: Any) -> dict[str, Any] | None:
        if not isinstance(record, dict):
            return None
        individual = isinstance(record.get("summaries"), dict)
        out: dict[str, Any] = {"P(Yes) true / (true + other)" if individual else "P(correct)": record.get("score")}
        if record.get("excluded"):
            out["excluded"] = record.get("exclusion_reason")
        for name, part in (record.get("orders") or {}).items():
            if isinstance(part, dict):
                out[f"{name} P(correct)"] = part.get("p_own")
        for name, part in (record.get("summaries") if individual else {}).items():
            if isinstance(part, dict):
                out[f"P(Yes), {'the article' if name == OWN else 'another article'}'s summary"] = part.get("value")
        return out
