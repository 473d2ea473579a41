"""A persistent cache of model calls, shared by every cell of every sweep.

SQLite in WAL mode: several processes on one machine (Hydra's joblib launcher, two sweeps at once) can
read and write the same file safely; each write is its own transaction, so an interrupted cell keeps
every call it finished. A row whose value cannot be decoded (a torn or hand-edited entry) counts as a
miss and is recomputed.

Two things make concurrent use safe (see `tests/test_store.py::test_store_under_concurrency`):
- Opening. Switching a new file to WAL needs an exclusive lock, and SQLite answers "database is
  locked" at once, without waiting, when another process holds a lock on the file during the switch
  (its busy handler is not used there). So the switch and the schema are made under an OS file lock
  beside the store, once per file; a store already in WAL mode is never switched again.
- Writing. Each write takes the write lock up front (`BEGIN IMMEDIATE`), where SQLite does wait
  (busy_timeout); a write that still finds the file busy is retried with backoff.

WAL needs shared memory on one host, so one store must not be shared across machines over NFS or
Lustre. A cluster gives each node its own store and merges them with `merge_stores`
(`python -m selfpref_sweep.store merge DEST SRC...`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from filelock import FileLock
from tenacity import (before_sleep_log, retry, retry_if_exception, stop_after_attempt,
                      wait_exponential)

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
# Other processes hold the write lock only for one small INSERT; a long wait is never a deadlock.
_BUSY_TIMEOUT_S = 120


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc).lower()


_retry_busy = retry(retry=retry_if_exception(_is_busy), stop=stop_after_attempt(6),
                    wait=wait_exponential(multiplier=0.2, max=5), reraise=True,
                    before_sleep=before_sleep_log(log, logging.WARNING))


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._open()

    def _open(self) -> None:
        with FileLock(_lock_path(self.path), timeout=_BUSY_TIMEOUT_S):
            conn = self._connect()
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_S * 1000}")
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
        row = (key, kind, model, json.dumps(request, sort_keys=True), json.dumps(value, sort_keys=True),
               time.time())
        self._write("INSERT OR REPLACE INTO calls (key, kind, model, request, value, created) "
                    "VALUES (?, ?, ?, ?, ?, ?)", row)

    @_retry_busy
    def _write(self, sql: str, params: tuple) -> None:
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(sql, params)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)  # a retry must start a transaction of its own
            raise

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


@dataclass(frozen=True)
class MergeReport:
    """What one source store brought to a merge."""
    source: str
    rows: int        # rows in the source
    added: int       # keys the destination did not have
    same: int        # keys it had, with the same value
    conflicts: int   # keys it had with another value (a sampled call made twice); the destination's kept

    def line(self) -> str:
        return (f"{self.source}: {self.rows} rows, {self.added} added, {self.same} already there, "
                f"{self.conflicts} conflicting (destination kept)")


def merge_stores(dest: str | Path, sources: Sequence[str | Path]) -> list[MergeReport]:
    """Copy every call of each source store into `dest` (created if absent), keeping what `dest` has.

    A key names the model (base + adapter), the prompt and the decoding settings, so two stores that
    made the same call hold the same value unless the call was sampled; such conflicts are counted and
    the destination's value is kept, so a merge never changes a number that was already served.
    """
    target = Store(dest)
    reports = []
    for source in sources:
        source = Path(source).expanduser()
        if not source.is_file():
            raise FileNotFoundError(f"no store at {source}")
        if source.resolve() == target.path.resolve():
            raise ValueError(f"cannot merge {source} into itself")
        reports.append(_merge_one(target, source))
    return reports


@_retry_busy
def _merge_one(target: Store, source: Path) -> MergeReport:
    conn = target._connect()
    # Read-only: a source may be another node's live store, and this must not write to it.
    conn.execute("ATTACH DATABASE ? AS src", (f"{source.resolve().as_uri()}?mode=ro",))
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows, same, conflicts = conn.execute(
                "SELECT COUNT(*), SUM(d.value IS s.value), SUM(d.key IS NOT NULL AND d.value IS NOT s.value) "
                "FROM src.calls s LEFT JOIN main.calls d ON d.key = s.key").fetchone()
            added = conn.execute("INSERT OR IGNORE INTO main.calls SELECT * FROM src.calls").rowcount
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    finally:
        conn.execute("DETACH DATABASE src")
    return MergeReport(str(source), rows, added, same or 0, conflicts or 0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfpref_sweep.store",
                                     description="Tools for the call store (the cache of model calls).")
    sub = parser.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge", help="copy the calls of per-node stores into one store")
    merge.add_argument("dest", help="the store to merge into (created if absent)")
    merge.add_argument("sources", nargs="+", help="stores to copy from (opened read-only)")
    args = parser.parse_args(argv)
    try:
        reports = merge_stores(args.dest, args.sources)
    except (FileNotFoundError, ValueError, sqlite3.DatabaseError) as exc:
        print(f"store merge failed: {exc}", file=sys.stderr)
        return 2
    for report in reports:
        print(report.line())
    print(f"{args.dest}: {len(Store(args.dest))} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
