"""The paper's inverse-causation check (finetune_task.inverse_check=true).

Could fine-tuning have changed the *summaries* the model would write, rather than how it judges? The
fine-tuned model writes new summaries of the evaluation articles, and judges them (as its own, in both
orders, both questions) against its base model's old ones. Recognition / preference above 0.5 mean it
picks its new summaries; the paper reports preference for new vs old.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

from omegaconf import DictConfig

from ..data import Article, Dataset
from ..judging import Pair, judge_pairwise
from ..models.cached import CachedModel
from ..scoring import summarize_question
from ..summaries import clean, model_summaries


def inverse_check(cfg: DictConfig, base: CachedModel, tuned: CachedModel, tuned_cfg: DictConfig, dataset: Dataset,
                  articles: Sequence[Article], prompts: Mapping, questions: Sequence[str]) -> Dict[str, Any]:
    """{"n_items", "items", "<question>": stats} with own = the tuned model's new summary, other = the base's."""
    max_new = int(cfg.summaries.max_new_tokens)
    usable = [a for a in articles if a.text.strip()]
    new, new_bad = clean(model_summaries(tuned, tuned_cfg, prompts, dataset, usable, max_new),
                         cfg.summaries.standardize)
    old, old_bad = clean(model_summaries(base, cfg.evaluator, prompts, dataset, usable, max_new),
                         cfg.summaries.standardize)
    pairs = [Pair(a.id, a.text, new[a.id], old[a.id]) for a in usable if a.id not in new_bad and a.id not in old_bad]
    judged = judge_pairwise(tuned, prompts, list(questions), pairs, float(cfg.judge.min_answer_mass))
    items: List[Dict[str, Any]] = []
    for p, verdicts in zip(pairs, judged):
        items.append({"article_id": p.article_id, "new_summary": p.own, "old_summary": p.other,
                      "identical": p.own == p.other, **verdicts})
    boot = cfg.bootstrap
    out: Dict[str, Any] = {"n_items": len(items), "n_identical": sum(it["identical"] for it in items),
                           "n_unusable": len(articles) - len(pairs), "items": items}
    for q in questions:
        out[q] = summarize_question(items, q, int(boot.n_resamples), float(boot.confidence), int(cfg.seed)) \
            if items else {"mean": None, "n": 0}
    return out
