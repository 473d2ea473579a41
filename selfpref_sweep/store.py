"""A persistent cache of model calls, shared by every cell of every sweep.

SQLite in WAL mode: several processes (Hydra's joblib launcher, two sweeps at once) can read and
write the same file safely; each write is its own transaction, so an interrupted cell keeps every
call it finished. A row whose value cannot be decoded (a torn or hand-edited entry) counts as a
miss and is recomputed.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    value TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # A long timeout: other processes hold the write lock only for one small INSERT.
            conn = sqlite3.connect(self.path, timeout=120, isolation_level=None)
            conn.execute("PRAGMA busy_timeout=120000")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> Optional[Any]:
        row = self._connect().execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except (json.JSONDecodeError, TypeError):
            log.warning("cache entry %s is corrupt; it will be recomputed", key[:12])
            return None

    def put(self, key: str, *, kind: str, model: str, request: Any, value: Any) -> None:
        payload = json.dumps(value, sort_keys=True)
        req = json.dumps(request, sort_keys=True)
        for attempt in range(5):
            try:
                self._connect().execute(
                    "INSERT OR REPLACE INTO calls (key, kind, model, request, value, created) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (key, kind, model, req, payload, time.time()),
                )
                return
            except sqlite3.OperationalError as exc:  # "database is locked" past busy_timeout
                if attempt == 4:
                    raise
                log.warning("cache write retry (%s)", exc)
                time.sleep(0.5 * (attempt + 1))

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
