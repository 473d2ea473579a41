"""The placebo question's settings: fields of `judge` (judge.placebo, judge.placebo_question)."""

from __future__ import annotations

from dataclasses import dataclass

from ...schema_fields import Switch


@dataclass
class PlaceboSettings:
    # Question sensitivity (a placebo question): a third question on the same pairs, both orders, whose right
    # answer is computable from the text and not about authorship (prompts.pairwise.<placebo_question>).
    # auto: on where the judge's calls cost nothing, as the competence control.
    placebo: Switch = Switch.auto
    placebo_question: str = "length"
