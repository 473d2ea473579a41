"""Every estimate the report prints, from a sweep's items: the fits' points, the regressions, the fine-tune tests,
the paired and pooled Δs and the joint article resample (the coverage study measures the same)."""

__all__ = ["arms", "estimates", "finetune_tests", "fit", "length_control", "paired", "paper_trend", "per_source",
           "positive_control", "resample", "units"]
