"""Cross-model familiarity: a second model (judge.familiarity_reference) scores the same summaries, and the
self-specific part is the judge's own - other difference minus the reference's. Its calls are cached and
counted in plan mode, the judge itself is refused as the reference, a cell without one says so, and the
report's "Verbal recognition next to authorship baselines" section shows it."""

import json
import math

import numpy as np
import pytest

from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.config import AdapterConfig, ModelConfig
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.measurements.familiarity.familiarity_cell import (
    NO_REFERENCE,
    FamiliarityMeasurement,
    refuse_the_judge,
)
from selfpref_sweep.measurements.familiarity.familiarity_report import authorship_baselines_table, baseline_reading
from selfpref_sweep.models import model_identity
from selfpref_sweep.run.plan import plan_cell
from selfpref_sweep.run.runner import run_cell
from tests import fakes
from tests.conftest import FAKE_BACKEND

BACKENDS = FAKE_BACKEND + ",familiar=tests.fakes:FamiliarJudge,refscorer=tests.test_cross_familiarity:RefScorer"
JUDGE = ["evaluator.backend=familiar", "evaluator.name=familiar_eval"]
REFERENCE = ["judge.familiarity_reference={name: ref_model, backend: refscorer}"]


class RefScorer(fakes.FamiliarJudge):
    """A reference that scores given text like FamiliarJudge, with other probabilities: each word costs log 0.3
    when the prompt holds it, log 0.1 when not. So for any pair, the judge's own - other difference is
    Δ·log 12 and the reference's Δ·log 3 (Δ: the share of own words in the prompt minus the other's), and the
    self-specific part is the judge's difference × log 4 / log 12."""

    SEQUENCE_CALLS = []
    P_IN_PROMPT, P_NOT = 0.3, 0.1

    @classmethod
    def preflight_problems(cls, cfg, model_cache):
        return [("weights", f"{cfg.name}: test weights are not on this machine")]


@pytest.fixture(autouse=True)
def _backends(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", BACKENDS)


def read_items(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------------ config
def test_a_model_config_composes_into_the_reference(compose_cfg):
    spec = resolve_cell(compose_cfg([*JUDGE, "+model@judge.familiarity_reference=smollm135"]))
    ref = spec.judge.familiarity_reference
    assert isinstance(ref, ModelConfig) and ref.name == "smollm135" and ref.weights.file.endswith(".gguf")
    assert ref.dtype != "auto"  # resolved once, as the evaluator's, so identities hold the real dtype
    assert resolve_cell(compose_cfg(JUDGE)).judge.familiarity_reference is None


def test_a_reference_that_is_not_a_model_config_is_a_clear_error(compose_cfg):
    with pytest.raises(ConfigError, match="judge.familiarity_reference is not a model config"):
        resolve_cell(compose_cfg([*JUDGE, "judge.familiarity_reference={name: x, no_such_key: 1}"]))


def test_the_judge_itself_is_refused(compose_cfg, tmp_path):
    cfg = compose_cfg([*JUDGE, "dataset.n_articles=2", "judge.familiarity_reference={name: familiar_eval, "
                                                        "backend: familiar}"])
    with pytest.raises(ConfigError, match="is the judge itself"):
        plan_cell(resolve_cell(cfg), tmp_path / "plan")
    with pytest.raises(ConfigError, match="is the judge itself"):
        run_cell(resolve_cell(cfg), tmp_path / "cell")


def test_the_same_weights_under_another_name_are_refused_but_a_fine_tuned_judges_base_is_not():
    base = ModelConfig(name="qwen", backend="local", hf_id="Qwen/Qwen2.5-0.5B-Instruct")
    alias = ModelConfig(name="qwen_again", backend="local", hf_id="Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ConfigError, match="is the judge itself"):
        refuse_the_judge(alias, base, model_identity(base))
    tuned = ModelConfig(name="qwen+ft", backend="local", hf_id="Qwen/Qwen2.5-0.5B-Instruct",
                        adapter=AdapterConfig(fingerprint="abc", path="/tmp/x"))
    refuse_the_judge(base, tuned, model_identity(tuned))  # the base scores what the fine-tune judges: allowed


def test_a_reference_that_cannot_score_text_is_off_under_auto_and_an_error_under_on(compose_cfg, tmp_path):
    cannot = ["judge.familiarity_reference={name: api_like, backend: fake}", "dataset.n_articles=2"]
    block = run_cell(resolve_cell(compose_cfg([*JUDGE, *cannot])), tmp_path / "auto")["familiarity"]
    assert block["enabled"] is True  # the judge's own familiarity stays on
    assert block["reference"]["enabled"] is False and "cannot score given text" in block["reference"]["reason"]
    assert "self_specific" not in block
    with pytest.raises(ConfigError, match="reference's fake backend cannot score given text"):
        run_cell(resolve_cell(compose_cfg([*JUDGE, *cannot, "judge.familiarity=on"])), tmp_path / "on")


# -------------------------------------------------------------------------------------------------- cell
def test_self_specific_is_the_judge_difference_minus_the_references(compose_cfg, tmp_path):
    fakes.FamiliarJudge.SEQUENCE_CALLS.clear()
    RefScorer.SEQUENCE_CALLS.clear()
    summary = run_cell(resolve_cell(compose_cfg([*JUDGE, *REFERENCE, "dataset.n_articles=4"])), tmp_path / "cell")
    items = read_items(tmp_path / "cell")
    assert len(RefScorer.SEQUENCE_CALLS) == len(fakes.FamiliarJudge.SEQUENCE_CALLS) == 2 * len(items)
    for it in items:
        fam, ref = it["familiarity"], it["familiarity"]["reference"]
        assert set(ref) == {"own", "other", "difference", "n_tokens"}
        assert fam["self_specific"] == pytest.approx(fam["difference"] - ref["difference"])
        # the fakes' closed forms (RefScorer's docstring): an independent check of the subtraction
        assert ref["difference"] == pytest.approx(fam["difference"] * math.log(3) / math.log(12))
        assert fam["self_specific"] == pytest.approx(fam["difference"] * math.log(4) / math.log(12))
    block = summary["familiarity"]
    ss = [it["familiarity"]["self_specific"] for it in items]
    assert block["reference"]["enabled"] is True and block["reference"]["model"] == "ref_model"
    assert block["reference"]["n"] == len(items) and block["reference"]["n_missing"] == 0
    assert block["reference"]["mean_difference"]["mean"] == pytest.approx(
        np.mean([it["familiarity"]["reference"]["difference"] for it in items]))
    assert block["self_specific"]["mean"] == pytest.approx(np.mean(ss)) and block["self_specific"]["mean"] > 0
    assert block["self_specific"]["ci_low"] <= block["self_specific"]["mean"] <= block["self_specific"]["ci_high"]
    lr = block["reference"]["likelihood_recognition"]
    assert set(lr) == {"mean", "ci_low", "ci_high", "n", "method"} and lr["method"] == "wilson"
    assert lr["ci_low"] < lr["ci_high"]  # a Wilson interval is never zero-width, even at n of n
    cols = FamiliarityMeasurement().cell_columns(block)
    assert cols["fam_ref_model"] == "ref_model" and cols["fam_self_specific_mean"] == pytest.approx(np.mean(ss))
    assert cols["fam_ref_diff_ci_low"] == pytest.approx(block["reference"]["mean_difference"]["ci_low"])
    item_cols = FamiliarityMeasurement().item_columns(items[0]["familiarity"])
    assert item_cols["fam_self_specific"] == pytest.approx(items[0]["familiarity"]["self_specific"])


def test_the_references_calls_are_cached(compose_cfg, tmp_path):
    cfg = compose_cfg([*JUDGE, *REFERENCE, "dataset.n_articles=3"])
    first = run_cell(resolve_cell(cfg), tmp_path / "a")
    RefScorer.SEQUENCE_CALLS.clear()
    fakes.CONSTRUCTED.clear()
    second = run_cell(resolve_cell(cfg), tmp_path / "b")
    assert second["model_calls"] == 0 and fakes.CONSTRUCTED == [] and RefScorer.SEQUENCE_CALLS == []
    assert second["familiarity"] == first["familiarity"]


def test_plan_counts_the_references_calls_and_preflights_its_weights(compose_cfg, tmp_path):
    with_ref, without = (compose_cfg([*JUDGE, "dataset.n_articles=3", *extra]) for extra in (REFERENCE, []))
    fakes.CONSTRUCTED.clear()
    plan_with = plan_cell(resolve_cell(with_ref), tmp_path / "p_with")
    plan_without = plan_cell(resolve_cell(without), tmp_path / "p_without")
    assert fakes.CONSTRUCTED == []  # nothing loaded
    assert plan_with["familiarity"]["requests"] == plan_without["familiarity"]["requests"] + 6
    assert plan_with["uncached_calls"] - plan_without["uncached_calls"] == 6  # two per article
    assert plan_with["by_model"]["familiarity_reference"]["uncached_calls"] == 6
    assert any(w["kind"] == "weights" and w["model"] == "ref_model" for w in plan_with["preflight"])
    assert not any(w["model"] == "ref_model" for w in plan_without["preflight"])
    run_cell(resolve_cell(with_ref), tmp_path / "cell")
    assert plan_cell(resolve_cell(with_ref), tmp_path / "p_again")["uncached_calls"] == 0


def test_a_cell_without_a_reference_says_so(compose_cfg, tmp_path):
    summary = run_cell(resolve_cell(compose_cfg([*JUDGE, "dataset.n_articles=2"])), tmp_path / "cell")
    block = summary["familiarity"]
    assert block["reference"] == {"enabled": False, "reason": NO_REFERENCE, "model": None}
    assert all("reference" not in it["familiarity"] for it in read_items(tmp_path / "cell"))
    cols = FamiliarityMeasurement().cell_columns(block)
    assert cols["fam_ref_model"] == "" and cols["fam_ref_reason"] == NO_REFERENCE
    assert all(math.isnan(cols[f"fam_{b}_{k}"]) for b in ("ref_diff", "ref_lr", "self_specific")
               for k in ("mean", "ci_low", "ci_high"))
    older = {k: v for k, v in block.items() if k != "reference"}  # a cell recorded before the reference existed
    assert "no reference model" in FamiliarityMeasurement().cell_columns(older)["fam_ref_reason"]
    assert math.isnan(FamiliarityMeasurement().cell_columns({})["fam_self_specific_mean"])
    assert "familiarity ref   none (no reference model" in FamiliarityMeasurement().format(block)


# ---------------------------------------------------------------------------------------------- analysis
def _cell(**numbers):
    base = {"evaluator_variant": "m1", "source": "s1", "dataset": "demo", "setting": "pairwise", "label": "none",
            "rec_mean": 0.6, "rec_ci_low": 0.55, "rec_ci_high": 0.65}
    return {**base, **numbers}


def test_the_reading_says_what_each_comparison_shows():
    import pandas as pd

    low_verbal = _cell(rc_accuracy=0.55, rc_accuracy_ci_low=0.5, rc_accuracy_ci_high=0.6, sb_accuracy=0.8,
                       sb_accuracy_ci_low=0.7, sb_accuracy_ci_high=0.9, fam_self_specific_mean=0.2,
                       fam_self_specific_ci_low=0.1, fam_self_specific_ci_high=0.3)
    assert baseline_reading(low_verbal) == "verbal below the surface baseline; self-specific familiarity > 0"
    assert baseline_reading(_cell()) == "—"  # nothing to compare with
    table = authorship_baselines_table(pd.DataFrame([low_verbal, _cell()]))
    assert table.loc[1, "surface baseline (accuracy)"] == "not measured"
    assert table.loc[0, "surface baseline (accuracy)"].startswith("0.800 [0.700, 0.900]")
    assert table.loc[1, "self-specific familiarity"] == "not measured"


def test_the_report_has_the_baselines_section(tmp_path):
    from tests.test_familiarity import _synthetic_sweep

    sweep = _synthetic_sweep(tmp_path / "sweep", "familiarity", n_articles=8)
    md = run_analysis([sweep], wandb_cfg={"mode": "disabled"}).report_md.read_text()
    assert "## Verbal recognition next to authorship baselines" in md
    section = md.split("## Verbal recognition next to authorship baselines", 1)[1].split("\n## ", 1)[0]
    assert "likelihood recognizer (accuracy)" in section and "not measured" in section
    assert "may be reading surface features" in section
    assert "No cell measured the surface baseline" in section and "no reference model" in section
