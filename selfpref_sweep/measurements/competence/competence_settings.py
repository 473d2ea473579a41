"""The judge-competence control's settings: fields of `judge` (judge.competence, judge.competence_threshold, ...),
each with its default and its allowed range; config.JudgeConfig is made of these and the other measurements'."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ...schema_fields import NON_NEGATIVE, NON_NEGATIVE_INT, PROBABILITY, Switch, ranged

# judge.competence: auto = on for local judges (free), off for API judges (each call costs).
CompetenceMode = Switch


class CompetenceSummaries(str, Enum):
    """Whose summaries the judge-competence control shows (the article's, and another article's)."""

    other = "other"  # the cell's source: a control per cell
    own = "own"  # the evaluator's own: the same control (and cached calls) for every source of a grid
    human = "human"  # the dataset's reference summaries


@dataclass
class CompetenceSettings:
    # The judge-competence control: "which summary is of this article?", the article's summary against
    # another article's summary from the same source, both orders. auto: on for local judges, off for API.
    competence: CompetenceMode = CompetenceMode.auto
    competence_summaries: CompetenceSummaries = CompetenceSummaries.other
    # at most this many articles get the control (seeded); 0 = every judged one
    competence_sample: int = ranged(0, NON_NEGATIVE_INT)
    # The pass rule, read on the log-odds scale (the content signal beyond the judge's position bias): the judge
    # passes when its mean log-odds of the right answer is at least this, its CI lies above 0, and at most
    # competence_max_excluded of the control's articles were excluded. 0.405 = logit(0.6).
    competence_threshold: float = ranged(0.405, NON_NEGATIVE)
    competence_max_excluded: float = ranged(0.2, PROBABILITY)
