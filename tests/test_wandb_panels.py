"""W&B comparison panels built offline with wandb-workspaces, the publish command, and what a cell run logs."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("wandb_workspaces")
import wandb  # noqa: E402
import wandb_workspaces.reports.v2 as wr  # noqa: E402

from selfpref_sweep.analysis.tracking import wandb_panels as P  # noqa: E402
from selfpref_sweep.config import WandbConfig
from selfpref_sweep.tracking import CellTracker, summary_metrics  # noqa: E402

CELLS = [{"evaluator": e, "source": s, "dataset": "paper_xsum", "setting": "pairwise", "label": "none",
          "finetune_task": t, "finetune_dataset": None, "finetune_n_articles": n, "transfer": "none"}
         for e in ("qwen05", "smollm135") for s in ("human", "paper_gpt4")
         for t, n in (("none", None), ("recognition", 2))]


def spec(entity=None):
    return P.make_spec(group="outputs_multirun_2026-11-23_10-00-00", project="selfpref_sweep", entity=entity,
                       cell_blocks=CELLS, metrics=["recognition/mean", "preference/mean", "tokens/prompt"],
                       regression_markdown={"Cell-level fit": "| slope |\n| --- |\n| 0.5 |"},
                       analysis_tables=["tables/regression_cells"], plots=["plots/preference_vs_recognition"])


def test_spec_names_the_grid_axes_that_vary():
    s = spec()
    assert s["axes"] == ["evaluator", "source", "finetune_task", "finetune_n_articles"]
    assert s["evaluators"] == ["qwen05", "smollm135"] and s["n_cells"] == 8
    assert json.loads(json.dumps(s)) == s  # plain data: it is what the offline sweep saves


def test_workspace_panels_and_query():
    ws = P.build_workspace(spec("my-team"))
    assert (ws.entity, ws.project) == ("my-team", "selfpref_sweep")
    sections = {s.name: s.panels for s in ws.sections}
    scatter, = sections["Preference vs recognition"]
    assert isinstance(scatter, wr.ScatterPlot)
    assert (scatter.x.name, scatter.y.name) == ("recognition/mean", "preference/mean")
    bars = sections["Per evaluator × source"]
    assert all(isinstance(b, wr.BarPlot) for b in bars)
    assert [m.name for m in bars[0].metrics] == ["recognition/mean"] and bars[0].max_runs_to_show == 8
    assert {b.groupby.name for b in bars[2:]} == {"cell.evaluator", "cell.source"}
    pc, = sections["Grid axes"]
    assert [c.metric.name for c in pc.columns] == ["cell.evaluator", "cell.source", "cell.finetune_task",
                                                   "cell.finetune_n_articles", "recognition/mean", "preference/mean"]
    table, = sections["Items"]
    assert isinstance(table, wr.WeavePanelSummaryTable) and table.table_name == "items"
    # The runset is the sweep's cell runs: its group and job type.
    wire = json.dumps(P.rendered(ws))
    assert '"name": "group"}, "op": "=", "value": "outputs_multirun_2026-11-23_10-00-00"' in wire
    assert '"name": "jobType"}, "op": "=", "value": "cell"' in wire
    assert '"xAxis": "summary:recognition/mean"' in wire


def test_report_holds_the_tables_plots_and_comparisons():
    report = P.build_report(spec())
    assert report.entity == P.OFFLINE_ENTITY  # built offline without asking W&B for a default entity
    markdown = [b.text for b in report.blocks if isinstance(b, wr.MarkdownBlock)]
    assert markdown == ["| slope |\n| --- |\n| 0.5 |"]
    grids = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    analysis_grid = grids[0]
    query = str(analysis_grid.runsets[0].filters)
    assert "Metric(\"Group\") == 'outputs_multirun_2026-11-23_10-00-00'" in query
    assert query.endswith("Metric(\"JobType\") == 'analysis'")
    media, table = analysis_grid.panels
    assert media.media_keys == ["plots/preference_vs_recognition"] and table.table_name == "tables/regression_cells"
    kinds = {type(p) for g in grids[1:] for p in g.panels}
    assert {wr.ScatterPlot, wr.BarPlot, wr.ParallelCoordinatesPlot, wr.WeavePanelSummaryTable} <= kinds
    assert all(str(g.runsets[0].filters).endswith("Metric(\"JobType\") == 'cell'") for g in grids[1:])


def test_publish_without_a_spec_is_a_clear_error(tmp_path, capsys):
    assert P.publish_main([str(tmp_path)]) == 1
    assert "run the analysis first" in capsys.readouterr().err
    (tmp_path / P.SPEC_FILE).write_text('{"format": "something else"}')
    assert P.publish_main([str(tmp_path)]) == 1
    assert "not a selfpref_sweep panel specification" in capsys.readouterr().err


def test_publish_dry_run_rebuilds_from_the_saved_spec(tmp_path, capsys):
    P.write_spec(tmp_path, spec())
    assert P.publish_main([str(tmp_path), "--dry-run", "--entity", "me"]) == 0
    out = capsys.readouterr().out
    assert "Grid axes: ParallelCoordinatesPlot" in out and "MarkdownBlock" in out


class RecordingRun:
    def __init__(self, tmp_path):
        self.id, self.dir = "abc123", str(tmp_path / "files")
        self.defined, self.logged, self.artifacts = {}, [], []
        self.config = SimpleNamespace(update=lambda d, allow_val_change=False: self.logged.append(("config", d)))
        self.summary = {}

    def define_metric(self, name, summary=None):
        self.defined[name] = summary

    def log(self, payload):
        self.logged.append(("log", payload))

    def log_artifact(self, artifact):
        self.artifacts.append(artifact)


def test_cell_run_declares_every_metric_and_logs_its_files(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"article_id": "a"}\n')
    summary = {"status": "complete", "cell": CELLS[0], "recognition": {"mean": 0.6, "ci_low": 0.5, "n": 3},
               "tokens": {"prompt": 10, "completion": 2}, "model_calls": 5}
    tracker = CellTracker(WandbConfig(mode="disabled"), tmp_path, name="qwen05-vs-human", group="g", config={})
    tracker.run, tracker.wandb = RecordingRun(tmp_path), wandb
    assert tracker.log_cell(summary, [{"article_id": "a", "recognition_score": 0.6}]) == tracker.run.dir
    assert tracker.run.defined == {k: "last" for k in summary_metrics(summary)}
    assert set(tracker.run.defined) == {"recognition/mean", "recognition/ci_low", "recognition/n", "tokens/prompt",
                                        "tokens/completion", "model_calls"}
    assert ("config", {"cell": CELLS[0]}) in tracker.run.logged
    artifact, = tracker.run.artifacts
    assert artifact.type == "cell-results" and set(artifact.manifest.entries) == {"results.jsonl", "summary.json"}
    written = json.loads(Path(artifact.manifest.entries["summary.json"].local_path).read_text())
    assert written == {**summary, "wandb_dir": tracker.run.dir}  # the summary.json the cell writes
