"""Per-item JSONL, in and out: one JSON object per line, one line per (item, question), from any tool that judged
summaries; ``import_jsonl`` turns a file into a sweep of ordinary cells, ``export_jsonl`` writes a sweep's items
back in the same format (docs/import_formats.md, "Per-item JSONL", is the field reference).

A line's answer probabilities become the readings a cell makes (readings.py: renormalised over the answers, one
formula); a line with only a score keeps that score as the verdict ("stored score"); a line the other tool could
not judge is an exclusion with its reason. Every item is kept: a question without a line, for an item that has
a line for the other question, is excluded as ``not_in_file`` and counted.

A bad line is an ImportInputError naming the file and the line, raised before anything is written."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import LabelName, SettingName
from ..records.atomic import atomic_write_text
from ..records.authors import ANCHOR, AUTHOR, CORRECT, FAMILY, JUDGE, OUTPUTS_KEY, SIDES, output_facts
from ..records.schema import QUESTIONS, CellCoordinates, CellRecord, Item, Verdict, read_cell, transfer_of
from ..records.sweep_dirs import find_cell_dirs
from . import readings as R
from .imported import ORIGIN_KEY, ImportedCell, ImportInputError, SweepWriter

FORMAT = "jsonl"
NOT_IN_FILE = "not_in_file"  # the item has a line for the other question, none for this one
REQUIRED = ("evaluator", "source", "dataset", "article_id", "question")
SETTINGS = tuple(s.value for s in SettingName)
LABELS = tuple(c.value for c in LabelName)
FINETUNE_KEYS = ("task", "dataset", "n_articles", "seed")
# The probability fields of each setting, and the answers each question's distributions are over.
PROB_FIELDS = {"pairwise": ("forward", "backward"), "individual": ("own", "other")}
ANSWERS = {("pairwise", "recognition"): R.PAIR_ANSWERS, ("pairwise", "preference"): R.PAIR_ANSWERS,
           ("individual", "recognition"): R.YES_NO, ("individual", "preference"): R.SCORES}
# The facts about the item's two outputs a line may give (records/authors.py): field -> (side, fact).
FACT_FIELDS = {f"{side}_{fact}": (side, fact) for side in SIDES for fact in (AUTHOR, ANCHOR, CORRECT, FAMILY)}
FACT_FIELDS[f"{JUDGE}_{FAMILY}"] = (JUDGE, FAMILY)
_HELP = "Nothing was written; the format is in docs/import_formats.md (Per-item JSONL)."


def _bad(where: str, what: str) -> ImportInputError:
    return ImportInputError(f"{where}: {what}. {_HELP}")


# ------------------------------------------------------------------------------------------ the lines
@dataclass(frozen=True)
class CellKey:
    """What makes a cell: one per distinct (evaluator, source, dataset, setting, label, fine-tune)."""

    evaluator: str
    source: str
    dataset: str
    setting: str
    label: str
    finetune: tuple[str, str | None, int | None, int | None] | None  # task, dataset, n, seed


@dataclass
class Line:
    """One validated line: its cell, article, question and verdict, the texts and the origin it gave."""

    number: int
    key: CellKey
    article_id: str
    question: str
    verdict: Verdict
    own_summary: str | None
    other_summary: str | None
    origin: Any
    facts: dict[str, Any]  # the output facts the line gives (FACT_FIELDS), nulls left out


def read_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) of every non-blank line; a file that is missing, not UTF-8, empty, or
    holds a line that is not a JSON object is an error naming the file (and the line)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImportInputError(f"{path} could not be read ({exc.strerror or exc}). {_HELP}") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise _bad(f"{path}, line {line}", f"not UTF-8 text ({exc.reason})") from exc
    raw = text.split("\n")
    out = []
    for number, line in enumerate(raw, 1):
        if line.strip():
            out.append((number, _parse(path, number, line, ended=number < len(raw))))
    if not out:
        raise ImportInputError(f"{path} is empty: no line to import. {_HELP}")
    return out


def _parse(path: Path, number: int, line: str, ended: bool) -> dict[str, Any]:
    where = f"{path}, line {number}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        if not ended:
            raise _bad(where, f"the last line is truncated (the file ends without a newline, mid-object: "
                              f"{exc.msg}); fetch or write the file again") from exc
        raise _bad(where, f"not valid JSON ({exc.msg}, column {exc.colno})") from exc
    if not isinstance(obj, dict):
        raise _bad(where, f"expected a JSON object, found {type(obj).__name__}")
    return obj


def _text(obj: Mapping[str, Any], name: str, where: str, required: bool = True) -> str | None:
    value = obj.get(name)
    if name == "article_id" and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise _bad(where, f"{name!r} must be a {'non-empty ' if required else ''}string, found {value!r}"
                   if name in obj else f"missing required field {name!r}")
    return value


def _choice(obj: Mapping[str, Any], name: str, allowed: Sequence[str], default: str | None, where: str) -> str:
    value = obj.get(name, default)
    if value not in allowed:
        shown = "missing" if name not in obj else repr(value)
        raise _bad(where, f"{name!r} is {shown}; expected one of {', '.join(allowed)}")
    return value


def _finetune(raw: Any, where: str) -> tuple[str, str | None, int | None, int | None] | None:
    """null, or {"task", "dataset", "n_articles", "seed"} as a tuple (task required)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _bad(where, f"'finetune' must be null or an object, found {type(raw).__name__}")
    unknown = sorted(set(raw) - set(FINETUNE_KEYS))
    if unknown:
        raise _bad(where, f"'finetune' has unknown key(s) {', '.join(unknown)}; known: {', '.join(FINETUNE_KEYS)}")
    task, dataset = raw.get("task"), raw.get("dataset")
    if not isinstance(task, str) or task in ("", "none"):
        raise _bad(where, f"'finetune.task' must name the fine-tune task (e.g. recognition), found {task!r}; "
                          f"write \"finetune\": null for an evaluator that is not fine-tuned")
    if dataset is not None and not isinstance(dataset, str):
        raise _bad(where, f"'finetune.dataset' must be a string or null, found {dataset!r}")
    ints = []
    for name in ("n_articles", "seed"):
        value = raw.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _bad(where, f"'finetune.{name}' must be an integer or null, found {value!r}")
        ints.append(value)
    return task, dataset, ints[0], ints[1]


def _probs(obj: Mapping[str, Any], name: str, answers: Sequence[str], where: str) -> dict[str, float]:
    raw = obj.get(name)
    if not isinstance(raw, dict):
        raise _bad(where, f"'{name}' must be an object of answer probabilities {{{', '.join(answers)}}}, found "
                          f"{'nothing' if name not in obj else type(raw).__name__}")
    unknown = sorted(set(raw) - set(answers))
    if unknown:
        raise _bad(where, f"'{name}' has answer(s) {', '.join(map(repr, unknown))}; this question's answers are "
                          f"{', '.join(map(repr, answers))}")
    probs = R.probabilities(raw, answers)
    if probs is None:
        raise _bad(where, f"'{name}' holds a value that is not a number in [0, 1]: {raw!r}")
    return probs


def _score(obj: Mapping[str, Any], where: str) -> float | None:
    if obj.get("score") is None:
        return None
    score = R.finite(obj["score"])
    if score is None:
        raise _bad(where, f"'score' must be a finite number or null, found {obj['score']!r}")
    return score


def _reason(obj: Mapping[str, Any], where: str) -> str | None:
    reason = obj.get("excluded")
    if reason in (None, False):
        return None
    if not isinstance(reason, str) or not reason:
        raise _bad(where, f"'excluded' must be a reason string, found {reason!r}")
    return reason


def _from_probs(obj: Mapping[str, Any], setting: str, question: str, stored: float | None,
                where: str) -> Verdict:
    first, second = PROB_FIELDS[setting]
    answers = ANSWERS[(setting, question)]
    a, b = _probs(obj, first, answers, where), _probs(obj, second, answers, where)
    if setting == "pairwise":
        return R.pair_from_probs(a, b, stored)
    return R.individual_from(R.summary_reading(a, answers), R.summary_reading(b, answers), R.READ_RENORMALISED,
                             **{R.IMPORTED_SCORE: stored})


def line_verdict(obj: Mapping[str, Any], setting: str, question: str, where: str) -> Verdict:
    """The line's verdict: from the probabilities (renormalised; with ``excluded``, the readings kept and the
    item excluded under that reason); excluded with its reason; or the stored score as it is."""
    stored, reason = _score(obj, where), _reason(obj, where)
    first, second = PROB_FIELDS[setting]
    if first in obj or second in obj:
        verdict = _from_probs(obj, setting, question, stored, where)
        if reason is not None:  # e.g. below the other tool's answer-mass threshold: no score, readings kept
            verdict.score = verdict.logodds = verdict.consistent = None
            verdict.excluded, verdict.exclusion_reason = True, reason
        return verdict
    wrong = [f for s, fields in PROB_FIELDS.items() if s != setting for f in fields if f in obj]
    if wrong:
        raise _bad(where, f"{' and '.join(wrong)} belong to the other setting; {setting} lines give "
                          f"{first} and {second}")
    if reason is not None:
        return R.excluded(reason, **{R.IMPORTED_SCORE: stored})
    if stored is None:
        raise _bad(where, f"no judgement: give {first} and {second} (answer probabilities), a 'score', or "
                          f"'excluded' with a reason")
    if not 0.0 <= stored <= 1.0:
        raise _bad(where, f"'score' {stored!r} is the item's verdict here (no probabilities given) and must lie "
                          f"in [0, 1]")
    return R.stored_pair(stored)


def fact_value(fact: str, value: Any) -> tuple[Any, str]:
    """(the fact's value, or None when ``value`` is not of its type; what the type is): an anchor is a finite
    number (as a float), correct a boolean, an author or family a non-empty string."""
    if fact == ANCHOR:
        return R.finite(value), "a finite number"
    if fact == CORRECT:
        return (value if isinstance(value, bool) else None), "true or false"
    return (value if isinstance(value, str) and value else None), "a non-empty string"


def line_facts(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The output facts a line gives (null: not given); a value not of the fact's type is an error."""
    out: dict[str, Any] = {}
    for name, (_side, fact) in FACT_FIELDS.items():
        if obj.get(name) is None:
            continue
        value, kind = fact_value(fact, obj[name])
        if value is None:
            raise _bad(where, f"{name!r} must be {kind} or null, found {obj[name]!r}")
        out[name] = value
    return out


def parse_line(path: Path, number: int, obj: Mapping[str, Any]) -> Line:
    """One line, validated (an error names the file and the line)."""
    where = f"{path}, line {number}"
    head = [_text(obj, name, where) for name in REQUIRED[:4]]
    question = _choice(obj, "question", QUESTIONS, None, where)
    setting = _choice(obj, "setting", SETTINGS, "pairwise", where)
    label = _choice(obj, "label", LABELS, "none", where)
    key = CellKey(*head[:3], setting, label, _finetune(obj.get("finetune"), where))
    return Line(number, key, head[3], question, line_verdict(obj, setting, question, where),
                _text(obj, "own_summary", where, False), _text(obj, "other_summary", where, False),
                obj.get("origin"), line_facts(obj, where))


# ------------------------------------------------------------------------------------------ the cells
@dataclass
class JsonlCell(ImportedCell):
    """An imported cell whose folder names its fine-tune (cells that differ only there get their own folder)
    and whose summary.json carries a ``finetune`` block: the seed, and a fingerprint telling seeds apart (so the
    analysis names each seed's adapter, as it does for a finetune_task.seed sweep)."""

    finetune: tuple[str, str | None, int | None, int | None] | None = None

    @property
    def tag(self) -> str:
        """The fine-tune in a word: ft-recognition-on_xsum-n10-seed1 (the parts given)."""
        task, dataset, n, seed = self.finetune or ("none", None, None, None)
        parts = ["ft", task, *([f"on_{dataset}"] if dataset else []), *([f"n{n}"] if n is not None else []),
                 *([f"seed{seed}"] if seed is not None else [])]
        return "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in "-".join(parts))

    @property
    def directory(self) -> str:
        parts = super().directory.split("/")  # setting / label / dataset / evaluator / source
        if self.finetune is not None:
            parts[3] = f"{parts[3]}+{self.tag}"
        return "/".join(parts)

    def summary_json(self) -> dict[str, Any]:
        out = super().summary_json()
        if self.finetune is not None:
            out["finetune"] = {"fingerprint": f"imported-{self.tag}", "seed": self.finetune[3], "hyperparameters": {}}
        return out


def group_lines(lines: Sequence[Line], path: Path) -> dict[CellKey, dict[str, dict[str, Line]]]:
    """cell -> article -> question -> line, in the file's order; a repeated (cell, article, question) is an
    error naming both lines."""
    cells: dict[CellKey, dict[str, dict[str, Line]]] = {}
    for line in lines:
        by_q = cells.setdefault(line.key, {}).setdefault(line.article_id, {})
        first = by_q.get(line.question)
        if first is not None:
            raise ImportInputError(
                f"{path}, lines {first.number} and {line.number}: both judge article {line.article_id!r}, "
                f"question {line.question} in the same cell ({_describe(line.key)}); keep one. {_HELP}")
        by_q[line.question] = line
    return cells


def _describe(key: CellKey) -> str:
    ft = "" if key.finetune is None else f", finetune {key.finetune[0]} on {key.finetune[1]}"
    return f"evaluator {key.evaluator}, source {key.source}, dataset {key.dataset}, {key.setting}, " \
           f"label {key.label}{ft}"


def item_texts(by_q: Mapping[str, Line], path: Path) -> tuple[str | None, str | None]:
    """The item's two summaries: the first line's that gives each; a line that gives another text for the same
    item is an error naming both lines."""
    out: list[str | None] = []
    for name in ("own_summary", "other_summary"):
        given = sorted((line.number, getattr(line, name)) for line in by_q.values()
                       if getattr(line, name) is not None)
        for number, text in given[1:]:
            if text != given[0][1]:
                raise ImportInputError(f"{path}, lines {given[0][0]} and {number}: two different {name} "
                                       f"texts for one item; give the same text (or leave it out). {_HELP}")
        out.append(given[0][1] if given else None)
    return out[0], out[1]


def item_outputs(by_q: Mapping[str, Line], path: Path) -> dict[str, dict[str, Any]]:
    """The item's ``outputs`` block from its lines' facts (side -> {fact: value}; {} when none gives one); two lines
    giving one fact different values is an error naming both lines."""
    first: dict[str, Line] = {}
    for line in sorted(by_q.values(), key=lambda x: x.number):
        for name, value in line.facts.items():
            earlier = first.setdefault(name, line)
            if earlier.facts[name] != value:
                raise ImportInputError(f"{path}, lines {earlier.number} and {line.number}: two different {name} "
                                       f"values ({earlier.facts[name]!r} and {value!r}) for one item; give the same "
                                       f"value (or leave it out). {_HELP}")
    out: dict[str, dict[str, Any]] = {}
    for name, (side, fact) in FACT_FIELDS.items():
        if name in first:
            out.setdefault(side, {})[fact] = first[name].facts[name]
    return {side: out[side] for side in (*SIDES, JUDGE) if side in out}


def provenance(file_name: str, by_q: Mapping[str, Line], questions: Sequence[str]) -> dict[str, Any]:
    """The item's origin: the file and its lines, and any origin the lines gave (under ``given``). An origin that
    is already an import's provenance (what export_jsonl writes) is kept as it is, so a re-imported export
    points at the first import's file and lines."""
    lines = [by_q[q] for q in questions if q in by_q]
    for line in lines:
        if isinstance(line.origin, dict) and line.origin.get("kind") == "imported" and "format" in line.origin:
            return line.origin
    out: dict[str, Any] = {"kind": "imported", "format": FORMAT, "file": file_name,
                           "line": {line.question: line.number for line in lines}}
    given = {line.question: line.origin for line in lines if line.origin is not None}
    if given:
        out["given"] = given
    return out


def coordinates(key: CellKey) -> CellCoordinates:
    task, ft_dataset, n, _seed = key.finetune or ("none", None, None, None)
    return CellCoordinates(key.evaluator, key.source, key.dataset, key.setting, key.label, task, ft_dataset, n,
                           transfer_of(task, ft_dataset, key.dataset).value)


def build_cell(key: CellKey, articles: Mapping[str, Mapping[str, Line]], path: Path) -> JsonlCell:
    """One cell: every article with a line, a verdict per question the cell's lines name (a missing one
    excluded as not_in_file, counted and named in the cell's warnings)."""
    questions = tuple(q for q in QUESTIONS if any(q in by_q for by_q in articles.values()))
    file_name = path.name
    cell = JsonlCell(coordinates(key), questions, block={"format": FORMAT, "file": file_name,
                                                         "evaluator_name": key.evaluator},
                     own_summaries={"kind": "generated", "name": key.evaluator}, finetune=key.finetune)
    missing: Counter = Counter()
    for article_id, by_q in articles.items():
        verdicts = {}
        for q in questions:
            if q in by_q:
                verdicts[q] = by_q[q].verdict
            else:
                verdicts[q], missing[q] = R.excluded(NOT_IN_FILE), missing[q] + 1
        own, other = item_texts(by_q, path)
        outputs = item_outputs(by_q, path)
        cell.items.append(Item(article_id, key.evaluator, key.source, key.dataset, None, False, own, other,
                               verdicts, {ORIGIN_KEY: provenance(file_name, by_q, questions),
                                          **({OUTPUTS_KEY: outputs} if outputs else {})}))
    cell.warnings += [f"{n} item(s) have no {q} line in {file_name}: excluded as {NOT_IN_FILE}"
                      for q, n in missing.items()]
    return cell


def import_jsonl(path: str | Path, out: str | Path, replace: bool = False) -> dict[str, Any]:
    """Per-item JSONL at ``path`` as a sweep at ``out`` (built beside it, swapped in when complete; an existing
    ``out`` is refused unless ``replace``). Returns {"out", "n_cells", "n_items", "n_lines", "exclusions"}:
    exclusions count excluded (item, question) verdicts by reason."""
    path, out = Path(path), Path(out)
    writer = SweepWriter(out, replace)  # refuses an existing destination before any work
    lines = [parse_line(path, number, obj) for number, obj in read_lines(path)]
    cells = [build_cell(key, articles, path) for key, articles in group_lines(lines, path).items()]
    exclusions = dict(sorted(Counter(v.exclusion_reason for c in cells for it in c.items
                                     for v in it.verdicts.values() if v.excluded).items()))
    n_items = sum(len(c.items) for c in cells)
    manifest = {"format": FORMAT, "file": path.name, "path": str(path.resolve()), "n_lines": len(lines),
                "n_cells": len(cells), "n_items": n_items, "exclusions": exclusions,
                "cells": [{"directory": c.directory, **c.coordinates.to_json(), "n_items": len(c.items)}
                          for c in cells]}
    with writer:
        for cell in cells:
            writer.add(cell)
        writer.finish(manifest, {})
    return {"out": str(out), "n_cells": len(cells), "n_items": n_items, "n_lines": len(lines),
            "exclusions": exclusions}


# ------------------------------------------------------------------------------------------ export
def verdict_fields(verdict: Verdict, setting: str) -> dict[str, Any]:
    """A verdict as a line's judgement: its readings' probabilities, else its score; the exclusion reason of an
    excluded one, and the imported score where there is one."""
    stored = verdict.extra.get(R.IMPORTED_SCORE)
    score = {} if stored is None else {"score": stored}
    readings = verdict.orders if setting == "pairwise" else verdict.summaries
    names = PROB_FIELDS[setting]
    why = {"excluded": verdict.exclusion_reason or "excluded"} if verdict.excluded else {}
    if readings and all(n in readings and readings[n].probs for n in names):
        return {**{n: dict(readings[n].probs) for n in names}, **why, **score}
    return {**why, **score} if verdict.excluded else {"score": verdict.score}


def fact_fields(item: Item) -> dict[str, Any]:
    """The item's output facts as a line's fields (those the format carries, of the types it takes)."""
    facts = output_facts(item.measured)
    out = {}
    for name, (side, fact) in FACT_FIELDS.items():
        value = fact_value(fact, facts.get(side, {}).get(fact))[0]
        if value is not None:
            out[name] = value
    return out


def _finetune_json(record: CellRecord) -> dict[str, Any] | None:
    cell = record.summary.cell
    if cell.get("finetune_task") in (None, "none"):
        return None
    return {"task": cell.get("finetune_task"), "dataset": cell.get("finetune_dataset"),
            "n_articles": cell.get("finetune_n_articles"), "seed": record.summary.block("finetune").get("seed")}


def cell_lines(record: CellRecord) -> list[dict[str, Any]]:
    """A complete cell's items as lines, one per question judged (a not_in_file verdict has no line)."""
    cell = record.summary.cell
    setting, label = cell.get("setting") or "pairwise", cell.get("label") or "none"
    head = {k: cell.get(k) for k in ("evaluator", "source", "dataset")}
    finetune = _finetune_json(record)
    out = []
    for item in record.items:
        texts = {k: getattr(item, k) for k in ("own_summary", "other_summary") if getattr(item, k) is not None}
        origin, facts = item.measured.get(ORIGIN_KEY), fact_fields(item)
        for q in QUESTIONS:
            verdict = item.verdicts.get(q)
            if verdict is None or (verdict.exclusion_reason == NOT_IN_FILE and not verdict.readings()):
                continue
            out.append({**head, "article_id": item.article_id, "question": q, "setting": setting, "label": label,
                        "finetune": finetune, **verdict_fields(verdict, setting), **texts, **facts,
                        **({} if origin is None else {"origin": origin})})
    return out


def export_jsonl(sweep_dir: str | Path, path: str | Path) -> int:
    """Every complete cell under ``sweep_dir`` as per-item JSONL at ``path`` (written whole or not at all);
    returns the number of lines. Cells that are not complete are skipped."""
    sweep_dir, path = Path(sweep_dir), Path(path)
    if not sweep_dir.is_dir():
        raise ImportInputError(f"{sweep_dir} is not a folder: nothing to export, nothing was written.")
    lines: list[dict[str, Any]] = []
    for cell_dir in find_cell_dirs(sweep_dir):
        record = read_cell(cell_dir)
        if record.summary is not None and record.summary.complete:
            lines += cell_lines(record)
    if not lines:
        raise ImportInputError(f"{sweep_dir} holds no complete cell with judged items; nothing was written.")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    return len(lines)
