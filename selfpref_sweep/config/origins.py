"""Whose summaries a config names: the paper's key of a model that wrote some of its published summaries
(`paper_key_of`), and where an evaluator's "own" summaries come from (`own_origin`, from `evaluator.own_summaries`).

Read off the config alone, so the config's own checks (spec.py: a source that is the evaluator's own text) and
the cell's stages (cell/summaries.py, cell/results.py) read them from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..records.authors import PAPER_KEY_BY_MODEL_NAME, PAPER_SOURCE_PREFIX
from . import ModelConfig

HUMAN = "human"  # the dataset's reference summaries, as a source key
OWN_GENERATED, OWN_DATASET, OWN_PATH = "generated", "dataset", "path"  # summary.json "own_summaries" kinds


def paper_key_of(model_cfg: Any) -> str | None:
    """The key of the paper's summaries a model wrote (its `paper_key`, else by its name), or None."""
    return getattr(model_cfg, "paper_key", None) or PAPER_KEY_BY_MODEL_NAME.get(str(model_cfg.name))


@dataclass(frozen=True)
class OwnOrigin:
    """Where a cell's "own" summaries come from (`evaluator.own_summaries`)."""

    kind: str  # generated | dataset | path
    name: str  # the evaluator's name, the dataset source (paper_gpt35, human) or the path as given
    key: str | None = None  # kind=dataset: the dataset's summary key (gpt35, human)

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name}


def own_origin(evaluator: ModelConfig) -> OwnOrigin:
    """`evaluator.own_summaries` read as a dataset source (human, paper_<key>) or, otherwise, a file path."""
    value = evaluator.own_summaries
    if not value:
        return OwnOrigin(OWN_GENERATED, evaluator.name)
    if value == HUMAN:
        return OwnOrigin(OWN_DATASET, value, HUMAN)
    if value.startswith(PAPER_SOURCE_PREFIX):
        return OwnOrigin(OWN_DATASET, value, value[len(PAPER_SOURCE_PREFIX):])
    return OwnOrigin(OWN_PATH, value)
