from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.worker_threads import auto_workers, available_gib, cores, pin_worker_threads

pin_worker_threads()  # before anything imports torch: an xdist worker's share of the cores

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from selfpref_sweep.config import register_configs  # noqa: E402

# The CI log's time per test file and peak memory (tests/ci_report.py), as hooks of this conftest.
from tests.ci_report import (  # noqa: F401, E402
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
    pytest_testnodedown,
)

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
PAPER_DATA = REPO.parent / "shared" / "paper-data"
FAKE_BACKEND = "fake=tests.fakes:FakeModel"

# The slowest test files first (the CI log's time-per-file line names them), so that xdist's workers start on
# them and the long tail is short files: in file order the vLLM file, the longest, came last, beside an idle worker.
SLOWEST_FILES_FIRST = ("test_vllm.py", "test_batch_invariance.py", "test_openai_backend.py", "test_golden.py",
                       "test_local_model.py", "test_individual_and_labels.py", "test_finetune_lora.py",
                       "test_claims.py", "test_openai_server_measurements.py", "test_placebo.py", "test_presets.py",
                       "test_gpu_judge_bench.py")


def pytest_xdist_auto_num_workers(config) -> int:  # noqa: ARG001 - the hook's signature
    """`-n auto` (pyproject's addopts): tests/worker_threads.py's rule."""
    return auto_workers(cores(), available_gib())


def pytest_collection_modifyitems(items) -> None:
    """The files in SLOWEST_FILES_FIRST first, in that order; the rest keep theirs (a stable sort)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
