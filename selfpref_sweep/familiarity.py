"""Familiarity, a rival explanation of self-preference: how likely the judge finds each summary.

LLM judges are reported to prefer low-perplexity text whoever wrote it (Wataoka et al., 2024), and a model's
own greedy summary is, by construction, text it finds likely. So per item the judge scores both summaries as
the answer to the summarization request it would have been given to write one (summaries.py's generation
request: the same chat messages, the summary as the assistant's reply), one scoring pass per summary, and
the item records the mean token log-likelihood of each. The judge is the model whose preference is measured
(the fine-tuned one in a fine-tuned cell), so familiarity is the judging model's, not its base's.

`judge.familiarity`: auto turns the stage on where the judge can score given text, as its backend's contract
says for its config (models/base.py, sequence_logprobs_support): the local backend can; an OpenAI-compatible
server can where its completions endpoint echoes prompt logprobs (vLLM, llama.cpp's servers; its config's
`echo_logprobs`, auto: one probe per process), with `chat_template` set for a chat model; OpenAI's API
cannot. Where it cannot, the stage is off with the reason recorded; on requires it; off skips it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .config import FamiliarityMode, JudgeConfig, ModelConfig
from .data import Article
from .errors import ConfigError
from .models import backend_class
from .models.base import SCORES_GIVEN_TEXT, SequenceLogprobs, SequenceRequest
from .measurements import CI_FIELDS, Measurement, Stage, block, numbers
from .pairs import Pair
from .scoring import article_mean
from .summaries import generation_request

FIELD = "familiarity"  # the item's and summary.json's key
OWN, OTHER = "own", "other"


@dataclass
class FamiliarityStage:
    """The stage's requests for a cell (article id -> own/other -> request), or why it is off."""

    enabled: bool
    reason: str
    requests: Dict[str, Dict[str, SequenceRequest]] = field(default_factory=dict)
    # article id -> the item's record (score_familiarity), filled by measure_familiarity
    records: Dict[str, Optional[Dict[str, Any]]] = field(default_factory=dict)

    def flat(self) -> List[SequenceRequest]:
        return [r for by_slot in self.requests.values() for r in by_slot.values()]


def familiarity_enabled(cfg: JudgeConfig, judge_cfg: ModelConfig) -> Tuple[bool, str]:
    """(on?, why): judge.familiarity, with auto on where the judge can score given text, as its backend's
    contract says for its config (sequence_logprobs_support: a local model can; a server can where its
    completions endpoint echoes prompt logprobs, found once per process, so no item sends a doomed request).
    The reason says which, and how it was decided."""
    mode = FamiliarityMode(cfg.familiarity)
    if mode == FamiliarityMode.off:
        return False, "judge.familiarity=off"
    offered, how = backend_class(judge_cfg.backend).sequence_logprobs_support(judge_cfg)
    if mode == FamiliarityMode.on:
        if not offered:
            raise ConfigError(f"judge.familiarity=on needs a judge whose backend can score given text; the "
                              f"{judge_cfg.backend} judge {judge_cfg.name!r} cannot: {how}. Set "
                              f"judge.familiarity=auto or off.")
        return True, "judge.familiarity=on"
    if offered:
        # a backend that always scores text needs no "how" (the reason stays as older cells recorded it)
        return True, f"judge.familiarity=auto, {judge_cfg.backend} judge" + ("" if how == SCORES_GIVEN_TEXT
                                                                             else f": {how}")
    return False, f"judge.familiarity=auto is off for the {judge_cfg.backend} judge {judge_cfg.name!r}: {how}"


def familiarity_requests(judge, judge_cfg: ModelConfig, cfg: JudgeConfig, prompts: Mapping, task: str,
                         articles: Sequence[Article], pairs: Sequence[Pair], max_new_tokens: int
                         ) -> FamiliarityStage:
    """Per judged pair, the judge's scoring request of each summary after the summarization prompt. `judge`
    is the cell's judge (a CachedModel, or plan mode's stand-in), `judge_cfg` its model config."""
    enabled, reason = familiarity_enabled(cfg, judge_cfg)
    stage = FamiliarityStage(enabled, reason)
    if not enabled:
        return stage
    by_id = {a.id: a for a in articles}
    for p in pairs:
        ask = generation_request(judge, judge_cfg, prompts, task, by_id[p.article_id], max_new_tokens)
        stage.requests[p.article_id] = {
            slot: SequenceRequest(judge.identity, continuation=text, messages=ask.messages, prompt=ask.prompt)
            for slot, text in ((OWN, p.own), (OTHER, p.other))}
    return stage


def score_familiarity(stage: FamiliarityStage, results: Mapping[SequenceRequest, SequenceLogprobs]
                      ) -> Dict[str, Optional[Dict[str, Any]]]:
    """article id -> the item's familiarity record: mean log-likelihood per token of each summary, own -
    other, and the token counts; None for an article whose summaries were not both scored."""
    out: Dict[str, Optional[Dict[str, Any]]] = {}
    for aid, by_slot in stage.requests.items():
        own, other = results.get(by_slot[OWN]), results.get(by_slot[OTHER])
        if own is None or other is None or own.mean is None or other.mean is None:
            out[aid] = None
            continue
        out[aid] = {OWN: own.mean, OTHER: other.mean, "difference": own.mean - other.mean,
                    "n_tokens": {OWN: own.n_tokens, OTHER: other.n_tokens}}
    return out


def measure_familiarity(judge, stage: FamiliarityStage) -> FamiliarityStage:
    """Score every request in one batch (the backend shares each article's prompt between its two
    summaries; cached calls are free) and fill the stage's per-item records."""
    if stage.enabled:
        stage.records = score_familiarity(stage, judge.sequence_logprobs(stage.flat(), desc="familiarity"))
    return stage


def summarize_familiarity(stage: FamiliarityStage, n_items: int, n_resamples: int, confidence: float,
                          seed: int) -> Dict[str, Any]:
    """summary.json's familiarity block: mean own - other log-likelihood per token, and the likelihood
    recognizer's accuracy (share of items whose own summary is the likelier; a tie counts ½), each with an
    article-clustered t CI (scoring.article_mean)."""
    if not stage.enabled:
        return {"enabled": False, "reason": stage.reason}
    scored = {aid: r for aid, r in stage.records.items() if r is not None}
    ids = list(scored)
    diffs = [scored[a]["difference"] for a in ids]
    wins = [1.0 if d > 0 else 0.5 if d == 0 else 0.0 for d in diffs]
    return {"enabled": True, "reason": stage.reason,
            "mean_own": _mean([scored[a][OWN] for a in ids]), "mean_other": _mean([scored[a][OTHER] for a in ids]),
            "mean_difference": article_mean(diffs, ids, confidence),
            "likelihood_recognition": article_mean(wins, ids, confidence, bounded=True),
            "n": len(ids), "n_missing": n_items - len(ids)}


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def format_familiarity(block: Optional[Dict[str, Any]]) -> Optional[str]:
    """The stage's line in the printed cell result."""
    if not block:
        return None
    if not block.get("enabled"):
        return f"  familiarity       off ({block.get('reason')})"
    diff, lr = block["mean_difference"], block["likelihood_recognition"]
    if diff["mean"] is None:
        return f"  familiarity       n/a (no item with both summaries scored; {block['n_missing']} missing)"

    def ci(stats: Dict[str, Any]) -> str:
        return "" if stats["ci_low"] is None else f" [{stats['ci_low']:.3f}, {stats['ci_high']:.3f}]"

    return (f"  familiarity       own - other log-likelihood/token {diff['mean']:+.3f}{ci(diff)}; "
            f"likelihood recognizer {lr['mean']:.3f}{ci(lr)} (n={block['n']})")


class FamiliarityMeasurement(Measurement):
    """The stage as a measurement plug-in: per item the judge's log-likelihood of each summary, in
    summary.json the mean difference and the likelihood recognizer."""

    name = item_key = summary_key = FIELD
    prefix = "fam"
    cell_column_names = ("fam_enabled", *(f"fam_{b}_{k}" for b in ("diff", "lr") for k in CI_FIELDS), "fam_n",
                         "fam_reason")
    item_column_names = ("fam_own", "fam_other", "fam_difference")

    def prepare(self, inputs, judge, judge_cfg) -> Stage:
        spec = inputs.spec
        stage = familiarity_requests(judge, judge_cfg, spec.judge, spec.prompts, inputs.dataset.task,
                                     inputs.selection.usable, inputs.pairs.pairs, spec.summaries.max_new_tokens)
        return Stage(stage.enabled, stage.reason, state=stage)

    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> Dict[str, Any]:
        return measure_familiarity(judge, stage.state).records

    def n_requests(self, stage: Stage) -> int:
        return len(stage.state.flat())

    def summarize(self, stage: Stage, inputs, n_items: int) -> Dict[str, Any]:
        boot = inputs.spec.bootstrap
        return summarize_familiarity(stage.state, n_items, int(boot.n_resamples), float(boot.confidence),
                                     inputs.spec.seed)

    def format(self, summary_block: Optional[Dict[str, Any]]) -> Optional[str]:
        return format_familiarity(summary_block)

    def cell_columns(self, summary_block: Dict[str, Any]) -> Dict[str, Any]:
        return {"fam_enabled": None if not summary_block else bool(summary_block.get("enabled", False)),
                **numbers(block(summary_block, "mean_difference"), "fam_diff", CI_FIELDS),
                **numbers(block(summary_block, "likelihood_recognition"), "fam_lr", CI_FIELDS),
                **numbers(summary_block, "fam", {"n": "n"}),
                "fam_reason": str(summary_block.get("reason") or "")}

    def item_columns(self, record: Any) -> Dict[str, Any]:
        return numbers(record if isinstance(record, dict) else {}, "fam",
                       {"own": OWN, "other": OTHER, "difference": "difference"})

    def table_columns(self, record: Any) -> Dict[str, Any]:
        return {"familiarity_difference": (record or {}).get("difference")}
