"""The two sets of summaries a cell compares: the evaluator's own and the other source's.

Model summaries are generated once per (model, prompt, decoding settings) through the call store;
reference and imported summaries come with the dataset. A summary that is missing or empty is
reported per article so the cell can count it, never silently dropped.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from omegaconf import DictConfig

from .config import enum_value
from .data import Article, Dataset
from .errors import ConfigError
from .models.base import GenerateRequest
from .models.cached import CachedModel
from .prompts import fill, standardize, summarize_messages

Summaries = Dict[str, Optional[str]]  # article id -> summary (None: missing)


def generation_request(model: CachedModel, model_cfg: DictConfig, prompts: Mapping, task: str, article: Article,
                       max_new_tokens: int) -> GenerateRequest:
    if model_cfg.chat:
        return GenerateRequest(model.identity, messages=summarize_messages(prompts, task, article.text),
                               max_new_tokens=max_new_tokens)
    if not model_cfg.get("completion_prompt"):
        raise ConfigError(f"Model {model_cfg.name!r} has chat: false but no completion_prompt.")
    return GenerateRequest(model.identity, prompt=fill(model_cfg.completion_prompt, article=article.text),
                           max_new_tokens=max_new_tokens, stop=tuple(model_cfg.stop))


def model_summaries(model: CachedModel, model_cfg: DictConfig, prompts: Mapping, dataset: Dataset,
                    articles: List[Article], max_new_tokens: int) -> Summaries:
    requests = {a.id: generation_request(model, model_cfg, prompts, dataset.task, a, max_new_tokens) for a in articles}
    results = model.generate(list(requests.values()), desc=f"summaries by {model_cfg.name}")
    return {aid: results[req].text for aid, req in requests.items()}


def dataset_summaries(source_cfg: DictConfig, dataset: Dataset, articles: List[Article]) -> Summaries:
    kind = str(enum_value(source_cfg.kind))
    if kind == "reference":
        return {a.id: a.reference for a in articles}
    if kind == "imported":
        if source_cfg.key not in dataset.imported:
            have = ", ".join(f"paper_{k}" for k in sorted(dataset.imported)) or "none"
            raise ConfigError(f"Source {source_cfg.name!r} needs summaries {source_cfg.key!r} that dataset "
                              f"{dataset.name!r} does not carry (its imported sources: {have}). Use a paper_* "
                              f"dataset, e.g. dataset=paper_xsum dataset.root=../shared/paper-data.")
        return {a.id: dataset.summary(source_cfg.key, a.id) for a in articles}
    raise ConfigError(f"Source kind {kind!r} is not a dataset source.")


def clean(summaries: Summaries, standardize_them: bool) -> Tuple[Summaries, Dict[str, str]]:
    """Apply the standardization (if on) and name the articles whose summary is unusable."""
    out: Summaries = {}
    problems: Dict[str, str] = {}
    for aid, text in summaries.items():
        if text is None:
            problems[aid] = "missing_summary"
            out[aid] = None
            continue
        text = standardize(text) if standardize_them else text.strip()
        if not text:
            problems[aid] = "empty_summary"
        out[aid] = text or None
    return out, problems
