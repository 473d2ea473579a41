"""The record a cell leaves behind, in one place: its coordinates in the matrix, the transfer rule,
the files and field names of summary.json and results.jsonl, and the W&B group of a sweep.

The cell writes these records, run.py names the W&B group, and the analysis reads them back; all of
them import this module, so the three can never disagree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Dict, Optional

# Files in a cell's directory.
SUMMARY_FILE = "summary.json"
RESULTS_FILE = "results.jsonl"
ERROR_FILE = "cell.error.txt"
PLAN_FILE = "plan.json"
INVERSE_FILE = "inverse.jsonl"

# summary.json["status"]
STATUS_COMPLETE = "complete"
STATUS_SKIPPED = "skipped"
STATUS_PLAN = "plan"

QUESTIONS = ("recognition", "preference")

# results.jsonl: one line per article. Per question, a verdict with these fields (see scoring.py).
ITEM_ID = "article_id"
ITEM_SOURCE = "source"
SCORE = "score"
LOGODDS = "logodds"  # the position-debiased log-odds score (scoring.pair_logodds / individual_logodds)
EXCLUDED = "excluded"
EXCLUSION_REASON = "exclusion_reason"

# Values a missing coordinate takes in an older summary.json.
CELL_DEFAULTS: Dict[str, Any] = {"setting": "pairwise", "label": "none", "finetune_task": "none"}


class Transfer(str, Enum):
    """Where a fine-tuned evaluator is evaluated, relative to what it was fine-tuned on."""

    none = "none"  # not fine-tuned
    in_domain = "in_domain"  # evaluated on the dataset it was fine-tuned on
    cross_dataset = "cross_dataset"  # evaluated on another dataset


def transfer_of(finetune_task: Any, finetune_dataset: Optional[str], dataset: str) -> Transfer:
    """The transfer condition, by dataset name."""
    if finetune_task in (None, "none") or getattr(finetune_task, "value", None) == "none":
        return Transfer.none
    return Transfer.in_domain if finetune_dataset == dataset else Transfer.cross_dataset


@dataclass(frozen=True)
class CellCoordinates:
    """A cell's place in the matrix: summary.json["cell"]; the analysis groups cells by these."""

    evaluator: str
    source: str
    dataset: str
    setting: str
    label: str
    finetune_task: str
    finetune_dataset: Optional[str]
    finetune_n_articles: Optional[int]
    transfer: str

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)

    @property
    def run_name(self) -> str:
        """The cell's W&B run name."""
        name = f"{self.evaluator}-vs-{self.source}-{self.dataset}-{self.setting}"
        if self.finetune_task != "none":
            name += f"-ft_{self.finetune_task}"
        if self.label != "none":
            name += f"-label_{self.label}"
        return name


CELL_KEYS = tuple(CellCoordinates.__dataclass_fields__)


def wandb_group_name(sweep_dir: str | Path) -> str:
    """The W&B group of a sweep's cell runs and of its analysis run: the sweep dir as Hydra spelled
    it, '/' -> '_'."""
    return Path(sweep_dir).as_posix().replace("/", "_")
