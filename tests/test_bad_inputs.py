"""Bad input, as a careless user would give it, through the command line (`python run.py ...`).

Every case ends in one of two ways: a clear message on stderr that names what is wrong (the key, the value
and the valid range or keys, or the file and the offending id) with no Python traceback; or a finished cell
whose summary.json names and counts what it excluded or warns about. The evaluator is the test suite's
deterministic backend (tests/fakes.py), so no weights are needed.

Most cases run the command line's own entry point (`selfpref_sweep.cli.main`, what run.py calls) inside the test
process, with run.py's arguments, environment, stdout and stderr, and its exit status from SystemExit: a fresh
Python process per case spent 3-5 s importing (about 5 minutes of CI on 2 cores) to test the same code.
`test_the_real_command_line` runs `python run.py` itself for one case of each kind.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAKE_BACKEND, REPO

ARTICLES = {"a1": "The first article. It has two sentences.", "a2": "The second article. It is short.",
            "a3": "The third article. It ends here."}
SUMMARIES = {"a1": "First.", "a2": "Second.", "a3": "Third."}


ENV = {"SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "disabled"}
UNSET = ("SELFPREF_PAPER_DATA", "HYDRA_FULL_ERROR")


def run_cli(tmp_path: Path, *overrides: str, multirun: bool = False, subprocess_: bool = False):
    """run.py's command line with the fake evaluator, in this process (or as `python run.py` with
    subprocess_=True); returns (a CompletedProcess: exit status, stdout, stderr; the run's output folder)."""
    run_dir = tmp_path / "run"
    env = {**ENV, "SELFPREF_STORE": str(tmp_path / "calls.sqlite")}
    args = [*(["-m"] if multirun else []), "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
            "show_progress=false", f"hydra.run.dir={run_dir}", *overrides]
    if subprocess_:
        full_env = {k: v for k, v in {**os.environ, **env}.items() if k not in UNSET}
        return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=full_env, capture_output=True,
                              text=True, timeout=120), run_dir
    return _in_process(args, env), run_dir


def _in_process(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """cli.main() as run.py calls it: argv, environment and working folder set, stdout and stderr captured
    (Hydra's log handlers are made during the run, so they write there too), the exit status from SystemExit.
    What a process would start fresh is reset: Hydra's global state, the sweep's failed-cell record, the
    root logger's handlers and the model pool."""
    from hydra.core.global_hydra import GlobalHydra

    from selfpref_sweep import cli, sweep_outcome
    from selfpref_sweep.models.pool import POOL

    out, err, status = io.StringIO(), io.StringIO(), 0
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        for key in UNSET:
            mp.delenv(key, raising=False)
        mp.setattr(sys, "argv", ["run.py", *args])
        mp.chdir(REPO)
        mp.setattr(sweep_outcome, "_failed", [])
        mp.setattr(sweep_outcome, "_damaged_stores", [])
        GlobalHydra.instance().clear()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                cli.main()
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            GlobalHydra.instance().clear()
            root.handlers[:] = handlers
            root.setLevel(level)
            POOL.clear()
    return subprocess.CompletedProcess(["run.py", *args], status, out.getvalue(), err.getvalue())


def assert_clear_error(proc, *words: str) -> str:
    """Failed, without a traceback, with a message naming every one of `words`."""
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    for word in words:
        assert word in proc.stderr, (word, proc.stderr[-2000:])
    return proc.stderr


def finished_summary(proc, run_dir: Path) -> dict:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    return json.loads((run_dir / "summary.json").read_text())


def paper_root(tmp_path: Path, articles=None, sources: dict[str, object] | None = None, raw: dict[str, bytes] = None
               ) -> Path:
    """A dataset in the paper's layout: articles/xsum_train_articles.json and one summaries file per source.
    `raw` writes exact bytes instead (relative path -> bytes)."""
    root = tmp_path / "paper"
    (root / "articles").mkdir(parents=True)
    (root / "summaries" / "xsum").mkdir(parents=True)
    files = {"articles/xsum_train_articles.json": json.dumps(ARTICLES if articles is None else articles).encode()}
    for key, content in (sources if sources is not None else {"human": SUMMARIES, "gpt4": SUMMARIES}).items():
        files[f"summaries/xsum/xsum_train_{key}_responses.json"] = json.dumps(content).encode()
    files.update(raw or {})
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    return root


def paper_args(root: Path, *more: str):
    return ("dataset=paper_xsum", f"dataset.root={root}", *more)


# ------------------------------------------------------------------ configuration: ranges and keys
# Through the command line: a SelfprefError is one paragraph on stderr and exit status 2.
@pytest.mark.parametrize("override,words", [
    ("summaries.max_new_tokens=0", ["summaries.max_new_tokens=0", "integer >= 1"]),
    ("dataset.n_articles=-2", ["dataset.n_articles=-2", "integer >= 1 or null"]),
    ("dataset.offset=-1", ["dataset.offset=-1", "integer >= 0"]),
    ("judge.min_answer_mass=7", ["judge.min_answer_mass=7", "[0, 1]"]),
    ("bootstrap.confidence=1.5", ["bootstrap.confidence=1.5", "(0, 1)"]),
    ("bootstrap.n_resamples=0", ["bootstrap.n_resamples=0", ">= 1"]),
    ("evaluator.top_logprobs=50", ["evaluator.top_logprobs=50", "[0, 20]"]),
    ("wandb.mode=onlin", ["wandb.mode='onlin'", "offline, online, disabled"]),
    ("setting.questions=[recogniton]", ["recogniton", "recognition, preference"]),
    # keys added with +: the schema is closed, so a typo is named along with the valid keys
    ("+judge.min_mass=0.2", ["judge.min_mass", "min_answer_mass"]),
    ("+dataset.n_article=3", ["dataset.n_article", "Did you mean dataset.n_articles"]),
    ("+seeds=3", ["Unknown config key seeds", "seed"]),
])
def test_bad_config_value_or_key_is_a_clear_error(tmp_path, override, words):
    proc, run_dir = run_cli(tmp_path, override)
    assert proc.returncode == 2
    assert_clear_error(proc, "error:", *words)
    assert not (run_dir / "summary.json").exists()


def test_the_real_command_line(tmp_path):
    """`python run.py` itself, in a fresh process: a bad value, bad data and a sweep with a bad cell end as the
    in-process cases do (exit status 2, 2 and 1; the message on stderr; no traceback)."""
    proc, run_dir = run_cli(tmp_path, "summaries.max_new_tokens=0", subprocess_=True)
    assert proc.returncode == 2
    assert_clear_error(proc, "error:", "summaries.max_new_tokens=0", "integer >= 1")
    root = paper_root(tmp_path, raw={"articles/xsum_train_articles.json": b'{"a1": "text",'})
    proc, _ = run_cli(tmp_path, *paper_args(root), subprocess_=True)
    assert proc.returncode == 2
    assert_clear_error(proc, "not valid JSON", "xsum_train_articles.json")
    sweep = tmp_path / "sweep"
    proc, _ = run_cli(tmp_path, "dataset.n_articles=-2,2", f"hydra.sweep.dir={sweep}",
                      "hydra.callbacks.analysis.enabled=false", multirun=True, subprocess_=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert "SWEEP FAILED: 1 of 2 cells failed (1 x ConfigError)" in proc.stderr, proc.stderr[-2000:]


# The rest of the ranges, in process (the same validate_config the entry calls): fast.
@pytest.mark.parametrize("override,words", [
    ("dataset.n_articles=0", ["dataset.n_articles=0", ">= 1 or null"]),
    ("judge.min_answer_mass=nan", ["judge.min_answer_mass=nan", "[0, 1]"]),
    ("judge.min_answer_mass=-0.1", ["judge.min_answer_mass=-0.1", "[0, 1]"]),
    ("bootstrap.confidence=0", ["bootstrap.confidence=0", "(0, 1)"]),
    ("evaluator.max_concurrency=0", ["evaluator.max_concurrency=0", ">= 1"]),
    ("evaluator.context_tokens=0", ["evaluator.context_tokens=0", ">= 1 or null"]),
    ("evaluator.timeout_s=-5", ["evaluator.timeout_s=-5", "> 0"]),
    ("evaluator.max_retries=-1", ["evaluator.max_retries=-1", ">= 0"]),
    ("articles.max_tokens=0", ["articles.max_tokens=0", ">= 1 or null"]),
    ("articles.chars_per_token=0", ["articles.chars_per_token=0", "> 0"]),
    ("finetune_task.lora.dropout=1.5", ["finetune_task.lora.dropout=1.5", "[0, 1)"]),
    ("finetune_task.n_articles=0", ["finetune_task.n_articles=0", ">= 1 or null"]),
    ("finetune_task.lr=0", ["finetune_task.lr=0", "> 0"]),
    ("setting.questions=[]", ["setting.questions", "at least one"]),
    ("dataset.task=summarize", ["dataset.task='summarize'", "xsum, cnn"]),
    ("+evaluator.context_token=512", ["evaluator.context_token", "context_tokens"]),
    ("+bootstrap.resamples=10", ["bootstrap.resamples", "n_resamples"]),
])
def test_every_range_and_closed_node_is_checked(compose_cfg, override, words):
    from selfpref_sweep.config.validation import validate_config
    from selfpref_sweep.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg([override]))
    for word in words:
        assert word in str(err.value)


def test_valid_configs_pass_and_every_numeric_field_has_a_range(compose_cfg):
    from selfpref_sweep.config.validation import unchecked_numeric_fields, validate_config

    assert unchecked_numeric_fields() == []
    for overrides in ([], ["dataset.n_articles=null", "judge.min_answer_mass=0", "+label.display_names.x=Y"],
                      ["evaluator=openai_compatible", "source=gpt4"], ["setting=individual"],
                      ["finetune_task=recognition", "finetune_dataset=demo", "articles.max_tokens=null"]):
        validate_config(compose_cfg(overrides))  # open Dict nodes (display_names) take any key


@pytest.mark.parametrize("override,words", [
    ("dataset.n_articles=abc", ["dataset.n_articles", "abc"]),  # wrong types on the command line
    ("dataset.n_articles=1.5", ["dataset.n_articles", "1.5"]),
    ("judge.min_answer_mass=high", ["judge.min_answer_mass", "high"]),
    ("plan=maybe", ["plan", "maybe"]),
    ("articles.too_long=chop", ["too_long", "truncate", "refuse"]),  # enum: the valid values are listed
    ("setting=pairwse", ["pairwse", "pairwise", "individual"]),  # an unknown choice lists the options
    ("judge.min_mass=0.2", ["judge.min_mass", "+judge.min_mass"]),  # without +: Hydra refuses it itself
])
def test_wrong_type_or_choice_is_refused_by_the_schema(tmp_path, override, words):
    proc, _ = run_cli(tmp_path, override)
    assert_clear_error(proc, *words)


def test_several_problems_are_named_together(tmp_path):
    proc, _ = run_cli(tmp_path, "judge.min_answer_mass=7", "dataset.n_articles=-2", "+judge.min_mass=0.2")
    assert_clear_error(proc, "judge.min_answer_mass=7", "dataset.n_articles=-2", "judge.min_mass")


def test_a_sweep_records_a_bad_cell_and_goes_on(tmp_path):
    sweep = tmp_path / "sweep"
    proc, _ = run_cli(tmp_path, "dataset.n_articles=-2,2", f"hydra.sweep.dir={sweep}",
                      "hydra.callbacks.analysis.enabled=false", multirun=True)
    # The good cell ran; the sweep still ends with exit status 1 and one paragraph naming the failure.
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert "dataset.n_articles=-2" in (sweep / "0" / "cell.error.txt").read_text()
    assert json.loads((sweep / "1" / "summary.json").read_text())["n_items"] == 2
    assert "SWEEP FAILED: 1 of 2 cells failed (1 x ConfigError)" in proc.stderr, proc.stderr[-2000:]
    assert "0/cell.error.txt" in proc.stderr


# ----------------------------------------------------------------------------- counts: warnings
def test_more_articles_than_the_dataset_has_is_a_counted_warning(tmp_path):
    proc, run_dir = run_cli(tmp_path, *paper_args(paper_root(tmp_path), "dataset.n_articles=100"))
    s = finished_summary(proc, run_dir)
    assert s["n_items"] == 3
    assert s["warnings"] == ["dataset.n_articles=100 but dataset 'paper_xsum' has 3 articles: judging 3."]
    assert s["warnings"][0] in proc.stdout  # printed too


def test_an_offset_that_leaves_fewer_is_a_counted_warning(tmp_path):
    proc, run_dir = run_cli(tmp_path, *paper_args(paper_root(tmp_path), "dataset.n_articles=2", "dataset.offset=2"))
    s = finished_summary(proc, run_dir)
    assert s["n_items"] == 1
    assert s["warnings"] == ["dataset.n_articles=2 but dataset 'paper_xsum' has 3 articles (1 after skipping the "
                             "first 2): judging 1."]


def test_exactly_what_was_asked_gives_no_warning(tmp_path):
    proc, run_dir = run_cli(tmp_path, *paper_args(paper_root(tmp_path), "dataset.n_articles=2", "dataset.offset=1"))
    s = finished_summary(proc, run_dir)
    assert s["n_items"] == 2 and s["warnings"] == []


def test_an_offset_past_the_end_is_a_clear_error(tmp_path):
    proc, _ = run_cli(tmp_path, *paper_args(paper_root(tmp_path), "dataset.offset=5"))
    assert_clear_error(proc, "selected no articles", "offset=5")


# ------------------------------------------------------------------- data files: shapes and ids
def test_an_article_file_that_is_a_json_list(tmp_path):
    root = paper_root(tmp_path, articles=[{"id": "a1", "article": "x"}])
    proc, _ = run_cli(tmp_path, *paper_args(root))
    assert_clear_error(proc, "must be a JSON object", "not a JSON list", "xsum_train_articles.json")


def test_a_summary_file_that_is_a_json_list(tmp_path):
    root = paper_root(tmp_path, sources={"human": SUMMARIES, "gpt4": ["First.", "Second.", "Third."]})
    proc, _ = run_cli(tmp_path, *paper_args(root, "source=paper_gpt4"))
    assert_clear_error(proc, "The gpt4 summaries file must be a JSON object", "xsum_train_gpt4_responses.json")


def test_an_empty_json_object_as_articles(tmp_path):
    proc, _ = run_cli(tmp_path, *paper_args(paper_root(tmp_path, articles={})))
    assert_clear_error(proc, "holds no articles", "xsum_train_articles.json")


def test_duplicate_article_ids_in_one_object(tmp_path):
    dup = b'{"a1": "The first article.", "a2": "The second.", "a1": "The first again."}'
    root = paper_root(tmp_path, raw={"articles/xsum_train_articles.json": dup})
    proc, _ = run_cli(tmp_path, *paper_args(root))
    assert_clear_error(proc, "'a1' twice", "xsum_train_articles.json")


def test_duplicate_ids_in_a_summary_file(tmp_path):
    dup = b'{"a1": "First.", "a2": "Second.", "a3": "Third.", "a2": "Second again."}'
    root = paper_root(tmp_path, raw={"summaries/xsum/xsum_train_gpt4_responses.json": dup})
    proc, _ = run_cli(tmp_path, *paper_args(root, "source=paper_gpt4"))
    assert_clear_error(proc, "'a2' twice", "xsum_train_gpt4_responses.json")


@pytest.mark.parametrize("value,kind", [(42, "a number"), (["text"], "a list"), ({"text": "x"}, "an object"),
                                        (True, "a boolean")])
def test_an_article_that_is_not_text_names_the_id(tmp_path, value, kind):
    proc, _ = run_cli(tmp_path, *paper_args(paper_root(tmp_path, articles={**ARTICLES, "a2": value})))
    assert_clear_error(proc, f"has {kind} for id 'a2'", "xsum_train_articles.json")


def test_a_summary_that_is_not_text_names_the_file_and_id(tmp_path):
    root = paper_root(tmp_path, sources={"human": SUMMARIES, "gpt4": {**SUMMARIES, "a3": {"summary": "x"}}})
    proc, _ = run_cli(tmp_path, *paper_args(root, "source=paper_gpt4"))
    assert_clear_error(proc, "an object for id 'a3'", "xsum_train_gpt4_responses.json")


def test_non_utf8_and_broken_json(tmp_path):
    root = paper_root(tmp_path, raw={"articles/xsum_train_articles.json": b'{"a1": "caf\xe9 au lait."}'})
    proc, _ = run_cli(tmp_path, *paper_args(root))
    assert_clear_error(proc, "not UTF-8", "xsum_train_articles.json")
    (root / "articles" / "xsum_train_articles.json").write_text('{"a1": "unterminated')
    proc, _ = run_cli(tmp_path, *paper_args(root))
    assert_clear_error(proc, "not valid JSON", "xsum_train_articles.json")


def test_a_dataset_root_that_is_a_file_missing_or_unset(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a dataset")
    proc, _ = run_cli(tmp_path, "dataset=paper_xsum", f"dataset.root={a_file}")
    assert_clear_error(proc, "is not a folder", "notes.txt")
    proc, _ = run_cli(tmp_path, "dataset=paper_xsum", f"dataset.root={tmp_path / 'nowhere'}")
    assert_clear_error(proc, "is not a folder")
    proc, _ = run_cli(tmp_path, "dataset=paper_xsum")
    assert_clear_error(proc, "dataset.root=PATH")
    (tmp_path / "empty_root").mkdir()
    proc, _ = run_cli(tmp_path, "dataset=paper_xsum", f"dataset.root={tmp_path / 'empty_root'}")
    assert_clear_error(proc, "article file not found")


def test_an_unknown_source_key(tmp_path):
    proc, _ = run_cli(tmp_path, *paper_args(paper_root(tmp_path), "source=paper_gpt4", "source.key=gpt5"))
    assert_clear_error(proc, "'gpt5'", "paper_gpt4")  # names the missing key and the sources the data has
    proc, _ = run_cli(tmp_path, *paper_args(paper_root(tmp_path / "b"), "source=paper_gpt5"))
    assert_clear_error(proc, "paper_gpt5", "paper_gpt4")  # an unknown choice: Hydra lists the options


def test_the_evaluator_as_its_own_source(tmp_path):
    proc, _ = run_cli(tmp_path, "source=fake_other", "source.model.name=fake_eval")
    assert_clear_error(proc, "is the evaluator itself")


# ------------------------------------------------------------ missing texts: counted exclusions
def test_null_and_empty_texts_are_counted_exclusions(tmp_path):
    articles = {**ARTICLES, "a4": None, "a5": "   ", "a6": "The sixth article. Fine."}
    gpt4 = {"a1": "First.", "a2": None, "a3": "", "a4": "Fourth.", "a5": "Fifth."}  # a6: no entry at all
    root = paper_root(tmp_path, articles=articles, sources={"human": SUMMARIES, "gpt4": gpt4})
    proc, run_dir = run_cli(tmp_path, *paper_args(root, "source=paper_gpt4", "dataset.n_articles=null"))
    s = finished_summary(proc, run_dir)
    assert s["n_items"] == 6 and s["n_excluded"] == 5
    assert s["exclusions"] == {"empty_article": 2, "missing_summary:paper_gpt4": 2, "empty_summary:paper_gpt4": 1}
    assert s["recognition"]["n"] == 1
    items = {json.loads(line)["article_id"]: json.loads(line) for line in
             (run_dir / "results.jsonl").read_text().splitlines()}
    assert items["a4"]["recognition"]["exclusion_reason"] == "empty_article"  # null article
    assert items["a2"]["preference"]["exclusion_reason"] == "missing_summary:paper_gpt4"  # null summary
    assert items["a3"]["preference"]["exclusion_reason"] == "empty_summary:paper_gpt4"


def test_a_huge_article_is_cut_to_the_token_budget_and_flagged(tmp_path):
    huge = "The long article goes on. " * 20000  # 100,000 words
    root = paper_root(tmp_path, articles={**ARTICLES, "a2": huge})
    proc, run_dir = run_cli(tmp_path, *paper_args(root, "articles.max_tokens=1000"))
    s = finished_summary(proc, run_dir)
    assert s["n_truncated_articles"] == 1 and s["n_excluded"] == 0
    items = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [it["article_truncated"] for it in items] == [False, True, False]
    proc, run_dir = run_cli(tmp_path / "refuse", *paper_args(root, "articles.max_tokens=1000",
                                                             "articles.too_long=refuse"))
    assert finished_summary(proc, run_dir)["exclusions"] == {"article_too_long": 1}
