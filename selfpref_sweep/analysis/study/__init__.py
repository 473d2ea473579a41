"""How well the analysis recovers known truths: the planted-bias simulator, its coverage study, its labels."""

__all__ = ["calibration", "coverage", "coverage_mode", "design", "simulate"]
