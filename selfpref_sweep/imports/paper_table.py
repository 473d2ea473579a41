"""paper_table.csv: the authors' numbers beside the project's reading of the same items, one row per
(evaluator, dataset, setting, label, question, source) and a pooled row per group (source = all).

- ``authors_mean``: the authors' stored scores averaged as their notebook does. Pairwise and label: the mean of
  the stored per-pair score over their rows (pooled: over all pairs). Individual: per article the ratio
  s_own / (s_own + s_other) of the stored values, 0/0 dropped, averaged over articles (pooled: the mean of the
  per-source ratios).
- ``mean``, ``ci_low``, ``ci_high``: the project's reading on the paper's probability scale (0.5 = no bias) with
  its 95% interval clustered by article (CR2, Bell–McCaffrey df, taken on the logit scale as the cell's own
  intervals are). Pooled: each source weighted alike, the items an article gives across sources kept together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..records.schema import Verdict
from ..stats.clustered import article_mean_ci, cell_means_t, logit_interval
from . import readings as R

TABLE_FILE = "paper_table.csv"
ALL = "all"
CONFIDENCE = 0.95


def _authors(verdicts: Sequence[Verdict]) -> list[float]:
    return [float(v.extra[R.IMPORTED_SCORE]) for v in verdicts if R.finite(v.extra.get(R.IMPORTED_SCORE)) is not None]


def _reading(verdicts: Sequence[Verdict]) -> str:
    counts = Counter(str(v.extra.get(R.READING)) for v in verdicts if not v.excluded)
    return "; ".join(f"{k}" if len(counts) == 1 else f"{k} ({n})" for k, n in counts.most_common())


def _mean(values: Sequence[float]) -> Any:
    return float(np.mean(values)) if len(values) else None


def _ci(est: float, low: float, high: float) -> tuple[Any, Any, Any]:
    """The mean and its interval taken on the logit scale (once: as a cell's own); None where there is none."""
    low, high = logit_interval(est, low, high)
    return est, (None if np.isnan(low) else float(low)), (None if np.isnan(high) else float(high))


class TableBuilder:
    """Rows of paper_table.csv, added one (evaluator, dataset, setting, label, question) group at a time."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, meta: Mapping[str, Any], question: str,
            by_source: Mapping[str, Sequence[tuple[str, Verdict]]], pooled_authors: str) -> None:
        """``by_source``: source -> (article, verdict) of every item; ``pooled_authors``: "pairs" (the mean over
        all pairs) or "sources" (the mean of the per-source means)."""
        per_source_authors = []
        values, cells, articles = [], [], []
        for k, (source, items) in enumerate(sorted(by_source.items())):
            verdicts = [v for _, v in items]
            scored = [(a, v.score) for a, v in items if not v.excluded and v.score is not None]
            authors = _authors(verdicts)
            per_source_authors.append(authors)
            row = self._row(meta, question, source, len(scored), len(items) - len(scored), authors,
                            _mean(authors), _reading(verdicts))
            if scored:
                est, low, high = article_mean_ci([s for _, s in scored], [a for a, _ in scored], CONFIDENCE)
                row.update(zip(("mean", "ci_low", "ci_high"), _ci(est, low, high), strict=True))
            self.rows.append(row)
            values += [s for _, s in scored]
            articles += [a for a, _ in scored]
            cells += [k] * len(scored)
        self._pooled(meta, question, by_source, per_source_authors, pooled_authors, values, cells, articles)

    def _pooled(self, meta, question, by_source, per_source_authors, pooled_authors, values, cells, articles):
        verdicts = [v for items in by_source.values() for _, v in items]
        everyone = [a for authors in per_source_authors for a in authors]
        authors_mean = (_mean(everyone) if pooled_authors == "pairs"
                        else _mean([np.mean(a) for a in per_source_authors if a]))
        n_scored = len(values)
        row = self._row(meta, question, ALL, n_scored, len(verdicts) - n_scored, everyone, authors_mean,
                        _reading(verdicts))
        present = sorted(set(cells))
        if n_scored and len(present) == len(by_source):
            codes = np.searchsorted(present, cells)
            weights = np.full(len(present), 1.0 / len(present))
            est, low, high, _ = cell_means_t(np.asarray(values, float), codes, np.asarray(articles, dtype=str),
                                             weights, CONFIDENCE)
            row.update(zip(("mean", "ci_low", "ci_high"), _ci(est, low, high), strict=True))
        elif n_scored:
            row["note"] = "a source has no scored item: no pooled reading (never a mean over part of the sources)"
        self.rows.append(row)

    @staticmethod
    def _row(meta, question, source, n, excluded, authors, authors_mean, reading) -> dict[str, Any]:
        return {**meta, "question": question, "source": source, "n": n, "excluded": excluded,
                "authors_n": len(authors), "authors_mean": authors_mean, "mean": None, "ci_low": None,
                "ci_high": None, "reading": reading, "note": ""}
