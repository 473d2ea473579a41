"""The causal question asked the right way (analysis/estimate/finetune_tests.py fit_specificity,
analysis/estimate/paired.py): the shift in
preference at matched recognition with its equivalence test, Holm within families of arms, Δpref/Δrec, the
dose trend over log N, and the report's reading of the interaction.

Every simulated sweep here is built as an analysis frame directly (paper units, or item rows as load.py gives
them), so hundreds of repetitions run in seconds. Rates are checked against 5% with Monte Carlo error: at
300 repetitions the standard error of a 5% rate is 1.26%, so "at most 5% + 3 SE" is 8.8%.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from selfpref_sweep.analysis.estimate import paired
from selfpref_sweep.analysis.estimate.finetune_tests import (
    SLOPE_MARGIN,
    SPECIFICITY_MARGIN,
    fit_interaction,
    fit_specificity,
    specificity_verdict,
    tost_p,
)
from selfpref_sweep.analysis.estimate.units import unit_mean_ci
from selfpref_sweep.analysis.job.command import _sweep_margins
from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.analysis.report.fit_tables import specificity_table
from selfpref_sweep.analysis.report.unit_tables import finetune_vs_base_table
from selfpref_sweep.config import AnalysisConfig
from selfpref_sweep.reporting.grouping import LEVEL_SOURCE

from .test_analysis import NO_WANDB, write_cell

REPO = Path(__file__).resolve().parents[1]
REPS = 300
MC_LIMIT = 0.05 + 3 * math.sqrt(0.05 * 0.95 / REPS)  # 0.088


# --- the specificity test on simulated paper units -----------------------------------------------


def _units(rng: np.random.Generator, *, shift: float = 0.0, noise: float = 0.01, n_rec: int = 3,
           n_ctl: int = 5) -> pd.DataFrame:
    """One paper unit per fine-tuned arm (the dose run's design: 3 recognition arms, 5 controls): recognition
    spread over the arms, preference on one common line 0.05 + 0.9 · recognition plus noise, and the
    recognition arms shifted by ``shift``."""
    tasks = ["recognition"] * n_rec + ["length", "vowel", "readability", "random", "always_1"][:n_ctl]
    rec = rng.uniform(0.45, 0.70, size=len(tasks))
    is_rec = np.array([t == "recognition" for t in tasks])
    pref = 0.05 + 0.9 * rec + shift * is_rec + rng.normal(0, noise, size=len(tasks))
    return pd.DataFrame({"recognition": rec, "preference": pref, "finetune_task": tasks,
                         "evaluator_variant": [f"v{k}" for k in range(len(tasks))]})


def _cells(rng: np.random.Generator, *, shift: float = 0.0, n_rec: int = 4, n_ctl: int = 5,
           n_sources: int = 3) -> pd.DataFrame:
    """The source level: ``n_sources`` cells per variant, each variant with its own deviation from the common
    line (shared by its cells, so the cells are not independent) plus cell noise."""
    rows = []
    for k in range(n_rec + n_ctl):
        task = "recognition" if k < n_rec else "length"
        offset = rng.normal(0, 0.01)
        for _ in range(n_sources):
            rec = rng.uniform(0.45, 0.70)
            rows.append({"recognition": rec, "finetune_task": task, "evaluator_variant": f"v{k}",
                         "preference": 0.05 + 0.9 * rec + offset + shift * (k < n_rec) + rng.normal(0, 0.01)})
    return pd.DataFrame(rows)


def test_on_one_common_line_the_test_holds_its_size_and_shows_equivalence() -> None:
    rng = np.random.default_rng(20260101)
    data = [_units(rng) for _ in range(REPS)]
    unit = [fit_specificity(d) for d in data]
    assert all(r.ok and r.df == 5 for r in unit)  # 8 points, 3 parameters
    rejected = np.mean([r.p < 0.05 for r in unit])
    equivalent = np.mean([r.equivalence_p < 0.05 for r in unit])
    assert rejected <= MC_LIMIT, rejected
    assert equivalent >= 0.95, equivalent  # noise 0.01 against a margin of 0.05
    # "One common line" needs two equivalence tests: the shift's TOST and the slopes' (the interaction's TOST).
    inter = [fit_interaction(d) for d in data]
    readings = [_reading(r, i) for r, i in zip(unit, inter, strict=True)]
    for t, r, i in zip(readings, unit, inter, strict=True):  # one common line exactly where both equivalence tests pass
        both = (r.ci_low <= 0 <= r.ci_high and r.equivalence_p < 0.05 and i.p >= 0.05
                and tost_p(i.estimate, i.se, i.n - 4, SLOPE_MARGIN) < 0.05)
        assert t.startswith("one common line") == both, t
    # its power here (8 points, slopes within ±0.5): about 0.6; the rest read "not shown to differ"
    assert np.mean([t.startswith("one common line") for t in readings]) >= 0.4
    assert not any(t.startswith("one common line") and i.p < 0.05 for t, i in zip(readings, inter, strict=True))
    assert any(t.startswith("no common line") for t in readings)  # where the interaction rejected
    # The source level, clustered by variant (CR2, Bell–McCaffrey df): 9 clusters, 4 of them recognition.
    cells = [fit_specificity(_cells(rng), level=LEVEL_SOURCE, cluster_col="evaluator_variant") for _ in range(REPS)]
    assert all(r.ok and not r.no_interval for r in cells)
    rejected_cells = np.mean([r.p < 0.05 for r in cells])
    assert rejected_cells <= MC_LIMIT, rejected_cells
    print(f"\nnull: paper unit rejects {rejected:.3f}, equivalent {equivalent:.3f}; "
          f"source level (clustered) rejects {rejected_cells:.3f}")


def test_a_planted_shift_is_covered_and_found() -> None:
    rng = np.random.default_rng(7)
    shift = 0.04
    fits = [fit_specificity(_units(rng, shift=shift)) for _ in range(REPS)]
    covered = np.mean([r.ci_low < shift < r.ci_high for r in fits])
    found = np.mean([r.ci_low > 0 for r in fits])
    assert covered >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / REPS), covered
    assert found >= 0.9, found
    assert abs(np.mean([r.shift for r in fits]) - shift) < 0.003
    assert all(_reading(r).startswith("positive shift (95% CI [") for r in fits if r.ci_low > 0)
    # Parallel lines: the interaction (the difference of slopes) stays about 0 though the shift is real.
    inter = [fit_interaction(_units(rng, shift=shift)).estimate for _ in range(100)]
    assert abs(np.mean(inter)) < 0.1
    down = fit_specificity(_units(np.random.default_rng(1), shift=-0.06))
    assert down.ci_high < 0 and _reading(down).startswith("negative shift")
    print(f"\nshift 0.04: covered {covered:.3f}, found {found:.3f}")


def test_noise_too_large_for_the_margin_is_inconclusive() -> None:
    res = fit_specificity(_units(np.random.default_rng(3), noise=0.08))
    assert res.ci_low < 0 < res.ci_high and not res.equivalence_p < 0.05
    assert _reading(res).startswith("inconclusive: neither a shift (95% CI [")


def _reading(r, interaction=None) -> str:
    """fit.specificity_verdict on a fit's figures (the report reads the corrected fit's the same way)."""
    # the plain interaction fit has n - 4 residual df (4 parameters)
    inter = None if interaction is None else (interaction.estimate, interaction.se, interaction.n - 4, interaction.p)
    return specificity_verdict(r.ci_low, r.ci_high, r.equivalence_p, r.margin, interaction=inter)


def test_a_non_rejected_interaction_is_not_one_common_line() -> None:
    """The shift is within the margin and the interaction does not reject, but its interval is too wide to show
    the slopes within SLOPE_MARGIN: "not shown to differ", never "one common line"."""
    text = specificity_verdict(-0.01, 0.01, 0.001, 0.05, interaction=(0.2, 0.6, 6.0, 0.75))
    assert text.startswith("shift within ±0.05") and "not shown to differ (interaction p = 0.750)" in text
    assert "common line" not in text
    one = specificity_verdict(-0.01, 0.01, 0.001, 0.05, interaction=(0.05, 0.1, 6.0, 0.63))
    assert one.startswith("one common line") and "interaction TOST p = " in one


def test_tost_is_the_90_percent_interval_inside_the_margin() -> None:
    from scipy import stats

    est, se, df, m = 0.01, 0.015, 6.0, 0.05
    half = stats.t.ppf(0.95, df) * se
    assert (tost_p(est, se, df, m) < 0.05) == (est - half > -m and est + half < m)
    assert tost_p(est, se, df, m) == pytest.approx(stats.t.cdf((est - m) / se, df))
    assert math.isnan(tost_p(est, 0.0, df, m))


def test_identification_and_too_few_clusters() -> None:
    units = _units(np.random.default_rng(0), n_rec=1, n_ctl=2)
    res = fit_specificity(units)
    assert not res.ok and "3 parameters need at least 4 paper units" in res.note
    no_ctl = fit_specificity(_units(np.random.default_rng(0)).assign(finetune_task="recognition"))
    assert not no_ctl.ok and "no control fine-tunes" in no_ctl.note
    one = fit_specificity(_units(np.random.default_rng(0), n_rec=1))
    assert one.ok and "one recognition fine-tune paper unit" in one.note
    thin = fit_specificity(_cells(np.random.default_rng(0), n_rec=2), level=LEVEL_SOURCE,
                           cluster_col="evaluator_variant")
    assert thin.ok and thin.no_interval.startswith("too few clusters")
    assert math.isfinite(thin.shift) and math.isnan(thin.p) and _reading(thin) == ""
    row = specificity_table([thin]).iloc[0]
    assert row["p (shift = 0)"].startswith("too few clusters") and "reading" not in row


# --- the fine-tuned arms against the base: p-values, Holm, ratio, trend --------------------------


def _items(arms: dict[str, tuple[str, int, float, float]], *, n_articles: int = 40, seed: int = 0,
           noise: float = 0.05, logodds: bool = False) -> pd.DataFrame:
    """Item rows as load.py gives them: a base model and fine-tuned arms {variant: (task, N, Δrec, Δpref)}
    judging the same articles against two sources; an article effect shared by every model, item noise
    drawn afresh per model (so each arm's Δ shares the base model's noise)."""
    rng = np.random.default_rng(seed)
    effect = rng.normal(0, 0.1, size=n_articles)
    rows = []
    for variant, (task, n, drec, dpref) in {"qwen05": ("none", 0, 0.0, 0.0), **arms}.items():
        for source in ("human", "paper_gpt4"):
            for a in range(n_articles):
                rec = 0.5 + effect[a] + drec + rng.normal(0, noise)
                pref = 0.5 + effect[a] + dpref + rng.normal(0, noise)
                rows.append({
                    "cell_id": f"{variant}/{source}", "evaluator_variant": variant, "is_finetuned": task != "none",
                    "evaluator": "qwen05", "source": source, "dataset": "paper_xsum", "setting": "pairwise",
                    "label": "none", "finetune_task": task,
                    "finetune_dataset": None if task == "none" else "paper_xsum",
                    "finetune_n_articles": None if task == "none" else n,
                    "transfer": "none" if task == "none" else "in_domain", "article_id": f"a{a}",
                    "rec_score": rec, "pref_score": pref, "rec_logodds": rec if logodds else math.nan,
                    "pref_logodds": pref if logodds else math.nan, "rec_excluded": False, "pref_excluded": False})
    return pd.DataFrame(rows)


def test_the_delta_ci_is_t_on_article_means_and_agrees_with_its_p() -> None:
    # One item per (source, article): the CI is exactly mean ± t(11)·sd/√12 over the articles' means over
    # sources, and its p is the same one-sample t test's, so "CI excludes 0" ⟺ "p < 0.05".
    from scipy import stats

    items = _items({"r10": ("recognition", 10, 0.05, 0.04)}, n_articles=12)
    diffs = paired.finetune_vs_base(items).iloc[0]
    (_, frames), = list(paired._pairs(items))
    for q in ("rec", "pref"):
        per_article = frames[(q, "paper")].groupby("article_id")["v"].mean().to_numpy()
        half = stats.t.ppf(0.975, 11) * per_article.std(ddof=1) / math.sqrt(12)
        want = (per_article.mean() - half, per_article.mean() + half)
        got = (diffs[f"d{q}_paper_ci_low"], diffs[f"d{q}_paper_ci_high"])
        assert got == pytest.approx(want, rel=1e-9)
        assert unit_mean_ci(frames[(q, "paper")], "v", n_resamples=1, confidence=0.95, seed=0) == pytest.approx(got)
        assert diffs[f"d{q}_paper_p"] == pytest.approx(stats.ttest_1samp(per_article, 0.0).pvalue, rel=1e-9)
        assert (diffs[f"d{q}_paper_ci_low"] > 0) == (diffs[f"d{q}_paper_p"] < 0.05)


def _null_family(rng: np.random.Generator, k_arms: int = 6, n_articles: int = 30) -> pd.DataFrame:
    """One sweep's Δ recognition family: ``k_arms`` fine-tunes that change nothing, each minus the same base
    model item by item (so their Δs share the base model's noise and are correlated, as in a real sweep),
    with the p-value paired.py gives each arm."""
    effect = rng.normal(0, 0.1, size=n_articles)
    def scores() -> np.ndarray:  # two sources × articles
        return 0.5 + effect + rng.normal(0, 0.05, size=(2, n_articles))
    base = scores()
    rows = []
    for k in range(k_arms):
        v = (scores() - base).ravel()
        frame = pd.DataFrame({"source": np.repeat(["human", "paper_gpt4"], n_articles),
                              "article_id": np.tile([f"a{a}" for a in range(n_articles)], 2), "v": v})
        p = paired.unit_t(frame, "v", 0.95)[2]
        rows.append({"setting": "pairwise", "label": "none", "dataset": "paper_xsum", "transfer": "in_domain",
                     "evaluator": "qwen05", "evaluator_variant": f"c{k}", "drec_paper_p": p})
    frame = pd.DataFrame(rows)
    for col in ("dpref_paper_p", "drec_logodds_p", "dpref_logodds_p"):
        frame[col] = math.nan
    return paired.with_holm(frame)


def test_holm_holds_the_familywise_rate_where_raw_p_values_do_not() -> None:
    rng = np.random.default_rng(11)
    raw_any, holm_any = [], []
    for _ in range(REPS):
        family = _null_family(rng)
        raw_any.append((family["drec_paper_p"] < 0.05).any())
        holm_any.append((family["drec_paper_p_holm"] < 0.05).any())
    raw_rate, holm_rate = float(np.mean(raw_any)), float(np.mean(holm_any))
    assert holm_rate <= MC_LIMIT, holm_rate
    assert raw_rate > 0.15, raw_rate  # one by one, six null arms give some "change" far more often than 5%
    print(f"\n6 null arms: any raw p < 0.05 in {raw_rate:.3f} of sweeps, any Holm p < 0.05 in {holm_rate:.3f}")


def test_holm_matches_statsmodels() -> None:
    from statsmodels.stats.multitest import multipletests

    p = np.random.default_rng(0).uniform(0, 0.2, size=9)
    assert paired.holm(p) == pytest.approx(multipletests(p, method="holm")[1], abs=1e-15)


def test_holm_families_and_the_ratio() -> None:
    arms = {"r2": ("recognition", 2, 0.02, 0.02), "r10": ("recognition", 10, 0.05, 0.03),
            "r50": ("recognition", 50, 0.08, 0.04), "flat": ("length", 10, 0.0, 0.03)}
    diffs = paired.finetune_vs_base(_items(arms, n_articles=30, noise=0.02), n_resamples=1000).set_index(
        "evaluator_variant")
    # One family of 4 arms per question: Holm multiplies the smallest p by 4, and never lowers a p.
    assert (diffs["drec_paper_p_holm"] >= diffs["drec_paper_p"]).all()
    assert diffs["drec_paper_p_holm"].min() == pytest.approx(min(1.0, 4 * diffs["drec_paper_p"].min()))
    r50 = diffs.loc["r50"]
    assert r50["drec_paper_ci_low"] > 0 and r50["ratio_paper_ci_low"] < 0.5 < r50["ratio_paper_ci_high"]
    assert r50["ratio_paper"] == pytest.approx(r50["dpref_paper_mean"] / r50["drec_paper_mean"])
    flat = diffs.loc["flat"]
    assert math.isnan(flat["ratio_paper"]) and flat["ratio_paper_note"] == paired.NO_RATIO
    table = finetune_vs_base_table(diffs.reset_index()).set_index("fine-tuned evaluator")
    assert table.loc["flat", "Δ preference / Δ recognition [95% CI]"] == paired.NO_RATIO
    # A t test's p has no resampling floor (the bootstrap's was 2/1001): Δ 0.08 with item noise 0.02 over 30
    # articles is far below 0.001, even times Holm's 4.
    assert diffs.loc["r50", "drec_paper_p_holm"] < 1e-3
    assert table.loc["r50", "Δ recognition: p (Holm p)"] == "<0.001 (<0.001)"


def test_the_trend_over_log_n_recovers_a_planted_slope() -> None:
    # Δ recognition 0.02, 0.05, 0.08 at N = 2, 10, 50 is 0.03 per fivefold N: 0.03 / log10(5) per tenfold.
    arms = {"r2": ("recognition", 2, 0.02, 0.01), "r10": ("recognition", 10, 0.05, 0.01),
            "r50": ("recognition", 50, 0.08, 0.01), "len": ("length", 10, 0.3, 0.3)}
    trends = {(t.scale, t.question): t for t in paired.dose_trend(_items(arms, noise=0.02), n_resamples=1000)}
    rec, pref = trends[("paper", "recognition")], trends[("paper", "preference")]
    assert rec.ok and rec.arms == "2, 10, 50" and rec.n_arms == 3
    assert rec.ci_low < 0.03 / math.log10(5) < rec.ci_high and rec.p < 0.01
    assert pref.ci_low < 0 < pref.ci_high  # flat preference: no trend
    assert rec.note == paired.ONE_ADAPTER  # three doses, one adapter each: training randomness is not covered
    one = paired.dose_trend(_items({"r10": ("recognition", 10, 0.05, 0.0)}), n_resamples=200)
    assert one and not one[0].ok and "2 or more N" in one[0].note


# --- configuration and the report's words ---------------------------------------------------------


def test_the_margin_defaults_agree_and_reach_the_analysis(tmp_path: Path) -> None:
    conf = OmegaConf.load(REPO / "conf" / "config.yaml")
    assert dict(conf.analysis.specificity_margin) == SPECIFICITY_MARGIN
    assert vars(AnalysisConfig().specificity_margin) == SPECIFICITY_MARGIN
    (tmp_path / "multirun.yaml").write_text("analysis:\n  specificity_margin:\n    paper: 0.03\n    logodds: 0.1\n")
    assert _sweep_margins(tmp_path, ["logodds=0.15"]) == {"paper": 0.03, "logodds": 0.15}
    assert _sweep_margins(tmp_path / "none", None) == {}


def _finetune_sweep(root: Path) -> Path:
    sweep = root / "s"
    write_cell(sweep, 0, items=[(f"a{i}", 0.50 + 0.01 * i, 0.50 + 0.01 * i) for i in range(5)])
    cells = [("recognition", 2, 0.55), ("recognition", 10, 0.62), ("recognition", 50, 0.70),
             ("length", 10, 0.52), ("vowel", 10, 0.47), ("readability", 10, 0.75)]
    for j, (task, n, rec) in enumerate(cells, start=1):
        write_cell(sweep, j, finetune_task=task, finetune_dataset="paper_xsum", finetune_n_articles=n,
                   items=[(f"a{i}", rec + 0.01 * i, rec + 0.01 * i + 0.004 * (-1) ** (i + j)) for i in range(5)])
    return sweep


def test_the_report_reads_the_interaction_correctly(tmp_path: Path) -> None:
    result = run_analysis([_finetune_sweep(tmp_path)], wandb_cfg=NO_WANDB, specificity_margin={"paper": 0.04})
    report = result.report_md.read_text()
    assert "causal claim is that it is positive" not in report and "a CI above 0 supports the claim" not in report
    assert "every fine-tune lies on one common line and the interaction is 0" in report
    assert "## Specificity: does preference follow recognition, whatever moved it?" in report
    assert "0.04 on the paper's scale" in report
    assert "Holm" in report and "Dose-response" in report
    spec = next(r for r in result.est.specificity if r.level == "paper unit" and r.scale == "paper")
    assert spec.ok and spec.margin == 0.04
    # the reading is the corrected shift's, in the resampled table, with the margin passed to the analysis
    table = result.tables["regression_resampled"]
    shifts = table[table["coefficient"].str.startswith("shift")]
    assert len(shifts) and all(r == "—" or "±0.04" in r or "shift (95% CI [" in r for r in shifts["reading"])
    files = result.out_dir / "analysis"
    assert (files / "specificity.csv").is_file() and (files / "dose_trend.csv").is_file()
    readme = (REPO / "README.md").read_text()
    assert "the paper's causal claim is that it is positive" not in readme
