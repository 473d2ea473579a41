"""A sweep read from disk: its cells and items as frames, and each measurement's report side that reads them."""

__all__ = ["load", "report_modules"]
