"""The placebo's verdict rule, shared by the cell (placebo_cell.py, summary.json's "reading") and the report
(placebo_report.py), which must not import the cell side. Pure Python and scipy: no model stack.

The question: on the items where all three questions made a choice, does preference agree with recognition
more often than the placebo does? Both agreements are read off the same items, so the comparison is paired.
d is the share of items where only preference agrees (b of n) less the share where only the placebo agrees
(c of n): how much more often preference agrees with recognition than the placebo does. Two tests, each at 5%,
and their outcomes, said before reading them:

- **told apart**: McNemar's exact test on the discordant items (two-sided) rejects d = 0 with b > c. Preference
  follows recognition more closely than the placebo does: the link is not just the judge answering every
  question alike.
- **alike**: preference out-agrees the placebo by less than half of its own link beyond chance: d < s·L, with
  L = P(preference agrees with recognition) − 0.5 and s = ALIKE_SHARE (0.5). The placebo then follows recognition
  at least half as far beyond chance as preference does, so the link may be the judge answering every question
  alike. The margin is relative: an absolute one (0.10, before) bounded the link itself where the placebo agrees
  only at chance, and the same small link read "alike" or "apart" by chance alone. The test: a 97.5% upper bound
  on d (the difference of one-sided 98.75% Clopper-Pearson bounds on b/n and c/n) below s times a 97.5% lower
  bound on L (Clopper-Pearson on the preference agreements). Each bound fails at most 2.5% of the time, so "alike"
  where d ≥ s·L is said at most 5% of the time, at every n (conservative); with no discordant item and preference
  agreeing on every item it needs 23 items.
- **undetermined**: neither. The data can tell neither; the reading names what was missing (McNemar needs 6
  discordant items before it can reject at 5%; the bound, at the rates seen, about how many items).
- **no link**: preference agrees with recognition on half the items or fewer: there is nothing to explain.

A non-rejection of McNemar's test is never read as "alike": with 5 or fewer discordant items its exact p cannot
go below 0.0625, so it could not have rejected.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scipy import stats

ALPHA = 0.05
ALIKE_SHARE = 0.5  # "alike": preference out-agrees the placebo by less than this share of its own link beyond chance
APART, ALIKE, UNDETERMINED, NO_LINK = "apart", "alike", "undetermined", "no link"
MAX_ITEMS = 100_000  # beyond this, "no number of items would do"


def mcnemar_p(preference_only: int, placebo_only: int) -> float:
    """McNemar's exact two-sided p on the discordant counts (NaN without any; summary.json records null)."""
    n = preference_only + placebo_only
    return float(stats.binomtest(preference_only, n, 0.5).pvalue) if n > 0 else math.nan


def min_discordant(alpha: float = ALPHA) -> int:
    """The fewest discordant items with which McNemar's exact two-sided test can reject (6 at 5%)."""
    return next(m for m in range(1, 64) if 2 * 0.5 ** m < alpha)


def upper_bound(n: float, preference_only: float, placebo_only: float, alpha: float = ALPHA) -> float:
    """A 1 - alpha upper bound on d = P(only preference agrees) - P(only the placebo agrees) from n paired items:
    the upper Clopper-Pearson bound of b/n at alpha/2 less the lower bound of c/n at alpha/2 (non-integer counts
    allowed, for the items-needed projection)."""
    if n <= 0:
        return math.inf
    b, c, a = preference_only, placebo_only, alpha / 2
    upper_b = 1.0 if b >= n else float(stats.beta.ppf(1 - a, b + 1, n - b))
    lower_c = 0.0 if c <= 0 else float(stats.beta.ppf(a, c, n - c + 1))
    return upper_b - lower_c


def link_lower_bound(n: float, preference_agree: float, alpha: float = ALPHA) -> float:
    """A 1 − alpha/2 lower bound on preference's link beyond chance, P(preference agrees with recognition) − 0.5
    (Clopper-Pearson; non-integer counts allowed, for the items-needed projection)."""
    if n <= 0:
        return -math.inf
    low = 0.0 if preference_agree <= 0 else float(stats.beta.ppf(alpha / 2, preference_agree, n - preference_agree
                                                                  + 1))
    return low - 0.5


def alike_margin(n: float, preference_agree: float, share: float = ALIKE_SHARE, alpha: float = ALPHA) -> float:
    """The margin the bound on d must fall under to read "alike": ``share`` of the link's lower bound (0 where that
    bound does not exceed chance: then nothing reads alike)."""
    return share * max(0.0, link_lower_bound(n, preference_agree, alpha))


def _alike_holds(n: float, preference_agree: float, preference_only: float, placebo_only: float, share: float
                 ) -> bool:
    return upper_bound(n, preference_only, placebo_only, ALPHA / 2) < alike_margin(n, preference_agree, share)


def items_for_bound(n: int, preference_agree: int, preference_only: int, placebo_only: int,
                    share: float = ALIKE_SHARE) -> int | None:
    """About how many items, at the rates seen (no discordance: none), would bring the upper bound under the
    margin; None when the estimate itself is at or above the margin (no number of items would)."""
    if n <= 0 or (preference_only - placebo_only) / n >= share * (preference_agree / n - 0.5):
        return None
    rates = (preference_agree / n, preference_only / n, placebo_only / n)

    def holds(m: int) -> bool:
        return _alike_holds(m, *(r * m for r in rates), share)

    lo, hi = n, n
    while not holds(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_ITEMS:
            return None
    while hi - lo > 1:  # the bounds tighten as items grow at fixed rates: bisect
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if not holds(mid) else (lo, mid)
    return hi


@dataclass(frozen=True)
class PlaceboReading:
    """The rule's outcome on one cell, with the test figures printed beside it."""

    outcome: str | None  # APART, ALIKE, UNDETERMINED, NO_LINK; None: no item
    n: int
    preference_agree: int
    preference_only: int
    placebo_only: int
    mcnemar_p: float  # NaN without a discordant item
    upper: float  # the 97.5% upper bound on d
    margin: float  # ALIKE_SHARE times the 97.5% lower bound on the link (alike_margin)
    share: float = ALIKE_SHARE

    @property
    def difference(self) -> float:
        return (self.preference_only - self.placebo_only) / self.n if self.n else math.nan

    def evidence(self) -> str:
        """The test and its figure behind the outcome, in words (for the report and the cell's line)."""
        m = self.preference_only + self.placebo_only
        mcnemar = (f"McNemar p = {self.mcnemar_p:.2g} on {m} discordant item{'s' if m > 1 else ''}"
                   if math.isfinite(self.mcnemar_p) else "McNemar: no discordant item")
        bound = (f"97.5% upper bound on the difference {self.upper:.3f} against the margin {self.margin:.3f} ("
                 f"{self.share:g} of preference's link beyond chance at its 97.5% lower bound)")
        if self.outcome == APART:
            return mcnemar
        if self.outcome == ALIKE:
            return f"{bound}; {mcnemar}"
        if self.outcome == UNDETERMINED:
            return f"{mcnemar}; {bound}; {self.missing()}"
        return f"preference agrees with recognition on {self.preference_agree} of {self.n} items" if self.n \
            else "no item with a choice in all three questions"

    def missing(self) -> str:
        """What an undetermined reading lacked: discordant items for McNemar, items for the bound."""
        need = min_discordant()
        discordant = self.preference_only + self.placebo_only
        parts = [f"McNemar needs {need} discordant items to be able to reject, there were {discordant}"] \
            if discordant < need else []
        more = items_for_bound(self.n, self.preference_agree, self.preference_only, self.placebo_only, self.share)
        parts.append(f"the bound would need about {more} items at these rates, there were {self.n}"
                     if more is not None else
                     f"the difference seen, {self.difference:.2f}, is not below {self.share:g} of the link seen, so no "
                     "number of items would bring the bound under the margin")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {**asdict(self), "mcnemar_p": _finite(self.mcnemar_p), "upper": _finite(self.upper),
                "evidence": self.evidence()}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def read(n: int, preference_agree: int, preference_only: int, placebo_only: int,
         share: float = ALIKE_SHARE) -> PlaceboReading:
    """The rule on one cell's counts: n items with a choice in all three questions, preference agreeing with
    recognition on preference_agree of them, b and c discordant."""
    p, upper = mcnemar_p(preference_only, placebo_only), upper_bound(n, preference_only, placebo_only, ALPHA / 2)
    margin = alike_margin(n, preference_agree, share)
    if n <= 0:
        outcome = None
    elif preference_agree / n <= 0.5:
        outcome = NO_LINK
    elif math.isfinite(p) and p < ALPHA and preference_only > placebo_only:
        outcome = APART
    elif upper < margin:
        outcome = ALIKE
    else:
        outcome = UNDETERMINED
    return PlaceboReading(outcome, n, preference_agree, preference_only, placebo_only, p, upper, margin, share)
