from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from selfpref_sweep.config import register_configs

# The CI log's time per test file and peak memory (tests/ci_report.py), as hooks of this conftest.
from tests.ci_report import pytest_runtest_logreport, pytest_sessionstart, pytest_terminal_summary  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
PAPER_DATA = REPO.parent / "shared" / "paper-data"
FAKE_BACKEND = "fake=tests.fakes:FakeModel"

register_configs()
os.environ.setdefault("WANDB_SILENT", "true")
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(autouse=True)
def _fake_backend_registered(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", FAKE_BACKEND)


@pytest.fixture(autouse=True)
def _empty_model_pool():
    """Each test starts without loaded models from the one before (the pool is process-wide)."""
    from selfpref_sweep.models.pool import POOL

    yield
    POOL.clear()


@pytest.fixture
def compose_cfg(tmp_path):
    """Compose conf/config.yaml with overrides; the store goes under tmp_path, W&B is off."""

    def _compose(overrides: list[str] = (), store: Path | None = None):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose("config", overrides=[f"store.path={store or tmp_path / 'calls.sqlite'}",
                                                "wandb.mode=disabled", "show_progress=false", *overrides])

    return _compose


FAKE_EVALUATOR = ["evaluator.backend=fake", "evaluator.name=fake_eval"]


@pytest.fixture
def paper_data() -> Path:
    if not (PAPER_DATA / "articles" / "xsum_train_articles.json").exists():
        pytest.skip("the paper data (../shared/paper-data) is not present")
    return PAPER_DATA
