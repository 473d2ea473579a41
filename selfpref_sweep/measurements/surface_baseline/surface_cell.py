"""A surface-feature authorship baseline: how well own summaries can be told from other summaries by length,
punctuation and lexical features alone, with no model asked.

If a logistic regression on such features picks the own summary as often as the judge does, the judge's
"recognition" needs no more than those features. The formulation is pairwise, as the judge's question is:
per item the feature difference own - other (label 1) and its negation (label 0); a standardized logistic
regression without intercept (so swapping the two summaries exactly flips its answer) is cross-validated with
GroupKFold over articles, so no article is ever in both the training and the held-out part. Reported: the
share of items whose held-out P(own) is above 1/2 (a tie counts 1/2) with its Wilson interval, the AUROC over
both presentations, and the largest standardized coefficients of a fit on every item, for the reader.
Deterministic: the folds follow the items' order and the solver has a fixed random_state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...cell.pairs import Pair
from ...config import Switch
from ...stats.classifier_metrics import auroc, hit, proportion
from .. import Measurement, Stage, block, number, settings

NAME = "surface_baseline"
TOO_FEW = "too few articles for k-fold"
EMPTY_SUMMARY = "empty_summary"  # an own or other summary with no text: no features (counted)
RANDOM_STATE = 0
N_TOP_COEFFICIENTS = 5

PUNCTUATION = {",": "comma", ".": "period", ";": "semicolon", ":": "colon", "!": "exclamation",
               "?": "question_mark", '"': "double_quote", "'": "apostrophe", "-": "hyphen", "(": "open_paren",
               ")": "close_paren"}
FEATURES: tuple[str, ...] = ("words", "characters", "mean_word_length", "sentences",
                             *(f"{name}_per_char" for name in PUNCTUATION.values()),
                             "digit_share", "uppercase_share", "type_token_ratio", "stopword_share",
                             "flesch_reading_ease")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")  # letters and digits, with inner apostrophes ("don't")
# A sentence ends at . ! or ? (a closing quote or bracket may follow) before a space or the end; at least one.
_SENTENCE_END = re.compile(r"[.!?]+[\"'’”)\]]*(?=\s|$)")


def surface_features(text: str) -> list[float]:
    """The summary's features, in the order of FEATURES."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from ...finetune.labels import reading_ease  # textstat with its dictionary offline (one home for it)

    words = [w.lower() for w in _WORD.findall(text)]
    n_chars, n_words = len(text), max(1, len(words))
    letters = [ch for ch in text if ch.isalpha()]
    sentences = max(1, len(_SENTENCE_END.findall(text)))
    return [float(len(words)), float(n_chars), sum(map(len, words)) / n_words, float(sentences),
            *(text.count(mark) / n_chars for mark in PUNCTUATION),
            sum(ch.isdigit() for ch in text) / n_chars,
            sum(ch.isupper() for ch in letters) / max(1, len(letters)),
            len(set(words)) / n_words, sum(w in ENGLISH_STOP_WORDS for w in words) / n_words,
            reading_ease(text)]


def design(pairs: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, groups): per item the feature difference own - other (y 1), then every item's negation (y 0);
    groups are the article ids, so an item's two presentations always share a fold."""
    diff = np.array([np.subtract(surface_features(p.own), surface_features(p.other)) for p in pairs], dtype=float)
    ids = np.array([p.article_id for p in pairs], dtype=object)
    return (np.vstack([diff, -diff]), np.r_[np.ones(len(pairs)), np.zeros(len(pairs))].astype(int),
            np.r_[ids, ids])


def article_folds(n_folds: int):
    """The cross-validation splitter: GroupKFold with articles as groups."""
    from sklearn.model_selection import GroupKFold

    return GroupKFold(n_splits=n_folds)


def classifier():
    """Standardize, then a logistic regression without intercept: the data are symmetric (each difference
    and its negation), so an intercept could only be a position bias, which the question has none of."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(fit_intercept=False, max_iter=1000,
                                                              random_state=RANDOM_STATE))


def out_of_fold(X: np.ndarray, y: np.ndarray, groups: np.ndarray, n_folds: int) -> tuple[np.ndarray, np.ndarray]:
    """(P(own) per item from the fold that held its article out, that fold's index per item). P(own) averages
    the item's two presentations: P(label 1 | own - other) and 1 - P(label 1 | other - own)."""
    from sklearn.model_selection import cross_val_predict

    splitter = article_folds(n_folds)
    proba = cross_val_predict(classifier(), X, y, groups=groups, cv=splitter, method="predict_proba")[:, 1]
    fold = np.empty(len(y), dtype=int)
    for k, (_, test) in enumerate(splitter.split(X, y, groups)):
        fold[test] = k
    n = len(y) // 2
    return 0.5 * (proba[:n] + 1.0 - proba[n:]), fold[:n]


def top_coefficients(X: np.ndarray, y: np.ndarray, n_top: int = N_TOP_COEFFICIENTS) -> list[dict[str, Any]]:
    """The largest standardized coefficients (by size) of a fit on every item; > 0: own has more of it."""
    model = classifier().fit(X, y)
    coef = model[-1].coef_[0]
    order = np.argsort(-np.abs(coef), kind="stable")[:n_top]
    return [{"feature": FEATURES[i], "coefficient": float(coef[i])} for i in order]


@dataclass
class SurfaceStage:
    """The baseline's work for a cell: its usable pairs, the items left out and why, the folds, and the
    reason it cannot run although on (too few articles), if any."""

    pairs: list[Pair]
    excluded: dict[str, str] = field(default_factory=dict)
    folds: int = 5
    not_run: str | None = None
    matrix: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # design(pairs), once computed


def baseline_stage(judge_settings: Any, pairs: Sequence[Pair]) -> tuple[bool, str, SurfaceStage]:
    """(on?, why, the stage): judge.surface_baseline; auto is on where the cell has at least 2 x folds usable
    items (one per article), on with fewer than `folds` runs nothing and records why."""
    mode = Switch(settings(judge_settings, NAME) or Switch.auto)
    folds = int(judge_settings.surface_folds)
    usable = [p for p in pairs if p.own.strip() and p.other.strip()]
    kept = {p.article_id for p in usable}
    stage = SurfaceStage(usable, {p.article_id: EMPTY_SUMMARY for p in pairs if p.article_id not in kept}, folds)
    count = f"{len(usable)} usable articles, judge.surface_folds={folds}"
    if mode == Switch.off:
        return False, f"judge.{NAME}=off", stage
    if mode == Switch.auto and len(usable) < 2 * folds:
        return False, f"{TOO_FEW}: {count} (judge.{NAME}=auto needs at least {2 * folds})", stage
    if len(usable) < folds:
        stage.not_run = f"{TOO_FEW}: {count} needs at least {folds}"
    return True, f"judge.{NAME}={mode.value}: {count}", stage


def run_baseline(stage: SurfaceStage) -> dict[str, dict[str, Any]]:
    """article id -> the item's record: its held-out P(own) and the fold that held it out ({} when the
    baseline cannot run)."""
    if stage.not_run or not stage.pairs:
        return {}
    stage.matrix = X, y, groups = design(stage.pairs)
    p_own, fold = out_of_fold(X, y, groups, stage.folds)
    return {p.article_id: {"p_own": float(q), "fold": int(k)} for p, q, k in zip(stage.pairs, p_own, fold, strict=True)}


def summarize_baseline(stage: SurfaceStage, records: Mapping[str, dict[str, Any]], reason: str,
                       confidence: float) -> dict[str, Any]:
    """summary.json's block: accuracy on held-out articles with its Wilson interval, AUROC over both
    presentations, the counts, the folds, the features and the top coefficients."""
    out: dict[str, Any] = {"enabled": True, "reason": stage.not_run or reason, "formulation": "pairwise",
                           "n": len(records), "n_excluded": len(stage.excluded),
                           "exclusions": _counts(stage.excluded.values()), "folds": stage.folds,
                           "features": list(FEATURES), "confidence": confidence}
    if not records:
        return {**out, "accuracy": proportion([], confidence), "auroc": auroc([], []), "top_coefficients": []}
    p_own = np.array([records[p.article_id]["p_own"] for p in stage.pairs])
    X, y, _ = stage.matrix or design(stage.pairs)
    # AUROC over both presentations: P(label 1) of (own - other) is p_own, of (other - own) is 1 - p_own.
    return {**out, "accuracy": proportion([hit(q, 0.5) for q in p_own], confidence),
            "auroc": {**auroc(y.astype(bool), np.r_[p_own, 1.0 - p_own]), "score": "held-out P(own)"},
            "top_coefficients": top_coefficients(X, y)}


def _counts(reasons) -> dict[str, int]:
    out: dict[str, int] = {}
    for why in reasons:
        out[why] = out.get(why, 0) + 1
    return out


def format_baseline(summary_block: dict[str, Any] | None) -> str | None:
    """The block's one line in the printed cell result."""
    if not summary_block:
        return None
    head = "  surface baseline"
    acc = block(summary_block, "accuracy")
    if not summary_block.get("enabled") or acc.get("value") is None:
        state = "off" if not summary_block.get("enabled") else "not run"
        return f"{head}  {state} ({summary_block.get('reason')})"
    auc = number(block(summary_block, "auroc").get("value"))
    top = ", ".join(f"{c['feature']} {c['coefficient']:+.2f}" for c in summary_block.get("top_coefficients", [])[:3])
    return (f"{head}  accuracy {acc['value']:.3f} [{acc['ci_low']:.3f}, {acc['ci_high']:.3f}] on held-out "
            f"articles, AUROC {'n/a' if auc != auc else f'{auc:.3f}'}  (n={summary_block.get('n')}, "
            f"{summary_block.get('folds')} folds; top: {top})")


class SurfaceBaselineMeasurement(Measurement):
    """The baseline as a measurement plug-in: no judge calls; per item its held-out P(own), in summary.json the
    accuracy, AUROC and top coefficients."""

    report_module = ".surface_report"  # its report side (the analysis imports it)

    name = item_key = summary_key = NAME
    prefix = "sb"
    omit_missing = True  # only the usable items of a cell where it ran have a record
    cell_column_names = ("sb_enabled", "sb_accuracy", "sb_accuracy_ci_low", "sb_accuracy_ci_high", "sb_auroc",
                         "sb_n", "sb_folds", "sb_top_features", "sb_reason")
    item_column_names = ("sb_p_own",)

    def prepare(self, inputs, judge, judge_cfg) -> Stage:
        enabled, reason, state = baseline_stage(inputs.spec.judge, inputs.pairs.pairs)
        return Stage(enabled, reason, state=state)

    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> dict[str, Any]:
        return run_baseline(stage.state)

    def summarize(self, stage: Stage, inputs, n_items: int) -> dict[str, Any]:
        return summarize_baseline(stage.state, stage.records, stage.reason, float(inputs.spec.bootstrap.confidence))

    def format(self, summary_block: dict[str, Any] | None) -> str | None:
        return format_baseline(summary_block)

    def cell_columns(self, summary_block: dict[str, Any]) -> dict[str, Any]:
        acc = block(summary_block, "accuracy")
        top = summary_block.get("top_coefficients") or []
        return {"sb_enabled": None if not summary_block else bool(summary_block.get("enabled")),
                "sb_accuracy": number(acc.get("value")), "sb_accuracy_ci_low": number(acc.get("ci_low")),
                "sb_accuracy_ci_high": number(acc.get("ci_high")),
                "sb_auroc": number(block(summary_block, "auroc").get("value")), "sb_n": number(summary_block.get("n")),
                "sb_folds": number(summary_block.get("folds")),
                "sb_top_features": ", ".join(f"{c.get('feature')} {number(c.get('coefficient')):+.2f}"
                                             for c in top if isinstance(c, dict)),
                "sb_reason": str(summary_block.get("reason") or "")}

    def item_columns(self, record: Any) -> dict[str, Any]:
        return {"sb_p_own": number((record if isinstance(record, dict) else {}).get("p_own"))}

    def view(self, record: Any) -> dict[str, Any] | None:
        return None if not isinstance(record, dict) else {"surface baseline P(own)": record.get("p_own"),
                                                          "held out in fold": record.get("fold")}
