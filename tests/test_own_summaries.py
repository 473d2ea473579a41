"""evaluator.own_summaries: published summaries as the evaluator's own (it then judges only), and the
refusal of a source that is the evaluator's own model."""

import json

import pytest

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.run.plan import plan_cell
from selfpref_sweep.run.runner import run_cell
from tests import fakes
from tests.conftest import FAKE_EVALUATOR
from tests.test_data import write_paper_layout

ARTICLES = {"11": "The council voted to close the library. Residents protested outside the town hall.",
            "22": "A storm flooded the valley overnight. Roads were closed and schools shut.",
            "33": "The club signed a new striker on Friday. He joins on a three-year deal."}
# Claude-style answers with the artefacts the authors removed by hand, as the paper's files might hold them.
GPT35 = {"11": "Here is a one-sentence summary of the article:\n\nThe council voted to close the library.",
         "22": "Summary: a storm flooded the valley, closing roads and schools.",
         "33": "The club signed a striker on a three-year deal."}
GPT4 = {"11": "Residents protested a vote to close the library.", "22": "- Valley flooded\n- Roads closed",
        "33": "3 years: the striker's new deal with the club."}


@pytest.fixture
def paper_root(tmp_path):
    root = tmp_path / "paper"
    write_paper_layout(root, articles=ARTICLES, sources={"human": {k: f"Human summary {k}." for k in ARTICLES},
                                                         "gpt35": GPT35, "gpt4": GPT4})
    return root


def paper_cell(root, *overrides):
    return ["dataset=paper_xsum", f"dataset.root={root}", *overrides]


def read_items(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_published_own_summaries_mean_judging_only(compose_cfg, tmp_path, paper_root, capsys):
    cfg = compose_cfg([*FAKE_EVALUATOR, *paper_cell(paper_root, "source=paper_gpt4",
                                                    "evaluator.own_summaries=paper_gpt35")])
    fakes.CONSTRUCTED.clear()
    summary = run_cell(resolve_cell(cfg), tmp_path / "cell")
    assert summary["model_calls"] == 3 * 2 * 2  # the two questions in both orders; no summary was generated
    assert summary["own_summaries"] == {"kind": "dataset", "name": "paper_gpt35"}
    items = read_items(tmp_path / "cell")
    assert [it["own_summary"] for it in items] == ["The council voted to close the library.",
                                                    "A storm flooded the valley, closing roads and schools.",
                                                    "The club signed a striker on a three-year deal."]
    # the same rules for every source, counted per source
    assert summary["standardization"] == {"paper_gpt35": {"preamble": 2, "bullet": 0, "numbering": 0},
                                          "paper_gpt4": {"preamble": 0, "bullet": 1, "numbering": 0}}
    assert items[1]["other_summary"] == "Valley flooded.\nRoads closed."
    assert items[2]["other_summary"].startswith("3 years:")  # a number that is not numbering stays
    # the fake evaluator has no paper key: it is told that it did not write these summaries
    assert any("not known to have written them" in w for w in summary["warnings"])
    assert "own summaries: paper_gpt35 (dataset), not generated" in capsys.readouterr().out


def test_own_summaries_from_a_file_and_in_plan_mode(compose_cfg, tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"demo-01": "My first summary.", "demo-02": None}))
    overrides = [*FAKE_EVALUATOR, "dataset.n_articles=3", f"evaluator.own_summaries={path}"]
    plan = plan_cell(resolve_cell(compose_cfg(overrides)), tmp_path / "plan")
    assert plan["uncached_calls"] == 1 * 2 * 2  # only demo-01 has an own summary; nothing to generate
    summary = run_cell(resolve_cell(compose_cfg(overrides)), tmp_path / "cell")
    assert summary["own_summaries"] == {"kind": "path", "name": str(path)}
    assert summary["model_calls"] == 4 and summary["exclusions"] == {"missing_summary:fake_eval": 2}
    assert summary["warnings"] == []  # a file may well hold the evaluator's own summaries


def test_a_missing_file_or_source_is_named(compose_cfg, tmp_path):
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=2", f"evaluator.own_summaries={tmp_path / 'no.json'}"])
    with pytest.raises(ConfigError, match="neither a source of dataset 'demo'"):
        run_cell(resolve_cell(cfg), tmp_path / "cell")
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=2", "evaluator.own_summaries=paper_gpt35"])
    with pytest.raises(ConfigError, match="paper_xsum"):
        run_cell(resolve_cell(cfg), tmp_path / "cell")


@pytest.mark.parametrize("overrides,message", [
    (["evaluator=gpt35", "source=paper_gpt35"], "holds gpt35's own published summaries"),
    (["evaluator=llama2", "source=paper_llama"], "holds llama2's own published summaries"),
    (["evaluator=gpt35", "source=paper_gpt35", "evaluator.own_summaries=paper_gpt35"], "are the same summaries"),
    (["evaluator=gpt35", "source=paper_gpt4", "evaluator.own_summaries=paper_claude"], "are not gpt35's"),
    (["evaluator=gpt35", "source=gpt35", "source.model.name=chatgpt"], r"own model \(model=gpt-3.5-turbo\)"),
    (["evaluator=qwen05", "source=qwen05", "source.model.name=qwen_again"], "own model"),
    (["evaluator=llama2", "source=llama2", "source.model.name=llama_again"], r"hf_id=meta-llama"),
    ([*FAKE_EVALUATOR, "evaluator.own_summaries=paper_gpt35", "finetune_task=recognition",
      "finetune_task.n_articles=2"], "not supported"),
])
def test_an_evaluator_against_its_own_model_is_refused(compose_cfg, overrides, message):
    with pytest.raises(ConfigError, match=message):
        resolve_cell(compose_cfg(overrides))


@pytest.mark.parametrize("overrides", [
    ["evaluator=gpt35", "source=paper_gpt4", "evaluator.own_summaries=paper_gpt35"],  # the paper's exact inputs
    ["evaluator=gpt35", "source=paper_claude"],
    ["evaluator=gpt35", "source=gpt4"],
    ["evaluator=qwen05", "source=paper_gpt35"],
])
def test_other_models_are_accepted(compose_cfg, overrides):
    resolve_cell(compose_cfg(overrides))


def test_a_sweep_skips_the_evaluator_against_its_own_model(compose_cfg, tmp_path):
    """A grid crosses evaluators with sources (experiment=paper_pairwise): that grid point is skipped and
    recorded with the reason, in plan mode too, instead of failing the sweep."""
    cfg = compose_cfg(["evaluator=gpt35", "source=paper_gpt35"])
    spec = resolve_cell(cfg, sweeping=True)
    assert "own published summaries" in spec.skip_reason
    plan = plan_cell(spec, tmp_path / "plan")
    assert plan["uncached_calls"] == 0 and "own published summaries" in plan["skipped"]
    summary = run_cell(spec, tmp_path / "cell")
    assert summary["status"] == "skipped" and summary["cell"]["source"] == "paper_gpt35"
    assert resolve_cell(compose_cfg(["evaluator=gpt35", "source=paper_gpt4"]), sweeping=True).skip_reason is None
