"""The record a cell leaves behind, in one place: its coordinates in the matrix, the transfer rule,
the files and field names of summary.json and results.jsonl, the W&B group of a sweep, and the record types
(the reading of one order, a question's verdict, an item, a question's statistics, the cell summary, the
plan) with their to_json / from_json, and read_cell, which reads a cell directory back.

The cell and plan mode write these records, the planted-bias simulator builds them as the cell does, run.py
names the W&B group, and every reader of a sweep (analysis/load.py, items_view.py, wandb_panels.py) reads
them back through read_cell; all of them import this module, so they can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

# Files in a cell's directory.
SUMMARY_FILE = "summary.json"
RESULTS_FILE = "results.jsonl"
ERROR_FILE = "cell.error.txt"  # a cell's failure (cli.py writes it)
ANALYSIS_ERROR_FILE = "error.txt"  # the analysis' own failure, in <sweep>/analysis/ (callback.py writes it)
PLAN_FILE = "plan.json"
INVERSE_FILE = "inverse.jsonl"

# summary.json["status"]
STATUS_COMPLETE = "complete"
STATUS_SKIPPED = "skipped"
STATUS_PLAN = "plan"

QUESTIONS = ("recognition", "preference")
QUESTION_PREFIX = {"recognition": "rec", "preference": "pref"}  # the analysis frames' column prefixes

# results.jsonl: one line per article (Item below); per question a Verdict, whose fields are the schema's.
ITEM_ID = "article_id"
LOGODDS = "logodds"  # the position-debiased log-odds score (scores.pair_logodds / scoring.individual_logodds)
# A pairwise verdict's top answer token in each order (forward, backward) as another tool stored it, where the
# verdict has no readings of its own (the paper's GPT rows).
STORED_TOP_TOKENS = "authors_top_tokens"

# Values a missing coordinate takes in an older summary.json.
CELL_DEFAULTS: dict[str, Any] = {"setting": "pairwise", "label": "none", "finetune_task": "none"}


class Transfer(str, Enum):
    """Where a fine-tuned evaluator is evaluated, relative to what it was fine-tuned on."""

    none = "none"  # not fine-tuned
    in_domain = "in_domain"  # evaluated on the dataset it was fine-tuned on
    cross_dataset = "cross_dataset"  # evaluated on another dataset


def transfer_of(finetune_task: Any, finetune_dataset: str | None, dataset: str) -> Transfer:
    """The transfer condition, by dataset name."""
    if finetune_task in (None, "none") or getattr(finetune_task, "value", None) == "none":
        return Transfer.none
    return Transfer.in_domain if finetune_dataset == dataset else Transfer.cross_dataset


@dataclass(frozen=True)
class CellCoordinates:
    """A cell's place in the matrix: summary.json["cell"]; the analysis groups cells by these."""

    evaluator: str
    source: str
    dataset: str
    setting: str
    label: str
    finetune_task: str
    finetune_dataset: str | None
    finetune_n_articles: int | None
    transfer: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def run_name(self) -> str:
        """The cell's W&B run name."""
        name = f"{self.evaluator}-vs-{self.source}-{self.dataset}-{self.setting}"
        if self.finetune_task != "none":
            name += f"-ft_{self.finetune_task}"
        if self.label != "none":
            name += f"-label_{self.label}"
        return name


CELL_KEYS = tuple(CellCoordinates.__dataclass_fields__)


def wandb_group_name(sweep_dir: str | Path) -> str:
    """The W&B group of a sweep's cell runs and of its analysis run: the sweep dir as Hydra spelled
    it, '/' -> '_'."""
    return Path(sweep_dir).as_posix().replace("/", "_")


# ------------------------------------------------------------------------------- the record schema
# What a cell writes, as types: the reading of one order (or one summary, individual setting), a question's
# verdict, an item (one results.jsonl line), a question's statistics and the cell summary (summary.json).
# Each has to_json (the file's form) and from_json (tolerant of older records: a missing field reads as
# None or empty). Measurements (measurements/) keep their own item records and summary blocks; the schema
# carries them through untouched, by key.


def plain(value: Any) -> Any:
    """A value in its JSON form: record objects by their to_json, containers element by element."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass
class OrderReading:
    """One order of a pairwise question: the raw probabilities of "1" and "2", their mass, the renormalized
    probability of the answer naming the own summary, and the answer the judge leaned to."""

    probs: dict[str, float]  # raw probability of each answer (all spellings)
    mass: float
    p_own: float | None  # renormalized probability of the answer naming the own summary
    own_position: int  # 1 or 2
    chosen_position: int | None  # the more probable answer; None for a tie or no mass
    method: str
    missing_reason: str | None = None  # from the backend, e.g. "no_logprobs"
    bounded: list[str] = field(default_factory=list)  # answers valued at an upper bound (AnswerDistribution)

    @property
    def chosen(self) -> str:
        if self.chosen_position is None:
            return "tie" if self.mass > 0 else "none"
        return "own" if self.chosen_position == self.own_position else "other"

    def to_json(self) -> dict[str, Any]:
        return {"probs": self.probs, "mass": self.mass, "p_own": self.p_own, "own_position": self.own_position,
                "chosen_position": self.chosen_position, "chosen": self.chosen, "method": self.method,
                "missing_reason": self.missing_reason, "bounded": list(self.bounded)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OrderReading:
        return cls(dict(_dict(d.get("probs"))), d.get("mass") or 0.0, d.get("p_own"), d.get("own_position") or 1,
                   d.get("chosen_position"), d.get("method") or "", d.get("missing_reason"),
                   list(d.get("bounded") or []))


@dataclass
class SummaryReading:
    """One summary judged alone (individual setting): the answers' probabilities, their mass, and the value
    read from them (P(Yes) renormalized, or the expected 1-5 score)."""

    probs: dict[str, float]
    mass: float
    value: float | None
    method: str
    missing_reason: str | None = None
    bounded: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"probs": self.probs, "mass": self.mass, "value": self.value, "method": self.method,
                "missing_reason": self.missing_reason, "bounded": list(self.bounded)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SummaryReading:
        return cls(dict(_dict(d.get("probs"))), d.get("mass") or 0.0, d.get("value"), d.get("method") or "",
                   d.get("missing_reason"), list(d.get("bounded") or []))


_VERDICT_KEYS = ("score", "logodds", "excluded", "exclusion_reason", "consistent", "orders", "summaries", "labels")


@dataclass
class Verdict:
    """A question's verdict on one item: the paper's score and the log-odds score (None when excluded, with
    the reason), whether the two orders agreed, and the readings behind it: `orders` (pairwise: forward,
    backward) or `summaries` (individual: own, other); none for an item that could not be judged."""

    score: float | None
    logodds: float | None
    excluded: bool
    exclusion_reason: str | None
    consistent: bool | None = None
    orders: dict[str, OrderReading] | None = None
    summaries: dict[str, SummaryReading] | None = None
    labels: dict[str, str] | None = None  # the labels the preference prompt gave own and other
    extra: dict[str, Any] = field(default_factory=dict)  # a measurement's own fields (e.g. the distractor)

    def readings(self) -> list[Any]:
        """The verdict's readings: two orders, two summaries, or none (unjudged)."""
        return list((self.orders or self.summaries or {}).values())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"score": self.score, "logodds": self.logodds, "excluded": self.excluded,
                               "exclusion_reason": self.exclusion_reason, "consistent": self.consistent}
        for name in ("orders", "summaries"):
            if getattr(self, name) is not None:
                out[name] = {k: r.to_json() for k, r in getattr(self, name).items()}
        if self.labels is not None:
            out["labels"] = dict(self.labels)
        return {**out, **plain(self.extra)}

    @classmethod
    def from_json(cls, d: Any) -> Verdict | None:
        """None for a missing or malformed verdict."""
        if not isinstance(d, dict):
            return None
        orders, summaries = d.get("orders"), d.get("summaries")
        extra = {k: v for k, v in d.items() if k not in _VERDICT_KEYS}
        if summaries is not None and not isinstance(summaries, dict):  # e.g. the competence control's name
            extra["summaries"], summaries = summaries, None
        if isinstance(orders, dict):
            orders = {k: OrderReading.from_json(_dict(v)) for k, v in orders.items()}
        if summaries is not None:
            summaries = {k: SummaryReading.from_json(_dict(v)) for k, v in summaries.items()}
        return cls(d.get("score"), d.get("logodds"), bool(d.get("excluded", False)), d.get("exclusion_reason"),
                   d.get("consistent"), orders if isinstance(orders, dict) else None, summaries, d.get("labels"), extra)


def verdict_of(item: Any, question: str) -> Verdict | None:
    """An item's verdict on a question, whatever form the item is in (Item, or a dict of verdicts or of
    their JSON forms, as measurements build them)."""
    v = item.verdicts.get(question) if isinstance(item, Item) else item.get(question)
    return v if isinstance(v, Verdict) else Verdict.from_json(v)


def article_of(item: Any) -> str:
    return item.article_id if isinstance(item, Item) else item[ITEM_ID]


_ITEM_TEXT_KEYS = ("evaluator", "source", "dataset", "article", "article_truncated", "own_summary", "other_summary")


@dataclass
class Item:
    """One results.jsonl line: an article of the cell, judged (a verdict per question) or with the reason it
    could not be; the texts the judge saw; each measurement's record by its item key."""

    article_id: str
    evaluator: str | None = None
    source: str | None = None
    dataset: str | None = None
    article: str | None = None
    article_truncated: bool = False
    own_summary: str | None = None
    other_summary: str | None = None
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # question -> verdict
    measured: dict[str, Any] = field(default_factory=dict)  # a measurement's item key -> its record

    def to_json(self) -> dict[str, Any]:
        out = {ITEM_ID: self.article_id, **{k: getattr(self, k) for k in _ITEM_TEXT_KEYS}}
        out.update({q: v.to_json() for q, v in self.verdicts.items()})
        return {**out, **plain(self.measured)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], questions: Iterable[str] = QUESTIONS) -> Item:
        """Questions absent from the line have no verdict; a malformed verdict is kept out too."""
        verdicts = {q: v for q in questions if q in d for v in [Verdict.from_json(d[q])] if v is not None}
        known = {ITEM_ID, *_ITEM_TEXT_KEYS, *questions}
        return cls(str(d[ITEM_ID]), *(d.get(k) for k in _ITEM_TEXT_KEYS[:4]), bool(d.get("article_truncated")),
                   d.get("own_summary"), d.get("other_summary"), verdicts,
                   {k: v for k, v in d.items() if k not in known})


@dataclass
class QuestionStats:
    """A question's statistics over a cell's items: the paper's score with its CI and counts, the share of
    position-consistent verdicts, the log-odds score (`logodds`: mean, CI and `mde`), the smallest detectable
    effect (`mde`) and the bounded readings."""

    mean: float | None
    ci_low: float | None
    ci_high: float | None
    n: int | None = 0  # None: not recorded (an older cell)
    n_excluded: int | None = 0
    exclusions: dict[str, int] = field(default_factory=dict)
    position_consistency: float | None = None
    logodds: dict[str, Any] = field(default_factory=dict)
    mde: dict[str, Any] = field(default_factory=dict)
    bounded_readings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Any) -> QuestionStats | None:
        if not isinstance(d, dict):
            return None
        return cls(d.get("mean"), d.get("ci_low"), d.get("ci_high"), d.get("n"), d.get("n_excluded"),
                   dict(_dict(d.get("exclusions"))), d.get("position_consistency"), dict(_dict(d.get("logodds"))),
                   dict(_dict(d.get("mde"))), dict(_dict(d.get("bounded_readings"))))


_SUMMARY_KEYS = ("status", "cell", "n_articles", "n_items", "n_excluded", "exclusions", "n_truncated_articles",
                 "position_consistency", "min_answer_mass", "own_summaries", "standardization", "warnings",
                 "elapsed_s")


@dataclass
class CellSummary:
    """summary.json: the cell's status and coordinates; for a complete cell its counts, each question's
    statistics, where the own summaries came from and what standardization stripped; `extra` holds every
    other block by key (each measurement's, the fine-tune's, the model-call ledger, a skipped cell's reason).
    A field that is None was not recorded (an older or a skipped cell) and is left out of the file."""

    status: str | None
    cell: dict[str, Any] = field(default_factory=dict)  # CellCoordinates.to_json(); older cells lack keys
    n_articles: int | None = None
    n_items: int | None = None
    n_excluded: int | None = None
    exclusions: dict[str, int] | None = None
    n_truncated_articles: int | None = None
    questions: dict[str, QuestionStats] = field(default_factory=dict)  # written at the top level, by question
    position_consistency: dict[str, float | None] | None = None
    min_answer_mass: float | None = None
    own_summaries: dict[str, Any] | None = None
    standardization: dict[str, dict[str, int]] | None = None
    warnings: list[str] | None = None
    elapsed_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.status == STATUS_COMPLETE

    def block(self, key: str) -> dict[str, Any]:
        """An `extra` block ({} when absent or malformed)."""
        return _dict(self.extra.get(key))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "cell": dict(self.cell)}
        for key in _SUMMARY_KEYS[2:]:
            value = getattr(self, key)
            if value is not None or (key == "elapsed_s" and self.complete):
                out[key] = value
        out.update({q: s.to_json() for q, s in self.questions.items()})
        return {**out, **plain(self.extra)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], questions: Iterable[str] = QUESTIONS) -> CellSummary:
        stats = {q: s for q in questions for s in [QuestionStats.from_json(d.get(q))] if s is not None}
        known = {*_SUMMARY_KEYS, *questions}
        return cls(d.get("status"), dict(_dict(d.get("cell"))), *(d.get(k) for k in _SUMMARY_KEYS[2:7]), stats,
                   *(d.get(k) for k in _SUMMARY_KEYS[7:]), {k: v for k, v in d.items() if k not in known})


_PLAN_OPTIONAL = ("skipped", "n_articles", "n_empty_articles", "batch_price", "by_model")


@dataclass
class CellPlan:
    """plan.json: what a cell's run would need (plan=true): its calls not cached, tokens and cost, the roles
    priced at a batch API's rate, the fine-tune's plan, each measurement's calls (`extra`, by its summary key),
    the pre-flight problems and the calls per model. A skipped cell's plan names why and needs nothing."""

    cell: dict[str, Any]
    uncached_calls: int = 0
    prompt_tokens_est: int = 0
    completion_tokens_est: int = 0
    cost_usd_est: float | None = 0.0
    finetune: dict[str, Any] | None = None
    preflight: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: str | None = None  # the fields from here on are left out of the file when None
    n_articles: int | None = None
    n_empty_articles: int | None = None
    batch_price: list[str] | None = None
    by_model: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": STATUS_PLAN}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and not (f.name in _PLAN_OPTIONAL and value is None):
                out[f.name] = plain(value)
        return {**out, **plain(self.extra)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CellPlan:
        names = [f.name for f in fields(cls) if f.name != "extra"]
        return cls(**{k: d[k] for k in names if k in d},
                   extra={k: v for k, v in d.items() if k not in names and k != "status"})


# ------------------------------------------------------------------------------------ reading a cell
@dataclass
class CellRecord:
    """What one cell directory holds, read back: its summary (None when absent or unreadable, the reason in
    `summary_problem`), its items (empty when results.jsonl is absent: `has_results`), the results.jsonl lines
    that could not be parsed, and its error file's text."""

    path: Path
    summary: CellSummary | None = None
    summary_problem: str = ""
    summary_found: bool = False  # summary.json exists (readable or not)
    items: list[Item] = field(default_factory=list)
    has_results: bool = False
    results_problem: str = ""
    bad_lines: int = 0
    error: str = ""


def read_error(cell_dir: Path) -> str:
    """The cell's error file, "" when none."""
    path = Path(cell_dir) / ERROR_FILE
    if not path.is_file():
        return ""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError as exc:
        return f"(unreadable {ERROR_FILE}: {exc})"


def read_summary(cell_dir: Path) -> tuple[CellSummary | None, str]:
    """(summary, "") or (None, why not): no summary.json, unreadable, or not a JSON object."""
    path = Path(cell_dir) / SUMMARY_FILE
    if not path.is_file():
        return None, f"no {SUMMARY_FILE}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return None, f"unreadable {SUMMARY_FILE}: {exc}"
    if not isinstance(data, dict):
        return None, f"{SUMMARY_FILE} is not a JSON object"
    return CellSummary.from_json(data), ""


def read_items(path: Path, limit: int | None = None) -> tuple[list[Item], int]:
    """The items of a results.jsonl (the first ``limit`` lines' when given) and how many of its lines could not
    be parsed (not JSON, not an object, no article id). Raises OSError when the file cannot be read."""
    items: list[Item] = []
    bad = 0
    with Path(path).open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if limit is not None and len(items) + bad >= limit:
                break
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if not isinstance(data, dict) or data.get(ITEM_ID) is None:
                bad += 1
                continue
            items.append(Item.from_json(data))
    return items, bad


def read_cell(cell_dir: str | Path, items: bool = True, limit: int | None = None) -> CellRecord:
    """Everything a cell directory holds, read once, never raising for a damaged file (the problem is named
    instead). `items=False` skips results.jsonl (a reader that needs only the summary); `limit` reads only its
    first lines (a viewer of a large sweep)."""
    cell_dir = Path(cell_dir)
    summary, problem = read_summary(cell_dir)
    record = CellRecord(cell_dir, summary, problem, (cell_dir / SUMMARY_FILE).is_file(), error=read_error(cell_dir))
    results = cell_dir / RESULTS_FILE
    record.has_results = results.is_file()
    if items and record.has_results:
        try:
            record.items, record.bad_lines = read_items(results, limit)
        except OSError as exc:
            record.results_problem = f"unreadable {RESULTS_FILE} ({exc})"
    return record
