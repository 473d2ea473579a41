"""Write report.md (links the PNGs) and a self-contained report.html (PNGs inlined as base64).

The report opens with its summary box (summary_box.py), then a list of sections (reporting.items.Section), each
with optional text, table and plots; in report.html each top-level section folds open on a click. Both files are
built from the same summary and sections, so they always agree.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from pathlib import Path

from ...reporting.figures import PlotFile
from ...reporting.formatting import DASH, to_markdown
from ...reporting.items import Section

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


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.strip().split("\n\n") if p.strip()]


Summary = Sequence[tuple[str, str]]  # (heading, text) pairs: the report's first screen


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
            parts.append(("</details>" if folded else "")
                         + f"<details><summary><h2>{html.escape(s.title)}</h2></summary>")
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
