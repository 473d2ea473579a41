"""A damaged call store: what is wrong with it (`check_store`), and every call that can still be read copied
into a fresh store (`salvage_store`).

Salvage reads a copy of the damaged file, never the file itself, in three passes that each get past damage
the one before could not:
1. the calls in rowid order, until the first damaged page;
2. every rowid the key index lists, one by one (the index is a b-tree of its own, often intact when the
   table's pages are not): this also counts exactly what was lost;
3. seeks past the damage (doubling the step, then bisecting back), then 1 again from there.
A row counts as readable only when every column decodes and its value is JSON; a row that does not is lost,
not guessed at. A file whose first 100 bytes (SQLite's header) were overwritten gets a rebuilt header on the
copy first: page size from the pages themselves, everything else SQLite's defaults.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from .calls import _BUSY_TIMEOUT_S, Store, lock_path

_COLUMNS = "rowid, CAST(key AS BLOB), CAST(kind AS BLOB), CAST(model AS BLOB), CAST(request AS BLOB), " \
           "CAST(value AS BLOB), created"
_SIDE_FILES = ("-wal", "-shm")
Row = tuple[str, str, str, str, str, float]  # key, kind, model, request, value, created


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _decode(raw: tuple) -> Row | None:
    """A row as stored text, or None when any column is damaged."""
    _, *texts, created = raw
    try:
        key, kind, model, request, value = (bytes(t).decode("utf-8") for t in texts)
        json.loads(value)
    except (TypeError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not key or not isinstance(created, (int, float)):
        return None
    return key, kind, model, request, value, float(created)


@dataclass
class CheckReport:
    """What `check` found: SQLite's own check, and the calls per model (and those that cannot be decoded)."""

    path: str
    size_bytes: int
    problems: list[str] = field(default_factory=list)  # empty: healthy
    per_model: Counter = field(default_factory=Counter)
    unreadable: Counter = field(default_factory=Counter)
    counted: bool = False  # every row was reached

    @property
    def healthy(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        state = "healthy" if self.healthy else "DAMAGED: " + "; ".join(self.problems[:5])
        out = [f"{self.path}: {self.size_bytes / 1e6:.1f} MB, {state}"]
        reached = "" if self.counted else " (only the rows before the damage could be counted)"
        out.append(f"  calls: {sum(self.per_model.values())}{reached}")
        for model, n in sorted(self.per_model.items()):
            bad = self.unreadable.get(model, 0)
            out.append(f"    {model}: {n}" + (f" ({bad} unreadable: served as misses, recomputed)" if bad else ""))
        if not self.healthy:
            out.append(f"  repair: python -m selfpref_sweep.store salvage {self.path}")
        return out


def check_store(path: str | Path, full: bool = False) -> CheckReport:
    """SQLite's quick_check (integrity_check with `full`) and the calls per model, read-only."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no store at {path}")
    report = CheckReport(str(path), path.stat().st_size)
    conn = _read_only(path)
    try:
        try:
            found = [r[0] for r in conn.execute(f"PRAGMA {'integrity_check' if full else 'quick_check'}(20)")]
            report.problems += [] if found == ["ok"] else found
        except sqlite3.DatabaseError as exc:
            report.problems.append(str(exc))
        try:
            for model, value in conn.execute("SELECT CAST(model AS BLOB), CAST(value AS BLOB) FROM calls"):
                name = bytes(model).decode("utf-8", "replace")
                report.per_model[name] += 1
                try:
                    json.loads(bytes(value).decode("utf-8"))
                except (TypeError, UnicodeDecodeError, json.JSONDecodeError):
                    report.unreadable[name] += 1
            report.counted = True
        except sqlite3.DatabaseError as exc:
            if not report.problems:
                report.problems.append(f"reading the calls: {exc}")
    finally:
        conn.close()
    return report


# ----------------------------------------------------------------------------------------------- salvage
@dataclass
class SalvageReport:
    source: str
    dest: str
    copied: Counter = field(default_factory=Counter)  # model -> calls copied
    unreadable: int = 0        # rows reached but damaged
    lost: int | None = None  # rows the key index lists that could not be copied; None: the index is damaged too
    header_rebuilt: bool = False
    backup: str | None = None  # where the damaged file went (in-place salvage)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"salvaged {sum(self.copied.values())} calls from {self.source} into {self.dest}"]
        out += [f"  {model}: {n}" for model, n in sorted(self.copied.items())]
        if self.header_rebuilt:
            out.append("  its SQLite header was overwritten and was rebuilt (on a copy) before reading")
        lost = ("an unknown number (the key index is damaged too)" if self.lost is None else str(self.lost))
        out.append(f"  lost: {lost} calls; {self.unreadable} of them reached but damaged. A re-run makes only "
                   f"the lost calls again.")
        out += [f"  note: {n}" for n in self.notes]
        if self.backup:
            out.append(f"  the damaged file is kept as {self.backup} (delete it once the sweep has finished)")
        return out


def salvage_store(source: str | Path, dest: str | Path | None = None) -> SalvageReport:
    """Every readable call of `source` into a fresh store at `dest`; without `dest`, into a fresh store that
    replaces `source`, whose damaged file (and WAL) is kept beside it as *.damaged."""
    source = Path(source).expanduser()
    if not source.is_file():
        raise FileNotFoundError(f"no store at {source}")
    in_place = dest is None
    target = source.with_name(source.name + ".salvaging") if in_place else Path(dest).expanduser()
    if not in_place and (target.exists() or target.resolve() == source.resolve()):
        raise ValueError(f"{target} exists; salvage writes a new store (give a new path, or none to replace "
                         f"{source} in place)")
    for stale in [target, *(target.with_name(target.name + s) for s in _SIDE_FILES)]:
        stale.unlink(missing_ok=True)  # an interrupted in-place salvage's leftovers
    with FileLock(lock_path(source), timeout=_BUSY_TIMEOUT_S), tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "copy.sqlite"
        for suffix in ("", "-wal"):  # the WAL holds committed calls not yet checkpointed; -shm is rebuilt
            if Path(f"{source}{suffix}").is_file():
                shutil.copyfile(f"{source}{suffix}", f"{work}{suffix}")
        report = SalvageReport(str(source), str(source if in_place else target))
        rows = _readable_rows(work, report)
        _write_rows(target, rows)
        if in_place:
            report.backup = _replace(source, target)
    for _, _, model, _, _, _ in rows:
        report.copied[model] += 1
    return report


def _write_rows(target: Path, rows: list[Row]) -> None:
    store = Store(target)
    try:
        conn = store._connect()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT OR IGNORE INTO calls (key, kind, model, request, value, created) "
                         "VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()


def _replace(source: Path, fresh: Path) -> str:
    """The fresh store takes the damaged one's name; the damaged file and its WAL are kept as *.damaged."""
    backup = source.with_name(source.name + ".damaged")
    if backup.exists():
        backup = source.with_name(f"{source.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    source.replace(backup)
    for suffix in _SIDE_FILES:
        side = Path(f"{source}{suffix}")
        if side.exists():
            side.replace(Path(f"{backup}{suffix}"))
        Path(f"{fresh}{suffix}").unlink(missing_ok=True)  # empty after the checkpoint and close
    fresh.replace(source)
    return str(backup)


def _readable_rows(work: Path, report: SalvageReport) -> list[Row]:
    conn = _connect_or_rebuild(work, report)
    if conn is None:
        return []
    try:
        raw: dict[int, tuple] = {}
        _scan_with_seeks(conn, raw)  # passes 1 and 3
        index_rowids = _index_rowids(conn, report)  # pass 2
        for rowid in sorted((index_rowids or set()) - raw.keys()):
            try:
                row = conn.execute(f"SELECT {_COLUMNS} FROM calls WHERE rowid = ?", (rowid,)).fetchone()
            except sqlite3.DatabaseError:
                continue
            if row is not None:
                raw[row[0]] = row
    finally:
        conn.close()
    rows, keys, good = [], set(), set()
    for rowid in sorted(raw):
        row = _decode(raw[rowid])
        if row is None:
            report.unreadable += 1
            continue
        good.add(rowid)
        if row[0] not in keys:
            keys.add(row[0])
            rows.append(row)
    if index_rowids is not None:
        report.lost = len(index_rowids - good)
    return rows


def _connect_or_rebuild(work: Path, report: SalvageReport) -> sqlite3.Connection | None:
    for attempt in range(2):
        conn = sqlite3.connect(work, isolation_level=None)
        try:
            # A truncated file is shorter than its header says: SQLite reads such a file only with
            # writable_schema on (this is a private copy, and nothing is written to it).
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.DatabaseError as exc:
            conn.close()
            if attempt or "not a database" not in str(exc).lower() or not _rebuild_header(work):
                report.notes.append(f"the copy could not be opened ({exc}); nothing could be read")
                return None
            report.header_rebuilt = True
    return None


def _scan_forward(conn: sqlite3.Connection, raw: dict[int, tuple], after: int = 0) -> int | None:
    """Rows in rowid order after `after` until the end (None) or the first damaged page (the last rowid read)."""
    last = after
    try:
        for row in conn.execute(f"SELECT {_COLUMNS} FROM calls WHERE rowid > ? ORDER BY rowid", (after,)):
            raw[row[0]] = row
            last = row[0]
    except sqlite3.DatabaseError:
        return last
    return None


def _index_rowids(conn: sqlite3.Connection, report: SalvageReport) -> set | None:
    """Every rowid the key index lists (a covering scan: the table's pages are not read), or None when the
    index cannot be read whole."""
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'calls'")]
        if not names:
            return None
        return {r[0] for r in conn.execute(f'SELECT rowid FROM calls INDEXED BY "{names[0]}"')}
    except sqlite3.DatabaseError as exc:
        report.notes.append(f"the key index is damaged too ({exc}); the loss cannot be counted exactly")
        return None


def _seek_ok(conn: sqlite3.Connection, after: int) -> bool:
    """Whether SQLite can position itself on the first row after `after` (no damaged page on the way)."""
    try:
        conn.execute("SELECT rowid FROM calls WHERE rowid > ? ORDER BY rowid LIMIT 1", (after,)).fetchone()
    except sqlite3.DatabaseError:
        return False
    return True


def _scan_with_seeks(conn: sqlite3.Connection, raw: dict[int, tuple]) -> None:
    """Pass 1, then pass 3 from each place it stopped: the first rowid a seek reaches past the damage."""
    stopped = _scan_forward(conn, raw)
    while stopped is not None:
        resume = _first_seekable_after(conn, stopped)
        if resume is None:
            return
        stopped = _scan_forward(conn, raw, resume)


def _first_seekable_after(conn: sqlite3.Connection, stopped: int) -> int | None:
    """The smallest x > stopped that a seek gets past: doubling the step, then bisecting back (the rows between
    lie on the damaged pages). None when no seek gets past the damage."""
    step, failed = 1, stopped
    while not _seek_ok(conn, stopped + step):
        failed, step = stopped + step, step * 2
        if stopped + step >= 2 ** 62:
            return None
    lo, hi = failed, stopped + step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _seek_ok(conn, mid) else (mid, hi)
    return hi


# --------------------------------------------------------------------------------------- header rebuild
_MAGIC = b"SQLite format 3\x00"
_PAGE_SIZES = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def _header(page_size: int, n_pages: int, wal: bool) -> bytes:
    """SQLite's 100-byte file header with its defaults (no freelist, UTF-8, no auto-vacuum)."""
    version = 2 if wal else 1
    major, minor, patch = sqlite3.sqlite_version_info
    fields = [(0, _MAGIC), (16, (1 if page_size == 65536 else page_size).to_bytes(2, "big")),
              (18, bytes([version, version, 0, 64, 32, 32])),
              (24, (1).to_bytes(4, "big")),            # change counter
              (28, n_pages.to_bytes(4, "big")),
              (40, (1).to_bytes(4, "big")),            # schema cookie
              (44, (4).to_bytes(4, "big")),            # schema format
              (56, (1).to_bytes(4, "big")),            # text encoding: UTF-8
              (92, (1).to_bytes(4, "big")),            # version-valid-for = the change counter
              (96, (major * 1000000 + minor * 1000 + patch).to_bytes(4, "big"))]
    header = bytearray(100)
    for offset, value in fields:
        header[offset:offset + len(value)] = value
    return bytes(header)


def _problems_with(path: Path) -> float:
    """How many problems SQLite's quick_check finds in the file (infinite when it cannot be read at all)."""
    conn = sqlite3.connect(path)
    try:
        found = [line for r in conn.execute("PRAGMA quick_check(200)") for line in str(r[0]).splitlines()]
        return 0 if found == ["ok"] else len(found)
    except sqlite3.DatabaseError:
        return float("inf")
    finally:
        conn.close()


def _rebuild_header(path: Path) -> bool:
    """Write SQLite's 100-byte header anew on a copy whose header was overwritten. The page size is the one
    under which SQLite finds the fewest problems; False when the file is no SQLite database under any."""
    data = path.read_bytes()
    if len(data) < 512 or data[100] not in (5, 13):  # page 1's b-tree header follows the file header
        return False
    wal = Path(f"{path}-wal").is_file()
    best, best_problems = None, float("inf")
    for size in _PAGE_SIZES:
        if len(data) % size:
            continue
        path.write_bytes(_header(size, len(data) // size, wal) + data[100:])
        problems = _problems_with(path)
        if problems < best_problems:
            best, best_problems = size, problems
    if best is None or best_problems == float("inf"):
        path.write_bytes(data)
        return False
    path.write_bytes(_header(best, len(data) // best, wal) + data[100:])
    return True
