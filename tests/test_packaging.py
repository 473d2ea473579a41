"""pyproject.toml agrees with the code: every package listed, every third-party import declared, console
scripts pointing at real functions, and the SLURM preset naming no extra that does not exist."""

import ast
import importlib
import sys

import tomllib

from tests.conftest import CONF, REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# import name -> distribution name, where they differ
DIST = {"yaml": "pyyaml", "hydra": "hydra-core", "sklearn": "scikit-learn", "wandb_workspaces": "wandb-workspaces"}


def _declared():
    """Every distribution the project names: its dependencies and its extras (an optional backend's package,
    imported lazily, is declared by its extra)."""
    reqs = PYPROJECT["project"]["dependencies"] + [r for extra in PYPROJECT["project"]["optional-dependencies"].values()
                                                   for r in extra]
    return {r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower() for r in reqs}


def _third_party_imports():
    names = set()
    for path in [REPO / "run.py", *(REPO / "selfpref_sweep").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("selfpref_sweep", "__future__")}


def test_every_imported_package_is_declared():
    declared = _declared()
    missing = sorted(n for n in _third_party_imports() if DIST.get(n, n).lower().replace("_", "-") not in declared)
    assert missing == []


def test_every_package_directory_is_listed():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "selfpref_sweep").rglob("__init__.py")}
    assert found <= listed and "selfpref_sweep._conf" in listed
    assert PYPROJECT["tool"]["setuptools"]["package-dir"]["selfpref_sweep._conf"] == "conf"
    depth = max(len(p.relative_to(CONF).parts) for p in CONF.rglob("*.yaml"))
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["selfpref_sweep._conf"]
    assert f"{'*/' * (depth - 1)}*.yaml" in globs  # the deepest config files ship too


def test_console_scripts_point_at_functions():
    scripts = PYPROJECT["project"]["scripts"]
    assert set(scripts) == {"selfpref-sweep", "selfpref-analysis"}
    for target in scripts.values():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func))


def test_wandb_bound_covers_reinit_finish_previous():
    wandb_req = next(r for r in PYPROJECT["project"]["dependencies"] if r.startswith("wandb>="))
    bound = tuple(int(x) for x in wandb_req.split(">=")[1].split("."))
    assert bound >= (0, 19, 10)


def test_launcher_presets_name_only_existing_extras():
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    for preset in (CONF / "hydra" / "launcher").glob("*.yaml"):
        text = preset.read_text()
        for token in text.split(".[")[1:]:
            assert token.split("]")[0] in extras, (preset.name, token)
