"""The judge-competence control: a positive control for the judge of a cell.

"Which summary is of this article?": each article's summary against another article's summary from the
same source (a derangement seeded by the cell's seed), in both orders. The requests are built by the
pairwise request builder and scored by the pairwise scoring of the cell's own questions, with the
article's true summary in the "own" slot, so `p_own` and the score are P(correct). They go to the judge
in the same batch as the cell's judge requests. A judge that fails this cannot compare summaries with an
article at all, so a null self-recognition or self-preference result of its cell says nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .config import CompetenceMode, CompetenceSummaries, JudgeConfig, ModelConfig, SettingName
from .data import Article, Dataset
from .judging import ItemRequests, pairwise_requests
from .measurements import CI_FIELDS, Measurement, Stage, numbers
from .pairs import Pair
from .scoring import judge_passed, score_items, summarize_question, unjudged
from .summaries import HUMAN, SummarySet, dataset_summaries

QUESTION = "competence"  # prompts.pairwise.competence, and the verdict's key in results.jsonl
NO_DISTRACTOR = "no_distractor"  # fewer than two articles with a summary: no other article to pair with
IDENTICAL_SUMMARIES = "identical_summaries"  # the two articles' summaries are the same text: no right answer


@dataclass
class CompetenceControl:
    """The control's requests for a cell, or why it is off."""

    enabled: bool
    reason: str  # why it is on or off (the setting that decided)
    summaries: Optional[str] = None  # the source whose summaries it shows
    items: List[ItemRequests] = field(default_factory=list)
    distractors: Dict[str, str] = field(default_factory=dict)  # article id -> the other article's id
    excluded: Dict[str, str] = field(default_factory=dict)  # sampled article id -> why it has no question

    @property
    def n_requests(self) -> int:
        return sum(len(slots) for item in self.items for slots in item.by_question.values())


def competence_enabled(cfg: JudgeConfig, judge_cfg: ModelConfig) -> Tuple[bool, str]:
    """(on?, why): judge.competence, with auto on where the judge's calls cost nothing (the backend contract's
    costs_money for the judge's model config: a local judge, or a server its config marks `free: true`) and off
    where they may cost."""
    from .models import backend_class

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


def derangement(ids: Sequence[str], seed: Any) -> Dict[str, str]:
    """id -> another id, a single random cycle over all of them (Sattolo's algorithm), so no id maps to
    itself; the same ids and seed give the same mapping."""
    order = list(range(len(ids)))
    rng = random.Random(f"{seed}:competence")
    for i in range(len(order) - 1, 0, -1):
        j = rng.randrange(i)
        order[i], order[j] = order[j], order[i]
    return {ids[i]: ids[order[i]] for i in range(len(ids))} if len(ids) > 1 else {}


def competence_requests(judge, cfg: JudgeConfig, judge_cfg: ModelConfig, prompts: Mapping,
                        pairs: Sequence[Pair], summaries: SummarySet, seed: int) -> CompetenceControl:
    """The control's requests over the cell's judged articles (at most `competence_sample` of them, seeded).
    `judge` is the model that judges the cell (a fine-tuned one when the cell fine-tunes), or plan mode's
    stand-in; `judge_cfg` its model config."""
    enabled, reason = competence_enabled(cfg, judge_cfg)
    if not enabled:
        return CompetenceControl(False, reason)
    control = CompetenceControl(True, reason, summaries.source)
    texts = summaries.texts
    pool = [p.article_id for p in pairs if texts.get(p.article_id)]
    distractor_of = derangement(pool, seed)
    sampled = list(pairs)
    n = int(cfg.competence_sample)
    if 0 < n < len(sampled):
        keep = set(random.Random(f"{seed}:competence-sample").sample([p.article_id for p in sampled], n))
        sampled = [p for p in sampled if p.article_id in keep]
    for p in sampled:
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
            control.items.append(ItemRequests(aid, {QUESTION: pairwise_requests(judge, prompts, QUESTION, question)}))
    return control


def score_competence(control: CompetenceControl, dists: Mapping, min_mass: float) -> Dict[str, dict]:
    """article id -> the control's verdict: a pairwise verdict whose score is mean P(correct) over the two
    orders, with the distractor article; excluded articles keep their reason."""
    verdicts = {aid: unjudged(why) for aid, why in control.excluded.items()}
    for item, scored in zip(control.items, score_items(control.items, dists, SettingName.pairwise, min_mass)):
        verdicts[item.article_id] = {**scored[QUESTION], "distractor_article_id": control.distractors[item.article_id]}
    for verdict in verdicts.values():
        verdict["summaries"] = control.summaries
    return verdicts


def summarize_competence(control: CompetenceControl, verdicts: Mapping[str, dict], cfg: JudgeConfig,
                         n_resamples: int, confidence: float, seed: int) -> Dict[str, Any]:
    """summary.json's judge_competence: mean P(correct) with its article-level CI, and whether the judge
    passed (mean >= threshold and the CI above 0.5; null when too few articles to tell)."""
    if not control.enabled:
        return {"enabled": False, "reason": control.reason}
    rows = [{"article_id": aid, QUESTION: v} for aid, v in verdicts.items()]
    stats = summarize_question(rows, QUESTION, n_resamples, confidence, seed)
    threshold = float(cfg.competence_threshold)
    return {"enabled": True, **stats, "threshold": threshold, "passed": judge_passed(stats, threshold),
            "calls_sampled": control.n_requests, "summaries": control.summaries}


def format_competence(block: Optional[Dict[str, Any]]) -> Optional[str]:
    """The control's line in the printed cell result."""
    if not block:
        return None
    if not block.get("enabled"):
        return f"  judge competence  off ({block.get('reason')})"
    if block.get("mean") is None:
        return f"  judge competence  n/a (no scored articles; excluded {block['n_excluded']} {block['exclusions']})"
    ci = "" if block.get("ci_low") is None else f"  95% CI [{block['ci_low']:.3f}, {block['ci_high']:.3f}]"
    head = f"  judge competence  {block['mean']:.3f}{ci}  (n={block['n']}, excluded {block['n_excluded']})"
    if block["passed"] is None:
        return f"{head}: too few articles to tell whether the judge can do this task"
    if block["passed"]:
        return f"{head}: the judge can tell which summary is of the article"
    return (f"{head}\n  warning: the judge could not do this task (which summary is of the article?, threshold "
            f"{block['threshold']:g}); a null here is uninformative")


class CompetenceMeasurement(Measurement):
    """The control as a measurement plug-in: its requests join the cell's judge batch; per item its verdict
    (P(correct) per order), in summary.json its pass/fail block."""

    name = QUESTION
    item_key = QUESTION
    summary_key = "judge_competence"
    prefix = "jc"
    omit_missing = True  # only sampled articles get the control
    cell_column_names = ("jc_enabled", "jc_mean", "jc_ci_low", "jc_ci_high", "jc_n", "jc_threshold", "jc_passed",
                         "jc_reason")

    def prepare(self, inputs, judge, judge_cfg) -> Stage:
        spec = inputs.spec
        shown = control_summaries(spec.judge, inputs.own, inputs.other, inputs.dataset, inputs.selection.usable,
                                  spec.summaries)
        control = competence_requests(judge, spec.judge, judge_cfg, spec.prompts, inputs.pairs.pairs,
                                      shown, spec.seed)
        return Stage(control.enabled, control.reason, control.items, state=(control, shown))

    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> Dict[str, dict]:
        return score_competence(stage.state[0], dists, min_mass)

    def summarize(self, stage: Stage, inputs, n_items: int) -> Dict[str, Any]:
        spec = inputs.spec
        return summarize_competence(stage.state[0], stage.records, spec.judge, int(spec.bootstrap.n_resamples),
                                    float(spec.bootstrap.confidence), spec.seed)

    def shown_summaries(self, stage: Stage) -> Sequence[SummarySet]:
        return [stage.state[1]]

    def format(self, block: Optional[Dict[str, Any]]) -> Optional[str]:
        return format_competence(block)

    def cell_columns(self, summary_block: Dict[str, Any]) -> Dict[str, Any]:
        passed = summary_block.get("passed")
        return {"jc_enabled": None if not summary_block else bool(summary_block.get("enabled", False)),
                **numbers(summary_block, "jc", {**CI_FIELDS, "n": "n", "threshold": "threshold"}),
                "jc_passed": passed if isinstance(passed, bool) else None,
                "jc_reason": str(summary_block.get("reason") or "")}

    def table_columns(self, record: Any) -> Dict[str, Any]:
        return {"competence_score": (record or {}).get("score")}  # None: no control for this item

    def view(self, record: Any) -> Optional[Dict[str, Any]]:
        if not isinstance(record, dict):
            return None
        out: Dict[str, Any] = {"P(correct)": record.get("score")}
        if record.get("excluded"):
            out["excluded"] = record.get("exclusion_reason")
        for name, part in (record.get("orders") or {}).items():
            if isinstance(part, dict):
                out[f"{name} P(correct)"] = part.get("p_own")
        return out
