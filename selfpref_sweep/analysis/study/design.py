"""The planted-bias simulator's design: what is planted (SimulationSpec), the evaluator variants it plants it in, the
planted values on both scales, and the drawn items.

The judge it simulates, per item and question: a content signal s on the log-odds scale (the evaluator
variant's planted mean, plus an article effect shared by every cell that judges the article, plus item
noise), read through an additive position bias β that favours answer "1": P(own) = σ(s + β) when the own
summary is first and σ(s − β) when it is second. The log-odds score recovers s; the paper's score
½·[σ(s + β) + σ(s − β)] squashes it toward 0.5. Each variant's preference signal is
intercept + slope · its recognition signal (control_slope for control fine-tunes), so the slope is planted
exactly on the log-odds scale (and item_slope plants a within-variant, item-level one); on the paper's scale the planted
values are the expectations of the paper's score (Gauss-Hermite quadrature), and the planted slope is the OLS line
through them.

simulate.py writes the drawn items as a sweep and runs the analysis on it; coverage_mode.py draws many sweeps of a
fixed design and scores the analysis against its truths.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import expit

from ...config import CONTROL_QUESTION_TASKS, RECOGNITION_PROMPT_TASKS
from ...records.schema import QUESTION_PREFIX, QUESTIONS, CellCoordinates, transfer_of
from ...records.scores import LOW_ANSWER_MASS
from ..sweep.load import evaluator_variant

EVALUATOR = "simllm"
# The control fine-tunes in the order variants() cycles through them: the control-question tasks, then the
# recognition-prompt controls (every fine-tune task but `recognition`, from the config's groups).
CONTROL_ARMS = tuple(t.value for t in (*CONTROL_QUESTION_TASKS, *RECOGNITION_PROMPT_TASKS[1:]))
RECOGNITION_NS = (2, 10, 50, 100, 200, 500)
EXCLUDED_MASS = 0.3


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
    control_slope: float | None = None  # the same for control fine-tunes (None: = slope, no interaction)
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
    # Article effects that do not cancel against the base model: per variant (each adapter its own) and per arm
    # (shared by an arm's adapters; the base model is its own arm), N(0, sd²) per article, drawn per sweep and
    # added to recognition and preference alike, so every arm stays on the line in the population.
    variant_article_sd: float = 0.0
    arm_article_sd: float = 0.0
    # An independent simulator's process: article effects per source (shared by every variant, on both
    # questions), and the share of a fine-tune's change from the base model that it shows on a dataset it was not
    # fine-tuned on (1: all).
    source_article_sd: float = 0.0
    cross_transfer: float = 1.0

    def __post_init__(self) -> None:
        if self.n_articles < 1:
            raise ValueError("n_articles must be at least 1")
        if not self.sources or not self.datasets:
            raise ValueError("at least one source and one dataset are needed")
        if self.recognition_variants > len(RECOGNITION_NS):
            raise ValueError(f"at most {len(RECOGNITION_NS)} recognition variants (N = {RECOGNITION_NS})")
        if not 0.0 <= self.exclusion_rate < 1.0:
            raise ValueError("exclusion_rate must be in [0, 1)")
        if min(self.noise, self.article_sd, self.adapter_sd, self.variant_article_sd, self.arm_article_sd,
               self.source_article_sd, self.cross_transfer) < 0:
            raise ValueError("noise, article_sd, adapter_sd, the article-effect SDs and cross_transfer must be >= 0")
        if self.adapters_per_arm < 1:
            raise ValueError("adapters_per_arm must be at least 1")
        n_variants = int(self.include_base) + self.recognition_variants + self.control_variants
        for name in ("recognition_signals", "position_biases"):
            if getattr(self, name) and len(getattr(self, name)) != n_variants:
                raise ValueError(f"{name} needs one value per variant ({n_variants})")
        if self.source_effects and len(self.source_effects) != len(self.sources):
            raise ValueError("source_effects needs one value per source")

    @property
    def item_sd(self) -> float:
        """The SD of an item's signal around its variant's mean on one question (noise and article effects)."""
        return math.sqrt(self.noise ** 2 + self.article_sd ** 2 + self.variant_article_sd ** 2
                         + self.arm_article_sd ** 2 + self.source_article_sd ** 2)

    def source_effect(self, source: str) -> float:
        return self.source_effects[self.sources.index(source)] if self.source_effects else 0.0

    @property
    def effective_control_slope(self) -> float:
        return self.slope if self.control_slope is None else self.control_slope


@dataclass(frozen=True)
class Variant:
    """One evaluator variant and its planted signals."""

    finetune_task: str
    finetune_n_articles: int | None
    recognition: float
    preference: float
    competence: float
    position_bias: float = 1.0
    seed: int | None = None  # the fine-tune's seed, where an arm has several adapters

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
    order: list[tuple[str, int | None]] = [("none", None)] if spec.include_base else []
    for i in range(max(len(recognition), len(controls))):
        order += recognition[i:i + 1] + controls[i:i + 1]
    signals = (spec.recognition_signals or np.linspace(spec.recognition_low, spec.recognition_high, len(order))
               if order else [])
    biases = spec.position_biases or (spec.position_bias,) * len(order)
    out = []
    for k, ((task, n), rec) in enumerate(zip(order, signals, strict=True)):
        slope = spec.effective_control_slope if task not in ("none", "recognition") else spec.slope
        arm = Variant(task, n, float(rec), float(spec.intercept + slope * rec),
                      0.0 if k < spec.failing_judges else spec.competence, float(biases[k]))
        replicated = task != "none" and spec.adapters_per_arm > 1
        out += [replace(arm, seed=s) for s in range(spec.adapters_per_arm)] if replicated else [arm]
    return out


def on_dataset(v: Variant, spec: SimulationSpec, dataset: str) -> Variant:
    """The variant as judged on ``dataset``: a fine-tune off its own dataset shows cross_transfer of its change
    from the base model (recognition and preference alike, so a point on the base's line stays on it)."""
    if v.finetune_task == "none" or dataset == spec.datasets[0] or spec.cross_transfer == 1.0:
        return v
    base = variants(spec)[0] if spec.include_base else Variant("none", None, 0.0, spec.intercept, 0.0)
    share = spec.cross_transfer
    return replace(v, recognition=base.recognition + share * (v.recognition - base.recognition),
                   preference=base.preference + share * (v.preference - base.preference))


# --- the planted values on both scales ------------------------------------------------------------

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(64)  # E[f(Z)], Z ~ N(0, 1) = Σ w f(node) / √(2π)


def expected_paper_score(signal: float, spec: SimulationSpec, question: str = "recognition",
                         position_bias: float | None = None, spread: float = 0.0) -> float:
    """E[½·(σ(s + β) + σ(s − β))] over the item's article effect and noise, averaged over the sources (their
    effects): the paper-scale value a variant's unit converges to. β: spec.position_bias unless given.
    ``spread``: the SD of a shift common to all the unit's items, drawn once (an adapter's training deviation),
    averaged over too: the population value of an arm whose adapters each drew one."""
    beta = spec.position_bias if position_bias is None else position_bias
    sd = spec.item_sd
    if question == "preference":  # it also carries item_slope × the recognition deviation
        sd *= math.sqrt(1.0 + spec.item_slope ** 2)
    sd = math.hypot(sd, spread)
    out = []
    for shift in spec.source_effects or (0.0,):
        s = signal + shift + sd * _NODES
        values = 0.5 * (expit(s + beta) + expit(s - beta))
        out.append(float(np.sum(_WEIGHTS * values) / math.sqrt(2 * math.pi)))
    return float(np.mean(out))


def planted_units(spec: SimulationSpec) -> pd.DataFrame:
    """The planted value of every paper unit (variant × dataset), on both scales."""
    rows = []
    for arm in variants(spec):
        base = {"evaluator_variant": arm.name(spec), "finetune_task": arm.finetune_task}
        for dataset in spec.datasets:
            v = on_dataset(arm, spec, dataset)
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


def draw_adapter_deviations(spec: SimulationSpec, rng: np.random.Generator) -> dict[str, float]:
    """Each adapter's preference deviation from its arm (training randomness), by variant name; drawn only when
    planted (adapter_sd > 0), so a design without training randomness keeps its random stream."""
    if spec.adapter_sd <= 0:
        return {}
    return {v.name(spec): float(rng.normal(0.0, spec.adapter_sd)) for v in variants(spec)
            if v.finetune_task != "none"}


def draw_items(spec: SimulationSpec, rng: np.random.Generator, n_articles: int | None = None,
               adapter_deviations: dict[str, float] | None = None) -> pd.DataFrame:
    """Every item of the sweep in the analysis' item columns, plus the per-order probabilities the cell
    files are written from. Column arrays built with numpy, one frame at the end: the power curve draws
    thousands of sweeps. ``adapter_deviations``: drawn by the caller (draw_adapter_deviations, first from the
    same ``rng``, so the stream is the same), who then knows each adapter's own truth; else drawn here."""
    n = spec.n_articles if n_articles is None else n_articles
    columns: dict[str, list] = {}
    named = [(v, v.name(spec)) for v in variants(spec)]
    if adapter_deviations is None:
        adapter_deviations = draw_adapter_deviations(spec, rng)

    def add(name: str, values: Any) -> None:
        columns.setdefault(name, []).append(np.broadcast_to(np.asarray(values, dtype=object if isinstance(
            values, (str, type(None))) else None), (n,)))

    for dataset in spec.datasets:
        articles = np.array([f"{dataset}-{i:04d}" for i in range(n)], dtype=object)
        effects = {q: rng.normal(0.0, spec.article_sd, n) for q in (*QUESTIONS, "competence")}
        if spec.shared_article_effect:  # an article easy to recognize is as easy to prefer
            effects["preference"] = effects["recognition"]
        own_effects = _variant_article_effects(spec, named, rng, n)
        by_source = {s: rng.normal(0.0, spec.source_article_sd, n) if spec.source_article_sd > 0 else 0.0
                     for s in spec.sources}  # drawn only where planted: other designs keep their stream
        for arm, name in named:
            v = on_dataset(arm, spec, dataset)
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
                    own = own_effects[name] + by_source[source] if q != "competence" else 0.0
                    signal = mean + shift + effects[q] + own + rng.normal(0.0, spec.noise, n)
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


def _variant_article_effects(spec: SimulationSpec, named: list, rng: np.random.Generator, n: int
                             ) -> dict[str, Any]:
    """Per variant name, its article effects beyond the shared ones (SimulationSpec.variant_article_sd, and
    arm_article_sd shared by an arm's adapters); drawn only where planted, so other designs keep their stream."""
    out: dict[str, Any] = {name: 0.0 for _, name in named}
    if spec.arm_article_sd > 0:
        arms = {(v.finetune_task, v.finetune_n_articles) for v, _ in named}
        drawn = {arm: rng.normal(0.0, spec.arm_article_sd, n) for arm in sorted(arms, key=str)}
        for v, name in named:
            out[name] = out[name] + drawn[(v.finetune_task, v.finetune_n_articles)]
    if spec.variant_article_sd > 0:
        for _, name in named:
            out[name] = out[name] + rng.normal(0.0, spec.variant_article_sd, n)
    return out
