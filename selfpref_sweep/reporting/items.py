"""A report's items: each section of report.md / report.html is a ``ReportItem`` (its name, heading, prose, the
builder of its table, its figures, the designs it applies to and where its table goes in W&B), shown where the
sweep's ``Design`` supports it, and rendered to a ``Section``. The analysis lists the core's items; a measurement's
report module lists its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import pandas as pd

from .regression import MIN_POINTS

if TYPE_CHECKING:  # pragma: no cover - annotations only: figures.py imports matplotlib
    from .figures import PlotFile


@dataclass
class Section:
    title: str
    text: str = ""  # plain text; blank lines separate paragraphs
    table: pd.DataFrame | None = None
    plots: Sequence[PlotFile] = field(default_factory=list)
    level: int = 2  # heading level


class ReportResult(Protocol):
    """What an item's section is rendered from: the display tables by item name and the figures drawn."""

    tables: Mapping[str, pd.DataFrame]
    plots: Sequence[PlotFile]


# The result the items read (the analysis' AnalysisResult, analysis/report/result.py). A type parameter, as the
# kit imports nothing of the analysis.
ResultT = TypeVar("ResultT", bound=ReportResult)

# to_wandb: where an item's table goes besides the report. A run table is logged to the W&B summary run as a
# wandb.Table; a report table also goes into the W&B report (its markdown and a table panel).
NOT_LOGGED, RUN_TABLE, REPORT_TABLE = "", "table", "report"


@dataclass(frozen=True)
class Design:
    """What a sweep's cells can support, read off the loaded cells and items (not off the fits' outcomes)."""

    label_pairs: bool  # some item judged under 2+ label conditions: the source-label experiment
    max_condition_units: int  # the most paper units (evaluator variant × dataset) in one setting × label
    finetuned: bool  # some complete cell's evaluator is fine-tuned
    diffs: bool  # fine-tuned-vs-base rows exist
    trends: bool  # the recognition arms give a dose trend
    logodds_cells: bool  # some cell's summary has log-odds means
    per_source: bool = False  # some group of cells has two or more other sources (a family to Holm-adjust)
    measured: frozenset = frozenset()  # the measurements (by name) that some cell recorded
    # The fewest adapters (seeds) of a fine-tuned arm that has several (1: none has): arms.py pools them, and the
    # count chooses the coverage study that labels the report's rows.
    adapters_per_arm: int = 1
    positive_control: bool = False  # some arm is a positive control (config.POSITIVE_CONTROL_TASKS)
    paper_trend: bool = False  # some base evaluator has a line of recognition fine-tunes (paper_trend.py)
    length_control: bool = False  # some preference-scored item has both summaries' word counts (length_control.py)
    # Two or more base judges in one group, or anchored or checkable outputs: self-preference net of quality
    # (analysis/self_bias/).
    self_bias: bool = False
    # The user stated a training SD for one-adapter arms (analysis.training_sd): their rows speak for the recipe.
    training_sd_stated: bool = False

    @property
    def replicated(self) -> bool:
        """Some fine-tuned arm has several adapters."""
        return self.adapters_per_arm > 1

    @property
    def headline(self) -> bool:
        # Outside a label comparison an unfitted headline row is itself the finding (cells failed, too few
        # evaluators), so it stays; a label comparison with fewer paper units per condition than a line needs
        # was never a regression design, and its rows would all be dashes.
        return not self.label_pairs or self.max_condition_units >= MIN_POINTS

    @property
    def finetune_tests(self) -> bool:
        # The same reasoning for the specificity and interaction tests, which need fine-tuned evaluators.
        return not self.label_pairs or self.finetuned


Prose = str | Callable[[ResultT], str]


def _always(design: Design) -> bool:
    return True


@dataclass(frozen=True)
class ReportItem(Generic[ResultT]):
    """One section of the report: its ``name`` (the key of its display table, and the W&B table's name), its
    ``section`` heading, its ``prose`` (a string, or a function of the result), the ``builder`` that makes its
    table from the result (None: no table), the ``plots`` it shows (PNG stems of the analysis' plots.make_plots,
    or of a measurement's PLOTS), a design check ``applies`` (the section is shown only where the sweep's design
    supports it) and ``to_wandb`` (whether its table is logged to the W&B run, and whether it also goes into the
    W&B report). A measurement's item may name the core item it follows (``after``); else it goes with the other
    measurements' items. ``ResultT``: the result its functions read (the analysis' AnalysisResult)."""

    name: str
    section: str
    prose: Prose[ResultT] = ""
    builder: Callable[[ResultT], pd.DataFrame | None] | None = None
    plots: tuple[str, ...] = ()
    applies: Callable[[Design], bool] = _always
    to_wandb: str = RUN_TABLE
    level: int = 2
    after: str = ""
    # The fits behind the table (each with `ok` and `note`): where none was fitted, the section says why in one
    # line instead of showing a table whose every number is a dash.
    fitted: Callable[[ResultT], Sequence[Any]] | None = None

    def render(self, result: ResultT) -> Section:
        """The item's section for ``result``: its prose, its table (from ``result.tables``) and its figures (from
        ``result.plots``)."""
        text = self.prose(result) if callable(self.prose) else self.prose
        table = result.tables.get(self.name) if self.builder is not None else None
        line = unfitted_line(self.fitted(result)) if self.fitted is not None else ""
        if line:
            text, table = (f"{text}\n\n{line}" if text else line), None
        by_stem = {p.path.stem: p for p in result.plots}
        return Section(self.section, text, table, [by_stem[s] for s in self.plots if s in by_stem], self.level)


MAX_REASONS = 3  # an unfitted section names up to this many distinct reasons


def unfitted_line(fits: Sequence[Any]) -> str:
    """One line for a section none of whose fits was fitted ("" when one was): why, in the fits' own words."""
    if any(getattr(f, "ok", False) for f in fits):
        return ""
    if not fits:
        return "**Too small for this table:** this sweep has nothing to fit here."
    reasons = list(dict.fromkeys(str(getattr(f, "note", "") or "").strip().rstrip(".") for f in fits))
    reasons = [r for r in reasons if r]
    more = f" (and {len(reasons) - MAX_REASONS} other reason(s))" if len(reasons) > MAX_REASONS else ""
    why = "; ".join(reasons[:MAX_REASONS]) + more if reasons else "no group could be fitted"
    return f"**Too small for this table:** none of its {len(fits)} row(s) could be fitted ({why})."
