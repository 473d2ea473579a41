"""Writing result files so that a killed process or a full disk never leaves a half-written one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from .errors import StorageError


def atomic_write_text(path: Path, text: str) -> None:
    """Write-then-rename; on failure nothing partial is kept and the error says what to do."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"Could not write {path} ({exc.strerror or exc}); nothing partial was kept. Free some "
                           f"space (or fix permissions) and re-run the same command: finished model calls are "
                           f"cached, so nothing is recomputed.") from exc


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
