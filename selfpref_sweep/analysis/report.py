"""Write report.md (links the PNGs) and a self-contained report.html (PNGs inlined as base64).

The report opens with its summary box (summary_box.py), then a list of sections, each with optional text, table
and plots; in report.html each top-level section folds open on a click. Both files are built from the same
summary and sections, so they always agree.
"""

from __future__ import annotations

import base64
import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import pandas as pd

from .fit import MIN_POINTS
from .plots import PlotFile
from .tables import DASH, to_markdown

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
# Files the analysis writes beside the report; their names in the meta lines become relative links.
LINKED_FILES = ("items.html", "wandb_panels.json")


def _link_html(escaped: str) -> str:
    for name in LINKED_FILES:
        escaped = escaped.replace(name, f'<a href="{name}">{name}</a>')
    return escaped


def _link_md(text: str) -> str:
    for name in LINKED_FILES:
        text = text.replace(name, f"[{name}]({name})")
    return text


@dataclass
class Section:
    title: str
    text: str = ""  # plain text; blank lines separate paragraphs
    table: Optional[pd.DataFrame] = None
    plots: Sequence[PlotFile] = field(default_factory=list)
    level: int = 2  # heading level


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.strip().split("\n\n") if p.strip()]


Summary = Sequence[Tuple[str, str]]  # (heading, text) pairs: the report's first screen


def render_markdown(title: str, meta: Sequence[str], sections: Sequence[Section], out_dir: Path,
                    summary: Summary = ()) -> str:
    lines = [f"# {title}", ""]
    if summary:
        lines += ["## Summary", ""] + [f"- **{head}.** {text}" for head, text in summary] + [""]
    lines += [f"- {_link_md(m)}" for m in meta] + [""]
    for s in sections:
        lines += [f"{'#' * s.level} {s.title}", ""]
        for p in _paragraphs(s.text):
            lines += [p, ""]
        if s.table is not None:
            lines += [to_markdown(s.table), ""]
        for plot in s.plots:
            rel = Path(os.path.relpath(plot.path, out_dir)).as_posix()
            lines += [f"![{plot.title}]({rel})", ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0 1.5em; }
.meta li { margin: 0.1em 0; }
.summary { border: 2px solid #4a6fa5; border-radius: 6px; background: #f5f8fc; padding: 0.3em 1.2em 0.8em;
           margin: 1em 0 1.5em; max-width: 1000px; }
.summary dt { font-weight: bold; margin-top: 0.6em; }
.summary dd { margin: 0.1em 0 0 0; }
details > summary { cursor: pointer; }
details > summary > h2 { display: inline; }
.scroll { overflow-x: auto; }
"""


def _img_tag(plot: PlotFile) -> str:
    # Inline the PNG so the HTML file stands alone (mail it, open it offline).
    data = base64.b64encode(plot.path.read_bytes()).decode("ascii")
    alt = html.escape(plot.title)
    return f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"><figcaption>{alt}</figcaption></figure>'


def _summary_html(summary: Summary) -> str:
    rows = "".join(f"<dt>{html.escape(head)}</dt><dd>{html.escape(text)}</dd>" for head, text in summary)
    return f'<div class="summary"><h2>Summary</h2><dl>{rows}</dl></div>'


def render_html(title: str, meta: Sequence[str], sections: Sequence[Section], summary: Summary = ()) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *([_summary_html(summary)] if summary else []),
        '<details><summary>Sweep, cells and files</summary><ul class="meta">'
        + "".join(f"<li>{_link_html(html.escape(m))}</li>" for m in meta) + "</ul></details>",
    ]
    folded = False
    for s in sections:
        h = min(max(s.level, 2), 6)
        if h == 2:  # a top-level section folds with its subsections
            parts.append(("</details>" if folded else "") + f"<details><summary><h2>{html.escape(s.title)}</h2></summary>")
            folded = True
        else:
            parts.append(f"<h{h}>{html.escape(s.title)}</h{h}>")
        parts += [f"<p>{html.escape(p)}</p>" for p in _paragraphs(s.text)]
        if s.table is not None:
            if s.table.empty:
                parts.append("<p><em>(none)</em></p>")
            else:
                parts.append(
                    '<div class="scroll">' + s.table.to_html(index=False, escape=True, border=0, na_rep=DASH) + "</div>"
                )
        parts += [_img_tag(p) for p in s.plots]
    parts.append(("</details>" if folded else "") + "</body></html>")
    return "\n".join(parts)


def write_report(out_dir: Path, title: str, meta: Sequence[str], sections: Sequence[Section],
                 summary: Summary = ()) -> tuple[Path, Path]:
    """Write both files into ``out_dir``; returns (report.md, report.html)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path, html_path = out_dir / REPORT_MD, out_dir / REPORT_HTML
    md_path.write_text(render_markdown(title, meta, sections, out_dir, summary), encoding="utf-8")
    html_path.write_text(render_html(title, meta, sections, summary), encoding="utf-8")
    return md_path, html_path


# --- the report's items: what each section shows, from what, and where it goes ---------------------------------

# pipeline.AnalysisResult, which the items read. Not imported, even for type checking: pipeline imports the
# item lists, and the package keeps no import cycle (tests/test_architecture.py).
AnalysisResult = Any

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
    replicated: bool = False  # some fine-tuned arm has several adapters (seeds): arms.py pools them
    positive_control: bool = False  # some arm is a positive control (config.POSITIVE_CONTROL_TASKS)
    paper_trend: bool = False  # some base evaluator has a line of recognition fine-tunes (paper_trend.py)
    length_control: bool = False  # some preference-scored item has both summaries' word counts (length_control.py)

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


Prose = Union[str, Callable[[AnalysisResult], str]]


def _always(design: Design) -> bool:
    return True


@dataclass(frozen=True)
class ReportItem:
    """One section of the report: its ``name`` (the key of its display table, and the W&B table's name), its
    ``section`` heading, its ``prose`` (a string, or a function of the result), the ``builder`` that makes its
    table from the result (None: no table), the ``plots`` it shows (PNG stems of plots.make_plots), a design check
    ``applies`` (the section is shown only where the sweep's design supports it) and ``to_wandb`` (whether its
    table is logged to the W&B run, and whether it also goes into the W&B report). A measurement's item may name
    the core item it follows (``after``); else it goes with the other measurements' items."""

    name: str
    section: str
    prose: Prose = ""
    builder: Optional[Callable[[AnalysisResult], Optional[pd.DataFrame]]] = None
    plots: tuple[str, ...] = ()
    applies: Callable[[Design], bool] = _always
    to_wandb: str = RUN_TABLE
    level: int = 2
    after: str = ""
    # The fits behind the table (each with `ok` and `note`): where none was fitted, the section says why in one
    # line instead of showing a table whose every number is a dash.
    fitted: Optional[Callable[[AnalysisResult], Sequence[Any]]] = None

    def render(self, result: AnalysisResult) -> Section:
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
