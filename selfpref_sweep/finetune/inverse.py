"""The paper's inverse-causation check (finetune_task.inverse_check=true).

Could fine-tuning have changed the *summaries* the model would write, rather than how it judges? The
fine-tuned model writes new summaries of the evaluation articles, and judges them (as its own, in both
orders, both questions) against its base model's old ones, through the cell's own stages. Recognition /
preference above 0.5 mean it picks its new summaries; the paper reports preference for new vs old.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..cell.dataset_loaders import Article, Dataset
from ..cell.judging import answer_distributions, judge_requests
from ..cell.pairs import make_pairs
from ..cell.scoring import score_items, summarize_question
from ..cell.summaries import generate_summaries
from ..config import ModelConfig, SettingName
from ..config.spec import CellSpec
from ..models.cached import CachedModel
from ..records.schema import QUESTIONS


def inverse_check(spec: CellSpec, base: CachedModel, tuned: CachedModel, tuned_cfg: ModelConfig, dataset: Dataset,
                  articles: Sequence[Article]) -> dict[str, Any]:
    """{"n_items", "items", "<question>": stats} with own = the tuned model's new summary, other = the base's."""
    max_new, rules = spec.summaries.max_new_tokens, spec.summaries
    usable = [a for a in articles if a.text.strip()]
    new = generate_summaries(tuned, tuned_cfg, spec.prompts, dataset.task, usable, max_new, rules)
    old = generate_summaries(base, spec.evaluator, spec.prompts, dataset.task, usable, max_new, rules)
    pairs = make_pairs(usable, new, old).pairs
    requests = judge_requests(tuned, spec.prompts, SettingName.pairwise, QUESTIONS, pairs)
    verdicts = score_items(requests, answer_distributions(tuned, requests), SettingName.pairwise,
                           spec.judge.min_answer_mass)
    items: list[dict[str, Any]] = [{"article_id": p.article_id, "new_summary": p.own, "old_summary": p.other,
                                    "identical": p.own == p.other, **v} for p, v in zip(pairs, verdicts, strict=True)]
    boot = spec.bootstrap
    out: dict[str, Any] = {"n_items": len(items), "n_identical": sum(it["identical"] for it in items),
                           "n_unusable": len(articles) - len(pairs), "items": items}
    for q in QUESTIONS:
        out[q] = summarize_question(items, q, int(boot.n_resamples), float(boot.confidence), spec.seed) \
            if items else {"mean": None, "n": 0}
    return out
