"""Familiarity's settings: fields of `judge` (judge.familiarity, judge.familiarity_reference)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...schema_fields import Switch

# judge.familiarity: auto = on where the judge's backend can score given text (local), off elsewhere (APIs).
FamiliarityMode = Switch


@dataclass
class FamiliaritySettings:
    # Familiarity, a rival explanation: the judge's mean token log-likelihood of each summary given the
    # article and the summarization prompt. auto: on where the judge's backend can score text (local).
    familiarity: FamiliarityMode = FamiliarityMode.auto
    # Cross-model familiarity: the same log-likelihoods scored by a second local model (a model config, e.g.
    # `+model@judge.familiarity_reference=smollm135`); null: none. The self-specific part is the judge's
    # own - other difference minus the reference's.
    familiarity_reference: Any | None = None
