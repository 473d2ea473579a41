"""An imported cell, and the sweep folder the imports write: ordinary cell directories (summary.json and
results.jsonl, the record schema's), a manifest of what was read and left out, and a table at the top.

The folder is built beside its destination and moved into place at the end, so a failed import leaves no
half-written sweep; an existing destination is replaced only when asked (``replace``), else refused."""

from __future__ import annotations

import csv
import io
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..records.atomic import atomic_write_json, atomic_write_jsonl, atomic_write_text
from ..records.schema import RESULTS_FILE, SUMMARY_FILE, CellCoordinates, Item
from ..records.scores import question_stats, summary_record

MANIFEST_FILE = "import.json"  # what was read, from where, what was left out and why, the defects flagged
ORIGIN_KEY = "origin"  # an item's provenance: {"kind": "imported", "format", "file", "row"}
IMPORT_BLOCK = "imported"  # summary.json's block: the source's name for the evaluator, files, defects
CONFIDENCE = 0.95


class ImportInputError(DataError):
    """A bad input file (truncated, corrupt, an unknown model, a missing field): one paragraph naming it."""


@dataclass
class ImportedCell:
    """One cell's worth of imported judgements: its coordinates, its items (each verdict holding the imported
    score and the project's reading of it), the defects of its data and where it came from."""

    coordinates: CellCoordinates
    questions: Sequence[str]
    items: list[Item] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    block: dict[str, Any] = field(default_factory=dict)  # summary.json[IMPORT_BLOCK]
    own_summaries: dict[str, Any] | None = None
    finetune: dict[str, Any] | None = None  # summary.json's finetune block, where the source names the model

    @property
    def directory(self) -> str:
        """The cell's folder under the sweep: setting / label / dataset / evaluator name / source."""
        c = self.coordinates
        name = self.block.get("evaluator_name") or c.evaluator
        return "/".join(_safe(p) for p in (c.setting, f"label_{c.label}", c.dataset, name, c.source))

    def summary_json(self) -> dict[str, Any]:
        stats = {q: question_stats(self.items, q, CONFIDENCE) for q in self.questions}
        summary = summary_record(
            self.items, self.questions, stats, cell=self.coordinates.to_json(), n_articles=len(self.items),
            n_truncated_articles=0, min_answer_mass=0.0, own_summaries=self.own_summaries,
            warnings=list(self.warnings), elapsed_s=0.0, extra={"model_calls": 0, "cache_hits": 0,
                                                                IMPORT_BLOCK: self.block,
                                                                **({"finetune": self.finetune} if self.finetune
                                                                   else {})})
        return summary.to_json()


def _safe(part: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in str(part))
    return keep.strip(".") or "_"


def prepare_destination(out: Path, replace: bool) -> None:
    """Refuse an existing destination unless ``replace`` (checked before any work is done)."""
    if out.exists() and not replace:
        raise ImportInputError(
            f"{out} already exists. Nothing was written. Pass --replace to replace it (the new sweep is built "
            f"beside it and swapped in only when complete), or choose another --out.")
    if out.exists() and not out.is_dir():
        raise ImportInputError(f"{out} exists and is not a folder; nothing was written.")


class SweepWriter:
    """Writes cells into a staging folder beside ``out`` as they come (so memory holds one cell at a time) and
    swaps the folder in for ``out`` only at ``finish``; leaving the ``with`` block without finishing (an error)
    removes the staging folder, so no half-written sweep is ever left at ``out``."""

    def __init__(self, out: Path, replace: bool):
        self.out, self.replace = Path(out), replace
        prepare_destination(self.out, replace)
        self.staging = self.out.parent / f".{self.out.name}.importing-{os.getpid()}"
        self._seen: dict[str, int] = {}
        self.n_cells = 0

    def __enter__(self) -> SweepWriter:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir()
        return self

    def __exit__(self, *exc: Any) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)  # gone already after finish()

    def add(self, cell: ImportedCell) -> Path:
        rel = cell.directory
        self._seen[rel] = self._seen.get(rel, 0) + 1
        cell_dir = self.staging / (rel if self._seen[rel] == 1 else f"{rel}#{self._seen[rel]}")
        cell_dir.mkdir(parents=True)
        atomic_write_jsonl(cell_dir / RESULTS_FILE, [it.to_json() for it in cell.items])
        atomic_write_json(cell_dir / SUMMARY_FILE, cell.summary_json())
        self.n_cells += 1
        return cell_dir

    def finish(self, manifest: Mapping[str, Any], tables: Mapping[str, list[dict[str, Any]]]) -> Path:
        """The manifest and the tables (file name -> rows) beside the cells; then the folder is swapped in."""
        atomic_write_json(self.staging / MANIFEST_FILE, dict(manifest))
        for name, rows in tables.items():
            atomic_write_text(self.staging / name, csv_text(rows))
        prepare_destination(self.out, self.replace)  # another process may have made it meanwhile
        _swap_in(self.staging, self.out)
        return self.out


def _swap_in(staging: Path, out: Path) -> None:
    """Move the finished folder into place; an old one is moved aside first and removed only after."""
    old = out.parent / f".{out.name}.replaced-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(staging, out)
    shutil.rmtree(old, ignore_errors=True)


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as CSV, columns in first-seen order; floats at full precision, None as empty."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()
