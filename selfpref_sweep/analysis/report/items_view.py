"""items.html: a static page (no server) with every judged item of a sweep, behind report.html's numbers.

Per cell and item it shows the article, both summaries, P(own) in each presentation order, the answer mass,
any exclusion and each measurement's record of it (the judge-competence control, ...) where the cell has one. It filters
by cell and by exclusion and sorts by score. It reads only the sweep's own files: each cell's summary.json and
results.jsonl (article texts are stored once per dataset and article, not once per cell).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...measurements import registered
from ...records.schema import CellRecord, Item, Verdict, read_cell
from ...records.sweep_dirs import find_cell_dirs

ITEMS_HTML = "items.html"
# A static page holds every item of an ordinary sweep; an imported one (the paper's: about 445,000 items) would
# make a page no browser opens. Past this many, each cell shows its first items (article order), and says so.
MAX_ITEMS = 50_000


def _cell_label(cell: dict[str, Any]) -> str:
    text = f"{cell.get('evaluator')} vs {cell.get('source')} on {cell.get('dataset')} ({cell.get('setting')})"
    extras = []
    if cell.get("finetune_task") not in (None, "none"):
        n = cell.get("finetune_n_articles")
        extras.append(f"ft {cell['finetune_task']}" + (f" N={n}" if n is not None else "")
                      + (f", {cell['transfer']}" if cell.get("transfer") not in (None, "none") else ""))
    if cell.get("label") not in (None, "none"):
        extras.append(f"label {cell['label']}")
    return text + ("".join(f"; {e}" for e in extras))


def _question(verdict: Verdict | None) -> dict[str, Any] | None:
    """The viewer's fields of one question: score, exclusion, and per order (pairwise) or per summary
    (individual) P(own) / value and answer mass."""
    if verdict is None:
        return None
    out: dict[str, Any] = {"score": verdict.score, "excluded": verdict.excluded,
                           "reason": verdict.exclusion_reason, "consistent": verdict.consistent}
    parts = []
    for name, order in (verdict.orders or {}).items():
        parts.append({"name": name, "p_own": order.p_own, "mass": order.mass, "chosen": order.chosen,
                      "probs": order.probs, "method": order.method})
    for name, reading in (verdict.summaries or {}).items():
        parts.append({"name": f"{name} summary", "value": reading.value, "mass": reading.mass,
                      "probs": reading.probs, "method": reading.method})
    out["parts"] = parts
    return out


def _cell_entry(record: CellRecord, cell_id: int, rel: str) -> dict[str, Any]:
    summary = record.summary
    status = (summary.status if summary else None) or ("failed" if record.error else "incomplete")
    cell = summary.cell if summary else {}
    return {"id": cell_id, "dir": rel, "label": _cell_label(cell) if cell else rel, "status": status,
            "n_items": len(record.items), "n_unreadable_lines": record.bad_lines}


def _item_entry(item: Item, cell_id: int, cell: dict[str, Any], measurements: list) -> tuple[dict[str, Any], str]:
    """The viewer's item and the key of its article text."""
    article_key = f"{item.dataset or cell.get('dataset')}/{item.article_id}"
    entry = {
        "cell": cell_id, "article_id": item.article_id, "article_key": article_key,
        "truncated": item.article_truncated, "own": item.own_summary, "other": item.other_summary,
        "source": item.source, "questions": {q: _question(v) for q, v in item.verdicts.items()},
        # each measurement's record, as the measurement shows it
        "measurements": {m.item_key: shown for m in measurements
                         if (shown := m.view(item.measured.get(m.item_key))) is not None},
    }
    return entry, article_key


def collect_items(sweep_dirs: Iterable[Path], max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """The page's data: cells, items and article texts (deduplicated) from the sweeps' cell directories; past
    ``max_items`` in all, each cell's first max_items / cells items (``capped`` gives the counts)."""
    cells: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    articles: dict[str, str] = {}
    measurements = registered()
    dirs = [(Path(sweep), cell_dir) for sweep in sweep_dirs for cell_dir in find_cell_dirs(Path(sweep))]
    per_cell, total, capped = max(1, max_items // max(1, len(dirs))), 0, False
    for sweep, cell_dir in dirs:
        rel = cell_dir.relative_to(sweep).as_posix() if cell_dir != sweep else cell_dir.name
        record = read_cell(cell_dir, limit=per_cell)
        entry = _cell_entry(record, len(cells), rel)
        cells.append(entry)
        cell = record.summary.cell if record.summary else {}
        n_items = (record.summary.n_items if record.summary is not None else None) or len(record.items)
        total, capped = total + n_items, capped or n_items > per_cell
        for item in record.items:
            shown, article_key = _item_entry(item, entry["id"], cell, measurements)
            if item.article and article_key not in articles:
                articles[article_key] = item.article
            items.append(shown)
    data: dict[str, Any] = {"cells": cells, "items": items, "articles": articles}
    if capped:
        data["capped"] = {"per_cell": per_cell, "shown": len(items), "total": total}
    return data


def _json_for_script(data: Any) -> str:
    # Inside <script>, "</" would end the element early; JSON allows "<\/" for "</".
    return json.dumps(data, ensure_ascii=False, allow_nan=False, default=str).replace("</", "<\\/")


_CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 1.5em auto; max-width: 1500px;
       padding: 0 1em; color: #222; }
.controls { display: flex; gap: 1.2em; flex-wrap: wrap; align-items: end; margin: 0.8em 0; }
.controls label { display: flex; flex-direction: column; font-size: 0.85em; gap: 2px; }
table { border-collapse: collapse; font-size: 0.85em; width: 100%; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.excluded td { background: #fff3f0; }
tr.detail td { background: #fafafa; }
.text { white-space: pre-wrap; max-height: 16em; overflow-y: auto; margin: 0.2em 0 0.6em; }
.grid { display: grid; grid-template-columns: 2fr 1fr 1fr; gap: 1em; }
.reason { color: #a33; font-weight: 600; }
.muted { color: #777; }
button.toggle { font-size: 0.8em; }
"""

_JS = r"""
const DATA = JSON.parse(document.getElementById('items-data').textContent);
const $ = (id) => document.getElementById(id);
const fmt = (x, d = 3) => (x === null || x === undefined || Number.isNaN(x)) ? '—' : Number(x).toFixed(d);
const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));

function reasons(item) {
  return Object.values(item.questions).filter((q) => q && q.excluded).map((q) => q.reason || 'excluded');
}
function score(item, q) { const b = item.questions[q]; return b && !b.excluded ? b.score : null; }

function setup() {
  const cellSel = $('filter-cell');
  for (const c of DATA.cells) {
    const o = document.createElement('option');
    o.value = String(c.id);
    o.textContent = `${c.dir}: ${c.label} [${c.status}, ${c.n_items} items]`;
    cellSel.appendChild(o);
  }
  const exSel = $('filter-exclusion');
  const all = new Set();
  DATA.items.forEach((it) => reasons(it).forEach((r) => all.add(r)));
  [...all].sort().forEach((r) => {
    const o = document.createElement('option'); o.value = 'reason:' + r; o.textContent = 'excluded: ' + r; exSel.appendChild(o);
  });
  for (const el of [cellSel, exSel, $('sort')]) el.addEventListener('change', render);
  render();
}

function partsText(block) {
  if (!block) return '—';
  return block.parts.map((p) => {
    const v = p.p_own !== undefined ? `P(own) ${fmt(p.p_own)}` : `value ${fmt(p.value)}`;
    return `${p.name}: ${v}, mass ${fmt(p.mass)}` + (p.chosen ? `, chose ${p.chosen}` : '');
  }).join('<br>');
}

function measurementsText(ms) {
  const lines = Object.entries(ms || {}).flatMap(([name, shown]) => Object.entries(shown).map(([k, v]) =>
    `${esc(name)} ${esc(k)}: ${esc(typeof v === 'number' ? (Number.isInteger(v) ? String(v) : fmt(v)) : JSON.stringify(v))}`));
  return lines.length ? lines.join('<br>') : '<span class="muted">—</span>';
}

function render() {
  const cell = $('filter-cell').value, ex = $('filter-exclusion').value, sort = $('sort').value;
  let rows = DATA.items.filter((it) => cell === 'all' || String(it.cell) === cell);
  rows = rows.filter((it) => {
    const rs = reasons(it);
    if (ex === 'all') return true;
    if (ex === 'included') return rs.length === 0;
    if (ex === 'excluded') return rs.length > 0;
    return rs.includes(ex.slice('reason:'.length));
  });
  if (sort !== 'none') {
    const [q, dir] = sort.split(':');
    const sign = dir === 'desc' ? -1 : 1;
    rows = rows.slice().sort((a, b) => {
      const x = score(a, q), y = score(b, q);
      if (x === null && y === null) return 0;
      if (x === null) return 1;   // unscored (excluded) items last either way
      if (y === null) return -1;
      return sign * (x - y);
    });
  }
  $('count').textContent = `${rows.length} of ${DATA.items.length} items`;
  const body = $('items-body');
  body.innerHTML = '';
  rows.forEach((it, i) => {
    const c = DATA.cells[it.cell];
    const rs = reasons(it);
    const tr = document.createElement('tr');
    tr.className = 'item' + (rs.length ? ' excluded' : '');
    tr.dataset.cell = String(it.cell);
    for (const q of ['recognition', 'preference']) tr.dataset[q] = score(it, q) === null ? '' : String(score(it, q));
    tr.innerHTML = `<td>${esc(c.dir)}<br><span class="muted">${esc(c.label)}</span></td>`
      + `<td>${esc(it.article_id)}${it.truncated ? '<br><span class="reason">article truncated</span>' : ''}</td>`
      + `<td class="num">${fmt(score(it, 'recognition'))}</td><td class="num">${partsText(it.questions.recognition)}</td>`
      + `<td class="num">${fmt(score(it, 'preference'))}</td><td class="num">${partsText(it.questions.preference)}</td>`
      + `<td>${rs.length ? '<span class="reason">' + rs.map(esc).join(', ') + '</span>' : '<span class="muted">none</span>'}</td>`
      + `<td>${measurementsText(it.measurements)}</td>`
      + `<td><button class="toggle" data-row="${i}">texts</button></td>`;
    const detail = document.createElement('tr');
    detail.className = 'detail';
    detail.hidden = true;
    const article = DATA.articles[it.article_key];
    detail.innerHTML = `<td colspan="9"><div class="grid"><div><b>Article</b><div class="text">${article ? esc(article) : '<span class="muted">(not stored in results.jsonl)</span>'}</div></div>`
      + `<div><b>Own summary</b><div class="text">${esc(it.own)}</div></div>`
      + `<div><b>Other summary (${esc(it.source)})</b><div class="text">${esc(it.other)}</div></div></div></td>`;
    tr.querySelector('button').addEventListener('click', () => { detail.hidden = !detail.hidden; });
    body.appendChild(tr);
    body.appendChild(detail);
  });
}
setup();
"""  # noqa: E501 - the page's JavaScript, written to items.html as it stands here


def render_items_html(data: dict[str, Any], title: str = "Items behind the sweep report") -> str:
    n_cells, n_items = len(data["cells"]), len(data["items"])
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        (f"<p><b>Showing {n_items} of {data['capped']['total']} items: each cell's first "
         f"{data['capped']['per_cell']} (by article). Every item is in its cell's results.jsonl.</b></p>"
         if data.get("capped") else ""),
        f"<p>{n_items} judged items in {n_cells} cells. Scores are P(own summary) averaged over the two "
        "presentation orders (pairwise) or own / (own + other) (individual); 0.5 = no bias. The answer mass is "
        "the probability the evaluator put on the valid answers. "
        '<a href="report.html">Back to the report</a>.</p>',
        '<div class="controls">',
        '<label>Cell<select id="filter-cell"><option value="all">all cells</option></select></label>',
        '<label>Exclusion<select id="filter-exclusion"><option value="all">all items</option>'
        '<option value="included">not excluded</option><option value="excluded">excluded (any reason)</option>'
        "</select></label>",
        '<label>Sort<select id="sort"><option value="none">sweep order</option>'
        '<option value="recognition:desc">recognition score, high first</option>'
        '<option value="recognition:asc">recognition score, low first</option>'
        '<option value="preference:desc">preference score, high first</option>'
        '<option value="preference:asc">preference score, low first</option></select></label>',
        '<span id="count"></span></div>',
        "<table><thead><tr><th>cell</th><th>article</th><th>recognition</th><th>recognition: per order</th>"
        "<th>preference</th><th>preference: per order</th><th>exclusion</th><th>other measurements</th><th></th>"
        '</tr></thead><tbody id="items-body"></tbody></table>',
        f'<script type="application/json" id="items-data">{_json_for_script(data)}</script>',
        f"<script>{_JS}</script>",
        "</body></html>",
    ])


def write_items_html(sweep_dirs: Iterable[Path], out_dir: Path) -> Path:
    """Write ``out_dir/items.html`` for the cells of ``sweep_dirs``; returns its path."""
    data = collect_items([Path(d) for d in sweep_dirs])
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ITEMS_HTML
    path.write_text(render_items_html(data), encoding="utf-8")
    return path
