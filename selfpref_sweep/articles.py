"""Which articles a cell can judge: empty ones are excluded, and ones longer than the models'
context, or than `articles.max_tokens`, are cut to fit or refused (`articles.too_long`). The
fine-tuning examples follow the same rule, so their prompts are the ones the evaluation builds."""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

from omegaconf import DictConfig

from .config import enum_value
from .data import Article

EMPTY_ARTICLE = "empty_article"
ARTICLE_TOO_LONG = "article_too_long"
# Tokens a judge prompt needs besides the article: instructions, chat template, two summaries.
PROMPT_OVERHEAD_TOKENS = 400


def article_budget(cfg: DictConfig, model_cfgs: List[DictConfig]) -> Optional[int]:
    """Most characters of article text a prompt carries: what fits every model's context with room for the
    prompt, two summaries and the summary being generated, and at most `articles.max_tokens` (a huge
    article costs bounded time); None when neither limits it."""
    limits = [m.get("context_tokens") - PROMPT_OVERHEAD_TOKENS - 3 * int(cfg.summaries.max_new_tokens)
              for m in model_cfgs if m.get("context_tokens")]
    if cfg.articles.get("max_tokens") is not None:
        limits.append(int(cfg.articles.max_tokens))
    if not limits:
        return None
    return max(0, int(min(limits) * float(cfg.articles.chars_per_token)))


def usable_articles(cfg: DictConfig, articles: List[Article]) -> Tuple[List[Article], Set[str], Dict[str, str]]:
    """The articles a cell can judge (truncated to fit where allowed), the ids truncated, and why
    each other article is excluded."""
    models = [cfg.evaluator] + ([cfg.source.model] if enum_value(cfg.source.kind) == "model" else [])
    budget = article_budget(cfg, models)
    usable, truncated, reasons = [], set(), {}
    for a in articles:
        if not a.text.strip():
            reasons[a.id] = EMPTY_ARTICLE
            continue
        fitted = fit_article(a, budget, enum_value(cfg.articles.too_long))
        if fitted is None:
            reasons[a.id] = ARTICLE_TOO_LONG
        else:
            usable.append(fitted)
            if fitted is not a:
                truncated.add(a.id)
    return usable, truncated, reasons


def fit_article(article: Article, budget: Optional[int], policy: str) -> Optional[Article]:
    """The article, cut at a word boundary to `budget` characters if it is longer (policy
    "truncate"), or None (policy "refuse")."""
    if budget is None or len(article.text) <= budget:
        return article
    if policy == "refuse":
        return None
    cut = article.text[:budget]
    cut = cut[: cut.rfind(" ")] if " " in cut else cut
    return Article(article.id, cut.rstrip(), article.reference)
