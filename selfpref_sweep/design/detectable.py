"""The smallest detectable effects of a planned sweep, from the variance model the analysis uses.

An arm's Δ (fine-tuned − base, log-odds) is the mean over its K adapters of each adapter's Δ over N articles.
Its variance has two parts (analysis/estimate/arms.py, stats/replicates.replicate_contrast): the articles',
s²/N (every adapter judged the same articles, so article noise does not average over adapters; s is the SD of an
article's paired difference), and training's, σ_t²/K (σ_t the SD of an adapter's Δ about its recipe's). The test
is t on the Welch-Satterthwaite df of the two parts (N − 1 and K − 1). With K ≥ 2 the analysis estimates σ_t² from
the adapters' spread, median-unbiased on K − 1 df, so its interval is wider than the true SE on average; the power
here averages over that spread (Test._estimated_power), and so matches what the analysis' test does (checked
against it by simulation in tests/test_design_tool.py).

What the estimate speaks for decides which variance applies:

- with K ≥ 2 the recipe: both parts, the training part on K − 1 df;
- with K = 1 and a training SD the user states (with its source), the recipe: both parts, the stated SD taken as
  known;
- with K = 1 and no stated SD, this training run only: the articles' part. No recipe-level figure is given.

The interaction (recognition fine-tunes' slope of preference on recognition minus the controls') is read at the
arm level: each arm's point averages its datasets, whose training deviation is one (the adapter is one training
run on every dataset), so a point's variance is s_p²/(N·D) + σ_t²/K plus the arms' own scatter about the line,
σ_a². With R recognition and C control arms whose recognition values have SD x_sd, Var = v·(1/Sxx_R + 1/Sxx_C),
Sxx = (arms − 1)·x_sd², on R + C − 4 df. An approximation for planning (equal spacing, no measurement error in
recognition), not the report's corrected fit.

Power is that of the two-sided t test at ``alpha`` with the noncentral t; the smallest detectable effect solves
power = ``power``. The chance of an equivalence word (TOST within ±margin) is computed where the truth is 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

ALPHA, POWER = 0.05, 0.80


@dataclass(frozen=True)
class Design:
    """A planned sweep, log-odds throughout. ``article_sd``: SD of one article's paired Δ (fine-tuned − base) over
    articles; ``point_sd``: SD of one article's preference about the line (the interaction's points);
    ``training_sd``: SD of an adapter's Δ about its recipe's (None: not stated); ``arm_sd``: the arms' own scatter
    about the line beyond articles and training."""

    adapters: int
    articles: int
    training_sd: float | None = None
    training_sd_source: str = ""
    article_sd: float = 0.6
    point_sd: float = 0.6
    datasets: int = 1
    recognition_arms: int = 3
    control_arms: int = 3
    recognition_sd: float = 0.4
    arm_sd: float = 0.0

    def __post_init__(self) -> None:
        if self.adapters < 1 or self.articles < 2 or self.datasets < 1:
            raise ValueError("adapters >= 1, articles >= 2 and datasets >= 1 are needed")
        if min(self.article_sd, self.point_sd, self.recognition_sd, self.arm_sd) < 0 or (
                self.training_sd is not None and self.training_sd < 0):
            raise ValueError("SDs must be >= 0")

    @property
    def recipe(self) -> bool:
        """Whether the design's figures speak for the recipe (replicates, or a stated training SD)."""
        return self.adapters >= 2 or self.training_sd is not None

    @property
    def speaks_for(self) -> str:
        if self.adapters >= 2:
            return f"the recipe ({self.adapters} adapters per arm; training SD estimated from them)"
        if self.training_sd is not None:
            source = f", {self.training_sd_source}" if self.training_sd_source else ""
            return f"the recipe (one adapter per arm; stated training SD {self.training_sd:g}{source})"
        return "this training run only (one adapter per arm, no stated training SD): no recipe-level figure"


_NODES = 200  # quantiles of the training spread's chi-square the power averages over


@dataclass(frozen=True)
class Test:
    """A test's standard error and df under the design. With ``tau_df`` > 0 the training part of the variance is
    estimated, as the analysis does (stats/replicates.replicate_contrast): τ² from the adapters' spread on
    ``tau_df`` df, scaled by its chi-square's median (median-unbiased); then the SE and df vary with the spread,
    and the power averages over it (``v_art``, ``v_train``: the two parts' true variances)."""

    se: float
    df: float
    tau_df: float = 0.0
    v_art: float = 0.0
    v_train: float = 0.0
    df_art: float = math.inf

    def power(self, effect: float, alpha: float = ALPHA) -> float:
        if self.tau_df > 0:
            return self._estimated_power(effect, alpha)
        crit = float(stats.t.ppf(1 - alpha / 2, self.df))
        ncp = effect / self.se
        exact = float(stats.nct.sf(crit, self.df, ncp) + stats.nct.cdf(-crit, self.df, ncp))
        if math.isfinite(exact):
            return exact
        # scipy's noncentral t fails far in its tail or at very large df: the normal limit there
        return float(stats.norm.sf(crit - ncp) + stats.norm.cdf(-crit - ncp))

    def _estimated_power(self, effect: float, alpha: float) -> float:
        """The rejection rate where τ² is estimated (class doc): at each quantile of the spread's chi-square, the
        interval's SE and Welch df as the analysis would compute them, against the estimate's true spread."""
        q = stats.chi2.ppf((np.arange(_NODES) + 0.5) / _NODES, self.tau_df)
        v_train = self.v_train * q / float(stats.chi2.ppf(0.5, self.tau_df))
        total = self.v_art + v_train
        df = total ** 2 / (self.v_art ** 2 / self.df_art + v_train ** 2 / self.tau_df)
        half = stats.t.ppf(1 - alpha / 2, df) * np.sqrt(total)
        truth = math.sqrt(self.v_art + self.v_train)
        return float(np.mean(stats.norm.sf((half - effect) / truth) + stats.norm.cdf((-half - effect) / truth)))

    def detectable(self, power: float = POWER, alpha: float = ALPHA) -> float:
        """The smallest effect detected with probability ``power``."""
        crit = float(stats.t.ppf(1 - alpha / 2, self.df))
        hi = (crit + 4.0) * self.se  # power is near 1 there; far beyond, the noncentral t's tail underflows
        while self.power(hi, alpha) < power:
            hi *= 2
        return float(optimize.brentq(lambda e: self.power(e, alpha) - power, 0.0, hi))

    def equivalence_chance(self, margin: float, alpha: float = ALPHA) -> float:
        """P(TOST within ±margin at level alpha) where the truth is 0: both one-sided tests reject, i.e. the
        estimate lies within ±(margin − t_{1−α}·SE); the estimate is t-distributed about 0."""
        room = margin / self.se - float(stats.t.ppf(1 - alpha, self.df))
        return max(0.0, 2 * float(stats.t.cdf(room, self.df)) - 1) if room > 0 else 0.0


def _welch(v_art: float, df_art: float, v_train: float, df_train: float) -> float:
    if v_train <= 0:
        return df_art
    return (v_art + v_train) ** 2 / (v_art ** 2 / df_art + v_train ** 2 / df_train)


def arm_delta_test(d: Design) -> Test:
    """An arm's Δ (module doc): the articles' part, plus training's where the design speaks for the recipe."""
    v_art, df_art = d.article_sd ** 2 / d.articles, d.articles - 1
    if d.adapters >= 2:
        sd = d.training_sd or 0.0
        v_train = sd ** 2 / d.adapters
        return Test(math.sqrt(v_art + v_train), _welch(v_art, df_art, v_train, d.adapters - 1),
                    tau_df=d.adapters - 1 if v_train > 0 else 0.0, v_art=v_art, v_train=v_train, df_art=df_art)
    v_train = (d.training_sd or 0.0) ** 2  # stated: known, no df of its own
    return Test(math.sqrt(v_art + v_train), _welch(v_art, df_art, v_train, math.inf))


def interaction_test(d: Design) -> Test | None:
    """The slopes' difference at the arm level (module doc); None without two arms of each kind and a df."""
    r, c = d.recognition_arms, d.control_arms
    df = r + c - 4
    if r < 2 or c < 2 or df < 1 or d.recognition_sd <= 0:
        return None
    train = (d.training_sd or 0.0) ** 2 / d.adapters if d.recipe else 0.0
    v = d.point_sd ** 2 / (d.articles * d.datasets) + train + d.arm_sd ** 2
    sxx_r, sxx_c = (r - 1) * d.recognition_sd ** 2, (c - 1) * d.recognition_sd ** 2
    return Test(math.sqrt(v * (1 / sxx_r + 1 / sxx_c)), df)


def smallest_design(target: float, base: Design, max_adapters: int = 10, max_articles: int = 1000,
                    power: float = POWER) -> Design | None:
    """The design with the fewest judged adapter-articles (adapters × articles) whose arm Δ detects ``target``
    at ``power``, holding the rest of ``base``; None where none up to the limits does."""
    best: Design | None = None
    for k in range(1, max_adapters + 1):
        lo, hi = 2, max_articles
        trial = Design(**{**base.__dict__, "adapters": k, "articles": hi})
        if arm_delta_test(trial).detectable(power) > target:
            continue
        while hi - lo > 1:  # detectable effects shrink as articles grow: bisect
            mid = (lo + hi) // 2
            trial = Design(**{**base.__dict__, "adapters": k, "articles": mid})
            lo, hi = (lo, mid) if arm_delta_test(trial).detectable(power) <= target else (mid, hi)
        found = Design(**{**base.__dict__, "adapters": k, "articles": hi})
        if best is None or k * hi < best.adapters * best.articles:
            best = found
    return best


def describe(d: Design, margin: float, slope_margin: float, target: float | None, setting: str) -> list[str]:
    """The design's figures in lines (the command's output, and plan=true's)."""
    arm = arm_delta_test(d)
    run = arm_delta_test(Design(**{**d.__dict__, "adapters": 1, "training_sd": None}))
    lines = [f"design: {d.adapters} adapter(s) per arm, {d.articles} articles, {d.datasets} dataset(s), {setting}; "
             f"power {POWER:.0%}, two-sided alpha {ALPHA:g}, log-odds",
             f"speaks for: {d.speaks_for}",
             f"  one training run's Δ (articles only): smallest detectable {run.detectable():.3f} "
             f"(SE {run.se:.3f}, df {run.df:.0f})"]
    if d.recipe:
        lines.append(f"  the recipe's arm Δ: smallest detectable {arm.detectable():.3f} (SE {arm.se:.3f}, "
                     f"df {arm.df:.1f}); chance of 'within ±{margin:g}' where the truth is 0: "
                     f"{arm.equivalence_chance(margin):.2f}")
    inter = interaction_test(d)
    if inter is None:
        lines.append("  interaction: needs 2+ recognition and 2+ control arms, 5+ arms in all and a recognition spread")
    else:
        lines.append(f"  interaction (slope difference, arm level): smallest detectable {inter.detectable():.3f} "
                     f"(SE {inter.se:.3f}, df {inter.df:.0f}); chance of 'one common line' within ±{slope_margin:g} "
                     f"where the truth is 0: {inter.equivalence_chance(slope_margin):.2f}")
    if target is not None:
        best = smallest_design(target, d)
        lines.append(f"  smallest design whose arm Δ detects {target:g}: " +
                     (f"{best.adapters} adapter(s) x {best.articles} articles" if best is not None
                      else "none up to 10 adapters x 1000 articles"))
    return lines
