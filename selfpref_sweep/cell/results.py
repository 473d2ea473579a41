"""Stage 7, the cell record: one results.jsonl line per article and summary.json's statistics.

Field names are the record schema's (records/schema.py), which the analysis reads back; the summary's counts
and statistics are read by records/scores.py's rules (summary_record, question_stats), as the simulator's are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..measurements import Measurement, Stage, registered
from ..records.schema import LOGODDS, QUESTIONS, CellSummary, Item, Verdict
from ..records.scores import question_stats, summary_record
from .inputs import CellInputs
from .scoring import unjudged_verdict
from .summaries import own_origin

Measured = Sequence[tuple[Measurement, Stage]]


def item_records(inputs: CellInputs, verdicts: Sequence[dict[str, Verdict]], measured: Measured = ()
                 ) -> list[Item]:
    """Every selected article, judged or with the reason it could not be (never dropped), and each
    measurement's record of it (left out, or null, where the measurement has none: its `omit_missing`)."""
    spec, pairs = inputs.spec, inputs.pairs
    judged = dict(zip((p.article_id for p in pairs.pairs), verdicts, strict=True))
    c = spec.coordinates
    items = []
    for a in inputs.selection.all:
        item_verdicts = judged.get(a.id) or {q: unjudged_verdict(pairs.excluded[a.id]) for q in spec.questions}
        item = Item(a.id, c.evaluator, c.source, c.dataset, a.text, a.id in inputs.selection.truncated,
                    inputs.own.texts.get(a.id), inputs.other.texts.get(a.id), dict(item_verdicts))
        for m, stage in measured:
            if a.id in stage.records or not m.omit_missing:
                item.measured[m.item_key] = stage.records.get(a.id)
        items.append(item)
    return items


def cell_summary(inputs: CellInputs, items: Sequence[Item], measured: Measured = ()) -> CellSummary:
    """summary.json's statistics: per question the mean score with its article-clustered CI; each
    measurement's block; where the own summaries came from; what standardization stripped, per source."""
    spec = inputs.spec
    shown = [inputs.own, inputs.other, *(s for m, stage in measured for s in m.shown_summaries(stage))]
    extra: dict[str, Any] = {}
    for m, stage in measured:
        extra[m.summary_key] = (m.summarize_items(stage, inputs, items) if stage.enabled
                                else {"enabled": False, "reason": stage.reason})
    stats = {q: question_stats(items, q, float(spec.bootstrap.confidence)) for q in spec.questions}
    return summary_record(
        items, spec.questions, stats, cell=spec.coordinates.to_json(), n_articles=len(inputs.selection.all),
        n_truncated_articles=len(inputs.selection.truncated), min_answer_mass=float(spec.judge.min_answer_mass),
        own_summaries=own_origin(spec.evaluator).to_json(),
        standardization={s.source: dict(s.stripped) for s in shown}, warnings=list(inputs.warnings), extra=extra)


def table_row(item: Item | dict[str, Any], questions: Sequence[str]) -> dict[str, Any]:
    """An item (or its results.jsonl line) as one flat row of the W&B item table."""
    item = item if isinstance(item, Item) else Item.from_json(item, questions)
    row: dict[str, Any] = {"article_id": item.article_id, "source": item.source}
    for m in registered():
        row.update(m.table_columns(item.measured.get(m.item_key)))
    for q in questions:
        v = item.verdicts[q]
        row[f"{q}_score"] = v.score
        row[f"{q}_{LOGODDS}"] = v.logodds
        row[f"{q}_excluded"] = v.exclusion_reason
        if v.summaries is not None:
            for name in ("own", "other"):  # individual setting: each summary's value and answer mass
                o = (v.summaries or {}).get(name)
                row[f"{q}_{name}_value"] = o.value if o else None
                row[f"{q}_{name}_mass"] = o.mass if o else None
            continue
        for name in ("forward", "backward"):
            o = (v.orders or {}).get(name)
            row[f"{q}_{name}_p_own"] = o.p_own if o else None
            row[f"{q}_{name}_mass"] = o.mass if o else None
            row[f"{q}_{name}_chosen_position"] = o.chosen_position if o else None
    return row


def _fmt(stats: dict[str, Any]) -> str:
    if stats.get("mean") is None:
        return "n/a (no scored items)"
    ci = "" if stats.get("ci_low") is None else f"  95% CI [{stats['ci_low']:.3f}, {stats['ci_high']:.3f}]"
    return f"{stats['mean']:.3f}{ci}"


def _fmt_detectable(mde: dict[str, Any], logodds_mde: dict[str, Any] | None) -> str:
    """'with n=14 articles, effects smaller than ±0.04 could not be seen (...)'."""
    k = mde["n_articles"]
    articles = f"n={k} article{'' if k == 1 else 's'}"
    if mde["value"] is None:
        return f"with {articles}, no detectable effect can be given (it needs at least 2 articles)"
    on_logodds = "" if not logodds_mde or logodds_mde.get("value") is None else \
        f" (log-odds ±{logodds_mde['value']:.3f})"
    return (f"with {articles}, effects smaller than ±{mde['value']:.3f}{on_logodds} could not be seen "
            f"({mde['power']:.0%} power, α={mde['alpha']:g})")


def _question_lines(q: str, stats: dict[str, Any], pc: float | None, verbose: bool) -> list[str]:
    """A question's printed lines: its score, CI and counts; with `verbose` also its log-odds score and the smallest
    effect it could have detected. Bounded readings are always said (they qualify the score)."""
    lines = [f"  self-{q:<12} score    {_fmt(stats)}"
             + ("" if stats.get("mean") is None else f"  (n={stats['n']}, excluded {stats['n_excluded']})")
             + ("" if pc is None or not verbose else f"  position-consistent {pc:.0%}")]
    if verbose and "logodds" in stats:
        lines.append(f"  {'':<17} log-odds {_fmt(stats['logodds'])}")
    if verbose and "mde" in stats:
        lines.append(f"  {'':<17} {_fmt_detectable(stats['mde'], stats.get('logodds', {}).get('mde'))}")
    bounded = stats.get("bounded_readings") or {}
    if bounded.get("n"):
        lines.append(f"  {'':<17} bounded readings {bounded['n']} of {bounded['of']} ({bounded['share']:.0%}): "
                     f"an answer absent from the top logprobs, valued at the smallest listed probability")
    return lines


def _notes(summary: dict[str, Any], verbose: bool) -> list[str]:
    """Where the own summaries came from, what standardization stripped (verbose), warnings and exclusions."""
    lines = []
    origin = summary.get("own_summaries") or {}
    if origin.get("kind") not in (None, "generated"):
        lines.append(f"  own summaries: {origin['name']} ({origin['kind']}), not generated")
    stripped = {src: {r: n for r, n in rules.items() if n}
                for src, rules in (summary.get("standardization") or {}).items() if any(rules.values())}
    if stripped and verbose:
        lines.append(f"  standardization stripped (summaries per rule): {stripped}")
    lines += [f"  warning: {w}" for w in summary.get("warnings") or []]
    if summary["n_excluded"]:
        lines.append(f"  excluded items: {summary['n_excluded']} of {summary['n_items']} {summary['exclusions']}")
    return lines


def format_result(summary: dict[str, Any], where: str, verbose: bool = False) -> str:
    """The cell's result as printed at its end: per question the paper's score with its CI; with `verbose`, also
    the log-odds score and the smallest effect the cell could have detected, and every measurement's line (by
    default only the judge-competence control's, and the names of the others)."""
    c = summary["cell"]
    lines = ["", f"== {c['evaluator']} judging its own summaries vs {c['source']} on {c['dataset']} "
                 f"({c['setting']}) =="]
    for q in QUESTIONS:
        if q in summary:
            lines += _question_lines(q, summary[q], summary["position_consistency"].get(q), verbose)
    if verbose:
        lines.append("  (score: 0.5 = no bias, > 0.5 = the evaluator recognizes / favours its own summary;")
        lines.append("   log-odds: the same on the logit scale, 0 = no bias; a position bias cancels in it)")
    quiet = []
    for m in registered():
        line = m.format(summary.get(m.summary_key))
        if line and (verbose or m.brief):
            lines.append(line)
        elif line:
            quiet.append(m.name)
    if quiet:
        lines.append(f"  also measured: {', '.join(quiet)} (in summary.json; verbose=true prints them)")
    lines += _notes(summary, verbose)
    lines.append(f"  model calls: {summary['model_calls']} (cache hits {summary['cache_hits']}), "
                 f"{summary['elapsed_s']:.1f}s -> {where}")
    return "\n".join(lines)
