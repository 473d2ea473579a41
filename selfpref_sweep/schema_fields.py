"""Helpers for the typed schemas' fields: each setting declares its allowed values where it is defined.

A numeric field carries its range in its metadata (`ranged(default, COUNT)`), or says that any value of its type
is meaningful (`unbounded(0)`, e.g. a seed); a string field may carry its closed set of values
(`one_of("offline", "offline", "online", "disabled")`). config/validation.py reads them from there, so a
setting's default and its range are written once, beside it, in whatever module owns it (config/__init__.py for
the core; models/<backend>/<backend>_settings.py for a backend's, measurements/<name>/<name>_settings.py for a
measurement's). `composed` makes one schema of the core's fields and every component's (config.ModelConfig,
config.JudgeConfig). This module imports nothing of the package, so any of those may use it.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

RANGE, CHOICES = "range", "choices"  # the metadata keys


@dataclass(frozen=True)
class Range:
    """A closed or half-open interval of allowed numbers; None = unbounded on that side."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False  # for the wording only: the schema's type already enforces it

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            return (f"{kind} in {'(' if self.low_open else '['}{_num(self.low)}, "
                    f"{_num(self.high)}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {_num(self.high)}"
        return kind


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


COUNT = Range(low=1, integer=True)  # how many of something: at least one
NON_NEGATIVE_INT = Range(low=0, integer=True)  # offsets, retries, "0 = off" switches
POSITIVE = Range(low=0, low_open=True)  # rates, seconds
NON_NEGATIVE = Range(low=0)
PROBABILITY = Range(low=0, high=1)
OPEN_UNIT = Range(low=0, high=1, low_open=True, high_open=True)
ANY = Range()  # any value of the type is meaningful (seeds)


def ranged(default: Any, allowed: Range) -> Any:
    """A numeric field with its default and its allowed range."""
    return dataclasses.field(default=default, metadata={RANGE: allowed})


def unbounded(default: Any) -> Any:
    """A numeric field where any value of its type is meaningful (a seed)."""
    return dataclasses.field(default=default, metadata={RANGE: ANY})


def one_of(default: str, *values: str) -> Any:
    """A string field with a closed set of values."""
    return dataclasses.field(default=default, metadata={CHOICES: tuple(values)})


def _field(schema: type, name: str) -> dataclasses.Field | None:
    return next((f for f in dataclasses.fields(schema) if f.name == name), None)


def range_of(schema: type, name: str) -> Range | None:
    """The field's declared range (ANY for an unbounded one); None where it declares none."""
    f = _field(schema, name)
    return None if f is None else f.metadata.get(RANGE)


def choices_of(schema: type, name: str) -> tuple[str, ...] | None:
    f = _field(schema, name)
    return None if f is None else f.metadata.get(CHOICES)


class Switch(str, Enum):
    """A three-way setting: on, off, or auto (decided per use, see each one)."""

    auto = "auto"
    on = "on"
    off = "off"


def composed(name: str, parts: Sequence[type], core: type) -> type:
    """The dataclass `name`: the fields of each settings dataclass in `parts`, in that order, then `core`'s, with
    `core`'s docstring and module. Each field keeps its type, default and metadata (its range, its choices), so
    Hydra's structured config, validation and whatever serializes a config see exactly what a class inheriting from
    them all (`class name(*reversed(parts), core)`) would, without any of them being named as a base class: the
    components are listed in their registries (models/backends.py, measurements.MEASUREMENT_SETTINGS), and
    adding one edits no schema. A field name two of them declare is a TypeError naming both (a base class would
    have let one silently override the other)."""
    owners: dict[str, str] = {}
    fields = []
    for part in [*parts, core]:
        hints = typing.get_type_hints(part)
        for f in dataclasses.fields(part):
            if f.name in owners:
                raise TypeError(f"{name}: the setting {f.name!r} is declared by both {owners[f.name]} and "
                                f"{part.__module__}.{part.__qualname__}; rename one of them.")
            owners[f.name] = f"{part.__module__}.{part.__qualname__}"
            fields.append((f.name, hints[f.name], _copied(f)))
    cls = dataclasses.make_dataclass(name, fields, namespace={"__doc__": core.__doc__})
    cls.__module__ = core.__module__  # pickled by reference, as `module.name`
    return cls


def _copied(f: dataclasses.Field) -> Any:
    """A field declaration like `f` (its default or factory, flags and metadata), for another dataclass."""
    return dataclasses.field(default=f.default, default_factory=f.default_factory, init=f.init, repr=f.repr,
                             hash=f.hash, compare=f.compare, metadata=f.metadata)
