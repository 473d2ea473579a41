"""Training examples for fine-tuning an evaluator, built from the fine-tune dataset's first n_articles.

Each pair is (the evaluator's own summary, one other source's summary) for one article. The own
summaries are the *base* evaluator's, made by the cell's own stages (articles.select_articles,
summaries.generate_summaries, pairs.make_pairs, judging.order_messages) through the same call store,
so a fine-tuned model learns on exactly the texts and prompts it is later evaluated with. Others: for the paper's
datasets every imported source except the evaluator's own key (human, gpt4, gpt35, claude, llama: the paper's 8N
examples came from 4 others), elsewhere the reference (human) summary. Both orders of every pair are used; the prompt is
the pairwise prompt the evaluation uses (`prompts.pairwise[question]`), and the answer is the assistant turn.

Labels per task (see labels.py): recognition = the own summary's position; always_1 = "1"; random =
seeded and balanced; length / vowel / readability = the summary that scores higher, ties dropped and
counted. With both orders of each pair, recognition and the controls are balanced by construction.

score_longer is trained one summary at a time instead (`score_examples`): each of an article's summaries (the
own once, each other source's once) under the individual-setting prompt the evaluation builds, answered by a
1-5 score that grows with its word count among that article's summaries.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..cell.articles import select_articles
from ..cell.dataset_loaders import Dataset, load_dataset
from ..cell.judging import individual_messages, order_messages
from ..cell.pairs import Pair, make_pairs
from ..cell.summaries import HUMAN, dataset_summaries, generate_summaries
from ..config import FinetuneTaskName
from ..config.origins import PAPER_KEY_BY_MODEL_NAME
from ..config.spec import CellSpec
from ..errors import ConfigError, DataError
from ..models.base import Message
from ..models.cached import CachedModel
from . import labels as L

OTHERS_ORDER = [HUMAN, "gpt4", "gpt35", "claude", "llama"]


def available_others(evaluator_name: str, configured: Sequence[str] | None, paper: bool,
                     imported: Sequence[str]) -> list[str]:
    """The other sources paired with the own summaries, in a stable order: the configured ones, else the
    human reference (and, for the paper's datasets, every imported source but the evaluator's own)."""
    if configured:
        return [str(o) for o in configured]
    if not paper:
        return [HUMAN]
    own = PAPER_KEY_BY_MODEL_NAME.get(evaluator_name)  # its summaries are not "others"
    keys = [k for k in OTHERS_ORDER if k in imported] + sorted(k for k in imported if k not in OTHERS_ORDER)
    return [k for k in keys if k != own]


@dataclass(frozen=True)
class TrainingExample:
    article_id: str
    other: str  # the other summary's source key (one summary alone: the shown summary's, "own" for the own)
    own_position: int  # where the evaluator's own summary is (1 or 2; one summary alone: 1 if it is the own, else 0)
    messages: tuple[Message, ...]  # system + user, exactly as the evaluation builds them
    answer: str  # the assistant turn: "1" or "2" (pairwise), a score such as "4" (one summary alone)

    def to_json(self) -> dict[str, Any]:
        return {"article_id": self.article_id, "other": self.other, "own_position": self.own_position,
                "messages": [asdict(m) for m in self.messages], "answer": self.answer}

    def chat(self) -> list[dict[str, str]]:
        """The OpenAI fine-tuning row's messages: the prompt plus the answer as the assistant turn."""
        return [{"role": m.role, "content": m.content} for m in self.messages] + [
            {"role": "assistant", "content": self.answer}]


@dataclass
class ExampleSet:
    examples: list[TrainingExample]
    task: str
    question: str
    dataset: str
    n_articles: int  # requested
    train_article_ids: list[str]  # the articles the examples came from
    others: list[str]
    n_pairs: int = 0
    n_ties_dropped: int = 0  # examples (both orders of a tied pair count 2; an all-tied article, its summaries)
    n_tie_pairs: int = 0  # tied pairs (one summary alone: articles whose summaries all tie)
    skipped: dict[str, int] = field(default_factory=dict)  # pairs that could not be built, by reason
    n_articles_truncated: int = 0  # cut to fit the evaluator's context, as the cell cuts them

    @property
    def label_balance(self) -> dict[str, int]:
        out = {"1": 0, "2": 0} if self.task not in L.INDIVIDUAL_TASKS else {}
        for ex in self.examples:
            out[ex.answer] = out.get(ex.answer, 0) + 1
        return dict(sorted(out.items()))  # "1" before "2" ... before "5"

    def fingerprint(self) -> str:
        blob = json.dumps([ex.to_json() for ex in self.examples], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def shuffled(self, seed: int) -> list[TrainingExample]:
        out = list(self.examples)
        random.Random(seed).shuffle(out)
        return out

    def stats(self) -> dict[str, Any]:
        return {"task": self.task, "question": self.question, "dataset": self.dataset, "n_articles": self.n_articles,
                "n_articles_used": len(self.train_article_ids), "train_article_ids": list(self.train_article_ids),
                "others": list(self.others), "n_pairs": self.n_pairs, "n_examples": len(self.examples),
                "n_ties_dropped": self.n_ties_dropped, "n_tie_pairs": self.n_tie_pairs,
                "pairs_skipped": dict(self.skipped), "n_articles_truncated": self.n_articles_truncated,
                "label_balance": self.label_balance,
                "examples_sha256": self.fingerprint()}


def label_examples(task: str, question: str, prompts: Mapping, pairs: Sequence[tuple[str, str, str, str, str]],
                   seed: int) -> tuple[list[TrainingExample], int, int]:
    """Both orders of each (article_id, article, own, other_key, other) pair, labelled for `task`, with the
    pairwise prompt the evaluation builds. Returns (examples, examples dropped as ties, tied pairs)."""
    task = FinetuneTaskName(task).value if task in FinetuneTaskName._value2member_map_ else task
    if task not in L.ALL_TASKS:
        raise ConfigError(f"Unknown fine-tune task {task!r}; valid: {', '.join(L.ALL_TASKS)}.")
    if task in L.INDIVIDUAL_TASKS:
        raise ValueError(f"{task} is trained one summary at a time: its examples come from score_examples")
    if question not in prompts["pairwise"]:
        raise ConfigError(
            f"finetune_task={task} asks prompts.pairwise.{question}, which the prompts config lacks (it has "
            f"{sorted(prompts['pairwise'])}). Add the paper's control prompt under pairwise.{question} in "
            f"conf/prompts/paper.yaml.")
    examples: list[TrainingExample] = []
    ties = tie_pairs = 0
    for aid, article, own, other_key, other in pairs:
        pair = Pair(aid, article, own, other)
        made = []
        for own_pos in (1, 2):
            s1, s2 = (own, other) if own_pos == 1 else (other, own)
            if task == "recognition":
                answer: str | None = L.recognition_label(own_pos)
            elif task == "always_1":
                answer = "1"
            elif task == "random":
                answer = "?"  # filled below, balanced over the whole set
            else:
                answer = L.control_label(task, s1, s2)
            made.append((own_pos, answer))
        if any(a is None for _, a in made):
            ties += len(made)
            tie_pairs += 1
            continue
        for own_pos, answer in made:
            examples.append(TrainingExample(aid, other_key, own_pos,
                                            order_messages(prompts, question, pair, own_first=own_pos == 1), answer))
    if task == "random":
        answers = L.balanced_random_labels(len(examples), seed)
        examples = [TrainingExample(e.article_id, e.other, e.own_position, e.messages, a)
                    for e, a in zip(examples, answers, strict=True)]
    return examples, ties, tie_pairs


OWN_SOURCE = "own"  # a one-summary example's source key when it shows the evaluator's own summary


def score_examples(task: str, question: str, prompts: Mapping, pairs: Sequence[tuple[str, str, str, str, str]]
                   ) -> tuple[list[TrainingExample], int, int]:
    """One example per distinct summary of each article in the (article_id, article, own, other_key, other)
    pairs (the own summary once, each other source's once), with the individual-setting prompt the evaluation
    builds for it, answered by the level of its measure among the article's summaries on the prompt's answer
    scale (labels.rank_levels: "1" for the fewest words, "5" for the most). Returns (examples, examples
    dropped as ties, articles whose summaries all tie)."""
    answers = list((prompts.get("individual_answers") or {}).get(question) or ())
    if question not in prompts.get("individual", {}) or len(answers) < 2:
        raise ConfigError(
            f"finetune_task={task} trains on the individual-setting prompt individual.{question} and its answer "
            f"scale individual_answers.{question}, which the prompts config lacks.")
    articles: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for aid, article, own, other_key, other in pairs:
        articles.setdefault(aid, (article, [(OWN_SOURCE, own)]))[1].append((other_key, other))
    examples: list[TrainingExample] = []
    ties = tie_articles = 0
    for aid, (article, shown) in articles.items():
        levels = L.rank_levels(task, [summary for _, summary in shown], len(answers))
        if levels is None:
            ties += len(shown)
            tie_articles += 1
            continue
        for (source, summary), level in zip(shown, levels, strict=True):
            examples.append(TrainingExample(aid, source, int(source == OWN_SOURCE),
                                            individual_messages(prompts, question, article, summary),
                                            answers[level]))
    return examples, ties, tie_articles


def build_examples(spec: CellSpec, evaluator: CachedModel, dataset: Dataset | None = None) -> ExampleSet:
    """The training set of the cell's fine-tune, through the cell's own stages: the training articles (same
    length rule), the evaluator's own summaries (the base model's cached handle, so they are shared with every
    cell) and each other source's, then the pairs and the evaluation's pairwise prompt."""
    ft = spec.finetune
    task = ft.task.value
    dataset = dataset if dataset is not None else load_dataset(require_root(ft.dataset))
    n = ft.n_articles
    if len(dataset.articles) < n:
        raise DataError(f"finetune_task.n_articles={n} but the fine-tune dataset {dataset.name!r} has only "
                        f"{len(dataset.articles)} articles from offset {ft.dataset.offset}.")
    others = available_others(spec.evaluator.name, ft.settings.others, ft.dataset.kind.value == "paper",
                              list(dataset.imported))
    if not others:
        raise DataError(f"The fine-tune dataset {dataset.name!r} has no other summaries to pair with the evaluator's.")
    for o in others:
        if o != HUMAN and o not in dataset.imported:
            raise ConfigError(f"finetune_task.others names {o!r}, which dataset {dataset.name!r} does not carry "
                              f"(it has: human{''.join(', ' + k for k in dataset.imported if k != HUMAN)}).")
    selection = select_articles(dataset.articles, [spec.evaluator], spec.summaries.max_new_tokens, spec.articles)
    skipped: dict[str, int] = {}
    for why in selection.excluded.values():  # an unusable article costs one pair per other source
        skipped[why] = skipped.get(why, 0) + len(others)
    rules = spec.summaries
    own = generate_summaries(evaluator, spec.evaluator, spec.prompts, dataset.task, selection.usable,
                             spec.summaries.max_new_tokens, rules, source="own")
    pairs = []
    for other_key in others:
        other = dataset_summaries(dataset, other_key, selection.usable, rules)
        made = make_pairs(selection.usable, own, other)
        for why in made.excluded.values():
            skipped[why] = skipped.get(why, 0) + 1
        pairs += [(p.article_id, p.article, p.own, other_key, p.other) for p in made.pairs]
    if task in L.INDIVIDUAL_TASKS:
        examples, ties, tie_pairs = score_examples(task, ft.question, spec.prompts, pairs)
    else:
        examples, ties, tie_pairs = label_examples(task, ft.question, spec.prompts, pairs, int(ft.settings.seed))
    return ExampleSet(examples=examples, task=task, question=ft.question, dataset=dataset.name, n_articles=n,
                      train_article_ids=[a.id for a in dataset.articles], others=others, n_pairs=len(pairs),
                      n_ties_dropped=ties, n_tie_pairs=tie_pairs, skipped=skipped,
                      n_articles_truncated=len(selection.truncated))


def require_root(dataset):
    """The fine-tune dataset, which must know where the paper's files are when it is a paper dataset."""
    if dataset.kind.value == "paper" and not dataset.root:
        raise ConfigError(f"finetune_dataset={dataset.name} needs the paper data's folder: add "
                          f"finetune_dataset.root=PATH (or dataset.root=PATH, or set SELFPREF_PAPER_DATA).")
    return dataset
