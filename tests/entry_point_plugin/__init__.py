"""A plug-in as another package would ship one: a backend in one file (longer_judge.py) and the entry points of
pyproject.toml, which register it and the toy measurement with selfpref_sweep without any environment variable.
tests/test_registry.py installs it the way pip would (its dist-info on sys.path)."""
