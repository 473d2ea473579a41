"""How well the analysis recovers known truths: the planted-bias simulator, its coverage study, and the
calibration labels the report reads from that study."""

__all__ = ["calibration", "coverage", "coverage_mode", "design", "simulate"]
