"""Writing result files so that a killed process or a full disk never leaves a half-written one."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import StorageError


def atomic_write(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Write-then-rename: ``write`` fills a temporary file beside ``path``, which then replaces it; on failure
    nothing partial is kept and the error says what to do."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"Could not write {path} ({exc.strerror or exc}); nothing partial was kept. Free some "
                           f"space (or fix permissions) and re-run the same command: finished model calls are "
                           f"cached, so nothing is recomputed.") from exc


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
