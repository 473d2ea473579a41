"""Stage 7, the cell record: one results.jsonl line per article and summary.json's statistics.

Field names are the record schema's (record.py), which the analysis reads back.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from .articles import ArticleSelection
from .competence import QUESTION as COMPETENCE, CompetenceControl, format_competence, summarize_competence
from .familiarity import FIELD as FAMILIARITY, FamiliarityStage, format_familiarity, summarize_familiarity
from .pairs import PairSet
from .record import EXCLUDED, EXCLUSION_REASON, LOGODDS, STATUS_COMPLETE
from .scoring import summarize_question, unjudged
from .spec import CellSpec
from .summaries import SummarySet, own_origin


def item_records(spec: CellSpec, selection: ArticleSelection, own: SummarySet, other: SummarySet, pairs: PairSet,
                 verdicts: Sequence[Dict[str, dict]], competence: Optional[Mapping[str, dict]] = None,
                 familiarity: Optional[FamiliarityStage] = None) -> List[Dict[str, Any]]:
    """Every selected article, judged or with the reason it could not be (never dropped); the competence
    control's verdict where the article got the control; the familiarity record (null when the stage is off
    or the article has no pair)."""
    judged = dict(zip((p.article_id for p in pairs.pairs), verdicts))
    c = spec.coordinates
    items = []
    for a in selection.all:
        item_verdicts = judged.get(a.id) or {q: unjudged(pairs.excluded[a.id]) for q in spec.questions}
        items.append({"article_id": a.id, "evaluator": c.evaluator, "source": c.source, "dataset": c.dataset,
                      "article": a.text,
                      "article_truncated": a.id in selection.truncated, "own_summary": own.texts.get(a.id),
                      "other_summary": other.texts.get(a.id), **item_verdicts})
        if competence and a.id in competence:
            items[-1][COMPETENCE] = competence[a.id]
        if familiarity is not None:
            items[-1][FAMILIARITY] = familiarity.records.get(a.id)
    return items


def exclusion_counts(items: Sequence[Dict[str, Any]], questions: Sequence[str]) -> Dict[str, int]:
    """Items per exclusion reason (an item excluded in both questions for one reason counts once)."""
    counts: Dict[str, int] = {}
    for it in items:
        for why in sorted({it[q][EXCLUSION_REASON] for q in questions if it[q][EXCLUDED]}):
            counts[why] = counts.get(why, 0) + 1
    return counts


def cell_summary(spec: CellSpec, items: Sequence[Dict[str, Any]], selection: ArticleSelection,
                 warnings: Sequence[str] = (), control: Optional[CompetenceControl] = None,
                 competence: Optional[Mapping[str, dict]] = None, summary_sets: Sequence[SummarySet] = (),
                 familiarity: Optional[FamiliarityStage] = None) -> Dict[str, Any]:
    """summary.json's statistics: per question the mean score with its article-level bootstrap CI; the
    judge-competence control; familiarity; where the own summaries came from; what standardization stripped,
    per source."""
    boot = spec.bootstrap
    extra: Dict[str, Any] = {"own_summaries": own_origin(spec.evaluator).to_json(),
                             "standardization": {s.source: dict(s.stripped) for s in summary_sets}}
    if control is not None:
        extra["judge_competence"] = summarize_competence(control, competence or {}, spec.judge,
                                                         int(boot.n_resamples), float(boot.confidence), spec.seed)
    if familiarity is not None:
        extra[FAMILIARITY] = summarize_familiarity(familiarity, len(items), int(boot.n_resamples),
                                                   float(boot.confidence), spec.seed)
    per_question = {q: summarize_question(items, q, int(boot.n_resamples), float(boot.confidence), spec.seed)
                    for q in spec.questions}
    excluded = [it for it in items if any(it[q][EXCLUDED] for q in spec.questions)]
    return {
        "status": STATUS_COMPLETE,
        "cell": spec.coordinates.to_json(),
        "n_articles": len(selection.all),
        "n_items": len(items),
        "n_excluded": len(excluded),
        "exclusions": exclusion_counts(items, spec.questions),
        "n_truncated_articles": len(selection.truncated),
        **per_question,
        "position_consistency": {q: per_question[q]["position_consistency"] for q in spec.questions},
        "min_answer_mass": float(spec.judge.min_answer_mass),
        **extra,
        "warnings": list(warnings),
        "elapsed_s": None,
    }


def table_row(item: Dict[str, Any], questions: Sequence[str]) -> Dict[str, Any]:
    """An item as one flat row of the W&B item table."""
    row: Dict[str, Any] = {"article_id": item["article_id"], "source": item["source"],
                           "competence_score": (item.get(COMPETENCE) or {}).get("score"),  # None: no control
                           "familiarity_difference": (item.get(FAMILIARITY) or {}).get("difference")}
    for q in questions:
        v = item[q]
        row[f"{q}_score"] = v["score"]
        row[f"{q}_logodds"] = v.get(LOGODDS)
        row[f"{q}_excluded"] = v["exclusion_reason"]
        if "summaries" in v:  # individual setting: each summary's value and answer mass
            for name in ("own", "other"):
                o = (v["summaries"] or {}).get(name) or {}
                row[f"{q}_{name}_value"] = o.get("value")
                row[f"{q}_{name}_mass"] = o.get("mass")
            continue
        for name in ("forward", "backward"):
            o = (v.get("orders") or {}).get(name) or {}
            row[f"{q}_{name}_p_own"] = o.get("p_own")
            row[f"{q}_{name}_mass"] = o.get("mass")
            row[f"{q}_{name}_chosen_position"] = o.get("chosen_position")
    return row


def _fmt(stats: Dict[str, Any]) -> str:
    if stats.get("mean") is None:
        return "n/a (no scored items)"
    ci = "" if stats.get("ci_low") is None else f"  95% CI [{stats['ci_low']:.3f}, {stats['ci_high']:.3f}]"
    return f"{stats['mean']:.3f}{ci}"


def _fmt_detectable(mde: Dict[str, Any], logodds_mde: Optional[Dict[str, Any]]) -> str:
    """'with n=14 articles, effects smaller than ±0.04 could not be seen (...)'."""
    k = mde["n_articles"]
    articles = f"n={k} article{'' if k == 1 else 's'}"
    if mde["value"] is None:
        return f"with {articles}, no detectable effect can be given (it needs at least 2 articles)"
    on_logodds = "" if not logodds_mde or logodds_mde.get("value") is None else \
        f" (log-odds ±{logodds_mde['value']:.3f})"
    return (f"with {articles}, effects smaller than ±{mde['value']:.3f}{on_logodds} could not be seen "
            f"({mde['power']:.0%} power, α={mde['alpha']:g})")


def format_result(summary: Dict[str, Any], where: str) -> str:
    """The cell's result as printed at its end: per question the paper's score and the log-odds score with
    their CIs, and the smallest effect the cell could have detected."""
    c = summary["cell"]
    lines = ["", f"== {c['evaluator']} judging its own summaries vs {c['source']} on {c['dataset']} ({c['setting']}) =="]
    for q in ("recognition", "preference"):
        if q not in summary:
            continue
        stats, pc = summary[q], summary["position_consistency"].get(q)
        lines.append(f"  self-{q:<12} score    {_fmt(stats)}"
                     + ("" if stats.get("mean") is None else f"  (n={stats['n']}, excluded {stats['n_excluded']})")
                     + ("" if pc is None else f"  position-consistent {pc:.0%}"))
        if "logodds" in stats:
            lines.append(f"  {'':<17} log-odds {_fmt(stats['logodds'])}")
        if "mde" in stats:
            lines.append(f"  {'':<17} {_fmt_detectable(stats['mde'], stats.get('logodds', {}).get('mde'))}")
        bounded = stats.get("bounded_readings") or {}
        if bounded.get("n"):
            lines.append(f"  {'':<17} bounded readings {bounded['n']} of {bounded['of']} ({bounded['share']:.0%}): "
                         f"an answer absent from the top logprobs, valued at the smallest listed probability")
    lines.append("  (score: 0.5 = no bias, > 0.5 = the evaluator recognizes / favours its own summary;")
    lines.append("   log-odds: the same on the logit scale, 0 = no bias; a position bias cancels in it)")
    competence = format_competence(summary.get("judge_competence"))
    if competence:
        lines.append(competence)
    familiarity = format_familiarity(summary.get(FAMILIARITY))
    if familiarity:
        lines.append(familiarity)
    origin = summary.get("own_summaries") or {}
    if origin.get("kind") not in (None, "generated"):
        lines.append(f"  own summaries: {origin['name']} ({origin['kind']}), not generated")
    stripped = {src: {r: n for r, n in rules.items() if n}
                for src, rules in (summary.get("standardization") or {}).items() if any(rules.values())}
    if stripped:
        lines.append(f"  standardization stripped (summaries per rule): {stripped}")
    for w in summary.get("warnings") or []:
        lines.append(f"  warning: {w}")
    if summary["n_excluded"]:
        lines.append(f"  excluded items: {summary['n_excluded']} of {summary['n_items']} {summary['exclusions']}")
    lines.append(f"  model calls: {summary['model_calls']} (cache hits {summary['cache_hits']}), "
                 f"{summary['elapsed_s']:.1f}s -> {where}")
    return "\n".join(lines)
