"""The package's shape: no import cycle among its modules, no import up its layers (LAYERS, lowest first), the
analysis reads records only, the report kit sits below the analysis and the measurements' report sides, and a
module-level constant's name means one thing across the package."""

from __future__ import annotations

import ast
import re
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
    assert "selfpref_sweep.run.runner" in graph and "selfpref_sweep.models.local" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _analysis_side(name: str) -> bool:
    """The analysis, the report kit, and each measurement's report side (measurements/<name>/<x>_report.py and the
    modules of columns it shares with the analysis)."""
    return name.startswith(("selfpref_sweep.analysis", "selfpref_sweep.reporting")) or (
        name.startswith("selfpref_sweep.measurements.") and name.endswith(("_report", "_columns")))


def test_the_analysis_reads_records_only():
    graph = import_graph()
    reachable, todo = set(), [m for m in graph if _analysis_side(m)]
    while todo:
        m = todo.pop()
        if m not in reachable:
            reachable.add(m)
            todo += graph[m]
    for forbidden in ("selfpref_sweep.run.plan", "selfpref_sweep.run.runner", "selfpref_sweep.finetune",
                      "selfpref_sweep.models"):
        assert forbidden not in reachable, forbidden
    assert "selfpref_sweep.records.schema" in reachable


def test_models_do_not_import_finetuning():
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith("selfpref_sweep.models"):
            assert not any(d.startswith("selfpref_sweep.finetune") for d in deps), (name, deps)


def test_the_core_does_not_import_the_analysis():
    """The analysis reads what the core writes; the core never reaches into the analysis (lazy imports too), nor
    into a measurement's report side."""
    graph = import_graph()
    for name, deps in graph.items():
        if not _analysis_side(name):
            assert not any(_analysis_side(d) for d in deps), (name, sorted(deps))


def test_the_analysis_loads_no_measurement_cell_side():
    """A measurement's report side, and the analysis, never import its cell side (which needs the models)."""
    graph = import_graph()
    for name, deps in graph.items():
        if _analysis_side(name):
            assert not any(d.endswith("_cell") for d in deps), (name, sorted(deps))


def test_the_report_kit_sits_below_the_analysis_and_the_measurements():
    """selfpref_sweep.reporting holds what the analysis and the measurements' report sides share (report items, table
    formatting, method texts, figures): it imports neither, and a measurement's report side imports the kit, never
    the analysis."""
    graph = import_graph()
    kit = [name for name in graph if name.startswith("selfpref_sweep.reporting")]
    assert "selfpref_sweep.reporting.items" in kit
    for name in kit:
        assert not any(d.startswith(("selfpref_sweep.analysis", "selfpref_sweep.measurements")) for d in graph[name]), \
            (name, sorted(graph[name]))
    for name, deps in graph.items():
        if name.startswith("selfpref_sweep.measurements.") and name.endswith(("_report", "_columns")):
            assert not any(d.startswith("selfpref_sweep.analysis") for d in deps), (name, sorted(deps))


def test_the_analysis_imports_nothing_of_the_cell():
    """The analysis reads records; what it shares with the cell (the scoring rules, the t interval over articles)
    sits below both, in records/ and stats/."""
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith("selfpref_sweep.analysis"):
            assert not any(d.startswith("selfpref_sweep.cell") for d in deps), (name, sorted(deps))


MAX_MODULES_PER_FOLDER, MAX_MODULE_LINES = 15, 600


def test_no_folder_is_crowded_and_no_module_is_long():
    """A folder past 15 modules wants subpackages by concern, and a module past 600 lines a split by concern."""
    for folder in sorted({p.parent for p in PACKAGE.rglob("*.py")}):
        modules = [p.name for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        assert len(modules) <= MAX_MODULES_PER_FOLDER, (str(folder.relative_to(PACKAGE)), len(modules))
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def _mentions_backend(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and "backend" in n.id.lower())
               or (isinstance(n, ast.Attribute) and "backend" in n.attr.lower()) for n in ast.walk(node))


def _names_a_string(node: ast.AST) -> bool:
    """A string constant, or a tuple / list / set of them (`backend in ("local", "openai")`)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_a_string(e) for e in node.elts)


def backend_name_comparisons(source: str) -> list:
    """(line, code) of every comparison of a backend with a name, e.g. `cfg.backend == "openai"`,
    `backend in ("local", ...)`, `"openai" != model.backend`, and of every `match backend: case "openai"`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_mentions_backend(o) for o in operands) and any(_names_a_string(o) for o in operands):
                found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Match) and _mentions_backend(node.subject)
              and any(isinstance(c.pattern, ast.MatchValue) and _names_a_string(c.pattern.value) for c in node.cases)):
            found.append((node.lineno, f"match {ast.unparse(node.subject)}"))
    return found


def test_the_backend_name_finder_finds_what_it_must():
    assert backend_name_comparisons('x = cfg.backend == "openai"')
    assert backend_name_comparisons('if backend in ("local", "openai"): pass')
    assert backend_name_comparisons('ok = "local" != model_cfg.backend.value')
    assert backend_name_comparisons('match cfg.backend:\n    case "openai":\n        pass')
    assert not backend_name_comparisons("same = a.backend != b.backend")  # two backends: no name tested
    assert not backend_name_comparisons('mode = cfg.mode == "openai"')


def test_no_backend_name_comparisons_outside_the_models():
    """Outside models/, what a backend can do is asked of its class (the backend contract in models/base.py),
    never read off its name."""
    models = PACKAGE / "models"
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {code}"
             for path in sorted(PACKAGE.rglob("*.py")) if models not in path.parents
             for line, code in backend_name_comparisons(path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_the_package_is_laid_out_by_concern():
    """A few modules at the top (the command, errors, registries, W&B, the sweep's end) beside subpackages by
    concern, and no two modules with one name (so a name says which one is meant)."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 6, top
    names = [p.stem for p in PACKAGE.rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def _string_constants(path: Path):
    """(line, text) of every string constant in a file, f-strings' literal parts included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _measurement_columns_outside(prefixes, root: Path = PACKAGE) -> list:
    pattern = re.compile(rf"^({'|'.join(map(re.escape, prefixes))})_[a-z0-9_]+$")
    measurements = root / "measurements"
    return [f"{path.relative_to(root)}:{line}: {text}" for path in sorted(root.rglob("*.py"))
            if measurements not in path.parents for line, text in _string_constants(path) if pattern.match(text)]


def test_no_measurement_column_is_named_outside_its_folder():
    """The analysis asks a measurement's report module about its columns; only measurements/ names them."""
    from selfpref_sweep.measurements import registered

    prefixes = sorted({m.prefix for m in registered()})
    assert {"jc", "fam", "pl", "rc", "sb"} <= set(prefixes)
    assert _measurement_columns_outside(prefixes) == []


def test_the_column_finder_finds_a_planted_column(tmp_path):
    (tmp_path / "analysis").mkdir()
    (tmp_path / "measurements" / "placebo").mkdir(parents=True)
    (tmp_path / "analysis" / "table.py").write_text('COLUMN = "pl_accuracy_mean"\nOK = "pref_mean"\n')
    (tmp_path / "measurements" / "placebo" / "placebo_report.py").write_text('COLUMN = "pl_accuracy_mean"\n')
    assert _measurement_columns_outside(["pl"], tmp_path) == ["analysis/table.py:1: pl_accuracy_mean"]


# ------------------------------------------------------------------------------------------------ the layers
# The package's layers, lowest first: a module may import modules of its own layer and of those below, never of one
# above (lazy imports and imports for type checking count too: import_graph reads them all). Each name is a module or
# package under selfpref_sweep (a package stands for every module in it); "" is the package's own __init__.
# "measurements" is the measurements' package module alone, their interface and registry (Measurement, Stage,
# registered(), the settings registry), which the config and the cell read; "measurements.*" is every measurement's
# folder, whose cell side needs the cell and fine-tuning's labels and whose report side needs the report kit. The
# report kit sits low (it reads statistics only), so the measurements' report sides and the analysis both stand on
# it and it can import neither. W&B logging (tracking) reads the records and the config and serves the runner and the
# analysis, so it sits beside the cell.
LAYERS = (
    ("", "errors", "schema_fields", "registry"),  # imports nothing of the package
    ("records", "store", "stats"),  # what a cell leaves on disk, the call store, shared statistics
    ("reporting",),  # the report kit the analysis and the measurements' report sides share
    ("models", "measurements"),  # backends and their registry; the measurements' interface and registry
    ("config",),  # the schemas (composed of the backends' and measurements' settings), the resolved cell spec
    ("cell", "finetune", "tracking"),  # the cell's stages; fine-tuning (which reuses them); W&B logging
    ("measurements.*",),  # each measurement's folder: its cell side, its settings, its report side
    ("analysis", "imports", "design"),  # the sweep's report; imported judgements; what a planned design can detect
    ("run", "cli", "sweep_outcome"),  # the sweep runner and plan mode, the command, the sweep's end
)
# Pairs in one layer where the first may still not import the second: stage code runs inside fine-tuning, never the
# reverse, and the cell writes no W&B run (the runner does).
APART = {("cell", "finetune"), ("cell", "tracking")}


def layer_unit(module: str) -> str:
    """The LAYERS name a module falls under: the most specific that matches."""
    rest = module.partition(".")[2]
    found = [n for names in LAYERS for n in names
             if (rest.startswith(n[:-1]) if n.endswith(".*") else rest == n or (n and rest.startswith(n + ".")))]
    assert found, f"{module} is in no layer: place its package in LAYERS"
    return max(found, key=len)


def layer_of(module: str) -> int:
    unit = layer_unit(module)
    return next(i for i, names in enumerate(LAYERS) if unit in names)


def layer_violations(graph: dict) -> list:
    """Every import that runs up the layers, or joins a pair kept APART: (importer, imported)."""
    return sorted((name, dep) for name, deps in graph.items() for dep in deps
                  if layer_of(dep) > layer_of(name) or (layer_unit(name), layer_unit(dep)) in APART)


def test_no_import_runs_up_the_layers():
    graph = import_graph()
    assert {layer_unit(m) for m in graph} >= {n for names in LAYERS for n in names}  # every layer name is in use
    assert layer_violations(graph) == []


def test_the_layer_check_finds_a_planted_upward_import():
    assert layer_unit("selfpref_sweep.measurements") == "measurements"
    assert layer_unit("selfpref_sweep.measurements.placebo.placebo_cell") == "measurements.*"
    assert layer_violations({"selfpref_sweep.config.spec": {"selfpref_sweep.cell.summaries"},
                             "selfpref_sweep.cell.results": {"selfpref_sweep.measurements"},
                             "selfpref_sweep.cell.inputs": {"selfpref_sweep.finetune.prepare"},
                             "selfpref_sweep.records.schema": {"selfpref_sweep.errors"}}) == [
        ("selfpref_sweep.cell.inputs", "selfpref_sweep.finetune.prepare"),
        ("selfpref_sweep.config.spec", "selfpref_sweep.cell.summaries")]


# ------------------------------------------------------------------------------ one name, one meaning
# Module-level ALL_CAPS names that several modules bind on purpose, to the same kind of value and one meaning: the
# attributes a measurement's report side or a report section module defines for its readers (NAME, SECTION, ITEMS,
# PACKAGE, TEXT, ...), a backend's BACKEND_VERSION, the registries' REGISTRY. They pass the check below on their
# own (one kind of value); the list records that their repetition is deliberate, and exempts them should a module's
# value ever take another form.
SHARED_NAMES = {"ALPHA", "NAME", "SECTION", "PACKAGE", "TEXT", "ITEMS", "REGISTRY", "BACKEND_VERSION"}


def _value_kind(node: ast.AST) -> str:
    """What kind of value an expression makes, as far as its syntax says: str, number, bool, none, sequence (a list or
    a tuple), set, dict, 'call X' (an instance of X, or what X returns), 'name X' (another name's value), or the
    expression's node type."""
    if isinstance(node, ast.Constant):
        kind = type(node.value).__name__
        return {"int": "number", "float": "number", "NoneType": "none"}.get(kind, kind)
    if isinstance(node, ast.UnaryOp):
        return _value_kind(node.operand)
    if isinstance(node, ast.BinOp):
        left, right = _value_kind(node.left), _value_kind(node.right)
        return left if left == right else f"{left} {type(node.op).__name__} {right}"
    literal = {ast.JoinedStr: "str", ast.List: "sequence", ast.ListComp: "sequence", ast.Tuple: "sequence",
               ast.Set: "set", ast.SetComp: "set", ast.Dict: "dict", ast.DictComp: "dict"}
    if type(node) in literal:
        return literal[type(node)]
    if isinstance(node, ast.Call):
        callee = ast.unparse(node.func)
        return {"list": "sequence", "tuple": "sequence", "frozenset": "set", "set": "set", "dict": "dict",
                "str": "str", "int": "number", "float": "number"}.get(callee, f"call {callee}")
    if isinstance(node, ast.Name) and node.id == "__package__":
        return "str"
    return f"name {ast.unparse(node)}" if isinstance(node, (ast.Name, ast.Attribute)) else type(node).__name__


def _constants(path: Path):
    """(name, kind) of every ALL_CAPS name a module binds at its top level (`A = ...`, `A: T = ...`, `A, B = x, y`)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        pairs = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += zip(target.elts, node.value.elts, strict=False)
                else:
                    pairs.append((target, node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs.append((node.target, node.value))
        for target, value in pairs:
            if isinstance(target, ast.Name) and re.fullmatch(r"_?[A-Z][A-Z0-9_]*", target.id):
                yield target.id, _value_kind(value)


def constant_clashes(root: Path = PACKAGE) -> dict:
    """name -> {module: kind} for every ALL_CAPS name bound at module level, in two or more modules, to values of
    different kinds (SHARED_NAMES aside)."""
    seen: dict = {}
    for path in sorted(root.rglob("*.py")):
        for name, kind in _constants(path):
            seen.setdefault(name, {})[str(path.relative_to(root))] = kind
    return {name: where for name, where in seen.items()
            if name not in SHARED_NAMES and len(set(where.values())) > 1}


def test_no_constant_name_has_two_meanings():
    """A module-level ALL_CAPS name means one thing across the package: two modules may bind it only to the same
    kind of value (a string, a number, a sequence, a dict, an instance of one class, ...). A reader who meets
    `SCALES` or `EVALUATOR` then knows what it holds whichever module it came from, and one module's name can be
    imported in place of another's only where they mean the same. Names several modules bind on purpose are listed
    in SHARED_NAMES with why; kinds are read off the syntax (_value_kind), so a list and a tuple are one kind, and a
    name bound to another name is its own kind."""
    assert constant_clashes() == {}


def test_the_constant_check_finds_a_planted_clash(tmp_path):
    (tmp_path / "a.py").write_text('EVALUATOR = "gpt4"\nNAME = "a"\nLIMIT = 3\n_ROWS = [1]\n')
    (tmp_path / "b.py").write_text('EVALUATOR = {"gpt4": "gpt4"}\nNAME = ("b",)\nLIMIT = 2.5\n_ROWS = (2,)\n')
    assert constant_clashes(tmp_path) == {"EVALUATOR": {"a.py": "str", "b.py": "dict"}}
