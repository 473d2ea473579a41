"""Training examples for fine-tuning an evaluator, built from the fine-tune dataset's first n_articles.

Each pair is (the evaluator's own summary, one other source's summary) for one article. The own
summaries are the *base* evaluator's, generated through the same cached path as a cell's
(`summaries.model_summaries` + `summaries.clean`), so a fine-tuned model learns on exactly the texts it
later calls its own. Others: for the paper's datasets every imported source except the evaluator's own
key (human, gpt4, gpt35, claude, llama: the paper's 8N examples came from 4 others), elsewhere the
reference (human) summary. Both orders of every pair are used; the prompt is the pairwise prompt the
evaluation uses (`prompts.pairwise[question]`), and the answer is the assistant turn.

Labels per task (see labels.py): recognition = the own summary's position; always_1 = "1"; random =
seeded and balanced; length / vowel / readability = the summary that scores higher, ties dropped and
counted. With both orders of each pair, recognition and the controls are balanced by construction.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from ..articles import article_budget, fit_article
from ..config import enum_value
from ..data import Article, Dataset, load_dataset
from ..errors import ConfigError, DataError
from ..models.base import Message
from ..models.cached import CachedModel
from ..prompts import pairwise_messages
from ..summaries import clean, model_summaries
from . import labels as L

# Paper source key of an evaluator that is one of the paper's models (its summaries are not "others").
OWN_PAPER_KEY = {"gpt35": "gpt35", "gpt4": "gpt4", "llama2": "llama", "llama": "llama", "claude": "claude"}
HUMAN = "human"


def task_name(cfg: DictConfig) -> str:
    return str(enum_value(cfg.finetune_task.name))


def question_for(task_cfg: DictConfig) -> str:
    """The prompts.pairwise key the training examples use."""
    if task_cfg.get("question"):
        return str(task_cfg.question)
    name = str(enum_value(task_cfg.name))
    return "recognition" if name in L.RECOGNITION_PROMPT_TASKS else name


def _plain(node: DictConfig) -> Dict[str, Any]:
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)


def finetune_dataset_cfg(cfg: DictConfig) -> DictConfig:
    """The fine-tune dataset as a plain config: finetune_dataset, or the cell's dataset when that is null,
    selecting the first finetune_task.n_articles articles (after its offset; offset 0 when it is the cell's)."""
    n = cfg.finetune_task.get("n_articles")
    if n is None or int(n) < 1:
        raise ConfigError(f"finetune_task={task_name(cfg)} needs finetune_task.n_articles >= 1 (the paper used 2, 10 "
                          f"and 500), got {n}.")
    if cfg.get("finetune_dataset") is None:
        d = _plain(cfg.dataset)
        d["offset"] = 0
    else:
        d = _plain(cfg.finetune_dataset)
    if d.get("kind") == "paper" and not d.get("root"):
        d["root"] = os.environ.get("SELFPREF_PAPER_DATA") or (cfg.dataset.get("root") if _plain(cfg.dataset).get(
            "kind") == "paper" else None)
        if not d["root"]:
            raise ConfigError(f"finetune_dataset={d.get('name')} needs the paper data's folder: add "
                              f"finetune_dataset.root=PATH (or dataset.root=PATH, or set SELFPREF_PAPER_DATA).")
    d["n_articles"] = int(n)
    return OmegaConf.create(d)


def dataset_identity(d: Mapping) -> Dict[str, Any]:
    """What selects the articles and summaries, independent of where the files live (no root, no local path
    for Hugging Face copies beyond hf_path as given)."""
    keys = {"demo": (), "paper": ("paper_name",),
            "hf": ("hf_path", "hf_name", "split", "id_field", "text_field", "summary_field")}[str(d["kind"])]
    return {"name": d["name"], "kind": str(d["kind"]), "task": d.get("task"), "seed": d.get("seed"),
            "offset": int(d.get("offset") or 0), **{k: d.get(k) for k in keys}}


def same_articles(a: Mapping, b: Mapping) -> bool:
    """Whether two dataset configs draw from the same article list in the same order."""
    ia, ib = dataset_identity(a), dataset_identity(b)
    ia.pop("offset"), ib.pop("offset")
    ia.pop("name"), ib.pop("name")
    return ia == ib


def own_paper_key(cfg: DictConfig) -> Optional[str]:
    return OWN_PAPER_KEY.get(str(cfg.evaluator.name))


def available_others(cfg: DictConfig, kind: str, imported: Sequence[str]) -> List[str]:
    """The other sources paired with the own summaries, in a stable order."""
    if cfg.finetune_task.get("others"):
        return [str(o) for o in cfg.finetune_task.others]
    if kind != "paper":
        return [HUMAN]
    own = own_paper_key(cfg)
    order = [HUMAN, "gpt4", "gpt35", "claude", "llama"]
    keys = [k for k in order if k in imported] + sorted(k for k in imported if k not in order)
    return [k for k in keys if k != own]


@dataclass(frozen=True)
class TrainingExample:
    article_id: str
    other: str  # the other summary's source key
    own_position: int  # where the evaluator's own summary is (1 or 2)
    messages: Tuple[Message, ...]  # system + user, exactly as the evaluation builds them
    answer: str  # "1" or "2": the assistant turn

    def to_json(self) -> Dict[str, Any]:
        return {"article_id": self.article_id, "other": self.other, "own_position": self.own_position,
                "messages": [asdict(m) for m in self.messages], "answer": self.answer}

    def chat(self) -> List[Dict[str, str]]:
        """The OpenAI fine-tuning row's messages: the prompt plus the answer as the assistant turn."""
        return [{"role": m.role, "content": m.content} for m in self.messages] + [
            {"role": "assistant", "content": self.answer}]


@dataclass
class ExampleSet:
    examples: List[TrainingExample]
    task: str
    question: str
    dataset: str
    n_articles: int  # requested
    train_article_ids: List[str]  # the articles the examples came from
    others: List[str]
    n_pairs: int = 0
    n_ties_dropped: int = 0  # examples (both orders of a tied pair count 2)
    n_tie_pairs: int = 0
    skipped: Dict[str, int] = field(default_factory=dict)  # pairs that could not be built, by reason
    n_articles_truncated: int = 0  # cut to fit the evaluator's context, as the cell cuts them

    @property
    def label_balance(self) -> Dict[str, int]:
        out = {"1": 0, "2": 0}
        for ex in self.examples:
            out[ex.answer] = out.get(ex.answer, 0) + 1
        return out

    def fingerprint(self) -> str:
        blob = json.dumps([ex.to_json() for ex in self.examples], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def shuffled(self, seed: int) -> List[TrainingExample]:
        out = list(self.examples)
        random.Random(seed).shuffle(out)
        return out

    def stats(self) -> Dict[str, Any]:
        return {"task": self.task, "question": self.question, "dataset": self.dataset, "n_articles": self.n_articles,
                "n_articles_used": len(self.train_article_ids), "train_article_ids": list(self.train_article_ids),
                "others": list(self.others), "n_pairs": self.n_pairs, "n_examples": len(self.examples),
                "n_ties_dropped": self.n_ties_dropped, "n_tie_pairs": self.n_tie_pairs,
                "pairs_skipped": dict(self.skipped), "n_articles_truncated": self.n_articles_truncated,
                "label_balance": self.label_balance,
                "examples_sha256": self.fingerprint()}


def label_examples(task: str, question: str, prompts: Mapping, pairs: Sequence[Tuple[str, str, str, str, str]],
                   seed: int) -> Tuple[List[TrainingExample], int, int]:
    """Both orders of each (article_id, article, own, other_key, other) pair, labelled for `task`.
    Returns (examples, examples dropped as ties, tied pairs)."""
    if task not in L.ALL_TASKS:
        raise ConfigError(f"Unknown fine-tune task {task!r}; valid: {', '.join(L.ALL_TASKS)}.")
    if question not in prompts["pairwise"]:
        raise ConfigError(
            f"finetune_task={task} asks prompts.pairwise.{question}, which the prompts config lacks (it has "
            f"{sorted(prompts['pairwise'])}). Add the paper's control prompt under pairwise.{question} in "
            f"conf/prompts/paper.yaml.")
    examples: List[TrainingExample] = []
    ties = tie_pairs = 0
    for aid, article, own, other_key, other in pairs:
        orders = [(1, own, other), (2, other, own)]
        made = []
        for own_pos, s1, s2 in orders:
            if task == "recognition":
                answer: Optional[str] = L.recognition_label(own_pos)
            elif task == "always_1":
                answer = "1"
            elif task == "random":
                answer = "?"  # filled below, balanced over the whole set
            else:
                answer = L.control_label(task, s1, s2)
            made.append((own_pos, s1, s2, answer))
        if any(a is None for *_, a in made):
            ties += len(made)
            tie_pairs += 1
            continue
        for own_pos, s1, s2, answer in made:
            examples.append(TrainingExample(aid, other_key, own_pos,
                                            pairwise_messages(prompts, question, article, s1, s2), answer))
    if task == "random":
        answers = L.balanced_random_labels(len(examples), seed)
        examples = [TrainingExample(e.article_id, e.other, e.own_position, e.messages, a)
                    for e, a in zip(examples, answers)]
    return examples, ties, tie_pairs


def article_rule(cfg: DictConfig) -> Dict[str, Any]:
    """The article-length rule the training prompts follow (part of the fine-tune's cache key)."""
    return {"budget_chars": article_budget(cfg, [cfg.evaluator]), "policy": enum_value(cfg.articles.too_long)}


def fit_articles(cfg: DictConfig, articles: Sequence[Article]) -> Tuple[List[Article], int, int]:
    """The cell's article-length rule (cell.fit_article: truncate or refuse articles longer than the evaluator's
    context allows), applied to the training articles so their prompts are the ones the evaluation would build.
    Returns (articles, number truncated, number refused)."""
    budget = article_budget(cfg, [cfg.evaluator])
    policy = enum_value(cfg.articles.too_long)
    out, truncated, refused = [], 0, 0
    for a in articles:
        fitted = fit_article(a, budget, policy)
        if fitted is None:
            refused += 1
            continue
        truncated += fitted is not a
        out.append(fitted)
    return out, truncated, refused


def build_examples(cfg: DictConfig, evaluator: CachedModel, prompts: Optional[Mapping] = None,
                   ft_dataset_cfg: Optional[DictConfig] = None, dataset: Optional[Dataset] = None) -> ExampleSet:
    """The training set of cfg.finetune_task on the fine-tune dataset, own summaries by `evaluator` (the base
    model's cached handle, so the summaries are shared with every cell)."""
    task = task_name(cfg)
    prompts = prompts if prompts is not None else OmegaConf.to_container(cfg.prompts, resolve=True)
    ds_cfg = ft_dataset_cfg if ft_dataset_cfg is not None else finetune_dataset_cfg(cfg)
    dataset = dataset if dataset is not None else load_dataset(ds_cfg)
    n = int(ds_cfg.n_articles)
    if len(dataset.articles) < n:
        raise DataError(f"finetune_task.n_articles={n} but the fine-tune dataset {dataset.name!r} has only "
                        f"{len(dataset.articles)} articles from offset {ds_cfg.get('offset', 0)}.")
    kind = str(ds_cfg.kind)
    others = available_others(cfg, kind, list(dataset.imported))
    if not others:
        raise DataError(f"The fine-tune dataset {dataset.name!r} has no other summaries to pair with the evaluator's.")
    for o in others:
        if o != HUMAN and o not in dataset.imported:
            raise ConfigError(f"finetune_task.others names {o!r}, which dataset {dataset.name!r} does not carry "
                              f"(it has: human{''.join(', ' + k for k in dataset.imported if k != HUMAN)}).")
    question = question_for(cfg.finetune_task)
    skipped: Dict[str, int] = {}
    usable = []
    for a in dataset.articles:
        if a.text.strip():
            usable.append(a)
        else:
            skipped["empty_article"] = skipped.get("empty_article", 0) + len(others)
    usable, n_truncated, n_refused = fit_articles(cfg, usable)
    if n_refused:
        skipped["article_too_long"] = n_refused * len(others)
    standardize = bool(cfg.summaries.standardize)
    own_raw = model_summaries(evaluator, cfg.evaluator, prompts, dataset, usable, int(cfg.summaries.max_new_tokens))
    own, own_problems = clean(own_raw, standardize)
    pairs = []
    for other_key in others:
        raw = {a.id: (a.reference if other_key == HUMAN else dataset.summary(other_key, a.id)) for a in usable}
        other, problems = clean(raw, standardize)
        for a in usable:
            why = own_problems.get(a.id) and f"{own_problems[a.id]}:own" or (
                problems.get(a.id) and f"{problems[a.id]}:{other_key}")
            if why:
                skipped[why] = skipped.get(why, 0) + 1
                continue
            pairs.append((a.id, a.text, own[a.id], other_key, other[a.id]))
    examples, ties, tie_pairs = label_examples(task, question, prompts, pairs, int(cfg.finetune_task.seed))
    return ExampleSet(examples=examples, task=task, question=question, dataset=dataset.name, n_articles=n,
                      train_article_ids=[a.id for a in dataset.articles], others=others, n_pairs=len(pairs),
                      n_ties_dropped=ties, n_tie_pairs=tie_pairs, skipped=skipped, n_articles_truncated=n_truncated)
