"""The package's shape: no import cycle among its modules, and the analysis reads records only."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "selfpref_sweep"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str) -> set:
    """Every selfpref_sweep module this file imports (at any depth of the file, lazy imports included)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("selfpref_sweep")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("selfpref_sweep"):
                out.add(target)
                out |= {f"{target}.{a.name}" for a in node.names}  # `from . import x` imports module x
    return out


def import_graph() -> dict:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        # An edge to one's own parent package is no cycle: Python imports the parents first anyway.
        graph[name] = {m for m in _imports(path, name) if m in modules and m != name
                       and not name.startswith(m + ".")}
    return graph


def _cycle(graph: dict):
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = "done"
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycle_among_modules():
    graph = import_graph()
    assert "selfpref_sweep.cell" in graph and "selfpref_sweep.models.local" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_analysis_reads_records_only():
    graph = import_graph()
    reachable, todo = set(), [m for m in graph if m.startswith("selfpref_sweep.analysis")]
    while todo:
        m = todo.pop()
        if m not in reachable:
            reachable.add(m)
            todo += graph[m]
    for forbidden in ("selfpref_sweep.plan", "selfpref_sweep.cell", "selfpref_sweep.finetune", "selfpref_sweep.models"):
        assert forbidden not in reachable, forbidden
    assert "selfpref_sweep.record" in reachable


def test_models_do_not_import_finetuning():
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith("selfpref_sweep.models"):
            assert not any(d.startswith("selfpref_sweep.finetune") for d in deps), (name, deps)
