"""Read the cells of one or more sweep directories into pandas tables.

A sweep directory is a Hydra multirun directory: one sub-directory per cell (``0/``, ``1/``, ...),
each with ``.hydra/`` from the start of the cell and, once the cell finished, ``summary.json`` and
``results.jsonl``. Every cell directory found ends up either in ``SweepData.cells`` (complete) or in
``SweepData.problems`` (failed, incomplete, unreadable) - never dropped without a trace. Complete
cells with partial data (no results.jsonl, null means) are kept and also listed as warnings.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pandas as pd
import yaml

from .discover import find_cell_dirs

from ..record import CELL_DEFAULTS as _CELL_DEFAULTS
from ..record import CELL_KEYS, ERROR_FILE, RESULTS_FILE, STATUS_COMPLETE, SUMMARY_FILE, transfer_of

STATUS_FAILED = "failed"
STATUS_INCOMPLETE = "incomplete"
STATUS_WARNING = "warning"  # complete, but part of its data could not be used


@dataclass
class CellProblem:
    """One cell that could not be used fully, with the reason, for the report's problem list."""

    cell: str  # display id: "<sweep name>/<job dir>"
    path: str
    status: str  # STATUS_FAILED | STATUS_INCOMPLETE | STATUS_WARNING
    reason: str
    overrides: str = ""
    error: str = ""  # contents of cell.error.txt, if any


@dataclass
class SweepData:
    """Everything the analysis reads from disk."""

    sweep_dirs: list[Path]
    cells: pd.DataFrame  # one row per complete cell (see _cell_row for the columns)
    items: pd.DataFrame  # one row per judged item of a complete cell
    problems: list[CellProblem] = field(default_factory=list)
    n_cell_dirs: int = 0

    @property
    def problems_df(self) -> pd.DataFrame:
        cols = ["cell", "status", "reason", "overrides", "error", "path"]
        return pd.DataFrame([asdict(p) for p in self.problems], columns=cols)


def num(value: Any) -> float:
    """A float, or NaN for null / non-numeric / non-finite values (metrics may be null)."""
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def derive_transfer(finetune_task: Any, finetune_dataset: Any, dataset: Any) -> str:
    """The transfer condition of an older summary.json that lacks it (the record schema's rule)."""
    return transfer_of(finetune_task, finetune_dataset, dataset).value


def evaluator_variant(row: dict[str, Any] | pd.Series) -> str:
    """A readable name for the judging model: the evaluator plus its fine-tune, if any."""
    task = row.get("finetune_task")
    if task in (None, "none"):
        return str(row.get("evaluator"))
    n = row.get("finetune_n_articles")
    n_txt = "" if n is None or (isinstance(n, float) and math.isnan(n)) else f", n={int(n)}"
    return f"{row.get('evaluator')} [ft {task} on {row.get('finetune_dataset')}{n_txt}]"


def read_overrides(cell_dir: Path) -> str:
    """The cell's Hydra overrides as one line ("evaluator=qwen05 source=human"), "" if none."""
    path = cell_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return ""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return f"(unreadable overrides.yaml: {exc})"
    if isinstance(data, list):
        return " ".join(str(x) for x in data)
    return "" if data is None else str(data)


def _read_error(cell_dir: Path) -> str:
    path = cell_dir / ERROR_FILE
    if not path.is_file():
        return ""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError as exc:
        return f"(unreadable cell.error.txt: {exc})"


def _sweep_labels(sweep_dirs: Sequence[Path]) -> list[str]:
    # Sweep dirs are usually named by time ("20-30-00"); two sweeps may share a name.
    labels: list[str] = []
    for d in sweep_dirs:
        base = d.name or str(d)
        label, k = base, 2
        while label in labels:
            label, k = f"{base}#{k}", k + 1
        labels.append(label)
    return labels


def _metric(summary: dict[str, Any], name: str, prefix: str) -> dict[str, float]:
    block = summary.get(name)
    block = block if isinstance(block, dict) else {}
    return {
        f"{prefix}_mean": num(block.get("mean")),
        f"{prefix}_ci_low": num(block.get("ci_low")),
        f"{prefix}_ci_high": num(block.get("ci_high")),
        f"{prefix}_n": num(block.get("n")),
        f"{prefix}_n_excluded": num(block.get("n_excluded")),
    }


def _cell_row(summary: dict[str, Any], cell_id: str, cell_dir: Path, sweep: str) -> dict[str, Any]:
    cell = summary.get("cell")
    cell = cell if isinstance(cell, dict) else {}
    row: dict[str, Any] = {"cell_id": cell_id, "sweep": sweep, "path": str(cell_dir)}
    for key in CELL_KEYS:
        value = cell.get(key, _CELL_DEFAULTS.get(key))
        row[key] = None if value is None else (value if key == "finetune_n_articles" else str(value))
    if not row.get("transfer"):
        row["transfer"] = derive_transfer(row["finetune_task"], row["finetune_dataset"], row["dataset"])
    row["finetune_n_articles"] = num(row["finetune_n_articles"])
    row["evaluator_variant"] = evaluator_variant(row)
    row["is_finetuned"] = row["finetune_task"] not in (None, "none")
    for key in ("n_articles", "n_items", "n_excluded", "model_calls", "elapsed_s"):
        row[key] = num(summary.get(key))
    row.update(_metric(summary, "recognition", "rec"))
    row.update(_metric(summary, "preference", "pref"))
    pc = summary.get("position_consistency")
    pc = pc if isinstance(pc, dict) else {}
    row["pc_recognition"] = num(pc.get("recognition"))
    row["pc_preference"] = num(pc.get("preference"))
    excl = summary.get("exclusions")
    row["exclusions"] = {str(k): num(v) for k, v in excl.items()} if isinstance(excl, dict) else {}
    return row


def _score(block: Any) -> tuple[float, bool, Optional[str]]:
    if not isinstance(block, dict):
        return math.nan, True, "missing"
    reason = block.get("exclusion_reason")
    return num(block.get("score")), bool(block.get("excluded", False)), (None if reason is None else str(reason))


def _read_items(path: Path, base: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """Item rows of one results.jsonl and the number of lines that could not be parsed."""
    rows: list[dict[str, Any]] = []
    bad = 0
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if not isinstance(rec, dict) or rec.get("article_id") is None:
                bad += 1
                continue
            rec_score, rec_excl, rec_reason = _score(rec.get("recognition"))
            pref_score, pref_excl, pref_reason = _score(rec.get("preference"))
            rows.append(
                {
                    **base,
                    "article_id": str(rec["article_id"]),
                    "rec_score": rec_score,
                    "rec_excluded": rec_excl,
                    "rec_exclusion_reason": rec_reason,
                    "pref_score": pref_score,
                    "pref_excluded": pref_excl,
                    "pref_exclusion_reason": pref_reason,
                }
            )
    return rows, bad


_METRIC_COLS = tuple(f"{p}_{k}" for p in ("rec", "pref") for k in ("mean", "ci_low", "ci_high", "n", "n_excluded"))
CELL_COLUMNS: tuple[str, ...] = (
    ("cell_id", "sweep", "path")
    + CELL_KEYS
    + ("evaluator_variant", "is_finetuned", "n_articles", "n_items", "n_excluded", "model_calls", "elapsed_s")
    + _METRIC_COLS
    + ("pc_recognition", "pc_preference", "exclusions", "overrides")
)

# Cell attributes copied onto every item row, for grouping and clustering.
_ITEM_CELL_COLS = ("cell_id", "evaluator_variant", "is_finetuned") + CELL_KEYS
ITEM_COLUMNS = _ITEM_CELL_COLS + (
    "article_id",
    "rec_score",
    "rec_excluded",
    "rec_exclusion_reason",
    "pref_score",
    "pref_excluded",
    "pref_exclusion_reason",
)


def load_sweeps(sweep_dirs: Iterable[str | Path]) -> SweepData:
    """Read every cell of every sweep dir. Raises FileNotFoundError for a missing sweep dir."""
    dirs = [Path(d).expanduser() for d in sweep_dirs]
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(f"sweep directory not found: {d}")
    cell_rows: list[dict[str, Any]] = []
    item_rows: list[dict[str, Any]] = []
    problems: list[CellProblem] = []
    n_cell_dirs = 0
    for sweep_dir, label in zip(dirs, _sweep_labels(dirs)):
        for cell_dir in find_cell_dirs(sweep_dir):
            n_cell_dirs += 1
            rel = cell_dir.relative_to(sweep_dir).as_posix()
            cell_id = label if rel == "." else f"{label}/{rel}"
            overrides = read_overrides(cell_dir)
            error = _read_error(cell_dir)

            def problem(status: str, reason: str) -> None:
                problems.append(CellProblem(cell_id, str(cell_dir), status, reason, overrides, error))

            summary_path = cell_dir / SUMMARY_FILE
            if not summary_path.is_file():
                if error:
                    problem(STATUS_FAILED, "failed: cell.error.txt present, no summary.json")
                else:
                    problem(STATUS_INCOMPLETE, "no summary.json (the cell did not finish)")
                continue
            try:
                summary = json.loads(summary_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                problem(STATUS_FAILED, f"unreadable summary.json: {exc}")
                continue
            if not isinstance(summary, dict):
                problem(STATUS_FAILED, "summary.json is not a JSON object")
                continue
            status = summary.get("status")
            if status != STATUS_COMPLETE:
                kind = STATUS_FAILED if (error or status in ("failed", "error")) else STATUS_INCOMPLETE
                problem(kind, f"summary.json status is {status!r}, not 'complete'")
                continue

            row = _cell_row(summary, cell_id, cell_dir, label)
            row["overrides"] = overrides
            cell_rows.append(row)
            if math.isnan(row["rec_mean"]) or math.isnan(row["pref_mean"]):
                missing = [m for m, k in (("recognition", "rec_mean"), ("preference", "pref_mean")) if math.isnan(row[k])]
                problem(STATUS_WARNING, f"{' and '.join(missing)} mean is null; cell left out of the cell-level fits")

            results_path = cell_dir / RESULTS_FILE
            if not results_path.is_file():
                problem(STATUS_WARNING, "no results.jsonl; cell left out of the item-level fits")
                continue
            base = {k: row[k] for k in _ITEM_CELL_COLS}
            try:
                rows, bad = _read_items(results_path, base)
            except OSError as exc:
                problem(STATUS_WARNING, f"unreadable results.jsonl ({exc}); cell left out of the item-level fits")
                continue
            item_rows.extend(rows)
            if bad:
                problem(STATUS_WARNING, f"{bad} malformed line(s) in results.jsonl skipped")

    cells = pd.DataFrame(cell_rows, columns=list(CELL_COLUMNS))
    items = pd.DataFrame(item_rows, columns=list(ITEM_COLUMNS))
    return SweepData(sweep_dirs=dirs, cells=cells, items=items, problems=problems, n_cell_dirs=n_cell_dirs)

