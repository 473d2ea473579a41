"""One cell of the experiment matrix, as a pipeline of stages over typed data:

    articles -> summaries (own, other) -> pairs -> judge requests -> answer distributions -> scores -> record

Each stage is the module named after it (articles, summaries, pairs, judging, scoring, results; `inputs`
prepares stages 1-3 once), `runner` composes them with the cell's files and W&B run, and plan mode (`plan`,
`preflight`) runs the same stages with a stand-in model. Datasets are read by `dataset_loaders`, prompts
rendered by `prompts`."""
