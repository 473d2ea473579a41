"""`python -m selfpref_sweep.store`: check a store, salvage a damaged one, merge per-node stores."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Sequence

from ..errors import SelfprefError
from .calls import Store, merge_stores
from .salvage import check_store, salvage_store


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfpref_sweep.store",
                                     description="Tools for the call store (the cache of model calls).")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="is the store healthy? its calls per model (exit 2 when damaged)")
    check.add_argument("path")
    check.add_argument("--full", action="store_true", help="SQLite's integrity_check instead of quick_check")
    salvage = sub.add_parser("salvage", help="copy every readable call of a damaged store into a fresh one")
    salvage.add_argument("path", help="the damaged store (read from a copy, never written)")
    salvage.add_argument("new", nargs="?", help="where the fresh store goes; without it, it replaces PATH and "
                                                "the damaged file is kept as PATH.damaged")
    merge = sub.add_parser("merge", help="copy the calls of per-node stores into one store")
    merge.add_argument("dest", help="the store to merge into (created if absent)")
    merge.add_argument("sources", nargs="+", help="stores to copy from (opened read-only)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except (FileNotFoundError, ValueError, SelfprefError, sqlite3.DatabaseError) as exc:
        print(f"store {args.command} failed: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "check":
        report = check_store(args.path, full=args.full)
        print("\n".join(report.lines()))
        return 0 if report.healthy else 2
    if args.command == "salvage":
        print("\n".join(salvage_store(args.path, args.new).lines()))
        return 0
    for report in merge_stores(args.dest, args.sources):
        print(report.line())
    print(f"{args.dest}: {len(Store(args.dest))} rows")
    return 0
