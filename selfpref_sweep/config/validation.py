"""One validation layer at the entry (run.py), before a cell plans or runs anything.

Hydra and the typed schema (config/__init__.py) already reject a wrong type (`dataset.n_articles=abc`), an
unknown choice (`evaluator=gtp4`) and a misspelt key without `+`. Two things get through them:

* values of the right type but out of range (`judge.min_answer_mass=7`, `dataset.n_articles=-2`);
* keys added with `+`: Hydra applies `+key=value` with OmegaConf's `force_add`, which lifts struct mode
  along the path, so `+judge.min_mass=0.2` lands in the typed `judge` node and is silently ignored.

`validate_config` walks the composed config alongside the schema's dataclasses: every numeric field declares
its range in its metadata where it is defined (schema_fields.py: `ranged`, or `unbounded` where any integer is
fine, like seeds), a few strings a closed set of values (`one_of`), and any key that a dataclass does not declare
is rejected, naming the valid ones. Dict-typed fields (`label.display_names`, `prompts.pairwise`, ...) stay
open: their keys are data. `judge.measurements.<name>` blocks are checked against the settings dataclass the named
measurement declares (measurements.settings_class), and a name no measurement is registered under is an error.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError
from ..measurements import MEASUREMENT_SETTINGS, registered, settings_class
from ..schema_fields import choices_of, range_of
from . import Config, JudgeConfig, enum_value


def validate_config(cfg: DictConfig) -> None:
    """Raise ConfigError naming every out-of-range value and unknown key (with the valid range or keys)."""
    problems: list[str] = []
    _check_node(cfg, Config, "", problems)
    problems += _cross_checks(cfg)
    if problems:
        many = len(problems) > 1
        raise ConfigError(("Invalid configuration: " if many else "") + " ".join(problems))


# --------------------------------------------------------------------------------------- the walk
# `Optional[X]` and `X | None` (PEP 604, what the schema's annotations use): two origins for the same union.
_UNIONS = (typing.Union, types.UnionType)


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in _UNIONS:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def schema_fields(schema: type) -> dict[str, Any]:
    """field name -> resolved type of a schema dataclass."""
    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema)}


def _value(node: DictConfig, key: str) -> tuple[bool, Any]:
    """(readable, value): values that are `???` or an unresolvable interpolation are left to the code that
    needs them, which names what to set."""
    if OmegaConf.is_missing(node, key):
        return False, None
    try:
        return True, node[key]
    except OmegaConfBaseException:
        return False, None


def _check_node(node: Any, schema: type, path: str, problems: list[str]) -> None:
    if not isinstance(node, DictConfig):
        return
    fields = schema_fields(schema)
    where = path.rstrip(".") or "the top level"
    for key in node:
        if key not in fields:
            _, value = _value(node, str(key))
            near = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean {path}{near[0]}?" if near else ""
            problems.append(f"Unknown config key {path}{key} (value {value!r}): {where} takes only "
                            f"{', '.join(fields)}.{hint}")
    for name, tp in fields.items():
        if name not in node:
            continue
        ok, value = _value(node, name)
        if not ok or value is None:
            continue
        tp = _unwrap_optional(tp)
        full = f"{path}{name}"
        if dataclasses.is_dataclass(tp):
            _check_node(value, tp, f"{full}.", problems)
        elif schema is JudgeConfig and name == "measurements":
            _check_plugin_settings(value, f"{full}.", problems)
        elif typing.get_origin(tp) is dict:
            inner = _unwrap_optional(typing.get_args(tp)[1])
            if dataclasses.is_dataclass(inner) and isinstance(value, DictConfig):
                for k in value:
                    ok_k, v = _value(value, str(k))
                    if ok_k:
                        _check_node(v, inner, f"{full}.{k}.", problems)
        elif range_of(schema, name) is not None:
            rng = range_of(schema, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not rng.contains(value):
                null = " or null" if _is_optional(schema, name) else ""
                problems.append(f"{full}={value} is out of range: it must be {rng.describe()}{null}.")
        elif choices_of(schema, name) is not None:
            valid = choices_of(schema, name)
            if str(enum_value(value)) not in valid:
                problems.append(f"{full}={value!r} is not valid: it must be one of {', '.join(valid)}.")


def _check_plugin_settings(blocks: Any, path: str, problems: list[str]) -> None:
    """judge.measurements.<name>: a registered measurement's settings, checked against its settings dataclass."""
    if not isinstance(blocks, DictConfig):
        return
    names = [m.name for m in registered()]
    for key in blocks:
        if str(key) not in names:
            problems.append(f"{path}{key} names no registered measurement: registered are "
                            f"{', '.join(names)} (add one with an entry point of the group "
                            f"selfpref_sweep.measurements, or $SELFPREF_MEASUREMENTS=name=module:Class).")
            continue
        # a built-in's settings are typed fields of judge (JudgeConfig), checked there; its open block is not read
        schema = None if str(key) in MEASUREMENT_SETTINGS else settings_class(str(key))
        ok, block = _value(blocks, str(key))
        if schema is None or not ok:
            continue
        before = len(problems)
        _check_node(block, schema, f"{path}{key}.", problems)
        if len(problems) == before:  # keys and ranges fine: the types must fit the dataclass too
            try:
                OmegaConf.merge(OmegaConf.structured(schema), block)
            except OmegaConfBaseException as exc:
                problems.append(f"{path}{key} does not fit {schema.__name__}: {str(exc).splitlines()[0]}")


def _is_optional(schema: type, name: str) -> bool:
    tp = schema_fields(schema)[name]
    return typing.get_origin(tp) in _UNIONS and type(None) in typing.get_args(tp)


# --------------------------------------------------------------------------------- across fields
def _cross_checks(cfg: DictConfig) -> list[str]:
    """Values valid alone but not together with the prompts they pick."""
    problems: list[str] = []
    try:
        prompts = cfg.prompts
        setting = str(enum_value(cfg.setting.name))
        questions = list(cfg.setting.questions)
    except OmegaConfBaseException:
        return problems
    if not questions:
        problems.append("setting.questions=[] is empty: it must list at least one question "
                        "(recognition, preference).")
    have = list((prompts.get(setting) or {}).keys())
    unknown = [q for q in questions if q not in have]
    if unknown:
        problems.append(f"setting.questions={questions} has {unknown}, which the {setting} setting has no "
                        f"prompt for: valid questions are {', '.join(have)}.")
    for group in ("dataset", "finetune_dataset"):
        node = cfg.get(group)
        if node is None:
            continue
        ok, task = _value(node, "task")
        tasks = list((prompts.get("summarize") or {}).keys())
        if ok and task not in tasks:
            problems.append(f"{group}.task={task!r} has no summarization prompt: valid tasks are "
                            f"{', '.join(tasks)}.")
    ok, competence = _value(cfg.judge, "competence") if "judge" in cfg else (False, None)
    # the control asks its question in the cell's setting (measurements/competence): that setting's prompt
    if ok and str(enum_value(competence)) != "off" and "competence" not in (prompts.get(setting) or {}):
        problems.append(f"judge.competence={enum_value(competence)} needs the prompt prompts.{setting}.competence, "
                        f"which prompts={prompts.get('name')} does not have: add it, or set judge.competence=off.")
    problems += _bad_patterns(cfg)
    return problems


def _bad_patterns(cfg: DictConfig) -> list[str]:
    """summaries.preamble_patterns that are not regular expressions."""
    ok, patterns = _value(cfg.summaries, "preamble_patterns") if "summaries" in cfg else (False, None)
    problems = []
    for i, pattern in enumerate((patterns if ok else None) or []):
        try:
            re.compile(str(pattern))
        except re.error as exc:
            problems.append(f"summaries.preamble_patterns[{i}]={str(pattern)!r} is not a regular expression "
                            f"({exc}).")
    return problems


def unchecked_numeric_fields() -> list[str]:
    """Numeric schema fields that declare no range, not even `unbounded` (the tests keep this empty)."""
    missing: list[str] = []
    seen: set = set()

    def visit(schema: type) -> None:
        if schema in seen:
            return
        seen.add(schema)
        for name, tp in schema_fields(schema).items():
            tp = _unwrap_optional(tp)
            if dataclasses.is_dataclass(tp):
                visit(tp)
            elif typing.get_origin(tp) is dict:
                inner = _unwrap_optional(typing.get_args(tp)[1])
                if dataclasses.is_dataclass(inner):
                    visit(inner)
            elif tp in (int, float) and range_of(schema, name) is None:
                missing.append(f"{schema.__name__}.{name}")

    visit(Config)
    return missing
