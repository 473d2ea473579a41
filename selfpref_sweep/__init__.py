"""selfpref_sweep: do LLM evaluators recognize and favour their own generations?"""

__version__ = "0.1.0"
