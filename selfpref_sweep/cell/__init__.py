"""One cell of the experiment matrix, as a pipeline of stages over typed data:

    articles -> summaries (own, other) -> pairs -> judge requests -> answer distributions -> scores -> record

Each stage is the module named after it (articles, summaries, pairs, judging, scoring, results; `inputs`
prepares stages 1-3 once). The sweep runner (selfpref_sweep/run/) composes them with fine-tuning, the measurements,
the cell's files and W&B run, and plan mode runs the same stages with a stand-in model (`preflight` holds its checks).
Datasets are read by `dataset_loaders`, prompts rendered by `prompts`. The cell imports neither fine-tuning nor the
runner (tests/test_architecture.py)."""
