"""The simulator's coverage mode (``python -m selfpref_sweep.analysis.study.simulate --coverage``): every printed
interval and test against known truths. The fixed dose-response design (CoverageDesign), its true cells, paper
units and Δs, the reps (each a sweep drawn from the design and analysed in memory, cached and resumable), and the
command that tallies them (coverage.py scores each rep and aggregates the table).
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from .coverage import Truth, analyse, coverage_table, markdown, rep_counts, table_records, true_fits, undecided
from .design import (
    CONTROL_ARMS,
    SimulationSpec,
    draw_adapter_deviations,
    draw_items,
    expected_paper_score,
    on_dataset,
    variants,
)

COVERAGE_SETTINGS = ("pairwise", "individual")
# How a rep's counts were scored; a cached rep counted another way is drawn again. 2: each adapter's own rows
# against its own truth (its drawn training deviation), no longer its arm's population value. 3: an arm's
# paper-scale population value averages over its adapters' deviations (coverage_truth). 4: the fine-tune tests'
# in-domain and cross-dataset rows, each alone. 5: the corrected shift's two directions, each alone.
SCORING = 5


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
    variant_article_sd: float = 0.0  # article effects per variant (SimulationSpec), not cancelled by the base
    arm_article_sd: float = 0.0  # ... per arm, shared by its adapters
    # An independent simulator's process (SimulationSpec): position biases spread evenly over
    # ±position_bias_spread across the variants (fixed, so the truths are), source-by-article effects, exclusions,
    # and cross-dataset transfer.
    position_bias_spread: float = 0.0
    source_article_sd: float = 0.0
    exclusion_rate: float = 0.0
    cross_transfer: float = 1.0

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
        if self.position_bias_spread:
            betas = [b + o for b, o in zip(betas, np.linspace(-1, 1, len(betas)) * self.position_bias_spread,
                                           strict=True)]
        if setting == "individual":
            betas = [0.0] * len(betas)
        return SimulationSpec(
            n_articles=n_articles, sources=self.sources, datasets=self.datasets, setting=setting,
            recognition_variants=len(rec), control_variants=len(ctl), slope=1.0, intercept=0.0, noise=self.noise,
            article_sd=self.article_sd, recognition_signals=tuple(signals), position_biases=tuple(betas),
            source_effects=self.source_effects, shared_article_effect=True,
            adapters_per_arm=self.adapters_per_arm, adapter_sd=self.adapter_sd,
            variant_article_sd=self.variant_article_sd, arm_article_sd=self.arm_article_sd,
            source_article_sd=self.source_article_sd, exclusion_rate=self.exclusion_rate,
            cross_transfer=self.cross_transfer)


def true_accuracy(signal: float, position_bias: float, spec: SimulationSpec) -> dict[str, float]:
    """The recognition classifier's true accuracy in a cell whose mean log-odds is ``signal``: an order is right
    when its P(own) > 1/2, i.e. when the item's signal (mean + article effect + noise, normal) shifted by the
    order's position bias is above 0. Over both orders each item counts once, the mean of its two hits.
    Individual: one reading (own above other), no per-order figures."""
    sd = spec.item_sd
    forward, backward = stats.norm.cdf((signal + position_bias) / sd), stats.norm.cdf((signal - position_bias) / sd)
    pairwise = spec.setting == "pairwise"
    return {"rec_acc": float(0.5 * (forward + backward)),
            "rec_acc_forward": float(forward) if pairwise else math.nan,
            "rec_acc_backward": float(backward) if pairwise else math.nan}


def coverage_truth(spec: SimulationSpec, adapter_deviations: Mapping[str, float] | None = None) -> Truth:
    """The true cells, paper units and fine-tuned-vs-base Δs of a design, on both scales: the arms' population
    values, or with ``adapter_deviations`` (variant name -> its preference deviation, as drawn) each adapter's
    own, which its per-adapter rows (cells, units, Δs) describe. An arm's population value on the paper scale
    averages over its adapters' deviations (the mean of σ over them, not σ at their mean: they differ by a
    Jensen gap that grows with the training SD); on log-odds the two agree."""
    rows = []
    for arm in variants(spec):
        spread = spec.adapter_sd if adapter_deviations is None and arm.finetune_task != "none" else 0.0
        deviation = (adapter_deviations or {}).get(arm.name(spec), 0.0)  # the same on every dataset
        for dataset in spec.datasets:
            v = on_dataset(arm, spec, dataset)
            v = replace(v, preference=v.preference + deviation)
            coords = v.coordinates(spec, "", dataset)
            base = {"setting": spec.setting, "label": spec.label, "dataset": dataset, "transfer": coords.transfer,
                    "evaluator_variant": v.name(spec),
                    "finetune_task": v.finetune_task, "finetune_n_articles": v.finetune_n_articles}
            for source in spec.sources:
                one = replace(spec, sources=(source,), source_effects=(spec.source_effect(source),))
                row = {**base, "source": source}
                for q, signal, question in (("rec", v.recognition, "recognition"),
                                            ("pref", v.preference, "preference")):
                    row[f"{q}_logodds"] = signal + spec.source_effect(source)
                    row[f"{q}_paper"] = expected_paper_score(signal, one, question, v.position_bias,
                                                             spread if question == "preference" else 0.0)
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


@functools.cache
def _truths(design: CoverageDesign, setting: str, n_articles: int) -> tuple[Truth, dict]:
    truth = coverage_truth(design.spec(setting, n_articles))
    return truth, true_fits(truth)


def coverage_rep(task: tuple[CoverageDesign, str, int, int, int]) -> dict[str, Any]:
    """One simulated sweep of the design, analysed in memory; its per-row counts (a JSON-able record)."""
    design, setting, n_articles, rep, seed = task
    # One stream per (seed, setting, articles, rep): reps can be run in any order, chunks combined.
    rng = np.random.default_rng([seed, zlib.crc32(setting.encode()), n_articles, rep])
    spec = design.spec(setting, n_articles)
    deviations = draw_adapter_deviations(spec, rng)  # first from rng, as draw_items would draw them
    items = draw_items(spec, rng, adapter_deviations=deviations)
    truth, fits = _truths(design, setting, n_articles)
    # An adapter's own rows (its cells, units and Δs) describe that adapter: scored against its own truth. The
    # arms' pooled rows and the fits aim at the arms' population values.
    own = coverage_truth(spec, deviations) if deviations else truth
    return {"setting": setting, "n_articles": n_articles, "rep": rep, "seed": seed, "scoring": SCORING,
            "design": asdict(design), "counts": rep_counts(analyse(items), truth, fits, items, own)}


def run_coverage(design: CoverageDesign, settings: Sequence[str], article_counts: Sequence[int], reps: int,
                 seed: int = 0, workers: int = 1, cache: Path | None = None,
                 prior: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Reps 0..reps-1 of every setting × article count; with ``cache`` (a JSONL file) the reps already there
    (same design and seed) are reused and every new one is appended as it finishes, so an interrupted run
    resumes and a larger --reps adds to a smaller one. ``prior``: records already in hand, reused the same way."""
    done: dict[tuple, dict] = {(r["setting"], r["n_articles"], r["rep"]): r for r in prior if r["seed"] == seed}
    done.update({(r["setting"], r["n_articles"], r["rep"]): r
                 for r in cached_records(cache, design, seed, scoring=SCORING)})
    # Rep by rep across settings and article counts: a run stopped early leaves them all with as many reps.
    wanted = [(s, n, k) for k in range(reps) for s in settings for n in article_counts]
    tasks = [(design, s, n, k, seed) for s, n, k in wanted if (s, n, k) not in done]
    for r in cached_runs(coverage_rep, tasks, workers, cache):
        done[(r["setting"], r["n_articles"], r["rep"])] = r
    return [done[k] for k in wanted]


def cached_records(cache: Path | None, design: Any, seed: int, **same: Any) -> list[dict[str, Any]]:
    """The records in a JSONL cache of finished reps that were drawn from ``design`` (a dataclass) with ``seed``
    (and carry the ``same`` fields: e.g. the scoring they were counted by)."""
    if cache is None or not cache.is_file():
        return []
    key = json.loads(json.dumps(asdict(design)))
    records = (json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines())
    return [r for r in records if r["seed"] == seed and r["design"] == key
            and all(r.get(k) == v for k, v in same.items())]


def cached_runs(work: Callable[[Any], dict[str, Any]], tasks: Sequence[Any], workers: int, cache: Path | None
                ) -> Iterator[dict[str, Any]]:
    """Each task's record as it finishes (in ``workers`` forked processes when more than one), appended to the
    JSONL ``cache`` at once: an interrupted run keeps every rep it finished."""
    with (cache.open("a", encoding="utf-8") if cache is not None else contextlib.nullcontext()) as sink:
        pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 and tasks else None
        try:
            for r in (pool.imap_unordered(work, tasks) if pool else map(work, tasks)):
                if sink is not None:
                    sink.write(json.dumps(r) + "\n")
                    sink.flush()
                yield r
        finally:
            if pool:
                pool.close()
                pool.join()


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
    extra = dict(position_bias_spread=args.position_bias_spread, source_article_sd=args.source_article_sd,
                 exclusion_rate=args.exclusion_rate, cross_transfer=args.cross_transfer)
    if args.adapters_per_arm < 1 or min(args.adapter_sd, args.variant_article_sd, args.arm_article_sd,
                                        *extra.values()) < 0 or args.exclusion_rate >= 1:
        print("error: --adapters-per-arm >= 1, the SDs, --position-bias-spread and --cross-transfer >= 0, and "
              "--exclusion-rate in [0, 1) are needed", file=sys.stderr)
        return 2
    design = CoverageDesign(adapters_per_arm=args.adapters_per_arm, adapter_sd=args.adapter_sd,
                            variant_article_sd=args.variant_article_sd, arm_article_sd=args.arm_article_sd, **extra)
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
    print_and_write(text, args.out_md)
    if args.out_json is not None:  # the figures as data: calibration.py labels the report's rows from them
        args.out_json.parent.mkdir(parents=True, exist_ok=True)
        payload = {**table_records(tables, command), "design": asdict(design)}
        args.out_json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


def print_and_write(text: str, path: Path | None) -> None:
    """A study's Markdown: printed, and written to ``path`` too when one is given (--out-md)."""
    print(text)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


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
