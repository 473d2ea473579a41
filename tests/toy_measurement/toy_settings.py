"""The toy measurement's settings (judge.measurements.toy.*): defaults and allowed values, written once here."""

from __future__ import annotations

from dataclasses import dataclass

from selfpref_sweep.schema_fields import NON_NEGATIVE_INT, one_of, ranged


@dataclass
class ToySettings:
    mode: str = one_of("off", "on", "off")
    min_word_gap: int = ranged(1, NON_NEGATIVE_INT)  # pairs whose word counts differ by less have no right answer
