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

Cross-model familiarity. A model's own greedy summary is likely to it by construction, and a summary copied
closely from the article is likely to any model, so the judge's own - other difference alone cannot say whose
familiarity it is. `judge.familiarity_reference` names a second model (a model config:
`+model@judge.familiarity_reference=smollm135`) that scores the same summaries after the same request (its own
chat template), loaded through the cell's models (cached in the call store, pooled, counted in plan mode).
Per item, `self_specific` = the judge's own - other difference minus the reference's: positive where the judge
finds its own summary likelier beyond what another model does. A reference that is the judge itself is
refused; one whose backend cannot score given text is off with the reason under judge.familiarity=auto and an
error under on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...cell.dataset_loaders import Article
from ...cell.pairs import Pair
from ...cell.summaries import generation_request
from ...config import JudgeConfig, ModelConfig
from ...config.spec import reference_model_config, same_model_field
from ...errors import ConfigError
from ...models import backend_class, model_identity
from ...models.base import SCORES_GIVEN_TEXT, SequenceLogprobs, SequenceRequest
from ...stats.article_means import article_mean
from ...stats.classifier_metrics import proportion
from .. import CI_FIELDS, Measurement, Stage, block, interval_text, numbers
from .familiarity_settings import FamiliarityMode

FIELD = "familiarity"  # the item's and summary.json's key
OWN, OTHER = "own", "other"
REFERENCE, SELF_SPECIFIC = "reference", "self_specific"  # the item's and the block's keys for the reference
REFERENCE_ROLE = "familiarity_reference"  # the reference's role among the cell's models (plan mode's by_model)
NO_REFERENCE = "no reference model (judge.familiarity_reference is unset)"
Requests = dict[str, dict[str, SequenceRequest]]  # article id -> own/other -> request


@dataclass
class ReferenceScorer:
    """The second model that scores the same summaries: its handle and requests, or why it is off."""

    enabled: bool
    reason: str
    name: str | None = None
    model: Any = None  # a CachedModel, or plan mode's stand-in
    requests: Requests = field(default_factory=dict)

    def flat(self) -> list[SequenceRequest]:
        return [r for by_slot in self.requests.values() for r in by_slot.values()]


@dataclass
class FamiliarityStage:
    """The stage's requests for a cell (article id -> own/other -> request), or why it is off."""

    enabled: bool
    reason: str
    requests: Requests = field(default_factory=dict)
    # article id -> the item's record (score_familiarity), filled by measure_familiarity
    records: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    reference: ReferenceScorer = field(default_factory=lambda: ReferenceScorer(False, NO_REFERENCE))

    def flat(self) -> list[SequenceRequest]:
        return [r for by_slot in self.requests.values() for r in by_slot.values()]


def familiarity_enabled(cfg: JudgeConfig, judge_cfg: ModelConfig) -> tuple[bool, str]:
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
                         articles: Sequence[Article], pairs: Sequence[Pair], max_new_tokens: int,
                         load_model: Callable[[ModelConfig, str], Any] | None = None) -> FamiliarityStage:
    """Per judged pair, the judge's scoring request of each summary after the summarization prompt, and the
    reference model's of the same (when one is named). `judge` is the cell's judge (a CachedModel, or plan
    mode's stand-in), `judge_cfg` its model config; `load_model` loads the reference through the cell's
    models (CellInputs.load_model)."""
    enabled, reason = familiarity_enabled(cfg, judge_cfg)
    stage = FamiliarityStage(enabled, reason)
    if not enabled:
        return stage
    by_id = {a.id: a for a in articles}
    stage.requests = scoring_requests(judge, judge_cfg, prompts, task, by_id, pairs, max_new_tokens)
    stage.reference = reference_scorer(cfg, judge, judge_cfg, load_model)
    if stage.reference.enabled:
        stage.reference.requests = scoring_requests(stage.reference.model, reference_model_config(
            cfg.familiarity_reference), prompts, task, by_id, pairs, max_new_tokens)
    return stage


def scoring_requests(model, model_cfg: ModelConfig, prompts: Mapping, task: str, by_id: Mapping[str, Article],
                     pairs: Sequence[Pair], max_new_tokens: int) -> Requests:
    """One model's scoring request of each pair's two summaries: the summarization request it would be given
    (summaries.generation_request, its own chat template or completion prompt), the summary as its reply."""
    out: Requests = {}
    for p in pairs:
        ask = generation_request(model, model_cfg, prompts, task, by_id[p.article_id], max_new_tokens)
        out[p.article_id] = {
            slot: SequenceRequest(model.identity, continuation=text, messages=ask.messages, prompt=ask.prompt)
            for slot, text in ((OWN, p.own), (OTHER, p.other))}
    return out


def reference_scorer(cfg: JudgeConfig, judge, judge_cfg: ModelConfig,
                     load_model: Callable[[ModelConfig, str], Any] | None) -> ReferenceScorer:
    """The reference model, loaded, or why there is none: unset, or (under judge.familiarity=auto) a backend
    that cannot score given text, or no loader (a caller outside the cell). The judge itself is refused."""
    ref_cfg = reference_model_config(cfg.familiarity_reference)
    if ref_cfg is None:
        return ReferenceScorer(False, NO_REFERENCE)
    refuse_the_judge(ref_cfg, judge_cfg, judge.identity)
    offered, how = backend_class(ref_cfg.backend).sequence_logprobs_support(ref_cfg)
    if not offered:
        if FamiliarityMode(cfg.familiarity) == FamiliarityMode.on:
            raise ConfigError(f"judge.familiarity=on with judge.familiarity_reference={ref_cfg.name!r}: the "
                              f"reference's {ref_cfg.backend} backend cannot score given text ({how}). Name a "
                              f"model that can (a local one), or set judge.familiarity=auto.")
        return ReferenceScorer(False, f"the reference {ref_cfg.name!r} cannot score given text: {how}", ref_cfg.name)
    if load_model is None:
        return ReferenceScorer(False, f"the reference {ref_cfg.name!r} was not loaded (no model loader here)",
                               ref_cfg.name)
    return ReferenceScorer(True, f"reference {ref_cfg.name} ({ref_cfg.backend})", ref_cfg.name,
                           load_model(ref_cfg, REFERENCE_ROLE))


def refuse_the_judge(ref_cfg: ModelConfig, judge_cfg: ModelConfig, judge_identity) -> None:
    """A reference that is the judge (the same identity, or the same weights with the same fine-tune) would
    make every self-specific difference 0 by construction: a ConfigError. The base model of a fine-tuned judge
    is a different model and is allowed."""
    same = model_identity(ref_cfg) == judge_identity
    if not same and ref_cfg.adapter == judge_cfg.adapter:
        same = bool(same_model_field(ref_cfg, judge_cfg))
    if same:
        raise ConfigError(f"judge.familiarity_reference={ref_cfg.name!r} is the judge itself "
                          f"({judge_cfg.name!r}); its self-specific familiarity would be 0 by construction. Name "
                          f"another model, e.g. +model@judge.familiarity_reference=smollm135.")


def _pair_record(by_slot: Mapping[str, SequenceRequest], results: Mapping[SequenceRequest, SequenceLogprobs]
                 ) -> dict[str, Any] | None:
    """Mean log-likelihood per token of each summary, own - other and the token counts; None unless both
    summaries were scored."""
    own, other = results.get(by_slot[OWN]), results.get(by_slot[OTHER])
    if own is None or other is None or own.mean is None or other.mean is None:
        return None
    return {OWN: own.mean, OTHER: other.mean, "difference": own.mean - other.mean,
            "n_tokens": {OWN: own.n_tokens, OTHER: other.n_tokens}}


def score_familiarity(stage: FamiliarityStage, results: Mapping[SequenceRequest, SequenceLogprobs],
                      reference_results: Mapping[SequenceRequest, SequenceLogprobs] | None = None
                      ) -> dict[str, dict[str, Any] | None]:
    """article id -> the item's familiarity record: the judge's mean log-likelihood per token of each
    summary, own - other, and the token counts; None for an article whose summaries were not both scored. With
    a reference, also the reference's record (None where it did not score both) and `self_specific`, the
    judge's difference minus the reference's."""
    out: dict[str, dict[str, Any] | None] = {}
    for aid, by_slot in stage.requests.items():
        record = _pair_record(by_slot, results)
        if record is not None and stage.reference.enabled:
            ref = _pair_record(stage.reference.requests[aid], reference_results or {})
            record[REFERENCE] = ref
            record[SELF_SPECIFIC] = None if ref is None else record["difference"] - ref["difference"]
        out[aid] = record
    return out


def measure_familiarity(judge, stage: FamiliarityStage) -> FamiliarityStage:
    """Score every request in one batch per model (the backend shares each article's prompt between its two
    summaries; cached calls are free) and fill the stage's per-item records."""
    if stage.enabled:
        ref = stage.reference
        ref_results = ref.model.sequence_logprobs(ref.flat(), desc="familiarity, reference") if ref.enabled else None
        stage.records = score_familiarity(stage, judge.sequence_logprobs(stage.flat(), desc="familiarity"),
                                          ref_results)
    return stage


def summarize_familiarity(stage: FamiliarityStage, n_items: int, n_resamples: int, confidence: float,
                          seed: int) -> dict[str, Any]:
    """summary.json's familiarity block: mean own - other log-likelihood per token, and the likelihood
    recognizer's accuracy (share of items whose own summary is the likelier; a tie counts ½), each with an
    article-clustered t CI (article_means.article_mean); with a reference model, the same of the reference and the
    self-specific difference (judge's minus reference's), else why there is none."""
    if not stage.enabled:
        return {"enabled": False, "reason": stage.reason}
    scored = {aid: r for aid, r in stage.records.items() if r is not None}
    out = {"enabled": True, "reason": stage.reason, **likelihood_block(scored, confidence),
           "n": len(scored), "n_missing": n_items - len(scored)}
    ref = stage.reference
    if not ref.enabled:
        out[REFERENCE] = {"enabled": False, "reason": ref.reason, "model": ref.name}
        return out
    by_ref = {aid: r[REFERENCE] for aid, r in scored.items() if r.get(REFERENCE) is not None}
    out[REFERENCE] = {"enabled": True, "reason": ref.reason, "model": ref.name,
                      **likelihood_block(by_ref, confidence), "n": len(by_ref), "n_missing": len(scored) - len(by_ref)}
    ids = list(by_ref)
    out[SELF_SPECIFIC] = article_mean([scored[a][SELF_SPECIFIC] for a in ids], ids, confidence)
    return out


def likelihood_block(scored: Mapping[str, dict[str, Any]], confidence: float) -> dict[str, Any]:
    """One model's means over the scored items (article id -> its own/other/difference record): own, other,
    own - other with its CI, and the likelihood recognizer (own is the likelier; a tie counts ½) with its CI."""
    ids = list(scored)
    diffs = [scored[a]["difference"] for a in ids]
    wins = [1.0 if d > 0 else 0.5 if d == 0 else 0.0 for d in diffs]
    return {"mean_own": _mean([scored[a][OWN] for a in ids]), "mean_other": _mean([scored[a][OTHER] for a in ids]),
            "mean_difference": article_mean(diffs, ids, confidence),
            "likelihood_recognition": share_of_wins(wins, confidence)}


def share_of_wins(wins: Sequence[float], confidence: float) -> dict[str, Any]:
    """The likelihood recognizer's accuracy, a proportion of items (one per article), with its Wilson interval:
    honest at 10 of 10, where an article-level interval collapses to [1, 1]."""
    share = proportion(wins, confidence)
    return {"mean": share["value"], "ci_low": share["ci_low"], "ci_high": share["ci_high"], "n": share["n"],
            "method": "wilson"}


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def format_familiarity(block: dict[str, Any] | None) -> str | None:
    """The stage's line in the printed cell result (and the reference's, when the block has one)."""
    if not block:
        return None
    if not block.get("enabled"):
        return f"  familiarity       off ({block.get('reason')})"
    diff, lr = block["mean_difference"], block["likelihood_recognition"]
    if diff["mean"] is None:
        return f"  familiarity       n/a (no item with both summaries scored; {block['n_missing']} missing)"
    line = (f"  familiarity       own - other log-likelihood/token {diff['mean']:+.3f}{interval_text(diff)}; "
            f"likelihood recognizer {lr['mean']:.3f}{interval_text(lr)} (n={block['n']})")
    ref = block.get(REFERENCE)
    return line if ref is None else line + "\n" + format_reference(ref, block.get(SELF_SPECIFIC) or {})


def format_reference(ref: dict[str, Any], self_specific: dict[str, Any]) -> str:
    """The reference model's line: its own - other difference and the judge's self-specific part."""
    if not ref.get("enabled"):
        return f"  familiarity ref   none ({ref.get('reason')})"
    diff, lr = ref["mean_difference"], ref["likelihood_recognition"]
    if diff["mean"] is None or self_specific.get("mean") is None:
        return f"  familiarity ref   {ref['model']}: n/a (no item scored by both models)"
    return (f"  familiarity ref   {ref['model']}: own - other {diff['mean']:+.3f}{interval_text(diff)}, recognizer "
            f"{lr['mean']:.3f}{interval_text(lr)}; self-specific (judge - reference) {self_specific['mean']:+.3f}"
            f"{interval_text(self_specific)} (n={ref['n']})")


class FamiliarityMeasurement(Measurement):
    """The stage as a measurement plug-in: per item the judge's log-likelihood of each summary (and a reference
    model's, when named), in summary.json the mean difference, the likelihood recognizer and the self-specific
    difference."""

    report_module = ".familiarity_report"  # its report side (the analysis imports it)

    name = item_key = summary_key = FIELD
    prefix = "fam"
    cell_column_names = ("fam_enabled", *(f"fam_{b}_{k}" for b in ("diff", "lr") for k in CI_FIELDS), "fam_n",
                         "fam_reason", "fam_ref_model",
                         *(f"fam_{b}_{k}" for b in ("ref_diff", "ref_lr", "self_specific") for k in CI_FIELDS),
                         "fam_ref_n", "fam_ref_reason")
    item_column_names = ("fam_own", "fam_other", "fam_difference", "fam_ref_own", "fam_ref_other",
                         "fam_ref_difference", "fam_self_specific")

    def prepare(self, inputs, judge, judge_cfg) -> Stage:
        # the reference model comes through the cell's loader (CellInputs.load_model), so it is cached,
        # pooled, closed and counted like the cell's other models; the interface stays the judge's alone
        spec = inputs.spec
        stage = familiarity_requests(judge, judge_cfg, spec.judge, spec.prompts, inputs.dataset.task,
                                     inputs.selection.usable, inputs.pairs.pairs, spec.summaries.max_new_tokens,
                                     getattr(inputs, "load_model", None))
        return Stage(stage.enabled, stage.reason, state=stage)

    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> dict[str, Any]:
        return measure_familiarity(judge, stage.state).records

    def n_requests(self, stage: Stage) -> int:
        return len(stage.state.flat()) + len(stage.state.reference.flat())

    def summarize(self, stage: Stage, inputs, n_items: int) -> dict[str, Any]:
        boot = inputs.spec.bootstrap
        return summarize_familiarity(stage.state, n_items, int(boot.n_resamples), float(boot.confidence),
                                     inputs.spec.seed)

    def format(self, summary_block: dict[str, Any] | None) -> str | None:
        return format_familiarity(summary_block)

    def cell_columns(self, summary_block: dict[str, Any]) -> dict[str, Any]:
        ref = block(summary_block, REFERENCE)
        return {"fam_enabled": None if not summary_block else bool(summary_block.get("enabled", False)),
                **numbers(block(summary_block, "mean_difference"), "fam_diff", CI_FIELDS),
                **numbers(block(summary_block, "likelihood_recognition"), "fam_lr", CI_FIELDS),
                **numbers(summary_block, "fam", {"n": "n"}),
                "fam_reason": str(summary_block.get("reason") or ""),
                "fam_ref_model": str(ref.get("model") or "") if ref.get("enabled") else "",
                **numbers(block(ref, "mean_difference"), "fam_ref_diff", CI_FIELDS),
                **numbers(block(ref, "likelihood_recognition"), "fam_ref_lr", CI_FIELDS),
                **numbers(block(summary_block, SELF_SPECIFIC), "fam_self_specific", CI_FIELDS),
                **numbers(ref, "fam_ref", {"n": "n"}), "fam_ref_reason": reference_reason(summary_block)}

    def item_columns(self, record: Any) -> dict[str, Any]:
        record = record if isinstance(record, dict) else {}
        slots = {"own": OWN, "other": OTHER, "difference": "difference"}
        return {**numbers(record, "fam", slots), **numbers(block(record, REFERENCE), "fam_ref", slots),
                **numbers(record, "fam", {"self_specific": SELF_SPECIFIC})}

    def table_columns(self, record: Any) -> dict[str, Any]:
        return {"familiarity_difference": (record or {}).get("difference"),
                "familiarity_self_specific": (record or {}).get(SELF_SPECIFIC)}


def reference_reason(summary_block: dict[str, Any]) -> str:
    """Why a cell has a reference model's familiarity or not, in words (older cells say so)."""
    if not summary_block:
        return ""
    if not summary_block.get("enabled"):
        return "familiarity off"
    ref = summary_block.get(REFERENCE)
    if not isinstance(ref, dict):
        return "no reference model (recorded before cross-model familiarity)"
    return str(ref.get("reason") or "")
