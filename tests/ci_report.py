"""What a CI log shows after the suite, so that a slow creep or a memory squeeze is visible run to run: pytest's
own 25 slowest tests (pyproject's ``--durations=25``), then one line of time per test file, slowest first, and the
peak memory (this process, its largest child, and the machine's least available memory while the suite ran,
sampled every second). Hooks imported by tests/conftest.py."""

from __future__ import annotations

import resource
import threading
from collections import defaultdict
from pathlib import Path

_SECONDS: dict[str, float] = defaultdict(float)
_LOWEST_AVAILABLE = {"kb": None}
_STOP = threading.Event()
_SHOWN_FILES = 12  # the line names the slowest files; the rest are summed


def _available_kb() -> int | None:
    """MemAvailable from /proc/meminfo (None where there is no such file: not Linux)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _watch_memory() -> None:
    while True:
        kb = _available_kb()
        if kb is None:
            return
        low = _LOWEST_AVAILABLE["kb"]
        _LOWEST_AVAILABLE["kb"] = kb if low is None else min(low, kb)
        if _STOP.wait(1.0):
            return


def pytest_sessionstart(session) -> None:  # noqa: ARG001 - pytest's hook signature
    threading.Thread(target=_watch_memory, name="ci-memory-watch", daemon=True).start()


def pytest_runtest_logreport(report) -> None:
    _SECONDS[report.nodeid.split("::", 1)[0]] += float(getattr(report, "duration", 0.0) or 0.0)


def time_per_file_line(seconds: dict[str, float], shown: int = _SHOWN_FILES) -> str:
    """``file seconds`` pairs, slowest first; the files past ``shown`` summed as one entry."""
    ordered = sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = [f"{Path(name).name} {s:.0f}s" for name, s in ordered[:shown]]
    rest = ordered[shown:]
    if rest:
        parts.append(f"{len(rest)} other files {sum(s for _, s in rest):.0f}s")
    return f"time per test file ({sum(seconds.values()):.0f}s in all): " + ", ".join(parts)


def pytest_terminal_summary(terminalreporter) -> None:
    _STOP.set()
    if _SECONDS:
        terminalreporter.write_line(time_per_file_line(_SECONDS))
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux -> GiB
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20
    low = _LOWEST_AVAILABLE["kb"]
    machine = f"; least memory available on the machine {low / 2 ** 20:.1f} GiB" if low is not None else ""
    terminalreporter.write_line(f"peak memory: pytest {own:.1f} GiB, largest child process {child:.1f} GiB{machine}")
