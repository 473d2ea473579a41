"""Features of a stored summary text that both the fine-tuning labels and the analysis read: one definition, so
that what a control was trained on and what the report reads it by are the same count."""

from __future__ import annotations


def word_count(text: str) -> int:
    """Whitespace-separated words (the length control's and the positive control's measure)."""
    return len(text.split())
