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

from .config import CompetenceMode, CompetenceSummaries, JudgeConfig, SettingName
from .data import Article, Dataset
from .judging import ItemRequests, pairwise_requests
from .pairs import Pair
from .scoring import score_items, summarize_question, unjudged
from .summaries import HUMAN, SummarySet, dataset_summaries

QUESTION = "competence"  # prompts.pairwise.competence, and the verdict's key in results.jsonl
NO_DISTRACTOR = "no_distractor"  # fewer than two articles with a summary: no other article to pair with
IDENTICAL_SUMMARIES = "identical_summaries"  # the two articles' summaries are the same text: no right answer
LOCAL_BACKENDS = ("local",)  # judge.competence=auto turns the control on for these (their calls cost nothing)


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


def competence_enabled(cfg: JudgeConfig, judge_backend: str) -> Tuple[bool, str]:
    """(on?, why): judge.competence, with auto on for local judges and off for API ones."""
    mode = CompetenceMode(cfg.competence)
    if mode != CompetenceMode.auto:
        return mode == CompetenceMode.on, f"judge.competence={mode.value}"
    if judge_backend in LOCAL_BACKENDS:
        return True, f"judge.competence=auto, {judge_backend} judge"
    return False, (f"judge.competence=auto is off for a {judge_backend} judge, whose calls may cost; "
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


def competence_requests(judge, cfg: JudgeConfig, judge_backend: str, prompts: Mapping, pairs: Sequence[Pair],
                        summaries: SummarySet, seed: int) -> CompetenceControl:
    """The control's requests over the cell's judged articles (at most `competence_sample` of them, seeded).
    `judge` is the model that judges the cell (a fine-tuned one when the cell fine-tunes), or plan mode's
    stand-in."""
    enabled, reason = competence_enabled(cfg, judge_backend)
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


def judge_passed(stats: Mapping[str, Any], threshold: float) -> Optional[bool]:
    """Whether the judge passed the control: mean P(correct) >= threshold and the CI clear of 0.5; None when
    there is nothing to tell it by (no scored article, or one article: no interval)."""
    if stats["mean"] is None:
        return None
    if stats["mean"] < threshold:
        return False
    if stats["ci_low"] is None:
        return None  # one article: no interval to tell chance from skill
    return not (stats["ci_low"] <= 0.5 <= stats["ci_high"])


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
