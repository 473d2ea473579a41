"""Judge ratings in long form: one row per (judge, output), "judge J gave the output of author A on item i the
score s", from a CSV file (header row) or JSONL (one object per line). ``import_ratings`` turns the file into
individual-setting preference cells, one per (dataset, judge J, other author X), whose items set J's rating of its
own output on the item beside its rating of X's (docs/import_formats.md, "Judge ratings in long form").

Each item also carries what is known of its two outputs apart from the judge (``outputs``, records/authors.py: the
author, a human anchor score, whether the answer is correct, the family, the length), which the estimators of
self-preference net of quality read. Every row lands in a cell or is counted with its reason in the manifest.

A bad row is an ImportInputError naming the file, the row and the column, raised before anything is written."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..records.authors import ANCHOR, AUTHOR, CORRECT, FAMILY, JUDGE, OUTPUTS_KEY, WORD_COUNT
from ..records.schema import CellCoordinates, Item, SummaryReading, Verdict
from . import readings as R
from .imported import ORIGIN_KEY, ImportedCell, ImportInputError, SweepWriter

FORMAT = "ratings"
QUESTION = "preference"
DEFAULT_DATASET = "ratings"  # the dataset of every row when the file names none
RATING_METHOD = "rating"  # SummaryReading.method: a raw rating, not answer probabilities
REQUIRED_KEYS = ("judge", "author", "item", "score")
OPTIONAL_KEYS = ("human", "dataset", "correct", "length", "text")
TEXT = "text"  # an output's text: the item's own_summary / other_summary
CSV_SUFFIXES, JSONL_SUFFIXES = (".csv",), (".jsonl", ".json", ".ndjson")
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes"), ("false", "0", "no")

# Why a verdict is excluded (counted in the cell's summary.json and the manifest).
NO_OWN_RATING = "no_own_rating"  # the judge did not rate its own output on the item
RATING_NOT_POSITIVE = "rating_not_positive"  # a rating <= 0: own / (own + other) is not a share
# Why a row's fact is left out (counted in the manifest; the row still lands in its cell).
ANCHOR_MISSING = "anchor_missing"
CORRECT_MISSING = "correct_missing"
CORRECT_NOT_BOOLEAN = "correct_not_boolean"
# Where each row went (the manifest's ``rows``): every row is counted under one of these.
ROW_OTHER = "other_output_in_cell"  # a judge's rating of another author's output: one item of one cell
ROW_OWN = "own_output_in_cells"  # a judge's rating of its own output: the own reading of its items on that item
OWN_OUTPUT_ONLY = "own_output_only"  # its own output, on an item where it rated no other author's: no cell

_HELP = "Nothing was written; the format is in docs/import_formats.md (Judge ratings in long form)."


def _bad(where: str, what: str) -> ImportInputError:
    return ImportInputError(f"{where}: {what}. {_HELP}")


# ------------------------------------------------------------------------------------------ the columns
def parse_columns(spec: str | Mapping[str, str], path: Path) -> dict[str, str]:
    """--columns "judge=COL,author=COL,..." (or a mapping) as {key: column}; an unknown, repeated or missing key is
    an error naming the file."""
    where = f"{path}, --columns {spec if isinstance(spec, str) else dict(spec)!r}"
    pairs: list[tuple[str, str]] = []
    if isinstance(spec, str):
        for part in spec.split(","):
            key, eq, col = part.partition("=")
            if not eq or not key.strip() or not col:
                raise _bad(where, f"{part!r} is not KEY=COLUMN")
            pairs.append((key.strip(), col))
    else:
        pairs = [(str(k), str(v)) for k, v in spec.items()]
    known = (*REQUIRED_KEYS, *OPTIONAL_KEYS)
    columns: dict[str, str] = {}
    for key, col in pairs:
        if key not in known:
            raise _bad(where, f"unknown key {key!r}; the keys are {', '.join(known)}")
        if key in columns:
            raise _bad(where, f"key {key!r} is given twice")
        columns[key] = col
    missing = [k for k in REQUIRED_KEYS if k not in columns]
    if missing:
        raise _bad(where, f"missing {', '.join(f'{k}=COL' for k in missing)}: which column holds the "
                          f"{' and the '.join(missing)}")
    return columns


# ------------------------------------------------------------------------------------------ the rows
@dataclass
class RawRow:
    """One data row as read: its 1-based data row and file line, and {key: raw value or None}."""

    row: int
    line: int
    values: dict[str, Any]

    def where(self, path: Path, column: str | None = None) -> str:
        col = "" if column is None else f", column {column!r}"
        return f"{path}, row {self.row} (line {self.line}){col}"


def _suffix_kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    raise ImportInputError(f"{path}: the file's extension {suffix or '(none)'!r} names no ratings format; use .csv "
                           f"(a header row) or .jsonl / .json (one JSON object per line). {_HELP}")


def _open_text(path: Path):
    try:
        return path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise ImportInputError(f"{path} could not be read ({exc.strerror or exc}). {_HELP}") from exc


def _csv_rows(path: Path, columns: Mapping[str, str]) -> Iterator[RawRow]:
    """A CSV's data rows (blank lines skipped); a column of ``columns`` not in the header, or a row whose fields do
    not match the header, is an error."""
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        header = next((h for h in reader if any(x.strip() for x in h)), None)  # blank lines before it skipped
        if header is None:
            return
        for key, col in columns.items():
            if header.count(col) != 1:
                what = "the header has that column twice" if header.count(col) else "no such column in the header"
                raise _bad(f"{path}, line {reader.line_num} (the header), column {col!r}",
                           f"--columns {key}={col}: {what} (its columns: {', '.join(header)})")
        index = {key: header.index(col) for key, col in columns.items()}
        n, line = 0, reader.line_num  # line: the last line read (a quoted field may span lines)
        for fields in reader:
            first, line = line + 1, reader.line_num
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            n += 1
            if len(fields) != len(header):
                raise _bad(f"{path}, row {n} (line {first})",
                           f"{len(fields)} fields where the header has {len(header)}")
            yield RawRow(n, first, {key: fields[i] for key, i in index.items()})


def _jsonl_rows(path: Path, columns: Mapping[str, str]) -> Iterator[RawRow]:
    """A JSONL file's objects (blank lines skipped); a column of ``columns`` in no object is an error."""
    seen: set[str] = set()
    n = 0
    with _open_text(path) as fh:
        for line, text in enumerate(fh, 1):
            if not text.strip():
                continue
            n += 1
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _bad(f"{path}, row {n} (line {line})", f"not valid JSON ({exc.msg}, column {exc.colno})") \
                    from exc
            if not isinstance(obj, dict):
                raise _bad(f"{path}, row {n} (line {line})", f"expected a JSON object, found {type(obj).__name__}")
            seen.update(c for c in columns.values() if c in obj)
            yield RawRow(n, line, {key: obj.get(col) for key, col in columns.items()})
    absent = [f"{k}={c}" for k, c in columns.items() if c not in seen]
    if n and absent:
        raise _bad(f"{path}, column {next(c for k, c in columns.items() if c not in seen)!r}",
                   f"--columns {', '.join(absent)} names a field no object of the file has")


def read_rows(path: Path, columns: Mapping[str, str]) -> list[RawRow]:
    """Every data row of a CSV or JSONL ratings file; an empty file, or one that is not UTF-8, is an error."""
    kind = _suffix_kind(path)
    try:
        rows = list((_csv_rows if kind == "csv" else _jsonl_rows)(path, columns))
    except UnicodeDecodeError as exc:
        raise ImportInputError(f"{path}: not UTF-8 text ({exc.reason}). {_HELP}") from exc
    except csv.Error as exc:
        raise ImportInputError(f"{path}: not readable as CSV ({exc}). {_HELP}") from exc
    if not rows:
        raise ImportInputError(f"{path} is empty: no row to import. {_HELP}")
    return rows


# ------------------------------------------------------------------------------------------ the values
def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _number(value: Any) -> float | None:
    """A finite number (or a string of one), else None."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    return R.finite(value)


def _boolean(value: Any) -> bool | None:
    """true/false, 1/0, "true"/"false"/"yes"/"no"/"1"/"0" (any case); else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return {1: True, 0: False}.get(value)
    text = str(value).strip().lower()
    return True if text in TRUE_WORDS else False if text in FALSE_WORDS else None


@dataclass
class Rating:
    """One validated row: who judged which output, the score, and the facts it gives about the output."""

    row: int
    line: int
    judge: str
    author: str
    item: str
    dataset: str
    score: float
    facts: dict[str, Any] = field(default_factory=dict)  # anchor, correct, words, text: those the row gives

    @property
    def output(self) -> tuple[str, str, str]:
        return self.dataset, self.author, self.item

    @property
    def place(self) -> str:
        return f"row {self.row} (line {self.line})"


def _name(raw: RawRow, key: str, columns: Mapping[str, str], path: Path) -> str:
    value = raw.values.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # a JSON item number
    if not isinstance(value, str) or not value.strip():
        raise _bad(raw.where(path, columns[key]),
                   f"the {key} must be a non-empty name, found {'nothing' if _empty(value) else repr(value)}")
    return value


def _facts(raw: RawRow, columns: Mapping[str, str], path: Path, counts: Counter) -> dict[str, Any]:
    """The output's facts the row gives (anchor, correct, words, text); an empty anchor or a correct that is not a
    boolean is left out and counted, a non-numeric anchor or length is an error."""
    out: dict[str, Any] = {}
    v = raw.values
    if "human" in columns:
        if _empty(v["human"]):
            counts[ANCHOR_MISSING] += 1
        elif (anchor := _number(v["human"])) is None:
            raise _bad(raw.where(path, columns["human"]), f"the human anchor must be a number, found {v['human']!r}")
        else:
            out[ANCHOR] = anchor
    if "correct" in columns:
        correct = None if _empty(v["correct"]) else _boolean(v["correct"])
        if correct is None:
            counts[CORRECT_MISSING if _empty(v["correct"]) else CORRECT_NOT_BOOLEAN] += 1
        else:
            out[CORRECT] = correct
    if "length" in columns and not _empty(v["length"]):
        words = _number(v["length"])
        if words is None or words < 0:
            raise _bad(raw.where(path, columns["length"]), f"the length must be a number >= 0, found {v['length']!r}")
        out[WORD_COUNT] = int(words) if words.is_integer() else words
    if "text" in columns and not _empty(v["text"]):
        if not isinstance(v["text"], str):
            raise _bad(raw.where(path, columns["text"]), f"the text must be a string, found {v['text']!r}")
        out[TEXT] = v["text"]
    return out


def parse_row(raw: RawRow, columns: Mapping[str, str], path: Path, counts: Counter) -> Rating:
    """One row, validated (an error names the file, the row and the column)."""
    judge, author, item = (_name(raw, k, columns, path) for k in ("judge", "author", "item"))
    dataset = _name(raw, "dataset", columns, path) if "dataset" in columns else DEFAULT_DATASET
    score = _number(raw.values["score"])
    if score is None:
        found = "nothing" if _empty(raw.values["score"]) else repr(raw.values["score"])
        raise _bad(raw.where(path, columns["score"]), f"the score must be a finite number, found {found}")
    return Rating(raw.row, raw.line, judge, author, item, dataset, score, _facts(raw, columns, path, counts))


# ------------------------------------------------------------------------------------------ checks across rows
FACT_COLUMN = {ANCHOR: "human", CORRECT: "correct", WORD_COUNT: "length", TEXT: "text"}


def check_duplicates(ratings: list[Rating], path: Path) -> None:
    """The same output rated twice by one judge is an error naming both rows."""
    seen: dict[tuple[str, str, str, str], Rating] = {}
    for r in ratings:
        key = (r.dataset, r.judge, r.author, r.item)
        first = seen.setdefault(key, r)
        if first is not r:
            raise _bad(f"{path}, {first.place} and {r.place}",
                       f"judge {r.judge!r} rates the output of {r.author!r} on item {r.item!r} (dataset "
                       f"{r.dataset!r}) twice; keep one row")


def facts_by_output(ratings: list[Rating], path: Path, columns: Mapping[str, str]) -> dict[tuple[str, str, str], dict]:
    """(dataset, author, item) -> the facts the rows give about that output; two rows giving one fact different
    values is an error naming both rows."""
    facts: dict[tuple[str, str, str], dict[str, Any]] = {}
    given: dict[tuple[tuple[str, str, str], str], Rating] = {}
    for r in ratings:
        known = facts.setdefault(r.output, {})
        for fact, value in r.facts.items():
            first = given.setdefault((r.output, fact), r)
            if first is r:
                known[fact] = value
            elif known[fact] != value:
                raise _bad(f"{path}, {first.place} and {r.place}, column {columns[FACT_COLUMN[fact]]!r}",
                           f"two different values ({known[fact]!r} and {value!r}) for the output of {r.author!r} "
                           f"on item {r.item!r} (dataset {r.dataset!r}); one output has one {fact}")
    return facts


# ------------------------------------------------------------------------------------------ the families
def read_families(path: str | Path | None) -> dict[str, str]:
    """--families: a JSON object {name: family} or a CSV of rows name,family (a header row name,family is skipped);
    anything else is an error naming the file (and the row)."""
    if path is None:
        return {}
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv"):
        raise ImportInputError(f"{path}: a families file is .json ({{name: family}}) or .csv (name,family), "
                               f"not {suffix or '(no extension)'!r}. {_HELP}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportInputError(f"{path} could not be read as UTF-8 text ({exc}). {_HELP}") from exc
    pairs = _families_json(path, text) if suffix == ".json" else _families_csv(path, text)
    out: dict[str, str] = {}
    for where, name, family in pairs:
        if not name.strip() or not family.strip():
            raise _bad(f"{path}, {where}", "a name and its family must both be non-empty")
        if out.setdefault(name, family) != family:
            raise _bad(f"{path}, {where}", f"{name!r} is given two families ({out[name]!r} and {family!r})")
    return out


def _families_json(path: Path, text: str) -> list[tuple[str, str, str]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(str(path), f"not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise _bad(str(path), f"expected a JSON object {{name: family}}, found {type(data).__name__}")
    bad = [k for k, v in data.items() if not isinstance(v, str)]
    if bad:
        raise _bad(f"{path}, key {bad[0]!r}", f"a family must be a string, found {data[bad[0]]!r}")
    return [(f"key {k!r}", k, v) for k, v in data.items()]


def _families_csv(path: Path, text: str) -> list[tuple[str, str, str]]:
    try:
        rows = [(n, r) for n, r in enumerate(csv.reader(text.splitlines()), 1) if r and any(x.strip() for x in r)]
    except csv.Error as exc:
        raise _bad(str(path), f"not readable as CSV ({exc})") from exc
    if rows and [x.strip().lower() for x in rows[0][1]] == ["name", "family"]:
        rows = rows[1:]
    for n, r in rows:
        if len(r) != 2:
            raise _bad(f"{path}, line {n}", f"expected 2 fields (name,family), found {len(r)}")
    return [(f"line {n}", r[0], r[1]) for n, r in rows]


# ------------------------------------------------------------------------------------------ the cells
@dataclass
class Plan:
    """What the rows make: cells (dataset, judge, other author) -> their ratings of the other's outputs in the
    file's order, each judge's own ratings by (dataset, judge, item), and where each row went."""

    cells: dict[tuple[str, str, str], list[Rating]]
    own: dict[tuple[str, str, str], Rating]
    rows: Counter


def plan_cells(ratings: list[Rating]) -> Plan:
    cells: dict[tuple[str, str, str], list[Rating]] = {}
    own: dict[tuple[str, str, str], Rating] = {}
    for r in ratings:
        if r.author == r.judge:
            own[(r.dataset, r.judge, r.item)] = r
        else:
            cells.setdefault((r.dataset, r.judge, r.author), []).append(r)
    used = {(d, j, r.item) for (d, j, _x), rs in cells.items() for r in rs}
    n_own_used = sum(key in used for key in own)
    rows = Counter({ROW_OTHER: len(ratings) - len(own), ROW_OWN: n_own_used, OWN_OUTPUT_ONLY: len(own) - n_own_used})
    return Plan(cells, own, +rows)


def _reading(rating: Rating) -> SummaryReading:
    return SummaryReading({}, 1.0, rating.score, RATING_METHOD)


def rating_verdict(own: Rating | None, other: Rating) -> Verdict:
    """The individual reading own / (own + other), log-odds log(own / other), where both ratings exist and are
    > 0; else excluded with the reason, the readings kept (the net-of-quality estimators read them)."""
    summaries = {**({"own": _reading(own)} if own is not None else {}), "other": _reading(other)}
    extra = {R.READING: R.READ_STORED_VALUES}
    if own is None or own.score <= 0 or other.score <= 0:
        reason = NO_OWN_RATING if own is None else RATING_NOT_POSITIVE
        return Verdict(None, None, True, reason, None, summaries=summaries, extra=extra)
    score = own.score / (own.score + other.score)
    return Verdict(score, math.log(own.score) - math.log(other.score), False, None, None, summaries=summaries,
                   extra=extra)


def _side(author: str, facts: Mapping[str, Any], families: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {AUTHOR: author}
    for fact, value in ((ANCHOR, facts.get(ANCHOR)), (CORRECT, facts.get(CORRECT)), (FAMILY, families.get(author)),
                        (WORD_COUNT, facts.get(WORD_COUNT))):
        if value is not None:
            out[fact] = value
    return out


@dataclass
class Context:
    """What every cell's items read: the file's name, the outputs' facts, the families."""

    file_name: str
    facts: dict[tuple[str, str, str], dict[str, Any]]
    families: dict[str, str]


def build_cell(key: tuple[str, str, str], ratings: list[Rating], own: Mapping[tuple[str, str, str], Rating],
               ctx: Context) -> ImportedCell:
    """One cell: an item per item the judge rated the other author's output on, in the file's order."""
    dataset, judge, other = key
    coords = CellCoordinates(judge, other, dataset, "individual", "none", "none", None, None, "none")
    cell = ImportedCell(coords, (QUESTION,), block={"format": FORMAT, "file": ctx.file_name, "evaluator_name": judge},
                        own_summaries={"kind": "generated", "name": judge})
    judge_block = {JUDGE: {FAMILY: ctx.families[judge]}} if judge in ctx.families else {}
    for r in ratings:
        mine = own.get((dataset, judge, r.item))
        own_facts, other_facts = ctx.facts.get((dataset, judge, r.item), {}), ctx.facts[r.output]
        origin = {"kind": "imported", "format": FORMAT, "file": ctx.file_name,
                  "row": {**({"own": mine.row} if mine is not None else {}), "other": r.row}}
        outputs = {"own": _side(judge, own_facts, ctx.families), "other": _side(other, other_facts, ctx.families),
                   **judge_block}
        cell.items.append(Item(r.item, judge, other, dataset, None, False, own_facts.get(TEXT), other_facts.get(TEXT),
                               {QUESTION: rating_verdict(mine, r)}, {ORIGIN_KEY: origin, OUTPUTS_KEY: outputs}))
    if not any((dataset, judge, r.item) in own for r in ratings):
        cell.warnings.append(f"judge {judge} rated none of its own outputs on these items: every verdict is "
                             f"excluded as {NO_OWN_RATING} (the ratings are kept)")
    return cell


def _ordered(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def import_ratings(path: str | Path, out: str | Path, columns: str | Mapping[str, str], replace: bool = False,
                   families: str | Path | None = None) -> dict[str, Any]:
    """A long-form ratings file (CSV or JSONL) at ``path`` as a sweep at ``out`` (built beside it, swapped in when
    complete; an existing ``out`` is refused unless ``replace``). ``columns``: {key: column} or "key=COL,...".
    Returns {"out", "n_rows", "n_cells", "n_items", "rows", "exclusions"}."""
    path, out = Path(path), Path(out)
    writer = SweepWriter(out, replace)  # refuses an existing destination before any work
    cols = parse_columns(columns, path)
    names = read_families(families)
    counts: Counter = Counter()
    ratings = [parse_row(raw, cols, path, counts) for raw in read_rows(path, cols)]
    check_duplicates(ratings, path)
    ctx = Context(path.name, facts_by_output(ratings, path, cols), names)
    plan = plan_cells(ratings)
    judges, authors = _ordered([r.judge for r in ratings]), _ordered([r.author for r in ratings])
    listed, n_items = [], 0
    with writer:
        for key, rs in plan.cells.items():
            cell = build_cell(key, rs, plan.own, ctx)
            writer.add(cell)
            counts.update(v.exclusion_reason for it in cell.items for v in it.verdicts.values() if v.excluded)
            listed.append({"directory": cell.directory, **cell.coordinates.to_json(), "n_items": len(cell.items)})
            n_items += len(cell.items)
        exclusions = dict(sorted(counts.items()))
        manifest = {"format": FORMAT, "file": path.name, "path": str(path.resolve()), "columns": cols,
                    "n_rows": len(ratings), "n_cells": len(listed), "n_items": n_items, "rows": dict(plan.rows),
                    "exclusions": exclusions, "judges": judges, "authors": authors,
                    "families": {n: names[n] for n in _ordered(judges + authors) if n in names}, "cells": listed}
        writer.finish(manifest, {})
    return {"out": str(out), "n_rows": len(ratings), "n_cells": len(listed), "n_items": n_items,
            "rows": dict(plan.rows), "exclusions": exclusions}
