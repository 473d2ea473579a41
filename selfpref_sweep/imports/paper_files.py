"""The paper's published files: where each lies in the authors' layout, what its name says (evaluator,
fine-tune, dataset, setting, label condition), and their rows read with errors that name the file.

Layout (the authors' repository; each judgement file ``X.json`` may also be ``X.json.xz``; the articles and
summaries are plain JSON, read as the project's paper datasets read them):

    articles/{xsum,cnn}_train_articles.json                       the article order (held-out keys[N:])
    summaries/{ds}/{ds}_train_{source}_responses.json             the summaries (optional: word counts)
    results/{ds}/{evaluator}_results.json                         pairwise
    individual_setting_results/{recognition,score}_results/{ds}/{evaluator}_results.json
    label_results/{correct,wrong,random}_label_results/{ds}/{evaluator}_results.json
    label_results/raw_llama_label_results/{ds}_label_llama_raw.json

``{evaluator}`` is ``gpt4``, ``gpt35``, ``llama`` or ``{trained_on}_{task}_ft_{base}`` (task 2, 10 or 500:
self-recognition on N articles; or a control: always_1, random, readability, length, vowelcount)."""

from __future__ import annotations

import json
import lzma
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cell.dataset_loaders import PAPER_SOURCES, read_summaries_file
from ..config import LabelName
from .imported import ImportInputError

SOURCES = PAPER_SOURCES  # the authors' source keys
BASES = ("gpt4", "gpt35", "llama")
LABEL_CONDITIONS = tuple(c.value for c in LabelName if c != LabelName.none)  # the label runs' folders
# The authors' base names -> this project's evaluator names (conf/evaluator/).
EVALUATOR_BY_BASE = {"gpt4": "gpt4", "gpt35": "gpt35", "llama": "llama2"}
# The authors' fine-tune tasks -> (finetune_task, N articles trained on). Controls trained on 500 articles.
TASKS = {"2": ("recognition", 2), "10": ("recognition", 10), "500": ("recognition", 500),
         "always_1": ("always_1", 500), "random": ("random", 500), "readability": ("readability", 500),
         "length": ("length", 500), "vowelcount": ("vowel", 500)}
_FT_NAME = re.compile(r"^(xsum|cnn)_(2|10|500|always_1|random|readability|length|vowelcount)_ft_(gpt35|llama)$")

PAIRWISE, RECOGNITION, SCORE, LABEL = "pairwise", "recognition", "score", "label"


def source_name(key: str) -> str:
    """The authors' source key as this project names the source (conf/source/): human, paper_<key>."""
    return key if key == "human" else f"paper_{key}"


def dataset_name(ds: str) -> str:
    return f"paper_{ds}"


@dataclass(frozen=True)
class PaperModel:
    """An evaluator as the authors name it: a base model, or a fine-tune of one."""

    name: str  # verbatim, e.g. xsum_10_ft_gpt35
    base: str  # gpt4 | gpt35 | llama
    task: str | None = None  # the authors' task (2, 10, 500, always_1, ...); None: not fine-tuned
    trained_on: str | None = None  # xsum | cnn

    @classmethod
    def parse(cls, name: str, where: str) -> PaperModel:
        if name in BASES:
            return cls(name, name)
        m = _FT_NAME.match(name)
        if m is None:
            raise ImportInputError(
                f"{where}: unknown model name {name!r}. Known: {', '.join(BASES)}, and fine-tunes named "
                f"{{xsum|cnn}}_{{2|10|500|always_1|random|readability|length|vowelcount}}_ft_{{gpt35|llama}}.")
        return cls(name, m.group(3), m.group(2), m.group(1))

    @property
    def evaluator(self) -> str:
        return EVALUATOR_BY_BASE[self.base]

    @property
    def finetune_task(self) -> str:
        return "none" if self.task is None else TASKS[self.task][0]

    @property
    def n_articles(self) -> int:
        """Articles trained on, which the evaluation leaves out (keys[N:]); 0 when not fine-tuned."""
        return 0 if self.task is None else TASKS[self.task][1]


@dataclass(frozen=True)
class PaperFile:
    path: Path
    rel: str  # the path under ROOT, as the authors name it (without .xz)
    kind: str  # PAIRWISE | RECOGNITION | SCORE | LABEL
    dataset: str  # xsum | cnn: the data the evaluation ran on
    model: PaperModel
    label: str = "none"


_PATTERNS = (
    (PAIRWISE, "none", re.compile(r"^results/(xsum|cnn)/(.+)_results\.json$")),
    (RECOGNITION, "none",
     re.compile(r"^individual_setting_results/recognition_results/(xsum|cnn)/(.+)_results\.json$")),
    (SCORE, "none", re.compile(r"^individual_setting_results/score_results/(xsum|cnn)/(.+)_results\.json$")),
    *((LABEL, lab, re.compile(rf"^label_results/{lab}_label_results/(xsum|cnn)/(.+)_results\.json$"))
      for lab in LABEL_CONDITIONS),
)
RAW_LLAMA_LABELS = re.compile(r"^label_results/raw_llama_label_results/(xsum|cnn)_label_llama_raw\.json$")
_FOLDERS = ("results", "individual_setting_results", "label_results")


def _plain(rel: str) -> str:
    return rel[:-3] if rel.endswith(".xz") else rel


def judgement_paths(root: Path) -> dict[str, Path]:
    """rel (without .xz) -> path, for every JSON under the judgement folders; a plain .json wins over .xz."""
    found: dict[str, Path] = {}
    for folder in _FOLDERS:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.json*")):
            if path.name.endswith((".json", ".json.xz")):
                rel = _plain(path.relative_to(root).as_posix())
                if rel not in found or path.suffix == ".json":
                    found[rel] = path
    return found


def catalogue(root: Path) -> tuple[list[PaperFile], dict[str, Path], list[str]]:
    """The judgement files under ROOT (kind, dataset, evaluator), the raw Llama label files by dataset (not read:
    the Llama label files store the same values), and the JSON files under the judgement folders that match no
    known name (reported, not read)."""
    files, raw, unknown = [], {}, []
    for rel, path in judgement_paths(root).items():
        m_raw = RAW_LLAMA_LABELS.match(rel)
        if m_raw:
            raw[m_raw.group(1)] = path
            continue
        for kind, label, pattern in _PATTERNS:
            m = pattern.match(rel)
            if m:
                files.append(PaperFile(path, rel, kind, m.group(1), PaperModel.parse(m.group(2), rel), label))
                break
        else:
            unknown.append(rel)
    return files, raw, unknown


def read_json(path: Path, rel: str) -> Any:
    """A JSON file, plain or xz-compressed; a truncated or corrupt one is an error naming it."""
    try:
        if path.name.endswith(".xz"):
            with lzma.open(path, "rt", encoding="utf-8") as fh:
                return json.load(fh)
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (lzma.LZMAError, EOFError) as exc:
        raise ImportInputError(f"{rel} ({path}) is truncated or not valid xz data ({exc}); nothing was "
                               f"written. Fetch the file again.") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ImportInputError(f"{rel} ({path}) is truncated or not valid JSON ({exc}); nothing was written. "
                               f"Fetch the file again.") from exc
    except OSError as exc:
        raise ImportInputError(f"{rel} ({path}) could not be read ({exc}); nothing was written.") from exc


def read_rows(pf: PaperFile, required: tuple[str, ...] = ("key", "model")) -> list[dict[str, Any]]:
    """A judgement file's rows: a JSON list of objects, each with ``required`` fields (else an error naming
    the file and the row)."""
    data = read_json(pf.path, pf.rel)
    if not isinstance(data, list):
        raise ImportInputError(f"{pf.rel}: expected a JSON list of rows, found {type(data).__name__}; nothing "
                               f"was written.")
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise ImportInputError(f"{pf.rel}, row {i}: expected an object, found {type(row).__name__}; nothing "
                                   f"was written.")
        missing = [f for f in required if f not in row]
        if missing:
            raise ImportInputError(f"{pf.rel}, row {i}: missing field(s) {', '.join(missing)}; nothing was "
                                   f"written.")
    return data


def read_articles(root: Path, ds: str) -> list[str]:
    """The dataset's article ids in the authors' order (their held-out filter is keys[N:]), read as the paper
    dataset reads them (dataset_loaders.read_summaries_file: a JSON object of id -> text, ids unique)."""
    path = root / "articles" / f"{ds}_train_articles.json"
    if not path.is_file():
        raise ImportInputError(f"{root} has no articles/{ds}_train_articles.json: the article order defines which "
                               f"articles a fine-tune trained on (keys[:N]) and which rows are missing. Point ROOT at "
                               f"the folder that holds articles/, results/, individual_setting_results/ and "
                               f"label_results/.")
    return [str(k) for k in read_summaries_file(path, f"The {ds} article file")]


def read_summaries(root: Path, ds: str) -> dict[str, dict[str, str | None]]:
    """source key -> {article_id: summary}, for each source whose file is present (optional), read as the paper
    dataset reads them."""
    out = {}
    for key in SOURCES:
        path = root / "summaries" / ds / f"{ds}_train_{key}_responses.json"
        if path.is_file():
            out[key] = read_summaries_file(path, f"The {key} summaries file")
    return out
