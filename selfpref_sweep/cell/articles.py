"""Stage 1, articles: which articles a cell can judge.

Empty articles are excluded, and ones longer than the models' context, or than `articles.max_tokens`
(so a huge article costs bounded time), are cut to fit or refused (`articles.too_long`). The fine-tuning examples go
through the same stage, so their prompts are the ones the evaluation builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config import ArticlesConfig, ModelConfig, TooLong
from .dataset_loaders import Article

EMPTY_ARTICLE = "empty_article"
ARTICLE_TOO_LONG = "article_too_long"
# Tokens a judge prompt needs besides the article: instructions, chat template, two summaries.
PROMPT_OVERHEAD_TOKENS = 400


@dataclass
class ArticleSelection:
    """The articles a cell judges (cut to fit where allowed), and why each other one is excluded."""

    all: list[Article]  # every selected article, in order (each gets a line in results.jsonl)
    usable: list[Article]  # the judgeable ones, truncated where needed
    truncated: set[str] = field(default_factory=set)
    excluded: dict[str, str] = field(default_factory=dict)  # article id -> reason


def article_budget(models: Sequence[ModelConfig | None], max_new_tokens: int, rule: ArticlesConfig
                   ) -> int | None:
    """Most characters of article text a prompt carries: what fits every model's context with room for the
    prompt, two summaries and the summary being generated, and at most `rule.max_tokens`; None when
    neither limits it."""
    limits = [m.context_tokens - PROMPT_OVERHEAD_TOKENS - 3 * int(max_new_tokens)
              for m in models if m is not None and m.context_tokens]
    if rule.max_tokens is not None:
        limits.append(int(rule.max_tokens))
    if not limits:
        return None
    return max(0, int(min(limits) * float(rule.chars_per_token)))


def select_articles(articles: Sequence[Article], models: Sequence[ModelConfig | None], max_new_tokens: int,
                    rule: ArticlesConfig) -> ArticleSelection:
    """The stage: exclude empty articles, fit the others to every model's context."""
    budget = article_budget(models, max_new_tokens, rule)
    selection = ArticleSelection(all=list(articles), usable=[])
    for a in articles:
        if not a.text.strip():
            selection.excluded[a.id] = EMPTY_ARTICLE
            continue
        fitted = fit_article(a, budget, rule.too_long)
        if fitted is None:
            selection.excluded[a.id] = ARTICLE_TOO_LONG
        else:
            selection.usable.append(fitted)
            if fitted is not a:
                selection.truncated.add(a.id)
    return selection


def fit_article(article: Article, budget: int | None, policy: TooLong) -> Article | None:
    """The article, cut at a word boundary to `budget` characters if it is longer (policy
    truncate), or None (policy refuse)."""
    if budget is None or len(article.text) <= budget:
        return article
    if policy == TooLong.refuse:
        return None
    cut = article.text[:budget]
    cut = cut[: cut.rfind(" ")] if " " in cut else cut
    return Article(article.id, cut.rstrip(), article.reference)
