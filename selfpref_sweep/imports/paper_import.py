"""`python -m selfpref_sweep.imports paper ROOT --out SWEEP`: the paper's published judgements as a sweep.

One cell per evaluator × other source × dataset × setting × label condition; fine-tuned evaluators sit on the
fine-tune axes (task, N, fine-tune dataset, base), so transfer, dose and controls appear as in a sweep run here.
Every expected item is kept: an article the authors have no row for, or whose row could not be scored, is an
excluded item with its reason; rows on a fine-tune's own training articles (keys[:N]) are left out and counted
in the manifest. Each file group is read, written and released in turn (memory holds one group)."""

from __future__ import annotations

import datetime as _dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..records.schema import CellCoordinates, Item, Verdict, transfer_of
from . import paper_files as F
from . import paper_rows as P
from .imported import ORIGIN_KEY, ImportedCell, ImportInputError, SweepWriter
from .paper_table import TABLE_FILE, TableBuilder

# Known defects of the published data, flagged in the cells they concern and in the report.
SAME_MODEL_ID = ("xsum_random_ft_gpt35", "xsum_always_1_ft_gpt35")
DEFECT_SAME_ID = ("the authors' model list maps xsum_random_ft_gpt35 and xsum_always_1_ft_gpt35 to one and the same "
                  "fine-tuned model id, so these two controls may be one model's judgements")
# The two share one fine-tune identity in their cells (summary.json's finetune fingerprint), so that the analysis can
# flag them as duplicates (finetune_tests.interaction_robustness leaves them out in one row).
SHARED_MODEL_FINGERPRINT = "paper-shared-model-id:" + "+".join(SAME_MODEL_ID)
DEFECT_LLAMA_FORMAT = ("Llama fine-tunes were trained on prompts ending '[/INST] 1' but evaluated on prompts ending "
                       "'[/INST] My answer is ': the evaluation format differs from the training format")
DEFECT_LLAMA_FORMULAS = ("the authors' stored Llama pairwise scores mix four formulas (raw P(own); fields swapped; "
                         "P(\"1\"), a position bias; renormalised P(own)); the project's reading recomputes one")
DEFECT_GPT_TOP1 = ("GPT rows keep only each order's top answer (and its probability in three of four orders): the "
                   "score cannot be renormalised over the two answers; the stored score is used as it is, with no "
                   "log-odds")
DEFECT_LLAMA_LABEL_ORDER = ("the Llama label runs asked one order only (own summary first) and stored P(\"1\") "
                            "renormalised: the reading cannot cancel a position bias")
DEFECT_INDIVIDUAL_DROP = ("the authors dropped individual-setting rows whose top-2 answers lacked \"Yes\"; those "
                          "articles are excluded here and counted (a biased sample)")


def _coordinates(model: F.PaperModel, source: str, ds: str, setting: str, label: str) -> CellCoordinates:
    ft_ds = None if model.task is None else F.dataset_name(model.trained_on)
    task = model.finetune_task
    return CellCoordinates(
        evaluator=model.evaluator, source=F.source_name(source), dataset=F.dataset_name(ds), setting=setting,
        label=label, finetune_task=task, finetune_dataset=ft_ds,
        finetune_n_articles=None if model.task is None else model.n_articles,
        transfer=transfer_of(task, ft_ds, F.dataset_name(ds)).value)


def _warnings(model: F.PaperModel, kind: str) -> list[str]:
    out = []
    if model.name in SAME_MODEL_ID:
        out.append(DEFECT_SAME_ID)
    if model.base == "llama" and model.task is not None:
        out.append(DEFECT_LLAMA_FORMAT)
    if model.base == "llama" and kind == F.PAIRWISE:
        out.append(DEFECT_LLAMA_FORMULAS)
    if model.base != "llama" and kind in (F.PAIRWISE, F.LABEL):
        out.append(DEFECT_GPT_TOP1)
    if _one_order(model, kind):
        out.append(DEFECT_LLAMA_LABEL_ORDER)
    if kind == F.RECOGNITION and model.base != "llama":
        out.append(DEFECT_INDIVIDUAL_DROP)
    return out


def _one_order(model: F.PaperModel, kind: str) -> bool:
    """Whether the group's runs asked one order only, own summary first: the Llama label runs."""
    return model.base == "llama" and kind == F.LABEL


class _Context:
    """What every file group needs: the article order, the summaries, the writer, the table and the tallies."""

    def __init__(self, root: Path, writer: SweepWriter, table: TableBuilder):
        self.root, self.writer, self.table = root, writer, table
        self.articles: dict[str, list[str]] = {}
        self.summaries: dict[str, dict[str, dict[str, str]]] = {}
        self.files: list[dict[str, Any]] = []
        self.exclusions: dict[str, int] = defaultdict(int)
        self.n_items = 0

    def article_ids(self, ds: str) -> list[str]:
        if ds not in self.articles:
            self.articles[ds] = F.read_articles(self.root, ds)
            self.summaries[ds] = F.read_summaries(self.root, ds)
        return self.articles[ds]

    def held_out(self, model: F.PaperModel, ds: str) -> list[str]:
        """The articles the evaluator was evaluated on: all, or keys[N:] for a fine-tune (its training articles
        come first in the article order, as the authors filter them)."""
        return self.article_ids(ds)[model.n_articles:]

    def summary(self, ds: str, source: str, article: str) -> str | None:
        return self.summaries.get(ds, {}).get(source, {}).get(article)

    def write(self, cell: ImportedCell) -> None:
        for item in cell.items:
            for v in item.verdicts.values():
                if v.excluded:
                    self.exclusions[v.exclusion_reason] += 1
        self.n_items += len(cell.items)
        self.writer.add(cell)


def _index(rows: Sequence[Mapping[str, Any]], target: str, keep: set, training: set
           ) -> tuple[dict[tuple[str, str], tuple[int, Mapping[str, Any]]], dict[str, int]]:
    """(article, source) -> (row number, row) over the rows on held-out articles; the rest counted by why:
    rows on the fine-tune's training articles, on articles not in the dataset, and repeated (article, source)
    rows (the first is kept)."""
    out: dict[tuple[str, str], tuple[int, Mapping[str, Any]]] = {}
    left: dict[str, int] = defaultdict(int)
    for i, row in enumerate(rows):
        key, src = str(row["key"]), str(row[target])
        if key not in keep:
            left["training_article" if key in training else "article_not_in_dataset"] += 1
        elif (key, src) in out:
            left["repeated_row"] += 1
        else:
            out[(key, src)] = (i, row)
    return out, dict(left)


def _item(ctx: _Context, model: F.PaperModel, ds: str, source: str, article: str,
          verdicts: dict[str, Verdict], origin: dict[str, Any]) -> Item:
    c = (model.evaluator, F.source_name(source), F.dataset_name(ds))
    item = Item(article, *c, None, False, ctx.summary(ds, model.base, article), ctx.summary(ds, source, article),
                verdicts)
    item.measured[ORIGIN_KEY] = origin
    return item


def _cell(model: F.PaperModel, source: str, ds: str, setting: str, label: str, kind: str,
          questions: Sequence[str], files: Sequence[F.PaperFile], left_out: Mapping[str, int]) -> ImportedCell:
    block = {"format": "paper", "evaluator_name": model.name, "files": [f.rel for f in files],
             "rows_left_out": dict(left_out), "authors_source": source}
    return ImportedCell(_coordinates(model, source, ds, setting, label), tuple(questions),
                        warnings=_warnings(model, kind), block=block,
                        finetune={"fingerprint": SHARED_MODEL_FINGERPRINT} if model.name in SAME_MODEL_ID else None,
                        own_summaries={"kind": "generated", "name": model.evaluator,
                                        "note": f"the published {model.base} summaries (the paper's own)"})


def _other_sources(model: F.PaperModel) -> list[str]:
    return [s for s in F.SOURCES if s != model.base]


def _meta(model: F.PaperModel, ds: str, setting: str, label: str) -> dict[str, Any]:
    """paper_table.csv's leading columns for one evaluator and condition."""
    return {"evaluator": model.name, "base": model.base, "finetune_task": model.finetune_task,
            "finetune_n_articles": model.n_articles or None, "trained_on": model.trained_on, "dataset": ds,
            "setting": setting, "label": label}


def _rows_of(ctx: _Context, pf: F.PaperFile | None, target: str
             ) -> tuple[dict[tuple[str, str], tuple[int, Mapping[str, Any]]], dict[str, int]]:
    """A file's rows on the evaluator's held-out articles, indexed by (article, ``target`` source)."""
    if pf is None:
        return {}, {}
    ids = ctx.article_ids(pf.dataset)
    index, left = _index(F.read_rows(pf, ("key", target)), target, set(ctx.held_out(pf.model, pf.dataset)),
                         set(ids[:pf.model.n_articles]))
    known = set(F.SOURCES)
    for key in [k for k in index if k[1] not in known]:
        left[f"unknown_source:{key[1]}"] = left.get(f"unknown_source:{key[1]}", 0) + 1
        del index[key]
    return index, left


def _group(ctx: _Context, model: F.PaperModel, ds: str, setting: str, label: str, kind: str,
           files: Sequence[F.PaperFile], left_out: Mapping[str, int],
           judge: Callable[[str, str], tuple[dict[str, Verdict], dict[str, Any]]], pooled_authors: str) -> None:
    """One file group's cells (one per other source), written, and their rows of the table.
    ``judge(article, source)`` -> (verdict per question, origin rows)."""
    questions = ("recognition", "preference")
    by_question: dict[str, dict[str, list[tuple[str, Verdict]]]] = {q: {} for q in questions}
    for source in _other_sources(model):
        cell = _cell(model, source, ds, setting, label, kind, questions, files, left_out)
        for article in ctx.held_out(model, ds):
            verdicts, rows = judge(article, source)
            origin = {"kind": "imported", "format": "paper", "file": [f.rel for f in files], "row": rows}
            cell.items.append(_item(ctx, model, ds, source, article, verdicts, origin))
        for q in questions:
            by_question[q][F.source_name(source)] = [(it.article_id, it.verdicts[q]) for it in cell.items]
        ctx.write(cell)
    for q in questions:
        ctx.table.add(_meta(model, ds, setting, label), q, by_question[q], pooled_authors)
    # One entry per file group: its rows left out were counted once, over the group's files together.
    ctx.files.append({"files": [f.rel for f in files], "kind": kind, "setting": setting, "dataset": ds,
                      "evaluator": model.name, "label": label, "rows_left_out": dict(left_out)})


def _pairwise(ctx: _Context, pf: F.PaperFile) -> None:
    index, left = _rows_of(ctx, pf, "model")

    def judge(article: str, source: str):
        hit = index.get((article, source))
        if hit is None:
            return {q: P.excluded_no_row() for q in P.FIELDS}, {"pairwise": None}
        i, row = hit
        return {q: P.pairwise_verdict(row, q, {}) for q in P.FIELDS}, {"pairwise": i}

    _group(ctx, pf.model, pf.dataset, "pairwise", "none", F.PAIRWISE, [pf], left, judge, "pairs")


def _individual(ctx: _Context, rec: F.PaperFile | None, score: F.PaperFile | None) -> None:
    model, ds = (rec or score).model, (rec or score).dataset
    indexes = {"recognition": _rows_of(ctx, rec, "target_model"), "preference": _rows_of(ctx, score, "target_model")}
    left = {f"{q}:{k}": n for q, (_, lo) in indexes.items() for k, n in lo.items()}

    def judge(article: str, source: str):
        verdicts, rows = {}, {}
        for q, (index, _) in indexes.items():
            own, other = index.get((article, model.base)), index.get((article, source))
            rows[q] = [None if own is None else own[0], None if other is None else other[0]]
            verdicts[q] = P.individual_verdict(own and own[1], other and other[1], q, {})
        return verdicts, rows

    files = [f for f in (rec, score) if f is not None]
    _group(ctx, model, ds, "individual", "none", F.RECOGNITION, files, left, judge, "sources")


def _label(ctx: _Context, pf: F.PaperFile, unlabelled: F.PaperFile | None) -> None:
    """A label condition: preference from the label file (as P(own)); recognition, whose prompt carries no labels,
    from the unlabelled pairwise run of the same evaluator on the same items."""
    index, left = _rows_of(ctx, pf, "model")
    rec_index, _ = _rows_of(ctx, unlabelled, "model")
    complement, one_order = P.stores_complement(pf), _one_order(pf.model, F.LABEL)

    def judge(article: str, source: str):
        hit, rec_hit = index.get((article, source)), rec_index.get((article, source))
        pref = P.excluded_no_row() if hit is None else P.label_verdict(hit[1], complement, {}, one_order)
        rec = (P.excluded_no_row() if rec_hit is None
               else P.pairwise_verdict(rec_hit[1], "recognition", {"from_file": unlabelled.rel}))
        return {"recognition": rec, "preference": pref}, {"label": hit and hit[0], "pairwise": rec_hit and rec_hit[0]}

    files = [pf] + ([unlabelled] if unlabelled is not None else [])
    _group(ctx, pf.model, pf.dataset, "pairwise", pf.label, F.LABEL, files, left, judge, "pairs")


def _groups(files: Sequence[F.PaperFile]):
    """The file groups in a stable order: pairwise files, individual (recognition, score) pairs, label files."""
    by_kind: dict[str, dict[tuple[str, str, str], F.PaperFile]] = defaultdict(dict)
    for f in files:
        by_kind[f.kind][(f.dataset, f.model.name, f.label)] = f
    pairwise = by_kind[F.PAIRWISE]
    individual = sorted(set(by_kind[F.RECOGNITION]) | set(by_kind[F.SCORE]))
    return (sorted(pairwise.items()),
            [(by_kind[F.RECOGNITION].get(k), by_kind[F.SCORE].get(k)) for k in individual],
            [(f, pairwise.get((k[0], k[1], "none"))) for k, f in sorted(by_kind[F.LABEL].items())])


def import_paper(root: str | Path, out: str | Path, replace: bool = False,
                 progress: Callable[[str], None] = lambda _msg: None) -> dict[str, Any]:
    """Import every judgement file under ``root`` into the sweep folder ``out``; returns the manifest."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ImportInputError(f"{root} is not a folder. Give the folder that holds the authors' articles/, "
                               f"results/, individual_setting_results/ and label_results/.")
    files, raw, unknown = F.catalogue(root)
    if not files:
        raise ImportInputError(f"no judgement files under {root} (looked for results/, individual_setting_results/ "
                               f"and label_results/ with *_results.json or *_results.json.xz).")
    pairwise, individual, labels = _groups(files)
    table = TableBuilder()
    with SweepWriter(Path(out), replace) as writer:
        ctx = _Context(root, writer, table)
        for _, pf in pairwise:
            progress(pf.rel)
            _pairwise(ctx, pf)
        for rec, score in individual:
            progress((rec or score).rel)
            _individual(ctx, rec, score)
        for pf, unlabelled in labels:
            progress(pf.rel)
            _label(ctx, pf, unlabelled)
        manifest = _manifest(root, ctx, unknown, raw)
        writer.finish(manifest, {TABLE_FILE: table.rows})
    return manifest


def _manifest(root: Path, ctx: _Context, unknown: Iterable[str], raw: Mapping[str, Path]) -> dict[str, Any]:
    left: dict[str, int] = defaultdict(int)
    for f in ctx.files:
        for k, n in f["rows_left_out"].items():
            left[k] += n
    return {"format": "paper", "root": str(root), "imported_at": _dt.datetime.now().isoformat(timespec="seconds"),
            "n_cells": ctx.writer.n_cells, "n_items": ctx.n_items,
            "n_files": len({rel for group in ctx.files for rel in group["files"]}),
            "excluded_items": dict(sorted(ctx.exclusions.items())), "rows_left_out": dict(sorted(left.items())),
            "files_not_recognised": sorted(unknown), "file_groups": ctx.files,
            # Recognised and not read: their outputs equal the Llama label files' stored P("1") row for row.
            "files_not_read": {str(p.relative_to(root)): "raw Llama label outputs, the values the Llama label files "
                               "store" for p in raw.values()},
            "defects": [DEFECT_SAME_ID, DEFECT_LLAMA_FORMAT, DEFECT_LLAMA_FORMULAS, DEFECT_GPT_TOP1,
                        DEFECT_INDIVIDUAL_DROP]}
