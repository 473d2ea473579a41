"""How the suite shares the machine (tests/worker_threads.py) and what the CI log says of it (tests/ci_report.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import worker_threads as wt
from tests.ci_report import memory_line, time_per_file_line
from tests.conftest import SLOWEST_FILES_FIRST, pytest_collection_modifyitems


@pytest.mark.parametrize(("cores", "gib", "workers"), [
    (2, 22.0, 2),  # CI's machine: two workers
    (16, 120.0, wt.MAX_WORKERS),  # never more than were measured
    (2, 12.0, 0),  # memory for one: the suite in one process, every core to it
    (1, 22.0, 0),  # one core
])
def test_auto_workers_counts_cores_and_memory(cores, gib, workers):
    assert wt.auto_workers(cores, gib) == workers


def test_a_worker_gets_its_share_of_the_cores_and_pins_it_before_torch(monkeypatch):
    monkeypatch.setattr(wt, "cores", lambda: 4)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert wt.worker_threads() == 4
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert wt.worker_threads() == 2
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    assert wt.worker_threads() == 1
    for name in wt.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    wt.pin_worker_threads()  # not a worker: nothing set
    assert all(name not in os.environ for name in wt.THREAD_VARIABLES)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("MKL_NUM_THREADS", "3")  # set by the user: kept
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        wt.pin_worker_threads()
        assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "3"
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


class _Item:
    def __init__(self, name: str, test: str):
        self.path, self.test = Path("tests") / name, test


def test_the_slowest_files_come_first_and_the_rest_keep_their_order():
    items = [_Item("test_a.py", "1"), _Item(SLOWEST_FILES_FIRST[1], "x"), _Item("test_b.py", "2"),
             _Item(SLOWEST_FILES_FIRST[0], "y"), _Item("test_a.py", "3"), _Item(SLOWEST_FILES_FIRST[0], "z")]
    pytest_collection_modifyitems(items)
    assert [(i.path.name, i.test) for i in items] == [
        (SLOWEST_FILES_FIRST[0], "y"), (SLOWEST_FILES_FIRST[0], "z"), (SLOWEST_FILES_FIRST[1], "x"),
        ("test_a.py", "1"), ("test_b.py", "2"), ("test_a.py", "3")]


def test_the_ci_lines_name_time_per_file_and_the_largest_workers_memory():
    line = time_per_file_line({"tests/test_a.py": 10.0, "tests/test_b.py": 30.0, "tests/test_c.py": 5.0}, shown=2)
    assert line == "time per test file (45s in all): test_b.py 30s, test_a.py 10s, 1 other files 5s"
    gib = 2 ** 20  # KiB
    two = [{"self_kb": 3 * gib, "child_kb": gib}, {"self_kb": gib, "child_kb": 5 * gib}]
    assert memory_line(two, 15 * gib) == ("peak memory: largest of 2 xdist workers 3.0 GiB, largest child process "
                                          "5.0 GiB; least memory available on the machine 15.0 GiB")
    assert memory_line(two[:1], None) == "peak memory: pytest 3.0 GiB, largest child process 1.0 GiB"
