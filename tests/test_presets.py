"""conf/experiment/ presets: every one composes (and so does every value it sweeps), and smoke runs as a sweep
that ends with the report, items.html and the W&B panel specification."""

import json
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import CONF, FAKE_BACKEND, REPO

PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def _compose(overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=["wandb.mode=disabled", *overrides], return_hydra_config=True)


def test_the_issue_presets_exist():
    for name in ("paper_pairwise", "paper_individual", "paper_labels", "transfer", "notebook", "paper_cpu",
                 "smoke", "finetune_dose_response"):
        assert name in PRESETS


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_and_each_swept_value_compose(preset):
    cfg = _compose([f"experiment={preset}"])
    params = dict(cfg.hydra.sweeper.params or {})
    assert params, f"{preset} sweeps nothing"
    assert (CONF / "experiment" / f"{preset}.yaml").read_text().startswith("# @package _global_")
    for key, values in params.items():
        for value in str(values).split(","):
            cell = _compose([f"experiment={preset}", f"{key}={value}"])
            if key == "finetune_arm":
                assert cell.finetune_task.name.value == ("none" if value == "base" else value.rsplit("_n", 1)[0])
            elif key in ("evaluator", "source", "dataset", "finetune_dataset"):
                assert cell[key].name == value
            elif key in ("setting", "label"):
                assert cell[key].name.value == value


def test_dose_response_preset_is_the_planned_design():
    cfg = _compose(["experiment=finetune_dose_response"])
    params = cfg.hydra.sweeper.params
    arms = params["finetune_arm"].split(",")
    assert sorted(arms) == sorted(["base", "recognition_n2", "recognition_n10", "recognition_n50", "always_1_n10",
                                   "random_n10", "length_n10", "vowel_n10", "readability_n10"])
    assert params["dataset"] == "paper_xsum,paper_cnn" and params["source"] == "human,paper_gpt4"
    assert cfg.evaluator.name == "qwen05" and cfg.finetune_dataset.name == "paper_xsum"
    n = {a: _compose(["experiment=finetune_dose_response", f"finetune_arm={a}"]).finetune_task.n_articles
         for a in ("recognition_n2", "recognition_n50", "vowel_n10")}
    assert n == {"recognition_n2": 2, "recognition_n50": 50, "vowel_n10": 10}


def test_individual_dose_preset_judges_one_summary_at_a_time_with_the_controls_on():
    cfg = _compose(["experiment=finetune_dose_individual"])
    params = cfg.hydra.sweeper.params
    assert params["finetune_arm"].split(",") == ["base", "recognition_n2", "recognition_n10", "readability_n10",
                                                 "length_n10"]
    assert params["dataset"] == "paper_xsum" and params["source"] == "human,paper_gpt4"
    assert cfg.evaluator.name == "qwen15" and cfg.setting.name.value == "individual"
    assert {cfg.judge.competence, cfg.judge.placebo, cfg.judge.recognition_classifier} == {"on"}
    # Fine-tuned as the paper did: the authors' learning rate, not the qwen05 dose run's tuned one.
    arm = _compose(["experiment=finetune_dose_individual", "finetune_arm=recognition_n10"]).finetune_task
    assert arm.name == "recognition" and arm.n_articles == 10 and arm.lr == 1.0e-4


@pytest.mark.parametrize("preset, judge, lr, seeds", [
    ("finetune_seeds_individual", ("qwen15", "individual"), 1.0e-4,
     {"none": [0], "recognition 10": [0, 1, 2], "length 10": [0, 1, 2], "prefer_longer 10": [0],
      "score_longer 10": [0]}),
    ("finetune_seeds_pairwise", ("qwen05", "pairwise"), 3.0e-4,
     {"none": [0], "recognition 2": [0, 1, 2], "recognition 10": [0, 1, 2], "length 10": [0, 1, 2],
      "prefer_longer 10": [0]}),
])
def test_seeds_presets_train_three_seeds_per_arm_and_the_positive_control_once(preset, judge, lr, seeds):
    cfg = _compose([f"experiment={preset}"])
    arms = cfg.hydra.sweeper.params["finetune_arm"].split(",")
    assert (cfg.evaluator.name, cfg.setting.name.value) == judge
    trained = {}
    for arm in arms:
        task = _compose([f"experiment={preset}", f"finetune_arm={arm}"]).finetune_task
        name = task.name.value if task.name.value == "none" else f"{task.name.value} {task.n_articles}"
        trained.setdefault(name, []).append(int(task.seed))
        assert task.name.value == "none" or task.lr == lr
    assert {k: sorted(v) for k, v in trained.items()} == seeds


@pytest.mark.parametrize("preset", ["finetune_dose_response", "finetune_dose_individual", "finetune_seeds_individual",
                                    "finetune_seeds_pairwise"])
def test_dose_response_arms_share_their_evaluation_articles(preset: str):
    # Every arm, in-domain and cross-dataset, is judged on the same articles, all past the largest N's training
    # articles: the fine-tuned models can be compared with the base item by item, and none sees its training data.
    from selfpref_sweep.config.spec import resolve_cell

    arms = _compose([f"experiment={preset}"]).hydra.sweeper.params["finetune_arm"].split(",")
    for dataset in ("paper_xsum", "paper_cnn"):
        starts = {}
        for arm in arms:
            with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
                cfg = compose("config", overrides=[f"experiment={preset}", f"finetune_arm={arm}",
                                                   f"dataset={dataset}", "dataset.root=/nonexistent"])
            spec = resolve_cell(cfg)
            starts[arm] = (spec.dataset.offset, spec.dataset.n_articles)
            if spec.finetune is not None:
                assert spec.finetune.train_end <= spec.dataset.offset
        assert set(starts.values()) == {(50, 10)}, starts


def test_command_line_overrides_a_preset_sweep():
    cfg = _compose(["experiment=notebook", "dataset.n_articles=3"])
    assert cfg.evaluator.name == "gpt41_nano" and cfg.dataset.n_articles == 3


def test_smoke_preset_runs_as_a_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    env = {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "SELFPREF_STORE": str(tmp_path / "calls.sqlite")}
    # The fake evaluator stands in for qwen05 (the preset's own sources, human and smollm135, are swept).
    cmd = [sys.executable, "run.py", "-m", "experiment=smoke", "hydra.searchpath=[file://tests/conf]",
           "evaluator=fake", "source=human,fake_other", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Readable sub-directories: the job number, then the overrides that vary.
    cells = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert [c.name for c in cells] == ["0_evaluator=fake,source=human", "1_evaluator=fake,source=fake_other"]
    for cell in cells:
        summary = json.loads((cell / "summary.json").read_text())
        assert summary["status"] == "complete" and summary["n_items"] == 2
        assert all(json.loads(line)["article"] for line in (cell / "results.jsonl").read_text().splitlines())
    for name in ("report.html", "report.md", "items.html", "wandb_panels.json"):
        assert (sweep / name).is_file(), name
    assert 'href="items.html"' in (sweep / "report.html").read_text()
    items = (sweep / "items.html").read_text()
    assert "fake_eval vs human" in items and "fake_eval vs fake_other" in items
    spec = json.loads((sweep / "wandb_panels.json").read_text())
    assert spec["n_cells"] == 2 and spec["axes"] == ["evaluator", "source"]
    assert "recognition/mean" in spec["metrics"] and "tokens/prompt" in spec["metrics"]
    # Artifacts are logged offline too: each cell run's and the analysis run's records name them.
    cell_runs = [p for c in cells for p in c.glob("wandb/offline-run-*/run-*.wandb")]
    assert len(cell_runs) == 2 and all(b"cell-results" in p.read_bytes() for p in cell_runs)
    analysis_runs = list((sweep / "wandb").glob("offline-run-*/run-*.wandb"))
    assert analysis_runs and b"sweep-report" in analysis_runs[0].read_bytes()
    # ... and the specification publishes (here: builds, without sending) with the one command.
    dry = subprocess.run([sys.executable, "-m", "selfpref_sweep.analysis", "publish-wandb", str(sweep), "--dry-run"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert "ScatterPlot" in dry.stdout and "ParallelCoordinatesPlot" in dry.stdout and "PanelGrid" in dry.stdout


def test_parallel_launcher_gives_each_job_its_share_of_threads():
    from selfpref_sweep.cli import threads_per_job

    proc = subprocess.run([sys.executable, "run.py", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "--cfg",
                           "hydra", "--resolve"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"OMP_NUM_THREADS: '{threads_per_job(2)}'" in proc.stdout and "JoblibLauncher" in proc.stdout
    assert threads_per_job(2) == str(max(1, (os.cpu_count() or 1) // 2)) and threads_per_job(10**6) == "1"
