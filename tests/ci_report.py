"""What a CI log shows after the suite, so that a slow creep or a memory squeeze is visible run to run: pytest's
own 25 slowest tests (pyproject's ``--durations=25``), then one line of time per test file, slowest first, and the
peak memory (the process that ran tests, its largest child, and the machine's least available memory while the
suite ran, sampled every second). Under pytest-xdist the largest of each over the workers, which report theirs as
they finish. Hooks imported by tests/conftest.py."""

from __future__ import annotations

import resource
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from selfpref_sweep.models.vllm.vllm_sizing import available_bytes  # the project's one reading of it

_SECONDS: dict[str, float] = defaultdict(float)
_LOWEST_AVAILABLE = {"kb": None}
_STOP = threading.Event()
_SHOWN_FILES = 12  # the line names the slowest files; the rest are summed
_WORKER_PEAKS: list[dict[str, int]] = []  # each xdist worker's own and largest child's peak RSS, in KiB


def _watch_memory() -> None:
    while True:
        kb = available_bytes() // 1024
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


def _own_peaks() -> dict[str, int]:
    return {"self_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,  # KiB on Linux
            "child_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}


def pytest_sessionfinish(session) -> None:
    """An xdist worker sends its peaks to the controller (xdist's workeroutput); elsewhere nothing to do."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["memory_peaks"] = _own_peaks()


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist, never called
def pytest_testnodedown(node, error) -> None:  # noqa: ARG001 - xdist's hook signature
    peaks = getattr(node, "workeroutput", {}).get("memory_peaks")
    if peaks:
        _WORKER_PEAKS.append(peaks)


def memory_line(peaks: list[dict[str, int]], lowest_available_kb: int | None) -> str:
    """The peak memory line: the test process (the largest worker's under xdist) and its largest child."""
    own, child = (max(p[k] for p in peaks) / 2 ** 20 for k in ("self_kb", "child_kb"))  # KiB -> GiB
    who = f"largest of {len(peaks)} xdist workers" if len(peaks) > 1 else "pytest"
    machine = (f"; least memory available on the machine {lowest_available_kb / 2 ** 20:.1f} GiB"
               if lowest_available_kb is not None else "")
    return f"peak memory: {who} {own:.1f} GiB, largest child process {child:.1f} GiB{machine}"


def pytest_terminal_summary(terminalreporter) -> None:
    _STOP.set()
    if _SECONDS:
        terminalreporter.write_line(time_per_file_line(_SECONDS))
    terminalreporter.write_line(memory_line(_WORKER_PEAKS or [_own_peaks()], _LOWEST_AVAILABLE["kb"]))
