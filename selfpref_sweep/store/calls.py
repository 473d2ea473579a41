"""A persistent cache of model calls, shared by every cell of every sweep.

SQLite in WAL mode: several processes on one machine (Hydra's joblib launcher, two sweeps at once) can
read and write the same file safely; each write is its own transaction, so an interrupted cell keeps
every call it finished. A row whose value cannot be decoded (a torn or hand-edited entry) counts as a
miss, is recomputed and is counted (`Store.unreadable`, summary.json's `cache_unreadable`).

Damage is named, never a traceback: a file that is not a healthy SQLite database (truncated, overwritten,
its header gone) is found when the store opens (SQLite's `quick_check`, about 0.2 s for 150 MB; not again
while the file is unchanged) or at the first page that turns out damaged, and raises `StoreDamagedError` with the path
and the command that repairs it (`python -m selfpref_sweep.store salvage PATH`, see `salvage.py`). A write
that fails for lack of space or permission raises `StorageError` naming the path; SQLite rolls the write
back, so the store stays healthy.

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

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from tenacity import before_sleep_log, retry, retry_if_exception, stop_after_attempt, wait_exponential

from ..errors import StorageError, StoreDamagedError

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


def lock_path(path: Path) -> Path:
    """The OS file lock beside a store, held while it is switched to WAL (and while it is salvaged)."""
    return path.with_name(path.name + ".lock")


# SQLite's primary result codes (sqlite3 exposes them from Python 3.11 on; the numbers are SQLite's ABI).
_CORRUPT, _NOTADB, _FULL = 11, 26, 13
_CANNOT_WRITE = {3, 8, 10, 14, 23}  # PERM, READONLY, IOERR, CANTOPEN, AUTH


def _primary_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the file itself is damaged (not busy, full or unwritable)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = _primary_code(exc)
    if code is not None:
        return code in (_CORRUPT, _NOTADB)
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


def storage_error(exc: BaseException, path: Path, doing: str) -> StorageError | None:
    """The clear error for a SQLite failure on the store at `path`, or None for one that is not about the file
    (busy, a bug): damage, a full disk, a file or folder that cannot be written."""
    if is_damage(exc):
        return StoreDamagedError(path, str(exc))
    code = _primary_code(exc)
    text = str(exc).lower()
    if code == _FULL or "disk is full" in text:
        return StorageError(f"Could not {doing} the call store {path}: {exc} (no space left on its disk, or its "
                            f"quota is spent). SQLite rolled the failed write back, so the store is healthy and keeps "
                            f"every call made before. Free some space and re-run the same command.")
    if code in _CANNOT_WRITE or "readonly" in text or "unable to open" in text:
        return StorageError(f"Could not {doing} the call store {path}: {exc}. Check that its folder exists and is "
                            f"writable by you, or put the store elsewhere (store.path=... or $SELFPREF_STORE).")
    return None


_HEALTHY: set = set()  # store files this process found healthy, as (path, inode, size, mtime)


def _file_identity(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self._local = threading.local()
        self._count_lock = threading.Lock()
        self.unreadable = 0  # entries found but not decodable: served as misses
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"Could not create the folder of the call store {self.path} ({exc.strerror or exc}). "
                               f"Put the store elsewhere (store.path=... or $SELFPREF_STORE).") from None
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """SQLite's errors about the file as the clear errors of `storage_error`; others pass unchanged."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            clear = storage_error(exc, self.path, doing)
            if clear is None:
                raise
            raise clear from None

    def _open(self) -> None:
        with self._guard("open"):
            with FileLock(lock_path(self.path), timeout=_BUSY_TIMEOUT_S):
                conn = self._connect()
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(_SCHEMA)
            self._check_health(conn)

    def _check_health(self, conn: sqlite3.Connection) -> None:
        """SQLite's quick_check (skipped while the file is as this process last found it healthy): a damaged
        store fails here, naming itself, rather than at whichever page a cell reads first. Outside the file
        lock: it only reads."""
        identity = _file_identity(self.path)
        if identity in _HEALTHY:
            return
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise StoreDamagedError(self.path, "; ".join(problems[:3]))
        _HEALTHY.add(identity)

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_S * 1000}")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> Any | None:
        # As bytes: a value that is not UTF-8 any more is then a miss here, not an error inside sqlite3.
        with self._guard("read"):
            row = self._connect().execute("SELECT CAST(value AS BLOB) FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(bytes(row[0]).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, TypeError):
            with self._count_lock:
                self.unreadable += 1
            log.warning("call store %s: entry %s cannot be read; it counts as a miss and is recomputed",
                        self.path, key[:12])
            return None

    def put(self, key: str, *, kind: str, model: str, request: Any, value: Any) -> None:
        row = (key, kind, model, json.dumps(request, sort_keys=True), json.dumps(value, sort_keys=True),
               time.time())
        with self._guard("write to"):
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
        with self._guard("read"):
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
        try:
            reports.append(_merge_one(target, source))
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):  # which of the two is damaged: the destination passed its check on opening
                raise StoreDamagedError(source, str(exc)) from None
            raise
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
