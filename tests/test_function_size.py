"""No function in selfpref_sweep/ is over MAX_LINES lines: a function that long does several things, and its
parts can be neither read nor tested alone.

A function's length is ``end_lineno - lineno + 1`` of its ``def`` node: from the ``def`` line (decorators
excluded) to its last line, docstring, comments and blank lines included. Methods and nested functions count
on their own (a nested function's lines count in its parent too)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "selfpref_sweep"
MAX_LINES = 60

# Functions still over the limit, as "path relative to selfpref_sweep/:qualified name": each names one
# function being shrunk elsewhere; the entry goes when it is. Empty: every function is within the limit.
ALLOWED: frozenset[str] = frozenset()


def function_lengths(root: Path = PACKAGE) -> dict[str, int]:
    """"file:qualified.name" -> lines, for every function and method of every .py under ``root``."""
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()

        def visit(node: ast.AST, prefix: str, rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{rel}:{prefix}{child.name}"] = child.end_lineno - child.lineno + 1
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                else:
                    visit(child, prefix)

        visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "")
    return out


def test_no_function_is_over_the_limit() -> None:
    lengths = function_lengths()
    assert len(lengths) > 100  # the walk found the package's functions
    over = {name: n for name, n in lengths.items() if n > MAX_LINES}
    unexpected = {name: n for name, n in over.items() if name not in ALLOWED}
    assert not unexpected, f"functions over {MAX_LINES} lines: {unexpected}"


def test_the_allow_list_names_only_functions_still_over_the_limit() -> None:
    # A shrunk (or renamed) function's entry would otherwise let the next long function through unseen.
    lengths = function_lengths()
    assert not {name for name in ALLOWED if lengths.get(name, 0) <= MAX_LINES}


def test_the_measure_counts_from_the_def_line_to_the_last(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))  # def + 60 lines: 61
    (tmp_path / "m.py").write_text(f"import functools\n\n\n@functools.cache\ndef long():\n{body}\n\n\n"
                                   "class C:\n    def short(self):\n        return 1\n")
    assert function_lengths(tmp_path) == {"m.py:long": MAX_LINES + 1, "m.py:C.short": 2}
