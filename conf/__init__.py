# Makes conf/ importable as selfpref_sweep._conf in an installed package (Hydra reads it via pkg://).
