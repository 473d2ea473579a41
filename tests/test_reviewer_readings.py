"""The paper's claims as a careful reviewer reads them (issue 67, items 2, 4 and 5): degenerate arms (one constant
answer) left out of the slope fits with a counted reason; the length control per other source, with the flag where
the estimate extrapolates; and a label run that asked one order compared with the unlabelled run's same order.
The last test reads the authors' data where ../shared/paper-data has been imported (skipped otherwise)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from selfpref_sweep.analysis.estimate.estimates import LEFT_OUT, estimate
from selfpref_sweep.analysis.estimate.length_control import EXTRAPOLATES, length_control_frames
from selfpref_sweep.analysis.estimate.paired import NO_SAME_ORDER, label_vs_reference
from selfpref_sweep.analysis.estimate.units import degenerate_units
from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.analysis.report.length_control_section import BY_SOURCE_NAME, BY_SOURCE_SECTION, by_source_table
from selfpref_sweep.analysis.report.unit_tables import DEGENERATE_COL, label_comparison_table
from selfpref_sweep.analysis.sweep.load import _order_scores, load_sweeps
from selfpref_sweep.imports.paper_rows import label_verdict
from selfpref_sweep.reporting.grouping import GROUPINGS

from .test_analysis import NO_WANDB, write_cell
from .test_length_control import _with_summaries, planted

# --- degenerate arms ---------------------------------------------------------------------------------------

SOURCES = ("human", "paper_gpt4")
N_ARTICLES = 25


def _arm(sweep: Path, job: int, task: str, n: int | None, rec: float, pref: float, spread: float,
         rng: np.random.Generator) -> int:
    """One unit (two cells, one per source) whose items scatter uniformly ±spread around (rec, pref)."""
    for source in SOURCES:
        items = [(f"a{i}", rec + float(rng.uniform(-spread, spread)), pref + float(rng.uniform(-spread, spread)))
                 for i in range(N_ARTICLES)]
        write_cell(sweep, job, source=source, finetune_task=task,
                   finetune_dataset=None if task == "none" else "paper_xsum", finetune_n_articles=n, items=items)
        job += 1
    return job


def _finetune_sweep(root: Path, constant_arms: bool) -> Path:
    """A base model, three recognition fine-tunes, three control fine-tunes and, with ``constant_arms``, two
    control arms that answer one constant (always_1 exactly at 0.5, random within ±0.005 of it)."""
    rng = np.random.default_rng(0)
    sweep = root / ("constant" if constant_arms else "plain")
    job = _arm(sweep, 0, "none", None, 0.60, 0.55, 0.1, rng)
    for n, rec, pref in ((2, 0.65, 0.58), (10, 0.74, 0.69), (50, 0.86, 0.80)):
        job = _arm(sweep, job, "recognition", n, rec, pref, 0.1, rng)
    for task, rec, pref in (("readability", 0.55, 0.54), ("length", 0.63, 0.60), ("vowelcount", 0.70, 0.66)):
        job = _arm(sweep, job, task, 10, rec, pref, 0.1, rng)
    if constant_arms:
        job = _arm(sweep, job, "always_1", 10, 0.5, 0.5, 0.0, rng)
        job = _arm(sweep, job, "random", 10, 0.5, 0.5, 0.005, rng)
    return sweep


def test_degenerate_arms_are_flagged_and_left_out_of_every_fit_with_a_counted_reason(tmp_path: Path) -> None:
    items = load_sweeps([_finetune_sweep(tmp_path, constant_arms=True)]).items
    est = estimate(items)
    flagged = est.degenerate
    assert sorted(flagged["finetune_task"]) == ["always_1", "random"]
    assert (flagged["n_items"] == 2 * N_ARTICLES).all() and (flagged["pref_range"] <= 0.01).all()
    assert flagged["reason"].str.startswith("one constant answer").all()
    # They keep their units (the paper-unit points), and stay out of the fits: 9 units, 7 fitted.
    assert len(est.units) == 9
    headline = next(f for f in est.unit_fits if f.group_by == GROUPINGS[0][0] and f.scale == "paper")
    assert headline.n == 7 and LEFT_OUT.format(n=2) in headline.note
    unit_interaction = next(r for r in est.interactions if r.level == "paper unit" and r.scale == "paper"
                            and r.group_by == GROUPINGS[0][0])
    assert unit_interaction.n_control == 3 and LEFT_OUT.format(n=2) in unit_interaction.note
    assert all(LEFT_OUT.format(n=2) in f.note for f in est.robustness_fits if f.group_by == GROUPINGS[0][0])
    assert all(LEFT_OUT.format(n=2) in f.note for f in est.resampled if f.group_by == GROUPINGS[0][0])
    # The Δs against the base model still have them: what the fine-tune changed is a measurement.
    assert {"always_1", "random"} <= set(est.diffs["finetune_task"])
    # The same sweep without the constant arms: nothing flagged, and the headline is the same fit.
    plain = estimate(load_sweeps([_finetune_sweep(tmp_path, constant_arms=False)]).items)
    assert plain.degenerate.empty and not any("degenerate" in f.note for f in plain.unit_fits)
    same = next(f for f in plain.unit_fits if f.group_by == GROUPINGS[0][0] and f.scale == "paper")
    assert same.slope == pytest.approx(headline.slope) and same.n == headline.n


def test_only_a_flat_finetuned_unit_over_enough_items_is_degenerate(tmp_path: Path) -> None:
    items = load_sweeps([_finetune_sweep(tmp_path, constant_arms=True)]).items
    always = items["finetune_task"] == "always_1"
    # A narrow but real spread on one question (0.05 wide) is information, not one constant answer.
    narrow = items.copy()
    narrow.loc[always, "rec_score"] = 0.5 + np.resize([-0.025, 0.025], int(always.sum()))
    assert sorted(degenerate_units(narrow)["finetune_task"]) == ["random"]
    # Too few items to tell: a flat unit of 10 kept items is not flagged.
    few = items[~always | items["article_id"].isin([f"a{i}" for i in range(5)])]
    assert sorted(degenerate_units(few)["finetune_task"]) == ["random"]
    # A base model is never flagged (the competence control judges it).
    base = items["finetune_task"] == "none"
    flat_base = items.assign(rec_score=items["rec_score"].where(~base, 0.5),
                             pref_score=items["pref_score"].where(~base, 0.5))
    assert "none" not in set(degenerate_units(flat_base)["finetune_task"])


def test_the_report_and_the_csvs_name_the_degenerate_arms(tmp_path: Path) -> None:
    sweep = _finetune_sweep(tmp_path, constant_arms=True)
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    md = result.report_md.read_text()
    assert md.count("**Degenerate arms left out:** 2 fine-tuned unit(s)") >= 4
    assert "[ft always_1 on paper_xsum, n=10] on paper_xsum" in md
    assert DEGENERATE_COL in result.tables["units"].columns
    csv = pd.read_csv(sweep / "analysis" / "degenerate_units.csv")
    assert sorted(csv["finetune_task"]) == ["always_1", "random"] and csv["level"].eq("paper unit").all()
    units = pd.read_csv(sweep / "analysis" / "paper_units.csv", keep_default_na=False)
    assert (units["degenerate"] != "").sum() == 2
    fits = pd.read_csv(sweep / "analysis" / "regression_units.csv", keep_default_na=False)
    assert fits["note"].str.contains(LEFT_OUT.format(n=2), regex=False).any()
    assert len(json.loads((sweep / "analysis" / "regressions.json").read_text())["degenerate_units"]) == 2
    # Without such arms the files are as they were.
    plain = _finetune_sweep(tmp_path, constant_arms=False)
    run_analysis([plain], wandb_cfg=NO_WANDB)
    assert not (plain / "analysis" / "degenerate_units.csv").exists()
    assert "degenerate" not in pd.read_csv(plain / "analysis" / "paper_units.csv").columns


# --- length control per source -----------------------------------------------------------------------------


def _two_sources() -> pd.DataFrame:
    """One unit: against humans the own summaries are about as long (log ratio 0) and preferred (0.6 log-odds);
    against gpt4 nearly always shorter (log ratio -1.2) and not preferred at equal length. One length slope."""
    human = planted(sources=("human",), own_effect=0.6, mean_log_ratio=0.0, length_effect=0.8, seed=11)
    gpt4 = planted(sources=("gpt4",), own_effect=0.0, mean_log_ratio=-1.2, length_effect=0.8, seed=12)
    return pd.concat([human, gpt4], ignore_index=True)


def test_each_source_has_its_adjusted_preference_and_the_share_at_equal_length() -> None:
    units, by_source = length_control_frames(_two_sources())
    rows = by_source[by_source["scale"] == "logodds"].set_index("source")
    human, gpt4 = rows.loc["human"], rows.loc["gpt4"]
    assert human["adjusted"] == pytest.approx(0.6, abs=0.15) and human["adjusted_ci_low"] > 0
    assert gpt4["adjusted_ci_low"] < 0 < gpt4["adjusted_ci_high"]
    # The pooled controlled value is the mean of the sources' intercepts: here it comes from the human pairs.
    pooled = units[units["scale"] == "logodds"].iloc[0]
    assert pooled["controlled"] == pytest.approx((human["adjusted"] + gpt4["adjusted"]) / 2)
    # Raw per source: its item mean, whose mean over sources is the unit's raw value.
    assert pooled["raw"] == pytest.approx((human["raw"] + gpt4["raw"]) / 2)
    # Where the items lie: against gpt4 under 10% have the own summary at least as long, so the intercept is read
    # beyond them; against humans, both sides are well covered.
    assert gpt4["share_own_at_least_as_long"] < 0.10 and bool(gpt4["extrapolates"])
    assert gpt4["note"] == EXTRAPOLATES.format(share=0.10)
    assert 0.2 < human["share_own_at_least_as_long"] < 0.8 and not bool(human["extrapolates"])
    assert human["share_own_at_least_as_long"] + human["share_own_at_most_as_long"] >= 1.0
    table = by_source_table(by_source)
    assert table.loc[table["other source"] == "gpt4", "verdict"].str.startswith("extrapolated: ").all()
    assert not table.loc[table["other source"] == "human", "verdict"].str.startswith("extrapolated").any()


def test_too_few_articles_give_a_source_no_interval() -> None:
    items = _two_sources()
    items = items[items["article_id"].isin(["a0", "a1", "a2"])]
    _, by_source = length_control_frames(items)
    assert by_source["adjusted_ci_low"].isna().all() and by_source["adjusted"].notna().all()
    assert by_source["note"].str.contains("too few clusters").all()


def test_the_per_source_table_and_csv_are_in_the_report(tmp_path: Path) -> None:
    sweep = tmp_path / "words"
    _with_summaries(write_cell(sweep, 0, source="human"), [18, 25, 30, 22, 27])
    _with_summaries(write_cell(sweep, 1, source="paper_gpt4"), [10, 12, 11, 9, 13])
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    md = result.report_md.read_text()
    assert f"### {BY_SOURCE_SECTION}" in md and "an adjusted estimate under a linear model" in md
    assert "bounds what is left" not in md
    csv = pd.read_csv(sweep / "analysis" / f"{BY_SOURCE_NAME}.csv")
    assert set(csv["source"]) == {"human", "paper_gpt4"} and csv["level"].eq("source").all()
    gpt4 = csv[csv["source"] == "paper_gpt4"].iloc[0]
    assert gpt4["share_own_at_least_as_long"] == 0 and bool(gpt4["extrapolates"])


# --- labels in the same order ------------------------------------------------------------------------------


def _label_items(one_order: bool, reference_orders: bool = True, n: int = 30) -> pd.DataFrame:
    """An evaluator judged unlabelled in both orders (P(own) 0.80 with its summary first, 0.40 second: a position
    bias toward "1") and under label=correct; ``one_order``: the label run asked its summary first only, at 0.82."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        for source in SOURCES:
            fwd, bwd = 0.80 + rng.normal(0, 0.03), 0.40 + rng.normal(0, 0.03)
            base = {"setting": "pairwise", "dataset": "paper_xsum", "evaluator_variant": "llama2", "source": source,
                    "article_id": f"a{i}", "rec_score": 0.6, "rec_logodds": 0.4, "rec_excluded": False,
                    "pref_excluded": False}
            ref = {"pref_forward_score": fwd, "pref_backward_score": bwd} if reference_orders else {
                "pref_forward_score": math.nan, "pref_backward_score": math.nan}
            rows.append({**base, "label": "none", "cell_id": f"none/{source}", "pref_score": (fwd + bwd) / 2,
                         "pref_logodds": 0.2, **ref})
            lab = fwd + 0.02 + rng.normal(0, 0.005)
            labelled = ({"pref_score": lab, "pref_logodds": math.nan, "pref_forward_score": lab,
                         "pref_backward_score": math.nan} if one_order else
                        {"pref_score": (lab + bwd) / 2, "pref_logodds": 0.3, "pref_forward_score": lab,
                         "pref_backward_score": bwd})
            rows.append({**base, "label": "correct", "cell_id": f"correct/{source}", **labelled})
    return pd.DataFrame(rows)


def test_a_one_order_label_run_is_compared_with_the_same_order() -> None:
    row = label_vs_reference(_label_items(one_order=True)).iloc[0]
    assert row["orders"] == "forward" and "one order asked (own summary first)" in row["note"]
    # Against the unlabelled forward order (0.80): +0.02; against its two-order mean (0.60) it would read +0.22.
    assert row["pref_ref_paper_mean"] == pytest.approx(0.80, abs=0.02)
    assert row["dpref_paper_mean"] == pytest.approx(0.02, abs=0.005) and row["dpref_paper_ci_low"] > 0
    assert math.isnan(row["dpref_logodds_mean"]) and math.isnan(row["dpref_logodds_p"])
    table = label_comparison_table(label_vs_reference(_label_items(one_order=True)))
    assert table["compared on"].iloc[0] == "one order (own summary first) vs the same order"


def test_a_two_order_label_run_is_compared_as_before() -> None:
    row = label_vs_reference(_label_items(one_order=False)).iloc[0]
    assert row["orders"] == "both" and row["note"] == ""
    assert row["dpref_paper_mean"] == pytest.approx(0.01, abs=0.005)  # half the forward change, in the mean
    assert row["dpref_logodds_mean"] == pytest.approx(0.1)
    table = label_comparison_table(label_vs_reference(_label_items(one_order=False)))
    assert table["compared on"].iloc[0] == "both orders' mean vs both orders' mean"


def test_without_the_references_orders_there_is_no_comparison_never_the_mean() -> None:
    row = label_vs_reference(_label_items(one_order=True, reference_orders=False)).iloc[0]
    assert row["orders"] == "forward" and row["note"] == NO_SAME_ORDER.format(reference="none")
    assert math.isnan(row["dpref_paper_mean"]) and math.isnan(row["pref_ref_paper_mean"])


def test_the_llama_label_rows_hold_their_one_order() -> None:
    one = label_verdict({"self_preference": 0.7}, False, {}, one_order=True)
    assert set(one.orders) == {"forward"} and one.orders["forward"].p_own == pytest.approx(0.7)
    assert _order_scores(one)[0] == pytest.approx(0.7) and math.isnan(_order_scores(one)[1])
    gpt = label_verdict({"self_preference": 0.7, "forward_comparison": "1", "backward_comparison": "2"}, False, {})
    assert gpt.orders is None and all(math.isnan(v) for v in _order_scores(gpt))


# --- the authors' data ------------------------------------------------------------------------------------

PAPER_SWEEP = os.environ.get("SELFPREF_PAPER_SWEEP", "/tmp/paper_sweep")


_PAPER_FILES = ("degenerate_units.csv", "length_control_by_source.csv", "label_comparison.csv", "question_collapse.csv")


@pytest.mark.skipif(not all((Path(PAPER_SWEEP) / "analysis" / f).is_file() for f in _PAPER_FILES),
                    reason="the paper sweep, imported and analysed by this code, is not here ($SELFPREF_PAPER_SWEEP)")
def test_on_the_papers_data() -> None:
    analysis = Path(PAPER_SWEEP) / "analysis"
    flagged = pd.read_csv(analysis / "degenerate_units.csv")
    gpt35 = flagged[(flagged["evaluator"] == "gpt35") & (flagged["setting"] == "pairwise")]
    assert sorted(gpt35["finetune_task"].value_counts().items()) == [("always_1", 4), ("random", 4)]
    by_source = pd.read_csv(analysis / f"{BY_SOURCE_NAME}.csv")
    row = by_source[(by_source["evaluator_variant"] == "gpt35") & (by_source["dataset"] == "paper_cnn")
                    & (by_source["setting"] == "pairwise") & (by_source["label"] == "none")
                    & (by_source["source"] == "paper_gpt4") & (by_source["scale"] == "paper")].iloc[0]
    assert row["adjusted"] == pytest.approx(0.43, abs=0.02) and bool(row["extrapolates"])
    labels = pd.read_csv(analysis / "label_comparison.csv")
    llama = labels[labels["evaluator_variant"] == "llama2"]
    assert (llama["orders"] == "forward").all() and len(llama)
    collapse = pd.read_csv(analysis / "question_collapse.csv")
    gpt35 = collapse[(collapse["evaluator"] == "gpt35") & (collapse["label"] == "none")]
    controls = gpt35[gpt35["finetune_task"].isin(["readability", "vowel"])]
    assert (controls["reading"].str.startswith("collapsed")).sum() >= 7  # of 8: vowel on XSUM, read on CNN, is not
    assert (gpt35.loc[gpt35["finetune_task"] == "none", "reading"].str.startswith("apart")).all()
    # The xsum random and always_1 fine-tunes share one model id: a robustness row leaves them out.
    from selfpref_sweep.analysis.estimate.finetune_tests import DUPLICATES_DROPPED

    robust = pd.read_csv(analysis / "interaction_robustness.csv")
    assert DUPLICATES_DROPPED in set(robust.loc[robust["evaluator"] == "gpt35", "variant"])
    # Each pairwise cell's own figure, in its summary.json.
    cells = [json.loads(p.read_text()) for p in Path(PAPER_SWEEP).glob("pairwise/label_none/*/*/*/summary.json")]
    assert cells and all(0 <= c["question_agreement"]["same_share"] <= 1 for c in cells
                         if c["question_agreement"]["n_items"])


# --- item 1: do the two questions collapse into one? -------------------------------------------------------------
def _collapse_items(seed: int = 0, n: int = 30) -> pd.DataFrame:
    """A base model whose two questions agree on a quarter of the items (independent answers), an arm trained on
    readability whose two questions agree on 90%, and one whose questions agree on 10%."""
    import numpy as np

    rng = np.random.default_rng(seed)
    picks = ("own/own", "own/other", "other/own", "other/other")
    rows = []
    for variant, task, agree in (("m", "none", None), ("m [ft readability]", "readability", 0.9),
                                 ("m [ft length]", "length", 0.1)):
        for i in range(n):
            for source in ("human", "x"):
                rec = picks[rng.integers(4)]
                if agree is None:
                    pref = picks[rng.integers(4)]
                else:
                    pref = rec if rng.random() < agree else next(p for p in picks if p != rec)
                rows.append({"setting": "pairwise", "label": "none", "dataset": "d", "evaluator": "m",
                             "evaluator_variant": variant, "is_finetuned": task != "none", "finetune_task": task,
                             "cell_id": f"{variant}/{source}", "source": source, "article_id": str(i),
                             "rec_excluded": False, "pref_excluded": False, "rec_score": rng.random(),
                             "pref_score": rng.random(), "rec_answers": rec, "pref_answers": pref})
    return pd.DataFrame(rows)


def test_the_collapse_control_reads_collapsed_apart_and_the_base():
    from selfpref_sweep.analysis.estimate.collapse import APART, COLLAPSED, question_collapse

    frame = question_collapse(_collapse_items()).set_index("evaluator_variant")
    assert frame.loc["m", "reading"] == APART and frame.loc["m", "same_share"] < 0.4
    tuned = frame.loc["m [ft readability]"]
    assert tuned["reading"] == COLLAPSED and tuned["same_ci_low"] > 0.5 and tuned["delta_ci_low"] > 0
    assert tuned["base_same_share"] == pytest.approx(frame.loc["m", "same_share"])
    assert frame.loc["m [ft length]", "reading"] == APART
    # Paired on the same (source, article) items: Δ is the arm's share minus the base's.
    assert tuned["delta"] == pytest.approx(tuned["same_share"] - tuned["base_same_share"])


# --- item 3: the interaction's robustness ---------------------------------------------------------------------
def test_the_interaction_robustness_table_on_three_control_tasks():
    import numpy as np

    from selfpref_sweep.analysis.estimate.finetune_tests import (
        AS_REPORTED,
        ONE_CLUSTER_PER_MODEL,
        fit_interaction,
        interaction_robustness,
    )
    from selfpref_sweep.analysis.estimate.units import DEGENERATE_COLUMNS

    rng = np.random.default_rng(5)
    rows = []
    arms = [("recognition", f"r{k}", 1.4) for k in range(4)] + [(t, f"{t}{k}", 1.0) for t in ("length", "vowel",
                                                                                              "readability")
                                                                 for k in range(2)]
    for task, variant, slope in arms:
        for dataset in ("xsum", "cnn"):
            rec = rng.uniform(0.45, 0.75)
            rows.append({"setting": "pairwise", "label": "none", "dataset": dataset, "evaluator": "m",
                         "evaluator_variant": variant, "finetune_task": task, "rec_paper_mean": rec,
                         "pref_paper_mean": 0.5 + slope * (rec - 0.5) + rng.normal(0, 0.01),
                         "rec_logodds_mean": np.nan, "pref_logodds_mean": np.nan})
    units = pd.DataFrame(rows)
    table = interaction_robustness(units, pd.DataFrame(columns=DEGENERATE_COLUMNS))
    assert list(table["variant"]) == [AS_REPORTED, ONE_CLUSTER_PER_MODEL, "without length", "without readability",
                                      "without vowel"]
    reported = table.set_index("variant").loc[AS_REPORTED]
    pts = pd.DataFrame({"recognition": units["rec_paper_mean"], "preference": units["pref_paper_mean"],
                        "finetune_task": units["finetune_task"], "evaluator_variant": units["evaluator_variant"]})
    assert reported["estimate"] == pytest.approx(fit_interaction(pts).estimate)
    assert reported["ci_low"] > 0  # the planted slopes differ by 0.4
    assert table.set_index("variant").loc["without vowel", "n_control"] == 8


def test_a_shared_fine_tune_identity_gets_its_own_robustness_row():
    import numpy as np

    from selfpref_sweep.analysis.estimate.finetune_tests import DUPLICATES_DROPPED, interaction_robustness
    from selfpref_sweep.analysis.estimate.units import DEGENERATE_COLUMNS

    rng = np.random.default_rng(7)
    rows = []
    arms = [("recognition", f"r{k}", 1.4, "") for k in range(4)] + [
        ("length", "l0", 1.0, ""), ("length", "l1", 1.0, ""), ("vowel", "v0", 1.0, "one-model"),
        ("readability", "b0", 1.0, "one-model"), ("readability", "b1", 1.0, "")]
    for task, variant, slope, fingerprint in arms:
        for dataset in ("xsum", "cnn"):
            rec = rng.uniform(0.45, 0.75)
            rows.append({"setting": "pairwise", "label": "none", "dataset": dataset, "evaluator": "m",
                         "evaluator_variant": variant, "finetune_task": task, "finetune_fingerprint": fingerprint,
                         "rec_paper_mean": rec, "pref_paper_mean": 0.5 + slope * (rec - 0.5) + rng.normal(0, 0.01),
                         "rec_logodds_mean": np.nan, "pref_logodds_mean": np.nan})
    table = interaction_robustness(pd.DataFrame(rows), pd.DataFrame(columns=DEGENERATE_COLUMNS)).set_index("variant")
    # v0 and b0 name one model: the row leaves both out (4 of the 10 control points gone).
    assert table.loc[DUPLICATES_DROPPED, "n_control"] == table.loc["as reported", "n_control"] - 4
    no_dupes = [dict(r, finetune_fingerprint="") for r in rows]
    plain = interaction_robustness(pd.DataFrame(no_dupes), pd.DataFrame(columns=DEGENERATE_COLUMNS))
    assert DUPLICATES_DROPPED not in set(plain["variant"])


def test_a_pairwise_cell_writes_whether_its_two_questions_agree_and_an_individual_one_does_not(tmp_path: Path):
    from selfpref_sweep.analysis.study.design import SimulationSpec
    from selfpref_sweep.analysis.study.simulate import write_sweep
    from selfpref_sweep.records.schema import read_cell
    from selfpref_sweep.records.scores import AGREEMENT_KEY, question_agreement, top_answers

    for setting in ("pairwise", "individual"):
        out = tmp_path / setting
        write_sweep(SimulationSpec(n_articles=8, setting=setting, recognition_variants=1, control_variants=0,
                                   include_base=False, datasets=("d",), sources=("human",)), out)
        record = read_cell(next(p.parent for p in out.rglob("summary.json")))
        block = record.summary.extra.get(AGREEMENT_KEY)
        if setting == "individual":
            assert block is None
            continue
        items = record.items
        kept = [it for it in items if not any(it.verdicts[q].excluded for q in ("recognition", "preference"))]
        same = [top_answers(it.verdicts["recognition"]) == top_answers(it.verdicts["preference"]) for it in kept]
        assert block["n_items"] == len(kept) and block["same_share"] == pytest.approx(sum(same) / len(same))
        assert block["ci_low"] <= block["same_share"] <= block["ci_high"]
        assert -1 <= block["corr"] <= 1
        assert question_agreement(items, ("recognition", "preference"), 0.95) == pytest.approx(block)


def test_the_judge_controls_table_names_each_arms_collapse_reading():
    from selfpref_sweep.analysis.estimate.collapse import APART, COLLAPSED, question_collapse
    from selfpref_sweep.analysis.report import judge_controls as J

    collapse = question_collapse(_collapse_items())
    cell = {"setting": "pairwise", "label": "none", "dataset": "d"}
    tuned = J.collapse_text(pd.Series({**cell, "evaluator_variant": "m [ft readability]"}), collapse)
    share = collapse.set_index("evaluator_variant").loc["m [ft readability]"]
    assert tuned.endswith(COLLAPSED) and tuned.startswith(f"{share['same_share']:.3f} ({share['base_same_share']:.3f})")
    assert J.collapse_text(pd.Series({**cell, "evaluator_variant": "m"}), collapse).endswith(APART)
    assert J.collapse_text(pd.Series({**cell, "evaluator_variant": "other"}), collapse) == J.NOT_COLLAPSE_UNIT
    assert J.COLLAPSE_COLUMN in J.judge_controls_table(pd.DataFrame(), collapse).columns
    assert J.COLLAPSE_COLUMN not in J.judge_controls_table(pd.DataFrame()).columns
