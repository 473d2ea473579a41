"""``python -m selfpref_sweep.analysis.simulate``: a planted-bias simulator for the sweep analysis.

It writes a synthetic sweep (real cell directories with summary.json and results.jsonl in the record schema)
whose evaluators have chosen effects, runs the analysis on it, and prints the recovered effects next to
the planted ones and a power curve (the probability of detecting a slope ≠ 0, by number of articles).

The judge it simulates, per item and question: a content signal s on the log-odds scale (the evaluator
variant's planted mean, plus an article effect shared by every cell that judges the article, plus item
noise), read through an additive position bias β that favours answer "1": P(own) = σ(s + β) when the own
summary is first and σ(s − β) when it is second. The log-odds score recovers s; the paper's score
½·[σ(s + β) + σ(s − β)] squashes it toward 0.5. Each variant's preference signal is
intercept + slope · its recognition signal (control_slope for control fine-tunes), so the slope is planted
exactly on the log-odds scale (and item_slope plants a within-variant, item-level one); on the paper's scale the planted values are the expectations of the
paper's score (Gauss-Hermite quadrature), and the planted slope is the OLS line through them.

The answer distributions go through the cell's own scoring rules (records/scores.pair_verdict), and the records are
built as the cell builds them (record.Item, scores.question_stats, scores.summary_record), so what the
analysis reads is what a real cell would write for such a judge.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing
import sys
import time
import zlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import expit

from ..config import CONTROL_QUESTION_TASKS, RECOGNITION_PROMPT_TASKS
from ..models.base import AnswerDistribution
from ..records.schema import (CELL_KEYS, QUESTION_PREFIX, QUESTIONS, RESULTS_FILE, SUMMARY_FILE, CellCoordinates, Item,
                              Verdict, transfer_of)
from ..records.scores import (LOW_ANSWER_MASS, competence_block, pair_verdict, question_stats, score_order,
                              summary_record)
from .coverage import Truth, analyse, coverage_table, markdown, rep_counts, table_records, true_fits, undecided
from .fit import GROUPINGS, fit_formula
from .load import evaluator_variant
from .units import kept_items, unit_means

EVALUATOR = "simllm"
# The control fine-tunes in the order variants() cycles through them: the control-question tasks, then the
# recognition-prompt controls (every fine-tune task but `recognition`, from the config's groups).
CONTROL_ARMS = tuple(t.value for t in (*CONTROL_QUESTION_TASKS, *RECOGNITION_PROMPT_TASKS[1:]))
RECOGNITION_NS = (2, 10, 50, 100, 200, 500)
MIN_ANSWER_MASS = 0.5  # the cell's default; an excluded order gets a mass below it
EXCLUDED_MASS = 0.3
ALPHA = 0.05


@dataclass(frozen=True)
class SimulationSpec:
    """What is planted. Signals are on the log-odds scale (0 = no bias)."""

    n_articles: int = 40
    sources: tuple[str, ...] = ("human", "paper_gpt4")
    datasets: tuple[str, ...] = ("sim_xsum",)  # fine-tunes are on the first: in-domain there, cross-dataset elsewhere
    setting: str = "pairwise"
    label: str = "none"
    include_base: bool = True
    recognition_variants: int = 4  # recognition fine-tunes, N = 2, 10, 50, ...
    control_variants: int = 4  # control fine-tunes (length, vowel, readability, always_1, random), N = 10
    recognition_low: float = 0.0  # the variants' recognition signals, evenly spread over [low, high]
    recognition_high: float = 1.0
    slope: float = 0.5  # preference signal per unit of recognition signal (base and recognition fine-tunes)
    control_slope: Optional[float] = None  # the same for control fine-tunes (None: = slope, no interaction)
    intercept: float = 0.0  # preference signal at recognition signal 0
    item_slope: float = 0.0  # within a variant: preference signal per unit of an item's recognition deviation
    position_bias: float = 1.0  # β, toward answer "1"
    noise: float = 1.0  # SD of each item's signal around its variant's mean
    article_sd: float = 0.3  # SD of the article effect shared across sources and variants
    exclusion_rate: float = 0.0  # chance that a question of an item falls under min_answer_mass
    competence: float = 3.0  # the judge-competence control's signal (log-odds of a correct answer)
    failing_judges: int = 0  # the first k variants get competence 0: they fail the control
    competence_threshold: float = 0.405  # the control's pass rule (scores.competence_passed), on log-odds
    competence_max_excluded: float = 0.2
    n_resamples: int = 500  # the cells' article-level bootstrap
    seed: int = 0
    # The coverage design's extras (coverage.py); empty/False keeps the plain design and its random draws.
    recognition_signals: tuple[float, ...] = ()  # per variant (variants() order), instead of the even spread
    position_biases: tuple[float, ...] = ()  # per variant (e.g. an always_1 fine-tune's large β)
    source_effects: tuple[float, ...] = ()  # per source, added to both questions' signals
    shared_article_effect: bool = False  # one article effect for both questions (else one per question)
    # Replicated fine-tunes: each fine-tuned arm is trained adapters_per_arm times (seeds 0, 1, ...), and each
    # adapter's preference signal is its arm's plus a deviation drawn per sweep, N(0, adapter_sd²) on the log-odds
    # scale, shared by all its cells: training randomness. The arms' planted values (the truth) are the population
    # of adapters' means, so they still lie on one line.
    adapters_per_arm: int = 1
    adapter_sd: float = 0.0

    def __post_init__(self) -> None:
        if self.n_articles < 1:
            raise ValueError("n_articles must be at least 1")
        if not self.sources or not self.datasets:
            raise ValueError("at least one source and one dataset are needed")
        if self.recognition_variants > len(RECOGNITION_NS):
            raise ValueError(f"at most {len(RECOGNITION_NS)} recognition variants (N = {RECOGNITION_NS})")
        if not 0.0 <= self.exclusion_rate < 1.0:
            raise ValueError("exclusion_rate must be in [0, 1)")
        if min(self.noise, self.article_sd, self.adapter_sd) < 0:
            raise ValueError("noise, article_sd and adapter_sd must be >= 0")
        if self.adapters_per_arm < 1:
            raise ValueError("adapters_per_arm must be at least 1")
        n_variants = int(self.include_base) + self.recognition_variants + self.control_variants
        for name in ("recognition_signals", "position_biases"):
            if getattr(self, name) and len(getattr(self, name)) != n_variants:
                raise ValueError(f"{name} needs one value per variant ({n_variants})")
        if self.source_effects and len(self.source_effects) != len(self.sources):
            raise ValueError("source_effects needs one value per source")

    def source_effect(self, source: str) -> float:
        return self.source_effects[self.sources.index(source)] if self.source_effects else 0.0

    @property
    def effective_control_slope(self) -> float:
        return self.slope if self.control_slope is None else self.control_slope


@dataclass(frozen=True)
class Variant:
    """One evaluator variant and its planted signals."""

    finetune_task: str
    finetune_n_articles: Optional[int]
    recognition: float
    preference: float
    competence: float
    position_bias: float = 1.0
    seed: Optional[int] = None  # the fine-tune's seed, where an arm has several adapters

    def name(self, spec: SimulationSpec) -> str:
        """The analysis' evaluator_variant: load.py tells adapters that differ only in their seed apart as
        "… [seed=s]"."""
        coords = asdict(self.coordinates(spec, "", ""))
        base = evaluator_variant({**coords, "own_summaries": ""})
        return base if self.seed is None else f"{base} [seed={self.seed}]"

    def coordinates(self, spec: SimulationSpec, source: str, dataset: str) -> CellCoordinates:
        tuned = self.finetune_task != "none"
        ft_dataset = spec.datasets[0] if tuned else None
        return CellCoordinates(
            evaluator=EVALUATOR, source=source, dataset=dataset, setting=spec.setting, label=spec.label,
            finetune_task=self.finetune_task, finetune_dataset=ft_dataset,
            finetune_n_articles=self.finetune_n_articles,
            transfer=transfer_of(self.finetune_task, ft_dataset, dataset).value,
        )


def variants(spec: SimulationSpec) -> list[Variant]:
    """Base (if any), then recognition and control fine-tunes interleaved, so that both kinds span the
    recognition range."""
    recognition = [("recognition", n) for n in RECOGNITION_NS[: spec.recognition_variants]]
    controls = [(CONTROL_ARMS[i % len(CONTROL_ARMS)], 10 * (1 + i // len(CONTROL_ARMS)))
                for i in range(spec.control_variants)]
    order: list[tuple[str, Optional[int]]] = [("none", None)] if spec.include_base else []
    for i in range(max(len(recognition), len(controls))):
        order += recognition[i:i + 1] + controls[i:i + 1]
    signals = (spec.recognition_signals or np.linspace(spec.recognition_low, spec.recognition_high, len(order))
               if order else [])
    biases = spec.position_biases or (spec.position_bias,) * len(order)
    out = []
    for k, ((task, n), rec) in enumerate(zip(order, signals)):
        slope = spec.effective_control_slope if task not in ("none", "recognition") else spec.slope
        arm = Variant(task, n, float(rec), float(spec.intercept + slope * rec),
                      0.0 if k < spec.failing_judges else spec.competence, float(biases[k]))
        replicated = task != "none" and spec.adapters_per_arm > 1
        out += [replace(arm, seed=s) for s in range(spec.adapters_per_arm)] if replicated else [arm]
    return out


# --- the planted values on both scales ------------------------------------------------------------

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(64)  # E[f(Z)], Z ~ N(0, 1) = Σ w f(node) / √(2π)


def expected_paper_score(signal: float, spec: SimulationSpec, question: str = "recognition",
                         position_bias: Optional[float] = None) -> float:
    """E[½·(σ(s + β) + σ(s − β))] over the item's article effect and noise, averaged over the sources (their
    effects): the paper-scale value a variant's unit converges to. β: spec.position_bias unless given."""
    beta = spec.position_bias if position_bias is None else position_bias
    sd = math.hypot(spec.noise, spec.article_sd)
    if question == "preference":  # it also carries item_slope × the recognition deviation
        sd *= math.sqrt(1.0 + spec.item_slope ** 2)
    out = []
    for shift in spec.source_effects or (0.0,):
        s = signal + shift + sd * _NODES
        values = 0.5 * (expit(s + beta) + expit(s - beta))
        out.append(float(np.sum(_WEIGHTS * values) / math.sqrt(2 * math.pi)))
    return float(np.mean(out))


def planted_units(spec: SimulationSpec) -> pd.DataFrame:
    """The planted value of every paper unit (variant × dataset), on both scales."""
    rows = []
    for v in variants(spec):
        base = {"evaluator_variant": v.name(spec), "finetune_task": v.finetune_task}
        for dataset in spec.datasets:
            rows.append({**base, "dataset": dataset, "transfer": v.coordinates(spec, "", dataset).transfer,
                         "rec_logodds": v.recognition, "pref_logodds": v.preference,
                         "rec_paper": expected_paper_score(v.recognition, spec, "recognition", v.position_bias),
                         "pref_paper": expected_paper_score(v.preference, spec, "preference", v.position_bias)})
    return pd.DataFrame(rows)


def planted_effects(spec: SimulationSpec) -> dict[str, dict[str, float]]:
    """The headline slope, intercept and r, and the interaction, that the analysis should recover, per scale."""
    units = planted_units(spec)
    out: dict[str, dict[str, float]] = {}
    for scale in ("paper", "logodds"):
        x, y = units[f"rec_{scale}"].to_numpy(), units[f"pref_{scale}"].to_numpy()
        effects = {"slope": math.nan, "intercept": math.nan, "r": math.nan, "interaction": math.nan}
        if len(units) >= 2 and np.ptp(x) > 0:
            fit = stats.linregress(x, y)
            effects.update(slope=float(fit.slope), intercept=float(fit.intercept),
                           r=float(fit.rvalue) if np.ptp(y) > 0 else math.nan)
        tuned = units[units["finetune_task"] != "none"]
        is_rec = (tuned["finetune_task"] == "recognition").to_numpy()
        slopes = []
        for mask in (is_rec, ~is_rec):
            xs, ys = tuned[f"rec_{scale}"].to_numpy()[mask], tuned[f"pref_{scale}"].to_numpy()[mask]
            slopes.append(float(stats.linregress(xs, ys).slope) if xs.size >= 2 and np.ptp(xs) > 0 else math.nan)
        effects["interaction"] = slopes[0] - slopes[1]
        out[scale] = effects
    return out


# --- drawing items --------------------------------------------------------------------------------


def draw_items(spec: SimulationSpec, rng: np.random.Generator, n_articles: Optional[int] = None) -> pd.DataFrame:
    """Every item of the sweep in the analysis' item columns, plus the per-order probabilities the cell
    files are written from. Column arrays built with numpy, one frame at the end: the power curve draws
    thousands of sweeps."""
    n = spec.n_articles if n_articles is None else n_articles
    columns: dict[str, list] = {}
    named = [(v, v.name(spec)) for v in variants(spec)]
    # Drawn only when planted, so a design without training randomness keeps its random stream.
    adapter_deviations = ({name: float(rng.normal(0.0, spec.adapter_sd)) for v, name in named
                           if v.finetune_task != "none"} if spec.adapter_sd > 0 else {})

    def add(name: str, values: Any) -> None:
        columns.setdefault(name, []).append(np.broadcast_to(np.asarray(values, dtype=object if isinstance(
            values, (str, type(None))) else None), (n,)))

    for dataset in spec.datasets:
        articles = np.array([f"{dataset}-{i:04d}" for i in range(n)], dtype=object)
        effects = {q: rng.normal(0.0, spec.article_sd, n) for q in (*QUESTIONS, "competence")}
        if spec.shared_article_effect:  # an article easy to recognize is as easy to prefer
            effects["preference"] = effects["recognition"]
        for v, name in named:
            deviation_of_adapter = adapter_deviations.get(name, 0.0)
            for source in spec.sources:
                coords = asdict(v.coordinates(spec, source, dataset))
                for key, value in {**coords, "evaluator_variant": name, "own_summaries": "",
                                   "is_finetuned": v.finetune_task != "none",
                                   "cell_id": f"{name}|{source}|{dataset}"}.items():
                    add(key, value)
                add("article_id", articles)
                deviation = np.zeros(n)  # the item's recognition signal minus its variant's mean
                for q, mean in (("recognition", v.recognition),
                                ("preference", v.preference + deviation_of_adapter), ("competence", v.competence)):
                    p = QUESTION_PREFIX.get(q, "comp")
                    shift = spec.source_effect(source) if q != "competence" else 0.0
                    signal = mean + shift + effects[q] + rng.normal(0.0, spec.noise, n)
                    if q == "recognition":
                        deviation = signal - mean - shift
                    elif q == "preference":
                        signal = signal + spec.item_slope * deviation
                    forward, backward = expit(signal + v.position_bias), expit(signal - v.position_bias)
                    excluded = rng.random(n) < (spec.exclusion_rate if q != "competence" else 0.0)
                    add(f"{p}_p_forward", forward)  # own (or correct) summary first
                    add(f"{p}_p_backward", backward)
                    add(f"{p}_mass_forward", np.where(excluded, EXCLUDED_MASS, 1.0))
                    add(f"{p}_excluded", excluded)
                    add(f"{p}_exclusion_reason", np.where(excluded, LOW_ANSWER_MASS, None))
                    add(f"{p}_score", np.where(excluded, np.nan, 0.5 * (forward + backward)))
                    add(f"{p}_logodds", np.where(excluded, np.nan, signal))
    return pd.DataFrame({k: np.concatenate(v) for k, v in columns.items()})


# --- writing the sweep ----------------------------------------------------------------------------


def _verdict(row: dict[str, Any], prefix: str) -> Verdict:
    """The cell's verdict for one question, through the scoring stage (own summary first, then second)."""
    mass_f = float(row[f"{prefix}_mass_forward"])
    pf, pb = float(row[f"{prefix}_p_forward"]), float(row[f"{prefix}_p_backward"])
    forward = score_order(AnswerDistribution({"1": mass_f * pf, "2": mass_f * (1 - pf)}, "simulated"), 1)
    backward = score_order(AnswerDistribution({"1": 1 - pb, "2": pb}, "simulated"), 2)
    return pair_verdict(forward, backward, MIN_ANSWER_MASS)  # with the paper's score and the log-odds score


COMPETENCE = "competence"  # the control's question (competence.QUESTION; the analysis never imports the core cell)


def _competence_block(items: list[Item], spec: SimulationSpec) -> dict[str, Any]:
    """summary.json's judge_competence, by the cell's own block builder and pass rule
    (records/scores.competence_block). Its verdicts are pairwise in either setting (as the simulated questions'), 2 calls
    per article either way."""
    rows = [{"article_id": it.article_id, COMPETENCE: it.measured[COMPETENCE]} for it in items]
    block = competence_block(rows, COMPETENCE, spec.setting, spec.competence_threshold,
                             spec.competence_max_excluded, 0.95)
    return {**block, "calls_sampled": 2 * len(items)}


def _plain(value: Any) -> Any:
    """A frame value as the record writes it: None for a missing one, int for a whole number."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return int(value) if float(value).is_integer() else float(value)
    return value


def _write_overrides(cell_dir: Path, coords: CellCoordinates) -> None:
    """.hydra/overrides.yaml as Hydra would have written it for the cell."""
    (cell_dir / ".hydra").mkdir(parents=True)
    overrides = [f"evaluator={EVALUATOR}", f"source={coords.source}", f"dataset={coords.dataset}",
                 f"setting={coords.setting}", f"label={coords.label}"]
    if coords.finetune_task != "none":
        overrides += [f"finetune_task={coords.finetune_task}",
                      f"finetune_task.n_articles={coords.finetune_n_articles}",
                      f"finetune_dataset={coords.finetune_dataset}"]
    (cell_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides), encoding="utf-8")


def _cell_items(cell: pd.DataFrame, coords: CellCoordinates) -> list[Item]:
    """The cell's results.jsonl records, in the record schema."""
    return [Item(row["article_id"], EVALUATOR, coords.source, coords.dataset,
                 f"(simulated article {row['article_id']})", False, "(simulated own summary)",
                 f"(simulated {coords.source} summary)",
                 {"recognition": _verdict(row, "rec"), "preference": _verdict(row, "pref")},
                 {"competence": _verdict(row, "comp")})
            for row in cell.to_dict("records")]


def _write_cell(cell_dir: Path, cell: pd.DataFrame, spec: SimulationSpec, variant: Variant) -> None:
    """One cell's directory: overrides, results.jsonl and summary.json, built as the cell builds them."""
    first = cell.iloc[0]
    # A replicated arm's adapters differ only in their seed, as a finetune_task.seed sweep's do.
    finetune = ({"finetune": {"fingerprint": f"sim-{variant.finetune_task}-{variant.finetune_n_articles}-"
                                             f"seed{variant.seed}", "seed": variant.seed, "hyperparameters": {}}}
                if variant.seed is not None else {})
    coords = CellCoordinates(**{k: _plain(first[k]) for k in CELL_KEYS})
    _write_overrides(cell_dir, coords)
    items = _cell_items(cell, coords)
    summary = summary_record(
        items, QUESTIONS, {q: question_stats(items, q, 0.95) for q in QUESTIONS}, cell=coords.to_json(),
        n_articles=len(items), min_answer_mass=MIN_ANSWER_MASS,
        own_summaries={"kind": "generated", "name": EVALUATOR}, elapsed_s=0.0,
        warnings=["simulated cell (python -m selfpref_sweep.analysis.simulate)"],
        extra={"judge_competence": _competence_block(items, spec), "model_calls": 0, **finetune})
    (cell_dir / RESULTS_FILE).write_text("".join(json.dumps(it.to_json()) + "\n" for it in items), encoding="utf-8")
    (cell_dir / SUMMARY_FILE).write_text(json.dumps(summary.to_json(), indent=2), encoding="utf-8")


def write_sweep(spec: SimulationSpec, out_dir: Path) -> pd.DataFrame:
    """Write the synthetic sweep into ``out_dir`` (one numbered cell directory per variant × source ×
    dataset, plus simulation.json with what was planted); returns the drawn items."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty: the simulator writes a fresh sweep")
    items = draw_items(spec, np.random.default_rng(spec.seed))
    by_name = {v.name(spec): v for v in variants(spec)}
    for job, (_, cell) in enumerate(items.groupby("cell_id", sort=False)):
        _write_cell(out_dir / str(job), cell, spec, by_name[cell["evaluator_variant"].iloc[0]])
    planted = {"spec": asdict(spec), "effects": planted_effects(spec),
               "units": planted_units(spec).to_dict(orient="records")}
    (out_dir / "simulation.json").write_text(json.dumps(planted, indent=2), encoding="utf-8")
    return items


# --- power ----------------------------------------------------------------------------------------


def reliability(spec: SimulationSpec) -> float:
    """var(true recognition) / (var(true) + the sampling variance of a unit's mean), log-odds scale: the factor
    by which noisy recognition means attenuate the fitted slope. (The article effect is shared by every unit
    of a dataset, so it shifts them together and does not count as noise.)"""
    x = np.array([v.recognition for v in variants(spec)])
    if x.size < 2:
        return math.nan
    true_var = float(np.var(x, ddof=1))
    error_var = spec.noise ** 2 / (spec.n_articles * len(spec.sources))
    return true_var / (true_var + error_var) if true_var + error_var > 0 else math.nan


def headline_slope_p(items: pd.DataFrame, scale: str) -> float:
    """The headline fit's slope p-value (paper units, all datasets of the one setting × label)."""
    kept, _ = kept_items(items)
    means = unit_means(kept).reset_index()
    fit = fit_formula(pd.DataFrame({"recognition": means[f"rec_{scale}_mean"], "preference": means[f"pref_{scale}_mean"]}),
                      group_by=GROUPINGS[0][0], scale=scale)
    return fit.slope_p if fit.ok else math.nan


def power_curve(spec: SimulationSpec, article_counts: Sequence[int], reps: int, seed: int = 1) -> pd.DataFrame:
    """P(headline slope ≠ 0 at α = 0.05), per number of articles, on both scales, over ``reps`` draws."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in article_counts:
        hits = {"paper": 0, "logodds": 0}
        for _ in range(reps):
            items = draw_items(spec, rng, n)
            for scale in hits:
                p = headline_slope_p(items, scale)
                hits[scale] += int(math.isfinite(p) and p < ALPHA)
        rows.append({"n_articles": int(n), "power_paper": hits["paper"] / reps,
                     "power_logodds": hits["logodds"] / reps, "reps": reps})
    return pd.DataFrame(rows)


# --- coverage: every printed interval and test against known truths (coverage.py) ---------------------

COVERAGE_SETTINGS = ("pairwise", "individual")


@dataclass(frozen=True)
class CoverageDesign:
    """The dose-response design of the coverage mode, every quantity with a known truth: a base model,
    recognition fine-tunes at N = 2, 10, 50 and 4 controls (length, vowel, readability, always_1), on 2 datasets
    (fine-tunes on the first) against 2 sources. Signals on the log-odds scale. Every variant's preference
    signal equals its recognition signal (slope 1, intercept 0) and the source and article effects hit both
    questions alike, so every arm lies on the line preference = recognition on both scales and at both levels:
    the specificity and interaction tests' nulls hold exactly, whatever the position bias."""

    datasets: tuple[str, ...] = ("sim_xsum", "sim_cnn")
    sources: tuple[str, ...] = ("human", "paper_gpt4")
    base_signal: float = 0.5
    recognition_deltas: tuple[float, ...] = (0.4, 0.8, 1.2)  # N = 2, 10, 50: equal steps in log10 N
    control_deltas: tuple[float, ...] = (0.0, 0.0, -0.4, 0.0)  # length, vowel, readability, always_1
    position_bias: float = 1.0
    always_1_bias: float = 3.0  # the always_1 control learned to answer "1"; its true paper-scale Δ is not 0
    source_effects: tuple[float, ...] = (-0.25, 0.25)
    noise: float = 1.0
    article_sd: float = 0.5
    adapters_per_arm: int = 1  # replicated fine-tunes (SimulationSpec)
    adapter_sd: float = 0.0  # training randomness: each adapter's preference deviation, log-odds SD

    def spec(self, setting: str, n_articles: int) -> SimulationSpec:
        """The design in one setting. Individual: each summary is judged alone, so there is no order to be
        biased toward (β = 0) and the paper's score is σ(s), not squashed."""
        rec = [self.base_signal + d for d in self.recognition_deltas]
        ctl = [self.base_signal + d for d in self.control_deltas]
        biases = [self.always_1_bias if CONTROL_ARMS[i % len(CONTROL_ARMS)] == "always_1" else self.position_bias
                  for i in range(len(ctl))]
        signals, betas = [self.base_signal], [self.position_bias]
        for i in range(max(len(rec), len(ctl))):  # variants()' order: recognition and controls interleaved
            signals += rec[i:i + 1] + ctl[i:i + 1]
            betas += [self.position_bias] * len(rec[i:i + 1]) + biases[i:i + 1]
        if setting == "individual":
            betas = [0.0] * len(betas)
        return SimulationSpec(
            n_articles=n_articles, sources=self.sources, datasets=self.datasets, setting=setting,
            recognition_variants=len(rec), control_variants=len(ctl), slope=1.0, intercept=0.0, noise=self.noise,
            article_sd=self.article_sd, recognition_signals=tuple(signals), position_biases=tuple(betas),
            source_effects=self.source_effects, shared_article_effect=True,
            adapters_per_arm=self.adapters_per_arm, adapter_sd=self.adapter_sd)


def true_accuracy(signal: float, position_bias: float, spec: SimulationSpec) -> dict[str, float]:
    """The recognition classifier's true accuracy in a cell whose mean log-odds is ``signal``: an order is right
    when its P(own) > 1/2, i.e. when the item's signal (mean + article effect + noise, normal) shifted by the
    order's position bias is above 0. Over both orders each item counts once, the mean of its two hits.
    Individual: one reading (own above other), no per-order figures."""
    sd = math.hypot(spec.article_sd, spec.noise)
    forward, backward = stats.norm.cdf((signal + position_bias) / sd), stats.norm.cdf((signal - position_bias) / sd)
    pairwise = spec.setting == "pairwise"
    return {"rec_acc": float(0.5 * (forward + backward)),
            "rec_acc_forward": float(forward) if pairwise else math.nan,
            "rec_acc_backward": float(backward) if pairwise else math.nan}


def coverage_truth(spec: SimulationSpec) -> Truth:
    """The true cells, paper units and fine-tuned-vs-base Δs of a design, on both scales."""
    rows = []
    for v in variants(spec):
        for dataset in spec.datasets:
            coords = v.coordinates(spec, "", dataset)
            base = {"setting": spec.setting, "label": spec.label, "dataset": dataset, "transfer": coords.transfer,
                    "evaluator_variant": v.name(spec),
                    "finetune_task": v.finetune_task, "finetune_n_articles": v.finetune_n_articles}
            for source in spec.sources:
                one = replace(spec, sources=(source,), source_effects=(spec.source_effect(source),))
                row = {**base, "source": source}
                for q, signal, question in (("rec", v.recognition, "recognition"), ("pref", v.preference, "preference")):
                    row[f"{q}_logodds"] = signal + spec.source_effect(source)
                    row[f"{q}_paper"] = expected_paper_score(signal, one, question, v.position_bias)
                rows.append({**row, **true_accuracy(row["rec_logodds"], v.position_bias, spec)})
    points = pd.DataFrame(rows)
    values = [f"{q}_{s}" for s in ("paper", "logodds") for q in ("rec", "pref")]
    keys = ["setting", "label", "dataset", "transfer", "evaluator_variant", "finetune_task", "finetune_n_articles"]
    units = points.groupby(keys, dropna=False, sort=False)[values].mean().reset_index()
    units = units.rename(columns={c: f"{c}_mean" for c in values})
    base_units = units[units["finetune_task"] == "none"].set_index("dataset")
    diffs = units[units["finetune_task"] != "none"].copy()
    for c in values:
        diffs[f"d{c}_mean"] = diffs[f"{c}_mean"].to_numpy() - base_units.loc[diffs["dataset"], f"{c}_mean"].to_numpy()
    return Truth(units=units, points=points, diffs=diffs)


@functools.lru_cache(maxsize=None)
def _truths(design: CoverageDesign, setting: str, n_articles: int) -> tuple[Truth, dict]:
    truth = coverage_truth(design.spec(setting, n_articles))
    return truth, true_fits(truth)


def coverage_rep(task: tuple[CoverageDesign, str, int, int, int]) -> dict[str, Any]:
    """One simulated sweep of the design, analysed in memory; its per-row counts (a JSON-able record)."""
    design, setting, n_articles, rep, seed = task
    # One stream per (seed, setting, articles, rep): reps can be run in any order, chunks combined.
    rng = np.random.default_rng([seed, zlib.crc32(setting.encode()), n_articles, rep])
    items = draw_items(design.spec(setting, n_articles), rng)
    truth, fits = _truths(design, setting, n_articles)
    return {"setting": setting, "n_articles": n_articles, "rep": rep, "seed": seed,
            "design": asdict(design), "counts": rep_counts(analyse(items), truth, fits, items)}


def run_coverage(design: CoverageDesign, settings: Sequence[str], article_counts: Sequence[int], reps: int,
                 seed: int = 0, workers: int = 1, cache: Optional[Path] = None,
                 prior: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Reps 0..reps-1 of every setting × article count; with ``cache`` (a JSONL file) the reps already there
    (same design and seed) are reused and every new one is appended as it finishes, so an interrupted run
    resumes and a larger --reps adds to a smaller one. ``prior``: records already in hand, reused the same way."""
    done: dict[tuple, dict] = {(r["setting"], r["n_articles"], r["rep"]): r for r in prior if r["seed"] == seed}
    if cache is not None and cache.is_file():
        for line in cache.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if r["seed"] == seed and r["design"] == json.loads(json.dumps(asdict(design))):
                done[(r["setting"], r["n_articles"], r["rep"])] = r
    # Rep by rep across settings and article counts: a run stopped early leaves them all with as many reps.
    wanted = [(s, n, k) for k in range(reps) for s in settings for n in article_counts]
    tasks = [(design, s, n, k, seed) for s, n, k in wanted if (s, n, k) not in done]
    with (cache.open("a", encoding="utf-8") if cache is not None else contextlib.nullcontext()) as sink:
        pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 and tasks else None
        try:
            results = pool.imap_unordered(coverage_rep, tasks) if pool else map(coverage_rep, tasks)
            for r in results:
                done[(r["setting"], r["n_articles"], r["rep"])] = r
                if sink is not None:
                    sink.write(json.dumps(r) + "\n")
                    sink.flush()
        finally:
            if pool:
                pool.close()
                pool.join()
    return [done[k] for k in wanted]


COVERAGE_NOT_SCORED = (
    "Not scored: r's Fisher interval (the true points lie on one line, r = 1, which no interval from noisy "
    "points covers); Δpref/Δrec (printed only where Δ recognition's CI excludes 0: a conditional interval); the "
    "item-level fit (its within-variant slope comes from the noise structure, not from a planted value); the "
    "specificity test's equivalence (TOST) p (under this design a power, not a size); per-dataset MixedLM rows.")


def coverage_header(design: CoverageDesign, command: str, seconds: float) -> str:
    return "\n".join([
        "## Coverage of the analysis' intervals and size of its tests (planted-bias simulator)", "",
        f"Command: `{command}` ({seconds / 60:.1f} min in this invocation; reps reused from --cache are not "
        "timed again).", "",
        f"Design (log-odds signals): {design}. Base + recognition fine-tunes N = 2, 10, 50 + controls length, "
        "vowel, readability, always_1; preference = recognition for every variant; article effects shared by "
        "every variant, source and both questions; source effects on both questions; pairwise: position bias "
        "per variant (always_1 larger), individual: none. With adapters_per_arm > 1 every fine-tuned arm has that "
        "many adapters, each with its own preference deviation (SD adapter_sd, drawn per sweep); the truths are "
        "the arms' population values.", "",
        "Each row: the rate over all reps (pooled over the units, arms or groups it names), ± its Monte Carlo SE "
        "(clustered by rep), and against the target (95% intervals cover 93–97%, 5% tests reject 3–7%): holds "
        "(the rate inside), does not hold (rate ± 1.96 SE wholly outside), undecided (the rate outside, its MC "
        "interval reaching in: more reps are needed, --until-decided).",
        "", COVERAGE_NOT_SCORED])


def coverage_main(args: argparse.Namespace, command: str) -> int:
    if args.adapters_per_arm < 1 or args.adapter_sd < 0:
        print("error: --adapters-per-arm >= 1 and --adapter-sd >= 0 are needed", file=sys.stderr)
        return 2
    design = CoverageDesign(adapters_per_arm=args.adapters_per_arm, adapter_sd=args.adapter_sd)
    settings = [s for s in args.settings.split(",") if s]
    counts = [int(x) for x in args.articles.split(",") if x.strip()]
    if args.reps < 2 or not counts or any(s not in COVERAGE_SETTINGS for s in settings):
        print(f"error: --reps >= 2, --articles and --settings from {COVERAGE_SETTINGS} are needed", file=sys.stderr)
        return 2
    start = time.perf_counter()
    records = run_coverage(design, settings, counts, args.reps, seed=args.seed, workers=args.workers,
                           cache=args.cache)
    tables = coverage_table(records)
    records, tables = _until_decided(design, args, records, tables)
    text = markdown(tables, coverage_header(design, command, time.perf_counter() - start))
    print(text)
    if args.out_md is not None:
        args.out_md.parent.mkdir(parents=True, exist_ok=True)
        args.out_md.write_text(text, encoding="utf-8")
    if args.out_json is not None:  # the figures as data: calibration.py labels the report's rows from them
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        payload = {**table_records(tables, command), "design": asdict(design)}
        args.out_json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


def _until_decided(design: CoverageDesign, args: argparse.Namespace, records: list[dict[str, Any]],
                   tables: dict[str, pd.DataFrame]) -> tuple[list[dict[str, Any]], dict[str, pd.DataFrame]]:
    """--until-decided N: where a row is undecided (coverage.verdict), double that setting × article count's
    reps (up to N) and score again, until every row holds or fails, or N is reached (the table says how many reps
    each column has)."""
    reps = {(r["setting"], r["n_articles"]): args.reps for r in records}
    while True:
        todo = [(s, n) for s, n in undecided(tables) if reps[(s, n)] < args.until_decided]
        if not todo:
            return records, tables
        for s, n in todo:
            reps[(s, n)] = min(2 * reps[(s, n)], args.until_decided)
            print(f"undecided rows at {s}, {n} articles: {reps[(s, n)]} reps", file=sys.stderr, flush=True)
            more = run_coverage(design, [s], [n], reps[(s, n)], seed=args.seed, workers=args.workers,
                                cache=args.cache, prior=records)
            kept = {(r["setting"], r["n_articles"], r["rep"]): r for r in records}
            kept.update({(r["setting"], r["n_articles"], r["rep"]): r for r in more})
            records = list(kept.values())
        tables = coverage_table(records)


# --- the command ----------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.3f}"


def _inside(value: float, low: float, high: float) -> str:
    if not all(map(math.isfinite, (value, low, high))):
        return "—"
    return "yes" if low <= value <= high else "NO"


def comparison_text(spec: SimulationSpec, result: Any) -> str:
    """Planted vs recovered: the headline slope (and intercept and r), the interaction, the item-level
    within-variant slope, and every paper unit."""
    effects = planted_effects(spec)
    group = f"{spec.setting} / {spec.label}"

    def row(scale: str, name: str, planted: float, est: float, lo: float, hi: float, check: bool = True) -> str:
        est_txt = f"{_fmt(est)} [{_fmt(lo)}, {_fmt(hi)}]"
        return f"  {scale:<9} {name:<22} {_fmt(planted):>8}  {est_txt:<26} {_inside(planted, lo, hi) if check else ''}"

    lines = [f"Planted vs recovered ({group}), 95% CIs",
             f"  {'scale':<9} {'quantity':<22} {'planted':>8}  {'recovered [95% CI]':<26} inside"]
    for f in result.unit_fits:
        if f.group_by == GROUPINGS[0][0] and f.group == group:
            planted = effects[f.scale]
            lines.append(row(f.scale, "headline slope", planted["slope"], f.slope, f.slope_ci_low, f.slope_ci_high)
                         + ("" if f.ok else f"not fitted: {f.note}"))
            lines.append(row(f.scale, "headline intercept", planted["intercept"], f.intercept, f.intercept_ci_low,
                             f.intercept_ci_high, check=False))
            lines.append(row(f.scale, "headline r", planted["r"], f.r, f.r_ci_low, f.r_ci_high, check=False))
    for r in result.interactions:
        if r.group == group and r.group_by == GROUPINGS[0][0]:
            lines.append(row(r.scale, f"interaction ({r.level})", effects[r.scale]["interaction"], r.estimate,
                             r.ci_low, r.ci_high) + ("" if r.ok else f"not fitted: {r.note}"))
    for f in result.robustness_fits:
        if f.level == "item" and f.scale == "logodds" and f.group == group and f.group_by == GROUPINGS[0][0]:
            lines.append(row(f.scale, "item slope (within)", spec.item_slope, f.slope, f.slope_ci_low, f.slope_ci_high))
    lines += ["  (intercept and r: the planted values are those of noise-free units; every unit shares the same",
              "  articles, so their common draw moves the intercept by more than its CI allows, and noise lowers r)",
              f"  Reliability of the units' recognition means ≈ {_fmt(reliability(spec))}: noise in them pulls the",
              "  fitted slope toward 0 by about this factor (errors in variables); spread the variants further",
              "  apart or add articles to raise it."]
    planted_units_ = planted_units(spec).set_index(["evaluator_variant", "dataset"])
    lines += ["", "Paper units (recognition; preference; paper's scale): planted vs recovered [95% CI]"]
    for _, u in result.units.iterrows():
        key = (u["evaluator_variant"], u["dataset"])
        if key not in planted_units_.index:
            continue
        p = planted_units_.loc[key]
        parts = [f"{_fmt(p[f'{q}_paper'])} vs {_fmt(u[f'{q}_paper_mean'])} "
                 f"[{_fmt(u[f'{q}_paper_ci_low'])}, {_fmt(u[f'{q}_paper_ci_high'])}]" for q in ("rec", "pref")]
        lines.append(f"  {u['evaluator_variant']} on {u['dataset']}: " + "; ".join(parts))
    return "\n".join(lines)


def _floats(text: str) -> tuple[float, float]:
    low, high = (float(x) for x in text.split(","))
    return low, high


def build_parser() -> argparse.ArgumentParser:
    d = SimulationSpec()
    p = argparse.ArgumentParser(
        prog="python -m selfpref_sweep.analysis.simulate",
        description="Write a synthetic sweep with planted self-recognition and self-preference effects, run the "
                    "analysis on it, and print the recovered effects next to the planted ones and a power curve. "
                    "Signals are on the log-odds scale (0 = no bias).",
    )
    p.add_argument("--out", type=Path, help="a new (or empty) directory for the synthetic sweep (not with --coverage)")
    p.add_argument("--n-articles", type=int, default=d.n_articles, help="articles per cell (default %(default)s)")
    p.add_argument("--sources", default=",".join(d.sources), help="comma-separated source names (default %(default)s)")
    p.add_argument("--datasets", default=",".join(d.datasets),
                   help="comma-separated dataset names; fine-tunes are on the first (default %(default)s)")
    p.add_argument("--setting", default=d.setting,
                   help="the setting the cells record, for the analysis' grouping; the simulated judge answers "
                        "pairwise either way (default %(default)s)")
    p.add_argument("--label", default=d.label, help="the label condition the cells record (default %(default)s)")
    p.add_argument("--no-base", action="store_true", help="no base-model evaluator")
    p.add_argument("--recognition-variants", type=int, default=d.recognition_variants,
                   help="recognition fine-tunes (default %(default)s)")
    p.add_argument("--control-variants", type=int, default=d.control_variants,
                   help="control fine-tunes (default %(default)s)")
    p.add_argument("--recognition-range", type=_floats, default=(d.recognition_low, d.recognition_high),
                   metavar="LOW,HIGH", help="the variants' recognition signals, evenly spread (default 0,1)")
    p.add_argument("--slope", type=float, default=d.slope,
                   help="preference signal per unit of recognition signal (default %(default)s)")
    p.add_argument("--control-slope", type=float, default=None,
                   help="the same for control fine-tunes (default: --slope, no interaction)")
    p.add_argument("--intercept", type=float, default=d.intercept, help="preference signal at recognition 0")
    p.add_argument("--item-slope", type=float, default=d.item_slope,
                   help="within a variant, preference signal per unit of an item's recognition deviation "
                        "(default %(default)s)")
    p.add_argument("--position-bias", type=float, default=d.position_bias,
                   help="additive log-odds bias toward answer '1' (default %(default)s)")
    p.add_argument("--noise", type=float, default=d.noise, help="item-level SD of the signals (default %(default)s)")
    p.add_argument("--article-sd", type=float, default=d.article_sd,
                   help="SD of the article effect shared across cells (default %(default)s)")
    p.add_argument("--exclusion-rate", type=float, default=d.exclusion_rate,
                   help="chance a question of an item is excluded (low answer mass) (default %(default)s)")
    p.add_argument("--competence", type=float, default=d.competence,
                   help="judge-competence signal of a competent judge (default %(default)s)")
    p.add_argument("--failing-judges", type=int, default=d.failing_judges,
                   help="the first k variants fail the competence control (default %(default)s)")
    p.add_argument("--adapters-per-arm", type=int, default=d.adapters_per_arm,
                   help="adapters (fine-tune seeds) per fine-tuned arm (default %(default)s; also with --coverage)")
    p.add_argument("--adapter-sd", type=float, default=d.adapter_sd,
                   help="SD of each adapter's preference deviation from its arm, log-odds: training randomness "
                        "(default %(default)s; also with --coverage)")
    p.add_argument("--bootstrap", type=int, default=d.n_resamples, help="bootstrap resamples per cell")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--power-articles", default="5,10,20,40",
                   help="article counts of the power curve, comma-separated; empty: no power curve")
    p.add_argument("--power-reps", type=int, default=50, help="simulated sweeps per article count (default %(default)s)")
    _add_coverage_args(p)
    return p


def _add_coverage_args(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("coverage mode (--coverage): the fixed dose-response design (CoverageDesign), "
                                "analysed in memory; the design options above do not apply")
    c.add_argument("--coverage", action="store_true",
                   help="print the coverage of every scored interval and the size of every scored test")
    c.add_argument("--reps", type=int, default=200, help="simulated sweeps per setting and article count")
    c.add_argument("--until-decided", type=int, default=0, metavar="MAX_REPS",
                   help="double the reps of a setting x article count with an undecided row, up to MAX_REPS")
    c.add_argument("--articles", default="10,20", help="articles per cell, comma-separated (default %(default)s)")
    c.add_argument("--settings", default=",".join(COVERAGE_SETTINGS), help="default %(default)s")
    c.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    c.add_argument("--cache", type=Path, default=None,
                   help="JSONL of finished reps: reused and appended to, so a run resumes or adds reps")
    c.add_argument("--out-md", type=Path, default=None, help="also write the table to this Markdown file")
    c.add_argument("--out-json", type=Path, default=None,
                   help="also write the table as data (the report's calibration labels read "
                        "selfpref_sweep/analysis/calibration.json)")


def spec_from_args(args: argparse.Namespace) -> SimulationSpec:
    return SimulationSpec(
        n_articles=args.n_articles, sources=tuple(s for s in args.sources.split(",") if s),
        datasets=tuple(s for s in args.datasets.split(",") if s), setting=args.setting, label=args.label,
        include_base=not args.no_base, recognition_variants=args.recognition_variants,
        control_variants=args.control_variants, recognition_low=args.recognition_range[0],
        recognition_high=args.recognition_range[1], slope=args.slope, control_slope=args.control_slope,
        intercept=args.intercept, item_slope=args.item_slope, position_bias=args.position_bias, noise=args.noise, article_sd=args.article_sd,
        exclusion_rate=args.exclusion_rate, competence=args.competence, failing_judges=args.failing_judges,
        n_resamples=args.bootstrap, seed=args.seed, adapters_per_arm=args.adapters_per_arm,
        adapter_sd=args.adapter_sd,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.coverage:
        words = ["python -m selfpref_sweep.analysis.simulate", *(sys.argv[1:] if argv is None else argv)]
        return coverage_main(args, " ".join(words))
    if args.out is None:
        print("error: --out is needed (or --coverage)", file=sys.stderr)
        return 2
    try:
        spec = spec_from_args(args)
        counts = [int(x) for x in args.power_articles.split(",") if x.strip()]
        if counts and args.power_reps < 1:
            raise ValueError(f"--power-reps={args.power_reps} must be at least 1 (or --power-articles= for no "
                             f"power curve)")
        write_sweep(spec, args.out)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from .pipeline import run_analysis

    result = run_analysis([args.out], wandb_cfg={"mode": "disabled"})
    print(f"Synthetic sweep: {args.out} (planted values in {args.out / 'simulation.json'})")
    print(f"Report:          {result.report_html}")
    print()
    print(comparison_text(spec, result))
    if counts:
        curve = power_curve(spec, counts, args.power_reps, seed=spec.seed + 1)
        print()
        print(f"Power: P(headline slope ≠ 0 at α = {ALPHA}) over {args.power_reps} simulated sweeps per row")
        print(curve.rename(columns={"n_articles": "articles per cell", "power_paper": "paper scale",
                                    "power_logodds": "log-odds scale"}).drop(columns="reps").to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
