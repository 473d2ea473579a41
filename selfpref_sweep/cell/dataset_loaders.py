"""Articles, their reference summaries, and summaries imported with a dataset.

Three loaders: the demo set shipped in the package; the paper's files in the authors' layout
(`articles/{ds}_train_articles.json`, `summaries/{ds}/{ds}_train_{source}_responses.json`); and any
Hugging Face dataset (EdinburghNLP/xsum, cnn_dailymail 3.0.0, or a local copy) through `datasets`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from omegaconf import DictConfig

from ..config import enum_value
from ..errors import DataError

# The paper's sources, by the keys of its file names.
PAPER_SOURCES = ("human", "gpt4", "gpt35", "claude", "llama")


@dataclass(frozen=True)
class Article:
    id: str
    text: str
    reference: str | None = None  # the human reference summary, when the dataset has one


@dataclass
class Dataset:
    name: str
    task: str  # "xsum" or "cnn": which summarization prompt fits
    articles: list[Article]
    # Summaries that come with the dataset, by source key (e.g. the paper's "gpt4"): id -> summary.
    imported: dict[str, dict[str, str]] = field(default_factory=dict)
    n_available: int | None = None  # articles in the dataset before offset and n_articles selected some

    def summary(self, key: str, article_id: str) -> str | None:
        return self.imported.get(key, {}).get(article_id)


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _refuse_duplicates(pairs):
    """json object_pairs_hook: json.load keeps the last of two equal keys; a dataset must not."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _read_json(path: Path, what: str):
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    if not path.is_file():
        raise DataError(f"{what} is not a file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f, object_pairs_hook=_refuse_duplicates)
    except UnicodeDecodeError as exc:
        raise DataError(f"{what} is not UTF-8 text: {path} ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{what} is not valid JSON: {path} (line {exc.lineno}: {exc.msg})") from exc
    except _DuplicateKey as exc:
        raise DataError(f"{what} has the id {exc.key!r} twice: {path}. Ids must be unique (JSON would silently "
                        f"keep the last one).") from None


def _texts_by_id(raw, path: Path, what: str) -> dict[str, str | None]:
    """A source file's content as id -> text. It must be a JSON object of id -> string; a null or empty
    text is kept (the cell counts it as an exclusion), any other value is an error naming the id."""
    if not isinstance(raw, dict):
        raise DataError(f"{what} must be a JSON object mapping each id to its text, not a JSON "
                        f"{_json_type(raw)}: {path}")
    for key, value in raw.items():
        if value is not None and not isinstance(value, str):
            raise DataError(f"{what} has {_a(_json_type(value))} for id {key!r} where the text should be: {path}. "
                            f"Each value must be a string (or null when missing).")
    return raw


def read_summaries_file(path: Path, what: str) -> dict[str, str | None]:
    """A JSON object {id: text} from a file (articles or summaries), every value checked."""
    return _texts_by_id(_read_json(path, what), path, what)


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def _json_type(value) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def selection_warnings(cfg: DictConfig, dataset: Dataset) -> list[str]:
    """What a user should hear about the selection's size: fewer articles than dataset.n_articles asked for
    (a small dataset, or an offset that leaves fewer). Empty when the selection is what was asked."""
    n = getattr(cfg, "n_articles", None)
    available = dataset.n_available
    if n is None or available is None or len(dataset.articles) >= int(n):
        return []
    offset = int(getattr(cfg, "offset", None) or 0)  # the effective one: an in-domain fine-tune's articles come first
    after = f" ({max(0, available - offset)} after skipping the first {offset})" if offset else ""
    return [f"dataset.n_articles={int(n)} but dataset {dataset.name!r} has {available} articles{after}: "
            f"judging {len(dataset.articles)}."]


def _select(articles: list[Article], cfg: DictConfig) -> list[Article]:
    ids = [a.id for a in articles]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise DataError(f"Dataset {cfg.name!r} has duplicate article ids (e.g. {dup}); ids must be unique.")
    if getattr(cfg, "seed", None) is not None:
        articles = list(articles)
        random.Random(int(cfg.seed)).shuffle(articles)
    start = int(getattr(cfg, "offset", None) or 0)
    n = getattr(cfg, "n_articles", None)
    return articles[start:] if n is None else articles[start : start + int(n)]


def load_demo(cfg: DictConfig) -> Dataset:
    rows = json.loads(resources.files("selfpref_sweep").joinpath("data/demo_articles.json").read_text("utf-8"))
    articles = [Article(r["id"], r["article"], r["summary"]) for r in rows]
    return Dataset(cfg.name, cfg.task, _select(articles, cfg), n_available=len(articles))


def load_paper(cfg: DictConfig) -> Dataset:
    if not getattr(cfg, "root", None):
        raise DataError(f"Dataset {cfg.name!r} needs the paper data's folder: add dataset.root=PATH "
                        f"(e.g. dataset.root=../shared/paper-data) or set SELFPREF_PAPER_DATA.")
    root = Path(cfg.root).expanduser()
    if not root.is_dir():
        raise DataError(f"dataset.root={cfg.root!r} is not a folder (resolved to {root.resolve()}).")
    ds = cfg.paper_name
    path = root / "articles" / f"{ds}_train_articles.json"
    raw = read_summaries_file(path, f"The {ds} article file")
    if not raw:
        raise DataError(f"The {ds} article file holds no articles (an empty JSON object): {path}")
    imported = {}
    for key in PAPER_SOURCES:
        path = root / "summaries" / ds / f"{ds}_train_{key}_responses.json"
        if path.exists():
            imported[key] = read_summaries_file(path, f"The {key} summaries file")
    human = imported.get("human", {})
    # A null article is a missing text: kept as empty, so the cell counts it (empty_article).
    articles = [Article(k, v or "", human.get(k)) for k, v in raw.items()]
    return Dataset(cfg.name, cfg.task, _select(articles, cfg), imported, n_available=len(articles))


def load_hf(cfg: DictConfig) -> Dataset:
    import datasets

    try:
        rows = datasets.load_dataset(cfg.hf_path, getattr(cfg, "hf_name", None), split=cfg.split)
    except Exception as exc:  # hub unreachable, bad path or split: say which and how to fix it
        raise DataError(
            f"Could not load Hugging Face dataset {cfg.hf_path!r} "
            f"(name={getattr(cfg, 'hf_name', None)}, split={cfg.split}): "
            f"{type(exc).__name__}: {exc}. Offline, point dataset.hf_path at a local copy."
        ) from exc
    missing = [f for f in (cfg.id_field, cfg.text_field, cfg.summary_field) if f not in rows.column_names]
    if missing:
        raise DataError(f"Dataset {cfg.hf_path!r} has no column(s) {missing}; columns: {rows.column_names}.")
    # Select before materializing: the full train splits hold 200k-300k articles.
    n_available = len(rows)
    n = getattr(cfg, "n_articles", None)
    if getattr(cfg, "seed", None) is None and n is not None:
        rows = rows.select(range(min(len(rows), int(getattr(cfg, "offset", None) or 0) + int(n))))
    articles = []
    for r in rows:
        aid = str(r[cfg.id_field])
        text, reference = r[cfg.text_field], r[cfg.summary_field]
        for field_name, value in ((cfg.text_field, text), (cfg.summary_field, reference)):
            if value is not None and not isinstance(value, str):
                raise DataError(f"Dataset {cfg.hf_path!r} has {_a(_json_type(value))} in column {field_name!r} for "
                                f"id {aid!r}; it must be text.")
        articles.append(Article(aid, text or "", reference))  # a missing text: counted as empty_article
    return Dataset(cfg.name, cfg.task, _select(articles, cfg), n_available=n_available)


LOADERS = {"demo": load_demo, "paper": load_paper, "hf": load_hf}


def load_dataset(cfg: DictConfig) -> Dataset:
    kind = str(enum_value(cfg.kind))
    return LOADERS[kind](cfg)
