"""The placebo question (question sensitivity): its truth, its requests and scoring orientation, the agreement
maths, when it runs, what plan mode counts, and its report section."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from statsmodels.stats.proportion import proportion_confint

from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.cell.judging import BACKWARD, FORWARD
from selfpref_sweep.cell.pairs import Pair
from selfpref_sweep.config import JudgeConfig, ModelConfig
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.measurements import Stage
from selfpref_sweep.measurements.placebo import placebo_report as Q
from selfpref_sweep.measurements.placebo.placebo_cell import (
    TIE,
    TRUTHS,
    PlaceboMeasurement,
    PlaceboState,
    agreement,
    format_placebo,
    placebo_enabled,
    placebo_stage,
    score_placebo,
    summarize_placebo,
    truth_of,
)
from selfpref_sweep.models.base import AnswerDistribution
from selfpref_sweep.records.schema import Item, Verdict
from selfpref_sweep.run.plan import plan_cell
from selfpref_sweep.run.runner import run_cell
from tests.conftest import CONF, FAKE_BACKEND, FAKE_EVALUATOR

from .test_analysis import NO_WANDB

PROMPTS = yaml.safe_load((CONF / "prompts" / "paper.yaml").read_text())
FAKE_JUDGE = ModelConfig(name="fake", backend="fake")
LOCAL_JUDGE = ModelConfig(name="qwen", backend="local")


from tests.fakes import RequestBuilder as _Judge  # noqa: E402  (requests without a model)


# --------------------------------------------------------------------------------------------- the truth
def test_the_truth_is_the_summary_with_the_higher_feature_value():
    assert truth_of("length", "one two three", "one two") == ("own", 3.0, 2.0)
    assert truth_of("length", "one", "one two") == ("other", 1.0, 2.0)
    assert truth_of("length", "a b", "c d")[0] == TIE  # equal word counts: no right answer
    assert truth_of("vowel", "aeiou", "AE xyz") == ("own", 5.0, 2.0)  # "y" is not a vowel
    easy = "The cat sat. It was fun."
    hard = "Notwithstanding multitudinous considerations, reorganization necessitates."
    assert truth_of("readability", easy, hard)[0] == "own" and truth_of("readability", hard, easy)[0] == "other"
    assert set(TRUTHS) == {"length", "vowel", "readability"} <= set(PROMPTS["pairwise"])


# ------------------------------------------------------------------------------------- on, off and auto
@pytest.mark.parametrize("mode,judge,on", [("auto", LOCAL_JUDGE, True),
                                           ("auto", ModelConfig(name="g", backend="openai"), False),
                                           ("auto", FAKE_JUDGE, False), ("on", FAKE_JUDGE, True),
                                           ("off", LOCAL_JUDGE, False)])
def test_auto_is_on_where_the_judges_calls_cost_nothing(mode, judge, on):
    enabled, why = placebo_enabled(JudgeConfig(placebo=mode), judge, PROMPTS)
    assert enabled is on and f"judge.placebo={mode}" in why
    if mode == "auto" and not on:
        assert "may cost" in why


def test_an_unknown_question_is_a_clear_error_and_a_missing_prompt_too():
    with pytest.raises(ConfigError, match="judge.placebo_question='colour' has no computable right answer"):
        placebo_enabled(JudgeConfig(placebo="auto", placebo_question="colour"), LOCAL_JUDGE, PROMPTS)
    assert placebo_enabled(JudgeConfig(placebo="off", placebo_question="colour"), LOCAL_JUDGE, PROMPTS)[0] is False
    without = {**PROMPTS, "pairwise": {k: v for k, v in PROMPTS["pairwise"].items() if k != "vowel"}}
    with pytest.raises(ConfigError, match="prompts.pairwise.vowel, which prompts=paper does not have"):
        placebo_enabled(JudgeConfig(placebo="on", placebo_question="vowel"), LOCAL_JUDGE, without)
    enabled, why = placebo_enabled(JudgeConfig(placebo="auto", placebo_question="vowel"), LOCAL_JUDGE, without)
    assert not enabled and "prompts.pairwise.vowel" in why


# ------------------------------------------------------------------------------ requests and orientation
PAIRS = [Pair("a0", "ARTICLE 0", "own has four words", "other two"),  # own longer
         Pair("a1", "ARTICLE 1", "own short", "the other is much longer"),  # other longer
         Pair("a2", "ARTICLE 2", "same length", "equal words")]  # a tie


def _stage():
    return placebo_stage(_Judge(), JudgeConfig(placebo="on"), FAKE_JUDGE, PROMPTS, PAIRS)


def test_requests_put_the_own_summary_in_the_own_slot_in_both_orders():
    stage = _stage()
    assert stage.enabled and [it.article_id for it in stage.answer_items] == ["a0", "a1", "a2"]
    for item, pair in zip(stage.answer_items, PAIRS, strict=True):
        reqs = item.by_question["length"]
        forward, backward = (r.messages[1].content for r in (reqs[FORWARD], reqs[BACKWARD]))
        assert f"Summary1:\n{pair.own}\n\nSummary2:\n{pair.other}\n" in forward
        assert f"Summary1:\n{pair.other}\n\nSummary2:\n{pair.own}\n" in backward
        assert "which summary is longer in terms of word count?" in forward
    assert PlaceboMeasurement().n_requests(stage) == 6


def _picks_own(stage, p=0.9):
    """A judge that names the own summary with probability p in both orders."""
    dists = {}
    for item in stage.answer_items:
        reqs = item.by_question["length"]
        dists[reqs[FORWARD]] = AnswerDistribution({"1": p, "2": 1 - p}, "full_distribution")
        dists[reqs[BACKWARD]] = AnswerDistribution({"1": 1 - p, "2": p}, "full_distribution")
    return dists


def test_the_score_is_p_own_and_correct_follows_the_truth():
    stage = _stage()
    records = score_placebo(stage, _picks_own(stage), min_mass=0.5)
    for aid, truth in (("a0", "own"), ("a1", "other"), ("a2", TIE)):
        r = records[aid]
        assert r["score"] == pytest.approx(0.9) and r["logodds"] == pytest.approx(np.log(9))  # picks OWN
        assert r["truth"] == truth and r["question"] == "length" and r["feature"] == "word count"
    assert records["a0"]["correct"] == pytest.approx(0.9)
    assert records["a0"]["correct_logodds"] == pytest.approx(np.log(9))
    assert records["a1"]["correct"] == pytest.approx(0.1)
    assert records["a1"]["correct_logodds"] == pytest.approx(-np.log(9))
    assert records["a2"]["correct"] is None and records["a2"]["correct_logodds"] is None
    assert records["a0"]["values"] == {"own": 4.0, "other": 2.0}
    assert records["a0"]["orders"]["forward"]["own_position"] == 1
    shown = PlaceboMeasurement().view(records["a1"])
    assert shown["right answer"] == "other (word count: own 2.0, other 5.0)"
    assert shown["P(correct)"] == pytest.approx(0.1)
    assert PlaceboMeasurement().item_columns(records["a1"])["pl_truth"] == "other"


# ------------------------------------------------------------------------------------- agreement maths
def _verdict(logodds, excluded=False):
    return Verdict(None if excluded else 0.5, None if excluded else logodds, excluded,
                   "low_answer_mass" if excluded else None)


def test_agreement_counts_the_same_items_for_both_rates_with_wilson_intervals():
    # (recognition, preference, placebo) log-odds per item
    signs = [(1, 1, 1), (1, 1, -1), (-1, -1, -1), (-1, 1, -1), (1, -1, 1), (1, 1, 1),
             (0, 1, 1),  # recognition even: no choice
             (1, 1, 1)]  # preference excluded below: left out
    items = [Item(f"a{i}", verdicts={"recognition": _verdict(r), "preference": _verdict(p, excluded=(i == 7))})
             for i, (r, p, _) in enumerate(signs)]
    records = {f"a{i}": {"excluded": False, "logodds": pl} for i, (_, _, pl) in enumerate(signs)}
    records["a8"] = {"excluded": True, "logodds": None}  # a placebo exclusion
    agree = agreement(records, items, 0.95)
    assert agree["n_agreement"] == 6 and agree["n_no_choice"] == 1
    placebo, pref = agree["placebo_recognition"], agree["preference_recognition"]
    assert placebo["count"] == 5 and pref["count"] == 4  # items 0, 2, 3, 4, 5 / 0, 1, 2, 5
    lo, hi = proportion_confint(5, 6, alpha=0.05, method="wilson")
    assert placebo["rate"] == pytest.approx(5 / 6)
    assert (placebo["ci_low"], placebo["ci_high"]) == pytest.approx((lo, hi))

    stage = Stage(True, "judge.placebo=on", state=PlaceboState("length"), records={
        **{aid: {**r, "score": 0.6, "truth": "own", "correct": 0.6, "correct_logodds": 0.4}
           for aid, r in records.items() if not r["excluded"]},
        "a8": {"excluded": True, "exclusion_reason": "low_answer_mass", "score": None, "logodds": None,
               "truth": "own", "correct": None, "correct_logodds": None}})
    stage.records["a6"]["truth"] = TIE
    block = summarize_placebo(stage, items, "pairwise", 0.95)
    assert block["n"] == 7 and block["n_ties"] == 1 and block["n_excluded"] == 1
    assert block["exclusions"] == {"low_answer_mass": 1} and block["accuracy"]["mean"] == pytest.approx(0.6)
    # Discordant: item 1 (only preference agrees), items 3 and 4 (only the placebo): McNemar p = 1.
    assert (agree["preference_only"], agree["placebo_only"]) == (1, 2) and agree["mcnemar_p"] == pytest.approx(1.0)
    # preference 4/6 > 1/2; McNemar cannot reject on 3 discordant items, and 6 items cannot bound the difference
    assert block["reading"]["outcome"] == "undetermined" and block["reading"]["mcnemar_p"] == pytest.approx(1.0)
    assert "undetermined, the data tell neither apart nor alike (McNemar p = 1 on 3 discordant items; 97.5% upper " \
           "bound on the difference" in format_placebo(block)
    assert "McNemar needs 6 discordant items to be able to reject, there were 3" in format_placebo(block)


def test_the_reading_has_three_outcomes_each_from_its_own_test():
    from selfpref_sweep.measurements.placebo import placebo_rule as R
    from selfpref_sweep.measurements.placebo.placebo_cell import placebo_reading

    def block(n, pref, pref_only, placebo_only):
        placebo = pref - pref_only + placebo_only
        return {"n_agreement": n, "placebo_recognition": {"rate": placebo / n, "count": placebo},
                "preference_recognition": {"rate": pref / n, "count": pref},
                "preference_only": pref_only, "placebo_only": placebo_only}

    def outcome(*counts):
        return placebo_reading(block(*counts)).outcome

    # 39 vs 38 of 40 (one item apart): the placebo follows recognition nearly as far as preference does, and 40
    # items show it: the lead (at most 0.149) is under half the link (at least 0.368 beyond chance)
    assert outcome(40, 39, 1, 0) == R.ALIKE
    # 32 vs 28 of 40: McNemar cannot reject, and 40 items do not bound the lead under half the link
    assert outcome(40, 32, 6, 2) == R.UNDETERMINED
    assert outcome(40, 36, 16, 0) == R.APART  # McNemar p = 3e-5: preference follows more closely
    assert outcome(40, 30, 0, 8) == R.ALIKE  # the placebo agrees more: the bound on preference's lead is below 0
    assert outcome(40, 20, 5, 0) == R.NO_LINK  # preference agrees on half: no link to explain
    assert placebo_reading({**block(40, 30, 0, 0), "placebo_recognition": {"rate": None}}) is None
    # a 3-item cell is undetermined, and says what it lacked
    three = placebo_reading(block(3, 3, 0, 0))
    assert three.outcome == R.UNDETERMINED
    assert "McNemar needs 6 discordant items" in three.evidence() and "about 23 items" in three.evidence()
    # many concordant items read alike only once the bounds hold: 22 do not, 23 do
    assert (outcome(22, 22, 0, 0), outcome(23, 23, 0, 0)) == (R.UNDETERMINED, R.ALIKE)
    reading = placebo_reading(block(23, 23, 0, 0))
    assert reading.upper < reading.margin == pytest.approx(R.alike_margin(23, 23)) and reading.share == R.ALIKE_SHARE


def test_a_small_link_with_a_placebo_at_chance_never_reads_alike():
    """Preference agrees with recognition on 55% of 1,000 items and the placebo at chance: the placebo explains
    none of the link, so "alike" must not be said (the absolute margin of 0.10 said it for such a link)."""
    from selfpref_sweep.measurements.placebo import placebo_rule as R

    # 550 agree in preference; the placebo agrees on half of each group: both 275, only preference 275, only the
    # placebo 225 (placebo agrees on 500).
    assert R.read(1000, 550, 275, 225).outcome != R.ALIKE


def _quadrinomial_rate(n: int, p: tuple[float, float, float, float], says) -> float:
    """The exact probability that the rule says `says` on n items drawn with probabilities p of (both agree with
    recognition, only preference, only the placebo, neither)."""
    from scipy.stats import multinomial

    from selfpref_sweep.measurements.placebo import placebo_rule as R

    total = 0.0
    for a in range(n + 1):
        for b in range(n + 1 - a):
            for c in range(n + 1 - a - b):
                counts = [a, b, c, n - a - b - c]
                if R.read(n, a + b, b, c).outcome == says:
                    total += multinomial.pmf(counts, n, p)
    return total


def _at_the_alike_boundary(p_a: float, p_c: float, share: float) -> tuple[float, float, float, float]:
    """Probabilities with d = p_b − p_c exactly share·(p_a + p_b − 0.5): the alike claim just false."""
    p_b = (p_c + share * (p_a - 0.5)) / (1 - share)
    assert p_b >= 0 and p_a + p_b + p_c <= 1
    return p_a, p_b, p_c, 1 - p_a - p_b - p_c


@pytest.mark.parametrize("n", [10, 20, 36])
def test_each_outcome_holds_its_rate_where_its_claim_is_false(n):
    from selfpref_sweep.measurements.placebo import placebo_rule as R

    # "alike" where preference in truth leads the placebo by half its link: at most 5%, at any discordance
    for p_a, p_c in ((0.6, 0.0), (0.65, 0.0), (0.5, 0.05), (0.4, 0.1), (0.3, 0.2)):
        assert _quadrinomial_rate(n, _at_the_alike_boundary(p_a, p_c, R.ALIKE_SHARE), R.ALIKE) <= R.ALPHA
    # "told apart" where the two agree with recognition equally often: at most 5%
    for probs in ((0.55, 0.05, 0.05, 0.35), (0.55, 0.2, 0.2, 0.05), (0.2, 0.4, 0.4, 0.0)):
        assert _quadrinomial_rate(n, probs, R.APART) <= R.ALPHA


def test_the_record_flattens_into_the_agreed_columns():
    m = PlaceboMeasurement()
    agreed = {"pl_enabled", "pl_accuracy_mean", "pl_accuracy_ci_low", "pl_accuracy_ci_high", "pl_agree_recognition",
              "pl_pref_agree_recognition", "pl_n", "pl_reason"}
    assert agreed <= set(m.cell_column_names) and {"pl_score", "pl_logodds", "pl_truth"} <= set(m.item_column_names)
    assert set(m.cell_columns({})) == set(m.cell_column_names) and m.cell_columns({})["pl_enabled"] is None
    off = m.cell_columns({"enabled": False, "reason": "judge.placebo=off"})
    assert off["pl_enabled"] is False and off["pl_reason"] == "judge.placebo=off"
    assert set(m.item_columns(None)) == set(m.item_column_names)
    assert m.format({"enabled": False, "reason": "why"}) == "  placebo question  off (why)"


# ------------------------------------------------------------------------------------------- plan mode
def test_plan_mode_counts_the_placebo_calls(compose_cfg, tmp_path):
    base = [*FAKE_EVALUATOR, "dataset.n_articles=3", "judge.competence=off"]
    off = plan_cell(resolve_cell(compose_cfg(base, store=tmp_path / "a.sqlite")), tmp_path / "off")
    on = plan_cell(resolve_cell(compose_cfg([*base, "judge.placebo=on"], store=tmp_path / "b.sqlite")), tmp_path / "on")
    assert off["placebo"]["enabled"] is False and "judge.placebo=auto" in off["placebo"]["reason"]
    assert on["placebo"] == {"enabled": True, "requests": 6, "reason": "judge.placebo=on"}
    assert on["uncached_calls"] - off["uncached_calls"] == 6  # two orders per judged pair, nothing else
    ind = plan_cell(resolve_cell(compose_cfg([*base, "judge.placebo=on", "setting=individual"],
                                             store=tmp_path / "c.sqlite")), tmp_path / "ind")
    assert ind["placebo"]["requests"] == 6  # each summary alone in an individual-setting cell: 3 items x 2


def test_an_unknown_question_stops_the_cell_before_any_call(compose_cfg, tmp_path):
    cfg = compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=2", "judge.placebo=on", "judge.placebo_question=colour"])
    with pytest.raises(ConfigError, match="placebo_question='colour'"):
        plan_cell(resolve_cell(cfg), tmp_path / "plan")


# ----------------------------------------------------------------------------------------- the report
def test_the_report_section_reads_each_cell(compose_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("SELFPREF_BACKENDS", FAKE_BACKEND + ",alike=tests.test_judge_controls_fakes:AlikeJudge")
    sweep = tmp_path / "sweep"
    alike = ["evaluator.backend=alike", "evaluator.name=alike_eval", "dataset.n_articles=8"]
    run_cell(resolve_cell(compose_cfg([*alike, "judge.placebo=on"])), sweep / "0")
    run_cell(resolve_cell(compose_cfg([*alike, "judge.placebo=on", "dataset.offset=6"])), sweep / "1")  # other articles
    run_cell(resolve_cell(compose_cfg([*FAKE_EVALUATOR, "dataset.n_articles=4"])), sweep / "2")  # auto: off
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    md = result.report_md.read_text()
    assert f"## {Q.SECTION}" in md
    section = md.split(f"## {Q.SECTION}", 1)[1].split("\n## ", 1)[0]
    # 8 articles cannot bound the difference under the margin, nor can McNemar reject on no discordant item
    assert "Of the 2 cell(s) with a placebo: told apart 0; alike 0; undetermined 2; no link to explain 0." in section
    assert "1 cell(s) have no placebo measured (1: judge.placebo=auto is off for the fake judge" in section
    table = result.tables[Q.NAME]
    assert list(table["level"]) == ["cell", "cell", "cell", "pooled"]
    readings = list(table["reading (test: p; bound)"])
    assert all(r.startswith(Q.UNDETERMINED) and "McNemar" in r for r in readings[:2])
    assert readings[2].startswith(Q.NO_PLACEBO)
    assert table["placebo agrees with recognition"][3] == table["preference agrees with recognition"][3]


def test_slopes_and_agreement_from_item_frames():
    rng = np.random.default_rng(0)
    rows, cells = [], []
    for c in range(2):
        cells.append({"cell_id": f"c{c}", "evaluator_variant": "e", "setting": "pairwise", "label": "none",
                      "source": f"s{c}", "dataset": "d", "pl_enabled": True, "pl_reason": "on"})
        for i in range(40):  # enough discordant items for McNemar's test to see a placebo that is noise
            rec = rng.normal()
            rows.append({**cells[-1], "article_id": f"a{i}", "rec_logodds": rec,
                         "pref_logodds": 0.8 * rec + c + 0.1 * rng.normal(), "pl_logodds": 0.1 * rng.normal()})
    cells.append({**cells[0], "cell_id": "old", "pl_enabled": None})
    frame = Q.sensitivity_frame(pd.DataFrame(cells), pd.DataFrame(rows))
    assert list(frame["level"]) == ["cell", "cell", "cell", "pooled"] and frame["n"].tolist()[:2] == [40, 40]
    pooled = frame.iloc[3]
    assert pooled["pref_slope"] == pytest.approx(0.8, abs=0.1) and pooled["pref_slope_ci_low"] > 0.5
    assert pooled["placebo_slope_ci_low"] < 0 < pooled["placebo_slope_ci_high"]
    # the pooled row's cells share articles: tested at the article level, not by McNemar over dependent pairs
    assert pooled["reading"] == Q.APART and pooled["n_agreement"] == 80 and pooled["p"] < 0.05
    assert pooled["test"] == Q.POOLED_TEST and "over 40 articles" in pooled["evidence"]
    assert frame.iloc[2]["reading"].startswith(f"{Q.NO_PLACEBO}: the cell records no placebo block")


# ---------------------------------------------------------------------------- the individual format
def test_individual_cells_ask_it_one_summary_at_a_time_against_the_median_length():
    from selfpref_sweep.cell.judging import OTHER, OWN
    from selfpref_sweep.measurements.placebo.placebo_cell import median_words

    stage = placebo_stage(_Judge(), JudgeConfig(placebo="on"), FAKE_JUDGE, PROMPTS, PAIRS, "individual")
    assert stage.state.asked.value == "individual"
    assert stage.state.words == median_words([t for p in PAIRS for t in (p.own, p.other)]) == 2
    for item, pair in zip(stage.answer_items, PAIRS, strict=True):
        reqs = item.by_question["length"]
        assert set(reqs) == {OWN, OTHER}
        assert f"Summary:\n{pair.own}\n" in reqs[OWN].messages[1].content
        assert f"Summary:\n{pair.other}\n" in reqs[OTHER].messages[1].content
        assert "Does this summary have more than 2 words?" in reqs[OWN].messages[1].content
        assert reqs[OWN].answers == ("Yes", "No")
    # a judge that reads the question: P(Yes) rises with the summary's length
    dists = {r: AnswerDistribution({"Yes": p, "No": 1 - p}, "full_distribution")
             for item, pair in zip(stage.answer_items, PAIRS, strict=True)
             for slot, r in item.by_question["length"].items()
             for p in [min(0.95, 0.2 * len((pair.own if slot == OWN else pair.other).split()))]}
    records = score_placebo(stage, dists, min_mass=0.5)
    assert records["a0"]["truth"] == "own" and records["a0"]["logodds"] == pytest.approx(np.log(0.8 / 0.4))
    assert records["a0"]["correct"] == pytest.approx(0.8 / 1.2)  # own / (own + other), as individual recognition
    assert records["a1"]["truth"] == "other" and records["a1"]["correct"] == pytest.approx(0.95 / 1.35)
    assert records["a2"]["correct"] is None  # a tie: no right answer
    block = summarize_placebo(Stage(True, "on", stage.answer_items, state=stage.state, records=records), [],
                              "individual", 0.95)
    assert block["asked"] == "individual" and block["words"] == 2 and block["n"] == 2
    assert "one summary at a time, more than 2 words?" in format_placebo(block)
    assert PlaceboMeasurement().view(records["a0"])["own: P(Yes)"] == pytest.approx(0.8)


def test_a_question_without_an_individual_form_is_asked_pairwise_in_individual_cells():
    stage = placebo_stage(_Judge(), JudgeConfig(placebo="on", placebo_question="vowel"), FAKE_JUDGE, PROMPTS, PAIRS,
                          "individual")
    assert stage.state.asked.value == "pairwise" and stage.state.words is None
    assert set(stage.answer_items[0].by_question["vowel"]) == {BACKWARD, FORWARD}
