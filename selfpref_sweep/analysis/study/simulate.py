"""``python -m selfpref_sweep.analysis.study.simulate``: a planted-bias simulator for the sweep analysis.

It writes a synthetic sweep (real cell directories with summary.json and results.jsonl in the record schema)
whose evaluators have chosen effects (design.py: what is planted, and the judge it simulates), runs the analysis
on it, and prints the recovered effects next to the planted ones and a power curve (the probability of detecting
a slope ≠ 0, by number of articles). With ``--coverage`` it runs the coverage mode instead (coverage_mode.py).

The answer distributions go through the cell's own scoring rules (records/scores.pair_verdict), and the records are
built as the cell builds them (records.schema.Item, scores.question_stats, scores.summary_record), so what the
analysis reads is what a real cell would write for such a judge.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...models.base import AnswerDistribution
from ...records.schema import CELL_KEYS, QUESTIONS, RESULTS_FILE, SUMMARY_FILE, CellCoordinates, Item, Verdict
from ...records.scores import competence_block, pair_verdict, question_stats, score_order, summary_record
from ...reporting.grouping import GROUPINGS, kept_items
from ..estimate.fit import fit_formula
from ..estimate.units import unit_means
from ..report.result import AnalysisResult
from .coverage_mode import COVERAGE_SETTINGS, coverage_main
from .design import EVALUATOR, SimulationSpec, Variant, draw_items, planted_effects, planted_units, variants

MIN_ANSWER_MASS = 0.5  # the cell's default; an excluded order gets a mass below it
ALPHA = 0.05



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
    (records/scores.competence_block). Its verdicts are pairwise in either setting (as the simulated questions'), 2
    calls per article either way."""
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
        warnings=["simulated cell (python -m selfpref_sweep.analysis.study.simulate)"],
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
    fit = fit_formula(pd.DataFrame({"recognition": means[f"rec_{scale}_mean"],
                                    "preference": means[f"pref_{scale}_mean"]}),
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


# --- the command ----------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.3f}"


def _inside(value: float, low: float, high: float) -> str:
    if not all(map(math.isfinite, (value, low, high))):
        return "—"
    return "yes" if low <= value <= high else "NO"


def comparison_text(spec: SimulationSpec, result: AnalysisResult) -> str:
    """Planted vs recovered: the headline slope (and intercept and r), the interaction, the item-level
    within-variant slope, and every paper unit."""
    effects = planted_effects(spec)
    group = f"{spec.setting} / {spec.label}"

    def row(scale: str, name: str, planted: float, est: float, lo: float, hi: float, check: bool = True) -> str:
        est_txt = f"{_fmt(est)} [{_fmt(lo)}, {_fmt(hi)}]"
        return f"  {scale:<9} {name:<22} {_fmt(planted):>8}  {est_txt:<26} {_inside(planted, lo, hi) if check else ''}"

    lines = [f"Planted vs recovered ({group}), 95% CIs",
             f"  {'scale':<9} {'quantity':<22} {'planted':>8}  {'recovered [95% CI]':<26} inside"]
    for f in result.est.unit_fits:
        if f.group_by == GROUPINGS[0][0] and f.group == group:
            planted = effects[f.scale]
            lines.append(row(f.scale, "headline slope", planted["slope"], f.slope, f.slope_ci_low, f.slope_ci_high)
                         + ("" if f.ok else f"not fitted: {f.note}"))
            lines.append(row(f.scale, "headline intercept", planted["intercept"], f.intercept, f.intercept_ci_low,
                             f.intercept_ci_high, check=False))
            lines.append(row(f.scale, "headline r", planted["r"], f.r, f.r_ci_low, f.r_ci_high, check=False))
    for r in result.est.interactions:
        if r.group == group and r.group_by == GROUPINGS[0][0]:
            lines.append(row(r.scale, f"interaction ({r.level})", effects[r.scale]["interaction"], r.estimate,
                             r.ci_low, r.ci_high) + ("" if r.ok else f"not fitted: {r.note}"))
    for f in result.est.robustness_fits:
        if f.level == "item" and f.scale == "logodds" and f.group == group and f.group_by == GROUPINGS[0][0]:
            lines.append(row(f.scale, "item slope (within)", spec.item_slope, f.slope, f.slope_ci_low, f.slope_ci_high))
    lines += ["  (intercept and r: the planted values are those of noise-free units; every unit shares the same",
              "  articles, so their common draw moves the intercept by more than its CI allows, and noise lowers r)",
              f"  Reliability of the units' recognition means ≈ {_fmt(reliability(spec))}: noise in them pulls the",
              "  fitted slope toward 0 by about this factor (errors in variables); spread the variants further",
              "  apart or add articles to raise it."]
    planted_units_ = planted_units(spec).set_index(["evaluator_variant", "dataset"])
    lines += ["", "Paper units (recognition; preference; paper's scale): planted vs recovered [95% CI]"]
    for _, u in result.est.units.iterrows():
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
        prog="python -m selfpref_sweep.analysis.study.simulate",
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
                   help="chance a question of an item is excluded (low answer mass) (default %(default)s; also "
                        "with --coverage)")
    p.add_argument("--competence", type=float, default=d.competence,
                   help="judge-competence signal of a competent judge (default %(default)s)")
    p.add_argument("--failing-judges", type=int, default=d.failing_judges,
                   help="the first k variants fail the competence control (default %(default)s)")
    p.add_argument("--adapters-per-arm", type=int, default=d.adapters_per_arm,
                   help="adapters (fine-tune seeds) per fine-tuned arm (default %(default)s; also with --coverage)")
    p.add_argument("--adapter-sd", type=float, default=d.adapter_sd,
                   help="SD of each adapter's preference deviation from its arm, log-odds: training randomness "
                        "(default %(default)s; also with --coverage)")
    _add_article_effect_args(p, d)
    p.add_argument("--bootstrap", type=int, default=d.n_resamples, help="bootstrap resamples per cell")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--power-articles", default="5,10,20,40",
                   help="article counts of the power curve, comma-separated; empty: no power curve")
    p.add_argument("--power-reps", type=int, default=50,
                   help="simulated sweeps per article count (default %(default)s)")
    _add_coverage_args(p)
    return p


def _add_article_effect_args(p: argparse.ArgumentParser, d: SimulationSpec) -> None:
    """The harder design's article effects that do not cancel against the base model (SimulationSpec)."""
    p.add_argument("--variant-article-sd", type=float, default=d.variant_article_sd,
                   help="SD of article effects per variant, on both questions (default %(default)s; also with "
                        "--coverage)")
    p.add_argument("--arm-article-sd", type=float, default=d.arm_article_sd,
                   help="SD of article effects per arm, shared by its adapters (default %(default)s; also with "
                        "--coverage)")
    p.add_argument("--source-article-sd", type=float, default=d.source_article_sd,
                   help="SD of article effects per source, shared by every variant (default %(default)s; also "
                        "with --coverage)")
    p.add_argument("--cross-transfer", type=float, default=d.cross_transfer,
                   help="share of a fine-tune's change from the base it shows off its own dataset (default "
                        "%(default)s; also with --coverage)")
    p.add_argument("--position-bias-spread", type=float, default=0.0,
                   help="--coverage only: position biases spread evenly over ±this across the variants")


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
                        "selfpref_sweep/analysis/study/calibration.json)")


def spec_from_args(args: argparse.Namespace) -> SimulationSpec:
    return SimulationSpec(
        n_articles=args.n_articles, sources=tuple(s for s in args.sources.split(",") if s),
        datasets=tuple(s for s in args.datasets.split(",") if s), setting=args.setting, label=args.label,
        include_base=not args.no_base, recognition_variants=args.recognition_variants,
        control_variants=args.control_variants, recognition_low=args.recognition_range[0],
        recognition_high=args.recognition_range[1], slope=args.slope, control_slope=args.control_slope,
        intercept=args.intercept, item_slope=args.item_slope, position_bias=args.position_bias, noise=args.noise,
        article_sd=args.article_sd,
        exclusion_rate=args.exclusion_rate, competence=args.competence, failing_judges=args.failing_judges,
        n_resamples=args.bootstrap, seed=args.seed, adapters_per_arm=args.adapters_per_arm,
        adapter_sd=args.adapter_sd, variant_article_sd=args.variant_article_sd, arm_article_sd=args.arm_article_sd,
        source_article_sd=args.source_article_sd, cross_transfer=args.cross_transfer,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.coverage:
        words = ["python -m selfpref_sweep.analysis.study.simulate", *(sys.argv[1:] if argv is None else argv)]
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
    from ..job.pipeline import run_analysis

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
