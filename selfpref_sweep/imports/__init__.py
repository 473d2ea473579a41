"""Judgements made elsewhere, as a sweep of ordinary cells: the paper's published per-item judgements
(`python -m selfpref_sweep.imports paper ROOT --out SWEEP`), per-item JSONL from any tool
(`python -m selfpref_sweep.imports jsonl FILE --out SWEEP`) and judge ratings in long form
(`python -m selfpref_sweep.imports ratings FILE --out SWEEP --columns ...`). No model is called; the analysis
reads the imported sweep as it reads a sweep run here.

The public surface: ``import_paper``, ``import_jsonl``, ``export_jsonl``, ``import_ratings`` and
``ImportInputError`` (what a bad input raises: one paragraph naming the file)."""

from importlib import import_module
from typing import Any

_PUBLIC = {"ImportedCell": "imported", "ImportInputError": "imported", "export_jsonl": "jsonl_format",
           "import_jsonl": "jsonl_format", "import_paper": "paper_import", "import_ratings": "ratings_format"}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    # Lazy: `python -m selfpref_sweep.imports jsonl` need not load the paper importer, nor the reverse.
    if name in _PUBLIC:
        return getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
