"""`python -m selfpref_sweep.imports paper ROOT --out SWEEP`, `... jsonl FILE --out SWEEP`, `... ratings FILE --out
SWEEP --columns ...`, `... export SWEEP --out FILE`: judgements made elsewhere as a sweep the analysis reads (see
docs/import_formats.md)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from ..errors import SelfprefError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m selfpref_sweep.imports",
                                     description="Import judgements made elsewhere as a sweep of ordinary cells "
                                                 "(no model is called); then run python -m selfpref_sweep.analysis "
                                                 "SWEEP.")
    sub = parser.add_subparsers(dest="command", required=True)
    paper = sub.add_parser("paper", help="the paper's published per-item judgements (the authors' layout)")
    paper.add_argument("root", help="folder with articles/, results/, individual_setting_results/, label_results/ "
                                    "(each judgement file X.json may be X.json.xz)")
    jsonl = sub.add_parser("jsonl", help="per-item JSONL, one line per item and question (docs/import_formats.md)")
    jsonl.add_argument("file")
    ratings = sub.add_parser("ratings", help="judge ratings in long form, one row per judge and output (CSV or JSONL; "
                                             "docs/import_formats.md)")
    ratings.add_argument("file", help="a .csv with a header row, or .jsonl / .json with one object per line")
    ratings.add_argument("--columns", required=True,
                         help="which column holds what: judge=COL,author=COL,item=COL,score=COL, optionally "
                              "human=COL (an anchor score), dataset=COL, correct=COL, length=COL, text=COL")
    ratings.add_argument("--families", help="a JSON object {name: family} or a CSV of rows name,family")
    for p in (paper, jsonl, ratings):
        p.add_argument("--out", required=True, help="the sweep folder to write")
        p.add_argument("--replace", action="store_true",
                       help="replace an existing --out (the new sweep is swapped in only when complete)")
    export = sub.add_parser("export", help="an imported (or any) sweep's items as per-item JSONL")
    export.add_argument("sweep")
    export.add_argument("--out", required=True, help="the JSONL file to write")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    start = time.perf_counter()
    try:
        if args.command == "paper":
            from .paper_import import import_paper

            done = import_paper(args.root, args.out, args.replace)
            print(f"Imported {done['n_files']} files: {done['n_cells']} cells, {done['n_items']} items -> "
                  f"{args.out} ({time.perf_counter() - start:.0f} s)")
            print(f"Excluded items (counted in each cell's summary.json): {done['excluded_items'] or 'none'}")
            print(f"Rows left out (manifest import.json): {done['rows_left_out'] or 'none'}")
        elif args.command == "jsonl":
            from .jsonl_format import import_jsonl

            print(import_jsonl(args.file, args.out, args.replace))
        elif args.command == "ratings":
            from .ratings_format import import_ratings

            done = import_ratings(args.file, args.out, args.columns, args.replace, args.families)
            print(f"Imported {done['n_rows']} rows: {done['n_cells']} cells, {done['n_items']} items -> {args.out} "
                  f"({time.perf_counter() - start:.1f} s)")
            print(f"Rows by where they went: {done['rows']}")
            print(f"Exclusions (manifest import.json): {done['exclusions'] or 'none'}")
        else:
            from .jsonl_format import export_jsonl

            print(f"{export_jsonl(args.sweep, args.out)} lines -> {args.out}")
    except (SelfprefError, FileNotFoundError) as exc:
        print(f"imports {args.command} failed: {exc}", file=sys.stderr)
        return 2
    print(f"Next: python -m selfpref_sweep.analysis {getattr(args, 'out', '')}" if args.command != "export" else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
