import json
import os
import subprocess
import sys

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.run.plan import plan_cell
from selfpref_sweep.run.runner import run_cell
from tests.conftest import FAKE_BACKEND, FAKE_EVALUATOR, REPO


def test_plan_counts_uncached_calls_and_spends_nothing(compose_cfg, tmp_path):
    from tests import fakes

    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=3"])
    fakes.CONSTRUCTED.clear()
    plan = plan_cell(resolve_cell(cfg), tmp_path / "plan")
    assert fakes.CONSTRUCTED == []  # no model was built
    # 3 summaries + (3 articles x 2 questions x 2 orders) judge calls, none cached yet
    assert plan["uncached_calls"] == 3 + 12
    assert plan["prompt_tokens_est"] > 0 and plan["cost_usd_est"] is None  # a price-less model: unknown cost
    assert json.loads((tmp_path / "plan" / "plan.json").read_text())["uncached_calls"] == 15
    run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert plan_cell(resolve_cell(cfg), tmp_path / "plan2")["uncached_calls"] == 0


def test_plan_prices_api_style_models(compose_cfg, tmp_path):
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=2", "evaluator.price_per_mtok_prompt=1.0",
                       "evaluator.price_per_mtok_completion=2.0"])
    plan = plan_cell(resolve_cell(cfg), tmp_path / "plan")
    expected = (plan["prompt_tokens_est"] * 1.0 + plan["completion_tokens_est"] * 2.0) / 1e6
    assert plan["cost_usd_est"] == round(expected, 4)


def test_plan_grid_prints_every_cell_and_a_total(tmp_path):
    env = {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "disabled",
           "SELFPREF_STORE": str(tmp_path / "calls.sqlite")}
    proc = subprocess.run([sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
                           "source=human,fake_other", "setting=pairwise,individual", "dataset.n_articles=2",
                           "plan=true", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "plan for 4 cells" in proc.stdout and "Nothing was spent" in proc.stdout
    assert not list((tmp_path / "sweep").glob("*/summary.json"))  # nothing ran
    assert not (tmp_path / "sweep" / "report.html").exists()


def test_the_grid_plan_lists_cells_by_their_job_number(tmp_path, capsys):
    """Presets name cell folders "<job>_<overrides>": the plan lists them in job order, under their job numbers."""
    from selfpref_sweep.run.plan import summarize_plans

    cell = {"evaluator": "e", "dataset": "d", "setting": "pairwise", "label": "none", "finetune_task": "none"}
    for job in (10, 2, 0):
        folder = tmp_path / f"{job}_source=s{job}"
        folder.mkdir()
        (folder / "plan.json").write_text(json.dumps({
            "cell": {**cell, "source": f"s{job}"}, "uncached_calls": job, "prompt_tokens_est": 1,
            "completion_tokens_est": 1, "cost_usd_est": 0.0}))
    summarize_plans(tmp_path)
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if " vs s" in line]
    assert [line.split(".")[0] for line in lines] == ["0", "2", "10"]
    assert "vs s2 " in lines[1] and "2 calls not cached" in lines[1]
