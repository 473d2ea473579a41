"""The sweep runner: a cell's stages (cell/) composed with fine-tuning (finetune/), the measurements
(measurements/), the call store and W&B (tracking.py).

`runner.run_cell` runs one cell and writes its record; `runner.judge_cell` is the judging part both it and plan mode
use; `plan.plan_cell` runs the same composition with stand-in models that count calls, tokens and cost instead of
making them, and `plan.PlanSummaryCallback` prints a grid's plan. It sits above every package it composes, so none of
them imports it (tests/test_architecture.py: the layers); the command (cli.py) calls it."""
