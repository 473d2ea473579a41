"""Claims: one launch runs a cell; another launch of the same cell waits for it, then uses its results.

A claim is a small JSON file made with O_CREAT|O_EXCL (atomic on local disks and on NFS), naming its holder:
host, PID, start time, a random token and the cell's digest. The holder's heartbeat thread rewrites it every
`HEARTBEAT_S`. Another launch finds the claim live while its content keeps changing. It takes the claim over
when the holder is gone: at once when the holder ran on this host and its PID is dead; on any host when the
content has not changed for `STALE_S` on the observer's own clock, so the nodes' clocks need not agree.
Taking over goes through a mutex directory (mkdir is atomic everywhere), so two launches never both remove
a stale claim and one of them the other's fresh one.

A cell takes two claims (`cell_claims`): one in its own folder (a second launch into the same output folder,
from any node that shares it) and one beside the call store, keyed by the cell's digest (a second launch of
the same cell into another folder on this machine).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StorageError

log = logging.getLogger(__name__)

HEARTBEAT_S = float(os.environ.get("SELFPREF_CLAIM_HEARTBEAT_S", "10"))
STALE_S = float(os.environ.get("SELFPREF_CLAIM_STALE_S", "90"))
POLL_S = min(2.0, HEARTBEAT_S)
CELL_CLAIM_FILE = ".cell.claim"
# Config keys that change where a cell's work goes or how it is shown, not the work: left out of its digest.
_NOT_THE_WORK = ("wandb", "show_progress", "plan", "store", "paths", "model_pool")


def cell_digest(config: Mapping[str, Any]) -> str:
    """The identity of a cell's work: its resolved config, less where results go and how they are shown."""
    work = {k: v for k, v in config.items() if k not in _NOT_THE_WORK}
    return hashlib.sha256(json.dumps(work, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    started: str
    token: str
    cell: str
    where: str
    beat: int = 0

    def describe(self) -> str:
        return f"{self.host} PID {self.pid}, started {self.started}"

    @staticmethod
    def parse(content: bytes) -> Holder | None:
        try:
            return Holder(**json.loads(content.decode("utf-8")))
        except (ValueError, TypeError):
            return None  # being written, or not ours


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


class Claim:
    """One claim file. `acquire` returns once this launch holds it; `release` gives it back."""

    def __init__(self, path: Path, cell: str, where: str):
        self.path, self.cell, self.where = Path(path), cell, where
        self.me = Holder(socket.gethostname(), os.getpid(), time.strftime("%Y-%m-%d %H:%M:%S"),
                         secrets.token_hex(8), cell, where)
        self.waited_on: Holder | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: tuple = (None, 0.0)  # (content, since when unchanged, on this process's clock)

    # ------------------------------------------------------------------------------------------ acquire
    def acquire(self, on_wait: Callable[[Holder, Path], None]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"Could not create {self.path.parent} for the cell's claim ({exc.strerror or exc}); "
                               f"check that it is writable.") from None
        while not self._create():
            content = _read(self.path)
            if content is None:
                continue  # released just now: try again
            holder = Holder.parse(content)
            if holder is not None and holder.cell != self.cell:
                raise ConfigError(
                    f"{self.where} is in use by another launch ({holder.describe()}) that runs a different cell "
                    f"(another config in the same output folder). Give this run its own folder "
                    f"(hydra.sweep.dir=... or hydra.run.dir=...).")
            if self._stale(holder, content):
                self._take_over(content)
                continue
            if self.waited_on is None:
                self.waited_on = holder or Holder("?", 0, "?", "", self.cell, self.where)
                on_wait(self.waited_on, self.path)
            time.sleep(POLL_S)
        self._thread = threading.Thread(target=self._heartbeat, name=f"claim {self.path.name}", daemon=True)
        self._thread.start()

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except OSError as exc:
            raise StorageError(f"Could not create the claim {self.path} ({exc.strerror or exc}); check that its "
                               f"folder is writable and has space.") from None
        try:  # no fsync: a claim lost in a crash is harmless, and an empty one is judged by its age like any
            os.write(fd, self._content())
        except OSError as exc:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise StorageError(f"Could not write the claim {self.path} ({exc.strerror or exc}); free some space "
                               f"(or fix permissions) and re-run.") from None
        os.close(fd)
        return True

    def _content(self) -> bytes:
        return json.dumps(asdict(self.me)).encode("utf-8")

    def _stale(self, holder: Holder | None, content: bytes) -> bool:
        if holder is not None and holder.host == self.me.host and not _pid_alive(holder.pid):
            return True
        now = time.monotonic()
        if self._seen[0] != content:
            self._seen = (content, now)
            return False
        return now - self._seen[1] >= STALE_S

    def _take_over(self, content: bytes) -> None:
        """Remove the stale claim, under the mutex, only if it is still the one judged stale."""
        mutex = self.path.with_name(self.path.name + ".takeover")
        try:
            mutex.mkdir()
        except FileExistsError:
            self._clear_dead_mutex(mutex)
            time.sleep(POLL_S)
            return
        try:
            if _read(self.path) == content:
                log.warning("taking over the claim %s from %s, which is gone", self.path,
                            (Holder.parse(content) or self.me).describe())
                self.path.unlink(missing_ok=True)
        finally:
            mutex.rmdir()
        self._seen = (None, 0.0)

    def _clear_dead_mutex(self, mutex: Path) -> None:
        """A taker killed inside its few-millisecond window leaves the mutex: cleared once it outlives STALE_S."""
        try:
            age = time.time() - mutex.stat().st_mtime
        except FileNotFoundError:
            return
        if age > STALE_S:
            with contextlib.suppress(OSError):
                mutex.rmdir()

    # ---------------------------------------------------------------------------------------- heartbeat
    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            holder = Holder.parse(_read(self.path) or b"")
            if holder is None or holder.token != self.me.token:
                log.error("the claim %s was taken over by another launch while this one ran; both may now do "
                          "this cell's work (results stay correct: model calls are cached)", self.path)
                return
            self.me = Holder(**{**asdict(self.me), "beat": self.me.beat + 1})
            tmp = self.path.with_name(f".{self.path.name}.{self.me.token}.tmp")
            try:
                tmp.write_bytes(self._content())
                os.replace(tmp, self.path)
            except OSError as exc:
                log.warning("could not refresh the claim %s (%s)", self.path, exc)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        holder = Holder.parse(_read(self.path) or b"")
        if holder is not None and holder.token == self.me.token:
            self.path.unlink(missing_ok=True)


def _summary_stamp(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass
class CellClaims:
    """The cell's two claims, held; `waited_on` names the launch this one waited for, if any,
    `summary_changed` says whether the cell's summary file was (re)written meanwhile, and `digest` is the
    cell's (cell_digest)."""

    claims: list[Claim]
    waited_on: Holder | None
    summary_changed: bool
    digest: str = ""


@contextmanager
def cell_claims(config: Mapping[str, Any], run_dir: Path, store_path: Path, summary_file: Path,
                on_wait: Callable[[Holder, Path], None]) -> Iterator[CellClaims]:
    """Hold the cell's claims for the block: beside the store (by digest) first, then in its folder, always in
    that order, so two launches never each hold one and wait for the other."""
    digest = cell_digest(config)
    store_path = Path(store_path).expanduser()
    before = _summary_stamp(summary_file)
    claims = [Claim(store_path.with_name(store_path.name + ".claims") / f"{digest}.claim", digest, str(run_dir)),
              Claim(Path(run_dir) / CELL_CLAIM_FILE, digest, str(run_dir))]
    held: list[Claim] = []
    try:
        for claim in claims:
            claim.acquire(on_wait)
            held.append(claim)
        waited = next((c.waited_on for c in claims if c.waited_on is not None), None)
        yield CellClaims(claims, waited, _summary_stamp(summary_file) != before, digest)
    finally:
        for claim in reversed(held):
            claim.release()
