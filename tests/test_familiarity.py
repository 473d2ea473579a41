"""The familiarity stage: its requests, records, caching, plan-mode counts and when it is on; and the analysis
regression that asks whether recognition predicts preference beyond familiarity."""

import json
import math

import numpy as np
import pytest

from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.cell.pairs import Pair
from selfpref_sweep.cell.prompts import summarize_messages
from selfpref_sweep.config import JudgeConfig, ModelConfig
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.measurements.familiarity.familiarity_cell import familiarity_enabled, familiarity_requests
from selfpref_sweep.measurements.familiarity.familiarity_report import fit_familiarity, likelihood_units
from selfpref_sweep.models.base import Message, ModelIdentity, SequenceRequest
from selfpref_sweep.run.plan import plan_cell
from selfpref_sweep.run.runner import run_cell
from tests.conftest import FAKE_BACKEND

FAMILIAR = ",familiar=tests.fakes:FamiliarJudge"
JUDGE = ["evaluator.backend=familiar", "evaluator.name=familiar_eval"]


@pytest.fixture(autouse=True)
def _familiar_registered(monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", FAKE_BACKEND + FAMILIAR)


def read_items(run_dir):
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def _model(backend: str) -> ModelConfig:
    return ModelConfig(name=f"{backend}_model", backend=backend)


@pytest.mark.parametrize("mode,backend,on", [("auto", "local", True), ("auto", "familiar", True),
                                             ("auto", "openai", False), ("auto", "fake", False),
                                             ("off", "local", False), ("on", "familiar", True)])
def test_auto_is_on_where_the_backend_scores_text(mode, backend, on):
    enabled, why = familiarity_enabled(JudgeConfig(familiarity=mode), _model(backend))
    assert enabled is on and f"judge.familiarity={mode}" in why
    if mode == "auto" and not on:
        assert "cannot score given text" in why


def test_on_with_an_api_judge_is_a_clear_error():
    with pytest.raises(ConfigError, match="judge.familiarity=on needs a judge whose backend can score"):
        familiarity_enabled(JudgeConfig(familiarity="on"), _model("openai"))


def test_requests_are_the_summarization_prompt_with_each_summary_as_the_reply(compose_cfg):
    spec = resolve_cell(compose_cfg(JUDGE))
    identity = ModelIdentity("judge", "familiar", "w")

    class Judge:
        pass

    judge = Judge()
    judge.identity = identity
    from selfpref_sweep.cell.dataset_loaders import Article
    articles = [Article("a1", "The article text. More.", "ref")]
    stage = familiarity_requests(judge, spec.evaluator, spec.judge, spec.prompts, "xsum", articles,
                                 [Pair("a1", "The article text. More.", "own text", "other text")], 100)
    assert stage.enabled
    own, other = stage.requests["a1"]["own"], stage.requests["a1"]["other"]
    assert own.messages == other.messages == summarize_messages(spec.prompts, "xsum", "The article text. More.")
    assert (own.continuation, other.continuation) == ("own text", "other text")
    assert own.model == identity and own.cache_key() != other.cache_key()
    assert len(stage.flat()) == 2


def test_cache_key_holds_model_prompt_and_continuation():
    a = ModelIdentity("m", "local", "w")
    msgs = (Message("user", "summarize"),)
    base = SequenceRequest(a, "text", msgs)
    assert base.cache_key() == SequenceRequest(a, "text", msgs).cache_key()
    assert base.cache_key() != SequenceRequest(a, "text!", msgs).cache_key()
    assert base.cache_key() != SequenceRequest(a, "text", (Message("user", "other"),)).cache_key()
    assert base.cache_key() != SequenceRequest(ModelIdentity("m", "local", "w", adapter="x"), "text", msgs).cache_key()


def test_cell_records_familiarity_per_item_and_per_cell(compose_cfg, tmp_path):
    from tests import fakes

    fakes.FamiliarJudge.SEQUENCE_CALLS.clear()
    summary = run_cell(resolve_cell(compose_cfg([*JUDGE, "dataset.n_articles=4"])), tmp_path / "cell")
    items = read_items(tmp_path / "cell")
    assert len(fakes.FamiliarJudge.SEQUENCE_CALLS) == 2 * len(items)  # one pass per summary
    for it in items:
        fam = it["familiarity"]
        assert set(fam) == {"own", "other", "difference", "n_tokens"}
        assert fam["difference"] == pytest.approx(fam["own"] - fam["other"])
        assert fam["n_tokens"] == {"own": len(it["own_summary"].split()), "other": len(it["other_summary"].split())}
        assert math.log(0.05) <= fam["own"] <= math.log(0.6)
    block = summary["familiarity"]
    diffs = [it["familiarity"]["difference"] for it in items]
    assert block["enabled"] is True and block["n"] == len(items) and block["n_missing"] == 0
    assert block["mean_difference"]["mean"] == pytest.approx(np.mean(diffs))
    wins = [1.0 if d > 0 else 0.5 if d == 0 else 0.0 for d in diffs]
    assert block["likelihood_recognition"]["mean"] == pytest.approx(np.mean(wins))
    assert block["likelihood_recognition"]["ci_low"] <= block["likelihood_recognition"]["mean"]
    # the fake's own summary is copied from the article: likelier than the reference for most articles
    assert block["mean_difference"]["mean"] > 0
    on_disk = json.loads((tmp_path / "cell" / "summary.json").read_text())["familiarity"]
    assert on_disk == block


def test_rerun_makes_no_calls(compose_cfg, tmp_path):
    from tests import fakes

    cfg = compose_cfg([*JUDGE, "dataset.n_articles=3"])
    first = run_cell(resolve_cell(cfg), tmp_path / "a")
    fakes.FamiliarJudge.SEQUENCE_CALLS.clear()
    fakes.CONSTRUCTED.clear()
    second = run_cell(resolve_cell(cfg), tmp_path / "b")
    assert second["model_calls"] == 0 and fakes.CONSTRUCTED == [] and fakes.FamiliarJudge.SEQUENCE_CALLS == []
    assert second["familiarity"] == first["familiarity"]
    assert read_items(tmp_path / "a") == read_items(tmp_path / "b")


def test_off_and_unsupported_backends_record_null_and_a_reason(compose_cfg, tmp_path):
    off = run_cell(resolve_cell(compose_cfg([*JUDGE, "dataset.n_articles=2", "judge.familiarity=off"])),
                   tmp_path / "off")
    assert off["familiarity"] == {"enabled": False, "reason": "judge.familiarity=off"}
    assert all(it["familiarity"] is None for it in read_items(tmp_path / "off"))
    fake = run_cell(resolve_cell(compose_cfg(["evaluator.backend=fake", "evaluator.name=fake_eval",
                                              "dataset.n_articles=2"])), tmp_path / "fake")
    assert fake["familiarity"]["enabled"] is False and "cannot score given text" in fake["familiarity"]["reason"]


def test_plan_counts_the_scoring_calls(compose_cfg, tmp_path):
    from tests import fakes

    on, off = (compose_cfg([*JUDGE, "dataset.n_articles=3", f"judge.familiarity={m}"]) for m in ("on", "off"))
    fakes.CONSTRUCTED.clear()
    plan_on = plan_cell(resolve_cell(on), tmp_path / "p_on")
    plan_off = plan_cell(resolve_cell(off), tmp_path / "p_off")
    assert fakes.CONSTRUCTED == []
    assert plan_on["familiarity"] == {"enabled": True, "requests": 6, "reason": "judge.familiarity=on"}
    assert plan_on["uncached_calls"] - plan_off["uncached_calls"] == 6  # two per article
    assert plan_on["prompt_tokens_est"] > plan_off["prompt_tokens_est"]
    run_cell(resolve_cell(on), tmp_path / "cell")
    assert plan_cell(resolve_cell(on), tmp_path / "p_again")["uncached_calls"] == 0


# ----------------------------------------------------------------------------------------------- analysis
def _write_cell(sweep, job, variant, source, rows, familiarity=True):
    """A cell directory whose items carry (recognition, preference, familiarity difference)."""
    d = sweep / str(job)
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(f"- evaluator={variant}\n- source={source}\n")
    cell = {"evaluator": variant, "source": source, "dataset": "demo", "setting": "pairwise", "label": "none",
            "finetune_task": "none", "finetune_dataset": None, "finetune_n_articles": None, "transfer": "none"}
    stat = {"mean": 0.6, "ci_low": 0.5, "ci_high": 0.7, "n": len(rows), "n_excluded": 0, "exclusions": {}}
    summary = {"status": "complete", "cell": cell, "n_articles": len(rows), "n_items": len(rows), "n_excluded": 0,
               "exclusions": {}, "recognition": stat, "preference": stat,
               "position_consistency": {"recognition": 0.5, "preference": 0.5}, "model_calls": 0, "elapsed_s": 1}
    if familiarity:
        lr = float(np.mean([f > 0 for _, _, _, f in rows]))
        summary["familiarity"] = {"enabled": True, "reason": "test", "n": len(rows),
                                  "mean_difference": {"mean": 0.1, "ci_low": 0.0, "ci_high": 0.2},
                                  "likelihood_recognition": {"mean": lr, "ci_low": lr - 0.1, "ci_high": lr + 0.1}}
    (d / "summary.json").write_text(json.dumps(summary))

    def verdict(score):
        return {"score": score, "logodds": math.log(score / (1 - score)), "excluded": False,
                "exclusion_reason": None, "consistent": True}

    with (d / "results.jsonl").open("w") as fh:
        for aid, rec, pref, fam in rows:
            item = {"article_id": aid, "recognition": verdict(rec), "preference": verdict(pref)}
            if familiarity:
                item["familiarity"] = {"own": -1.0 + fam, "other": -1.0, "difference": fam,
                                       "n_tokens": {"own": 20, "other": 20}}
            fh.write(json.dumps(item) + "\n")


def _synthetic_sweep(root, driver: str, n_articles=60, seed=0):
    """Two variants × two sources; recognition and familiarity correlated (r ≈ 0.6) per item. Preference is
    driven by familiarity only, or by recognition only, plus noise."""
    rng = np.random.default_rng(seed)
    job = 0
    for variant in ("m1", "m2"):
        for source in ("s1", "s2"):
            rows = []
            for a in range(n_articles):
                fam = rng.normal()
                rec_signal = 0.6 * fam + 0.8 * rng.normal()
                driver_signal = fam if driver == "familiarity" else rec_signal
                rec = 1 / (1 + math.exp(-0.8 * rec_signal))
                pref = float(np.clip(0.5 + 0.1 * driver_signal + 0.02 * rng.normal(), 0.01, 0.99))
                rows.append((f"a{a}", rec, pref, 0.3 * fam))
            _write_cell(root, job, variant, source, rows)
            job += 1
    return root


def _paper_fit(sweep):
    from selfpref_sweep.analysis.sweep.load import load_sweeps

    fits = [f for f in fit_familiarity(load_sweeps([sweep]).items) if f.scale == "paper"]
    assert len(fits) == 1 and fits[0].ok, fits
    return fits[0]


def test_recognition_coefficient_vanishes_when_familiarity_drives_preference(tmp_path):
    f = _paper_fit(_synthetic_sweep(tmp_path / "sweep", "familiarity"))
    assert f.n == 240 and f.n_clusters == 60 and f.n_variants == 2
    assert f.rec_before_ci_low > 0  # alone, recognition seems to predict preference (through familiarity)
    assert f.rec_after_ci_low <= 0 <= f.rec_after_ci_high  # with familiarity in, nothing is left
    assert abs(f.rec_after) < 0.1 * f.rec_before
    assert f.familiarity_ci_low > 0


def test_recognition_coefficient_stays_when_recognition_drives_preference(tmp_path):
    f = _paper_fit(_synthetic_sweep(tmp_path / "sweep", "recognition"))
    assert f.rec_after_ci_low > 0 and f.rec_after == pytest.approx(f.rec_before, rel=0.25)
    assert f.familiarity_ci_low <= 0 <= f.familiarity_ci_high


def test_likelihood_units_average_over_sources(tmp_path):
    from selfpref_sweep.analysis.sweep.load import load_sweeps

    sweep = tmp_path / "sweep"
    _write_cell(sweep, 0, "m1", "s1", [("a1", 0.6, 0.6, 0.2), ("a2", 0.7, 0.6, -0.1)])  # recognizer 0.5
    _write_cell(sweep, 1, "m1", "s2", [("a1", 0.8, 0.6, 0.2), ("a2", 0.8, 0.6, 0.0), ("a3", 0.8, 0.6, 0.1)])
    units = likelihood_units(load_sweeps([sweep]).items)
    row = units.iloc[0]
    assert len(units) == 1 and row["n_sources"] == 2 and row["n_items"] == 5
    assert row["likelihood_recognition"] == pytest.approx((0.5 + (1 + 0.5 + 1) / 3) / 2)  # a tie counts ½
    assert row["verbal_recognition"] == pytest.approx((0.65 + 0.8) / 2)


def test_report_has_the_familiarity_section_and_says_when_there_is_none(tmp_path):
    sweep = _synthetic_sweep(tmp_path / "sweep", "familiarity", n_articles=12)
    result = run_analysis([sweep], wandb_cfg={"mode": "disabled"})
    md = result.report_md.read_text()
    assert "## Familiarity: a rival explanation" in md and "likelihood recognizer" in md
    assert "per paper unit" in md and "recognition (+ familiarity)" in md
    assert json.loads((sweep / "analysis" / "regressions.json").read_text())["familiarity"]

    old = tmp_path / "old"
    for job, (variant, source) in enumerate([("m1", "s1"), ("m2", "s1"), ("m3", "s1")]):
        _write_cell(old, job, variant, source, [(f"a{i}", 0.5 + 0.05 * i, 0.6, 0.0) for i in range(4)],
                    familiarity=False)
    result = run_analysis([old], wandb_cfg={"mode": "disabled"})
    md = result.report_md.read_text()
    assert "No cell recorded familiarity" in md and fit_familiarity(result.data.items) == []
    assert (old / "analysis" / "familiarity.csv").is_file()
