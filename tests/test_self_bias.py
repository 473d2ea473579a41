"""Self-preference net of quality (selfpref_sweep/analysis/self_bias/): each estimator recovers a planted self term
within its interval; where κ is not identified there is no number and a reason; the fit test catches references
that disagree; the ratings import carries anchors and correctness through the analysis into self_bias.csv and the
report; and, where ../shared/paper-data is present, the paper's three judges get their rows."""

from __future__ import annotations

import csv
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from selfpref_sweep.analysis.self_bias import cross_judge
from selfpref_sweep.analysis.self_bias.net_bias import COLUMNS, PAPER_SCALE_NO_WORD, self_bias_frame
from selfpref_sweep.analysis.study.net_bias_study import DESIGNS, draw_items, truths

REAL = Path(__file__).resolve().parents[2] / "shared" / "paper-data"


def _pooled(frame: pd.DataFrame, scale: str = "logodds", estimator: str = "cross_judge") -> pd.DataFrame:
    rows = frame[(frame["estimator"] == estimator) & (frame["scale"] == scale)]
    if estimator == "cross_judge":
        rows = rows[rows["reference"] == cross_judge.POOLED_REFERENCE]
    return rows.set_index("judge")


@pytest.mark.parametrize("name", ["paper", "paper_individual"])
def test_cross_judge_recovers_a_planted_kappa(name):
    d = replace(DESIGNS[name], articles=300)
    frame, _ = self_bias_frame(draw_items(d, np.random.default_rng(3)))
    assert list(frame.columns) == COLUMNS
    pooled = _pooled(frame)
    for judge, kappa in zip(d.judges, d.kappa, strict=True):
        row = pooled.loc[judge]
        assert row["ci_low"] <= kappa <= row["ci_high"], (judge, row["estimate"], kappa)
        assert row["ci_high"] - row["ci_low"] < (0.3 if name == "paper" else 0.05)
    # Every common reference, and the judges' own outputs alone, read the same κ where the model holds.
    refs = frame[(frame["estimator"] == "cross_judge") & (frame["scale"] == "logodds")]
    assert set(refs["reference"]) == {"pooled", *d.references, "judges only"}
    assert (refs["fit_p"] > 0.05).all()
    assert pooled.loc["gpt4", "verdict"].startswith("favours its own")


def test_the_paper_scale_is_read_as_a_share_between_equal_outputs():
    d = replace(DESIGNS["paper"], articles=300)
    frame, _ = self_bias_frame(draw_items(d, np.random.default_rng(4)))
    paper = _pooled(frame, "paper")
    assert (paper["null"] == 0.5).all()
    # No word on the paper's scale (it comes from the log-odds scale); here the fit test rejects it anyway.
    assert paper["verdict"].isin([PAPER_SCALE_NO_WORD]).all() or paper["verdict"].str.startswith("no single").all()
    assert not paper["verdict"].str.contains("favours").any()
    truth = truths(d, d.kappa, seed=5, articles=20_000)
    for judge in d.judges:  # the pseudo-true κ: the additive fit to the population cell means
        row = paper.loc[judge]
        assert row["ci_low"] - 0.01 <= truth[("paper", "pooled", judge)] <= row["ci_high"] + 0.01


def test_one_judge_or_no_common_author_gives_no_number_and_says_why():
    items = draw_items(replace(DESIGNS["small"], articles=20), np.random.default_rng(1))
    alone = items[items["evaluator_variant"] == "a"]
    frame, _ = self_bias_frame(alone)
    rows = frame[frame["estimator"] == "cross_judge"]
    assert rows["estimate"].isna().all() and (rows["note"] == cross_judge.ONE_JUDGE).all()
    # Two judges that judged only each other: only κ_a + κ_b is identified.
    mutual = items[items["other_author"] != "human"]
    frame, _ = self_bias_frame(mutual)
    rows = frame[frame["estimator"] == "cross_judge"]
    assert rows["estimate"].isna().all() and (rows["note"] == cross_judge.NOT_IDENTIFIED).all()
    assert (rows["verdict"] == "").all()


def test_a_just_identified_design_says_it_cannot_test_its_model():
    frame, _ = self_bias_frame(draw_items(DESIGNS["small"], np.random.default_rng(2)))
    rows = _pooled(frame)
    assert rows["fit_p"].isna().all()
    assert rows["fit_note"].str.startswith("just identified").all()
    assert np.isfinite(rows["ci_low"]).all()


def test_references_that_disagree_fail_the_fit_test_and_get_no_single_verdict():
    d = replace(DESIGNS["paper"], articles=300)
    items = draw_items(d, np.random.default_rng(6))
    # gpt35 sees the human summaries as much worse than the other judges do: quality is not one number.
    tilt = (items["evaluator_variant"] == "gpt35") & (items["other_author"] == "human")
    items.loc[tilt, "pref_logodds"] += 1.0
    frame, _ = self_bias_frame(items)
    pooled = _pooled(frame)
    assert (pooled["fit_p"] < 0.001).all()
    assert pooled["verdict"].str.startswith("no single verdict").all()
    by_ref = frame[(frame["estimator"] == "cross_judge") & (frame["scale"] == "logodds")
                   & (frame["judge"] == "gpt35")].set_index("reference")
    assert by_ref.loc["human", "estimate"] - by_ref.loc["claude", "estimate"] > 0.25


def _anchored_items(rng: np.random.Generator, n: int = 60, kappa: float = 0.8) -> pd.DataFrame:
    """Two judges rating four authors' outputs (individual): rating = 1 + 0.5·anchor + κ·[own] + noise, with the
    anchor missing on one output of the first article."""
    d = replace(DESIGNS["small_individual"], judges=("a", "b"), references=("h", "g"), quality=(0, 0, 0, 0))
    items = draw_items(d, rng, n=n)
    anchor = {(a, str(i)): rng.normal(3, 1) for a in d.authors for i in range(n)}
    for side in ("own", "other"):
        items[f"{side}_anchor"] = [anchor[(a, i)] for a, i in zip(items[f"{side}_author"], items["article_id"],
                                                                   strict=True)]
        bonus = np.where(items[f"{side}_author"] == items["evaluator_variant"], kappa, 0.0)
        items[f"pref_{side}_value"] = 1 + 0.5 * items[f"{side}_anchor"] + bonus + rng.normal(0, 0.3, len(items))
    items.loc[(items["article_id"] == "0") & (items["other_author"] == "h"), "other_anchor"] = np.nan
    return items


def test_the_anchored_estimator_recovers_kappa_and_counts_partly_anchored_items():
    frame, _ = self_bias_frame(_anchored_items(np.random.default_rng(7)))
    rows = _pooled(frame, "paper", "human_anchored")
    for judge in ("a", "b"):
        assert rows.loc[judge, "ci_low"] <= 0.8 <= rows.loc[judge, "ci_high"]
        assert "1 item(s) with an anchor on some outputs only left out" in rows.loc[judge, "note"]
        assert rows.loc[judge, "n_articles"] == 59


def _verifiable_items() -> pd.DataFrame:
    """Judges a and b on 8 articles: each article's pair (a's output, b's output) judged by both."""
    rows = []
    for i in range(8):
        a_right, b_right = i % 2 == 0, i % 4 < 2
        for judge, other, own_right, other_right in (("a", "b", a_right, b_right), ("b", "a", b_right, a_right)):
            score = 0.9 if judge == "a" else 0.6 if own_right else 0.3
            rows.append({"setting": "pairwise", "label": "none", "dataset": "d", "evaluator_variant": judge,
                         "is_finetuned": False, "own_author": judge, "other_author": other, "cell_id": judge,
                         "article_id": str(i), "pref_excluded": False, "pref_exclusion_reason": None,
                         "pref_score": score, "pref_logodds": math.log(score / (1 - score)),
                         "pref_own_value": np.nan, "pref_other_value": np.nan, "own_anchor": np.nan,
                         "other_anchor": np.nan, "own_correct": own_right, "other_correct": other_right,
                         "own_family": None, "other_family": None, "judge_family": None})
    return pd.DataFrame(rows)


def test_the_verifiable_estimator_splits_legitimate_from_harmful():
    frame, _ = self_bias_frame(_verifiable_items())
    rows = frame[(frame["estimator"] == "verifiable") & (frame["scale"] == "paper")]
    a = rows[rows["judge"] == "a"].set_index("term")
    assert a.loc["legitimate", "estimate"] == pytest.approx(0.9) and a.loc["legitimate", "n_items"] == 2
    assert a.loc["harmful", "estimate"] == pytest.approx(0.9) and a.loc["harmful", "n_items"] == 2
    # On a's harmful items (a wrong, b right) b keeps its own (0.6): b picks a's wrong output 0.4 of the time.
    assert a.loc["harmful_excess", "estimate"] == pytest.approx(0.9 - 0.4)
    assert a.loc["harmful_excess", "reference"] == "b"


def _ratings_csv(path: Path, rng: np.random.Generator, n: int = 30) -> None:
    """Three judges rating four authors' outputs on n items, with a human anchor and correctness per output:
    rating = 2 + anchor + 1.0·[own] + noise."""
    authors = ("A", "B", "C", "human")
    anchors = {(a, i): float(rng.normal(2, 0.7)) for a in authors for i in range(n)}
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["judge", "author", "item", "score", "human", "correct"])
        for j in authors[:3]:
            for i in range(n):
                for a in authors:
                    s = 2 + anchors[(a, i)] + (1.0 if a == j else 0.0) + rng.normal(0, 0.3)
                    w.writerow([j, a, f"q{i}", round(s, 4), round(anchors[(a, i)], 4), (i + len(a)) % 3 != 0])


def test_a_ratings_log_runs_through_the_analysis_into_self_bias_csv(tmp_path):
    from selfpref_sweep.analysis.job.pipeline import run_analysis
    from selfpref_sweep.imports.ratings_format import import_ratings

    _ratings_csv(tmp_path / "ratings.csv", np.random.default_rng(11))
    import_ratings(tmp_path / "ratings.csv", tmp_path / "sweep",
                   "judge=judge,author=author,item=item,score=score,human=human,correct=correct")
    result = run_analysis([tmp_path / "sweep"], wandb_cfg={"mode": "disabled"})
    csv_rows = pd.read_csv(tmp_path / "sweep" / "analysis" / "self_bias.csv")
    assert set(csv_rows["estimator"]) == {"cross_judge", "human_anchored", "verifiable"}
    anchored = csv_rows[(csv_rows["estimator"] == "human_anchored") & (csv_rows["scale"] == "paper")]
    assert set(anchored["judge"]) == {"A", "B", "C"}
    # The same fit by statsmodels on the file itself (CR1 there, CR2 with BM df here: the intervals differ a little).
    raw = pd.read_csv(tmp_path / "ratings.csv")
    for row in anchored.itertuples():
        own = raw[raw["judge"] == row.judge].assign(own=lambda f, j=row.judge: (f["author"] == j).astype(float))
        fit = smf.ols("score ~ human + own", own).fit(cov_type="cluster", cov_kwds={"groups": own["item"]})
        assert row.estimate == pytest.approx(fit.params["own"], abs=1e-9)
        assert abs(row.estimate - 1.0) < 0.25  # the planted κ
        low, high = fit.conf_int().loc["own"]
        assert row.ci_low == pytest.approx(low, abs=0.03) and row.ci_high == pytest.approx(high, abs=0.03)
    report = (tmp_path / "sweep" / "report.md").read_text(encoding="utf-8")
    assert "Self-preference net of quality" in report and "Net of quality (each judge's self term" in report
    assert "self_bias" in result.tables


@pytest.mark.skipif(not (REAL / "results").is_dir(), reason="../shared/paper-data is not here")
def test_the_papers_three_judges_get_their_rows(tmp_path):
    from selfpref_sweep.analysis.sweep.load import load_sweeps
    from selfpref_sweep.imports.paper_import import import_paper

    root = tmp_path / "paper"
    for rel in ["articles/xsum_train_articles.json", *(f"results/xsum/{m}_results.json.xz"
                                                       for m in ("gpt4", "gpt35", "llama"))]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REAL / rel, root / rel)
    import_paper(root, tmp_path / "out")
    items = load_sweeps([tmp_path / "out"]).items
    frame, _ = self_bias_frame(items)
    pooled = frame[(frame["reference"] == "pooled") & (frame["scale"] == "paper")]
    assert set(zip(pooled["judge"], pooled["question"], strict=True)) == {
        (j, q) for j in ("gpt4", "gpt35", "llama2") for q in ("recognition", "preference")}
    # The pooled κ is least squares on the cell means: checked against numpy's on the same means.
    kept = items[~items["pref_excluded"].astype(bool)]
    means = kept.groupby(["evaluator_variant", "other_author"])["pref_score"].mean() - 0.5
    authors = sorted({*means.index.get_level_values(1), "gpt4", "gpt35", "llama"})
    judges = ["gpt35", "gpt4", "llama2"]
    own = {"gpt35": "gpt35", "gpt4": "gpt4", "llama2": "llama"}
    D = np.zeros((len(means), len(authors) + 3))
    for r, (j, x) in enumerate(means.index):
        D[r, authors.index(own[j])] += 1
        D[r, authors.index(x)] -= 1
        D[r, len(authors) + judges.index(j)] = 1
    theta = np.linalg.lstsq(D, means.to_numpy(), rcond=None)[0]
    mine = pooled[pooled["question"] == "preference"].set_index("judge")["estimate"]
    for k, j in enumerate(judges):
        assert mine[j] == pytest.approx(0.5 + theta[len(authors) + k], abs=1e-9)


def test_the_pairwise_anchored_self_term_is_the_preference_at_equal_anchors():
    rng = np.random.default_rng(12)
    items = _verifiable_items().drop(columns=["own_correct", "other_correct"])
    items = pd.concat([items.assign(article_id=lambda f, k=k: f["article_id"] + f"-{k}") for k in range(5)],
                      ignore_index=True)
    items["own_anchor"] = rng.normal(0, 1, len(items))
    items["other_anchor"] = rng.normal(0, 1, len(items))
    # log-odds = 0.6 + 0.8·(anchor own − anchor other) + noise: κ = 0.6 on the log-odds scale.
    items["pref_logodds"] = 0.6 + 0.8 * (items["own_anchor"] - items["other_anchor"]) + rng.normal(0, 0.2, len(items))
    frame, _ = self_bias_frame(items)
    rows = _pooled(frame, "logodds", "human_anchored")
    a = items[items["evaluator_variant"] == "a"]
    fit = smf.ols("y ~ d", pd.DataFrame({"y": a["pref_logodds"], "d": a["own_anchor"] - a["other_anchor"]})).fit()
    assert rows.loc["a", "estimate"] == pytest.approx(fit.params["Intercept"], abs=1e-9)
    assert abs(rows.loc["a", "estimate"] - 0.6) < 0.15


def test_a_judge_that_rated_no_output_of_its_own_has_no_self_row_but_counts(tmp_path):
    from selfpref_sweep.analysis.sweep.load import load_sweeps
    from selfpref_sweep.imports.ratings_format import import_ratings

    _ratings_csv(tmp_path / "ratings.csv", np.random.default_rng(13))
    raw = pd.read_csv(tmp_path / "ratings.csv")
    raw[~((raw["judge"] == "C") & (raw["author"] == "C"))].to_csv(tmp_path / "no_c.csv", index=False)
    import_ratings(tmp_path / "no_c.csv", tmp_path / "sweep", "judge=judge,author=author,item=item,score=score")
    frame, notes = self_bias_frame(load_sweeps([tmp_path / "sweep"]).items)
    rows = frame[frame["estimator"] == "cross_judge"]
    assert set(rows["judge"]) == {"A", "B"} and rows["estimate"].notna().all()
    assert any("judge C rated no output of its own" in n for n in notes)


def test_a_judge_with_no_kept_verdict_is_named_not_silently_missing():
    items = draw_items(DESIGNS["small"], np.random.default_rng(14))
    items.loc[items["evaluator_variant"] == "b", "pref_excluded"] = True  # e.g. every answer under the mass threshold
    frame, notes = self_bias_frame(items)
    assert (frame.loc[frame["estimator"] == "cross_judge", "note"] == cross_judge.ONE_JUDGE).all()
    assert any(n.endswith("b: no kept verdict on preference, so in no fit") for n in notes)
