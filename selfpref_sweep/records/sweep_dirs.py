"""Find the cell directories of a sweep (stdlib only: the Hydra callback uses it at exit time)."""

from __future__ import annotations

import os
from pathlib import Path

from .schema import SUMMARY_FILE

# Directories under a sweep that are never cells (our own output, W&B's offline runs).
_SKIP_DIRS = frozenset({"analysis", "wandb"})


def _natural_key(path: Path, root: Path) -> tuple:
    # Job dirs are numbers: sort 2 before 10.
    rel = path.relative_to(root).parts
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in rel)


def _is_cell_dir(path: Path) -> bool:
    return (path / ".hydra").is_dir() or (path / SUMMARY_FILE).is_file()


def find_cell_dirs(sweep_dir: Path) -> list[Path]:
    """Cell directories under a sweep: any directory holding ``.hydra/`` or ``summary.json``.

    Walks the tree rather than listing ``*/`` so that a custom ``hydra.sweep.subdir`` with nested
    directories still works. A sweep dir that is itself a cell (a single run) is one cell.
    """
    if _is_cell_dir(sweep_dir):
        return [sweep_dir]
    found: list[Path] = []
    for root, dirs, _files in os.walk(sweep_dir):
        here = Path(root)
        if here != sweep_dir and _is_cell_dir(here):
            found.append(here)
            dirs[:] = []  # a cell's own sub-directories are not cells
            continue
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
    return sorted(found, key=lambda p: _natural_key(p, sweep_dir))
