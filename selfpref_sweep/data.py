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
from typing import Dict, List, Optional

from omegaconf import DictConfig

from .config import enum_value
from .errors import DataError

# The paper's sources, by the keys of its file names.
PAPER_SOURCES = ("human", "gpt4", "gpt35", "claude", "llama")


@dataclass(frozen=True)
class Article:
    id: str
    text: str
    reference: Optional[str] = None  # the human reference summary, when the dataset has one


@dataclass
class Dataset:
    name: str
    task: str  # "xsum" or "cnn": which summarization prompt fits
    articles: List[Article]
    # Summaries that come with the dataset, by source key (e.g. the paper's "gpt4"): id -> summary.
    imported: Dict[str, Dict[str, str]] = field(default_factory=dict)

    def summary(self, key: str, article_id: str) -> Optional[str]:
        return self.imported.get(key, {}).get(article_id)


def _read_json(path: Path, what: str):
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except UnicodeDecodeError as exc:
        raise DataError(f"{what} is not UTF-8 text: {path} ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{what} is not valid JSON: {path} (line {exc.lineno}: {exc.msg})") from exc


def _select(articles: List[Article], cfg: DictConfig) -> List[Article]:
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
    return Dataset(cfg.name, cfg.task, _select(articles, cfg))


def load_paper(cfg: DictConfig) -> Dataset:
    if not getattr(cfg, "root", None):
        raise DataError(f"Dataset {cfg.name!r} needs the paper data's folder: add dataset.root=PATH "
                        f"(e.g. dataset.root=../shared/paper-data) or set SELFPREF_PAPER_DATA.")
    root = Path(cfg.root).expanduser()
    if not root.is_dir():
        raise DataError(f"dataset.root={cfg.root!r} is not a folder (resolved to {root.resolve()}).")
    ds = cfg.paper_name
    raw = _read_json(root / "articles" / f"{ds}_train_articles.json", f"The {ds} article file")
    imported = {}
    for key in PAPER_SOURCES:
        path = root / "summaries" / ds / f"{ds}_train_{key}_responses.json"
        if path.exists():
            imported[key] = {str(k): v for k, v in _read_json(path, f"The {key} summaries").items()}
    human = imported.get("human", {})
    articles = [Article(str(k), v, human.get(str(k))) for k, v in raw.items()]
    return Dataset(cfg.name, cfg.task, _select(articles, cfg), imported)


def load_hf(cfg: DictConfig) -> Dataset:
    import datasets

    try:
        rows = datasets.load_dataset(cfg.hf_path, getattr(cfg, "hf_name", None), split=cfg.split)
    except Exception as exc:  # hub unreachable, bad path or split: say which and how to fix it
        raise DataError(
            f"Could not load Hugging Face dataset {cfg.hf_path!r} (name={getattr(cfg, 'hf_name', None)}, split={cfg.split}): "
            f"{type(exc).__name__}: {exc}. Offline, point dataset.hf_path at a local copy."
        ) from exc
    missing = [f for f in (cfg.id_field, cfg.text_field, cfg.summary_field) if f not in rows.column_names]
    if missing:
        raise DataError(f"Dataset {cfg.hf_path!r} has no column(s) {missing}; columns: {rows.column_names}.")
    # Select before materializing: the full train splits hold 200k-300k articles.
    n = getattr(cfg, "n_articles", None)
    if getattr(cfg, "seed", None) is None and n is not None:
        rows = rows.select(range(min(len(rows), int(getattr(cfg, "offset", None) or 0) + int(n))))
    articles = [Article(str(r[cfg.id_field]), r[cfg.text_field], r[cfg.summary_field]) for r in rows]
    return Dataset(cfg.name, cfg.task, _select(articles, cfg))


LOADERS = {"demo": load_demo, "paper": load_paper, "hf": load_hf}


def load_dataset(cfg: DictConfig) -> Dataset:
    kind = str(enum_value(cfg.kind))
    return LOADERS[kind](cfg)
