"""What can a design detect? ``python -m selfpref_sweep.design``: for a planned sweep (adapters per arm, articles,
a training SD), the smallest effects its tests detect at 80% power, the chance that an equivalence word can be
reached when the truth is 0, and the smallest design that reaches a target (detectable.py)."""
