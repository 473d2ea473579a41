"""The placebo's verdict rule, shared by the cell (placebo_cell.py, summary.json's "alike") and the report
(placebo_report.py), which must not import the cell side. Pure Python and scipy: no model stack.

The question: on the items where all three questions made a choice, does preference agree with recognition
more often than the placebo does? Both agreements are read off the same items, so the comparison is paired:
McNemar's exact test on the discordant items (b: preference agrees and the placebo does not; c: the reverse),
two-sided at 5%. Its outcomes, said before reading them:

- it rejects with b > c: preference follows recognition more closely than the placebo does: the link is not
  just the judge answering every question alike (alike = False);
- it does not reject: the data cannot tell the two agreements apart, so the link may be the judge answering
  every question alike (alike = True); with few discordant items the test has little power, and the p beside
  the verdict says how close it came;
- preference agrees with recognition on half the items or fewer: there is no link to explain (None).
"""

from __future__ import annotations

import math
from typing import Optional

from scipy import stats

ALPHA = 0.05


def mcnemar_p(preference_only: int, placebo_only: int) -> float:
    """McNemar's exact two-sided p on the discordant counts (NaN without any; summary.json records null)."""
    n = preference_only + placebo_only
    return float(stats.binomtest(preference_only, n, 0.5).pvalue) if n > 0 else math.nan


def answers_alike(n: int, preference_agree: int, preference_only: int, placebo_only: int) -> Optional[bool]:
    """True: the judge answers these questions alike (not told apart); False: preference follows recognition
    more closely than the placebo (McNemar rejects, b > c); None: no item, or no link to explain."""
    if n <= 0 or preference_agree / n <= 0.5:
        return None
    p = mcnemar_p(preference_only, placebo_only)
    return not (math.isfinite(p) and p < ALPHA and preference_only > placebo_only)
