"""The report kit: what the analysis and the measurements' report sides share, below both (it imports neither)."""

# Its modules are its public surface, each imported where it is used (figures imports matplotlib).
__all__ = ["controls", "figures", "formatting", "grouping", "items", "method_texts", "regression"]
