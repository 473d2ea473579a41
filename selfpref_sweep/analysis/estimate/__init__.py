"""Every estimate the report prints, from a sweep's items (the coverage study measures the same)."""

__all__ = ["arms", "estimates", "finetune_tests", "fit", "length_control", "paired", "paper_trend", "per_source",
           "positive_control", "resample", "units"]
