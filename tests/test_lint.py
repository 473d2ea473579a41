"""Ruff over the package, the tests and the benches, with the rules pyproject.toml selects."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_ruff_finds_nothing():
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"],
                                                        capture_output=True).returncode:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "selfpref_sweep", "tests", "bench", "run.py"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
