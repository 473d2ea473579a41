"""API keys never land in outputs, W&B files, the cache or logs."""

import os
import subprocess
import sys

from selfpref_sweep.tracking import REDACTED, redact
from tests.conftest import FAKE_BACKEND, REPO

SECRET = "sk-test-SECRET-d0n0tl3ak-1234567890"


def test_redact_hides_secret_looking_keys():
    cfg = {"evaluator": {"api_key": SECRET, "api_key_env": "OPENAI_API_KEY", "name": "gpt4"},
           "wandb": {"token": "abc"}, "list": [{"password": "p"}], "empty_secret": None}
    out = redact(cfg)
    assert out["evaluator"]["api_key"] == REDACTED and out["wandb"]["token"] == REDACTED
    assert out["list"][0]["password"] == REDACTED
    assert out["evaluator"]["name"] == "gpt4"
    assert SECRET not in repr(out)


def grep_tree(root, needle):
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            hits.append(path)
    return hits


def test_a_sweep_with_a_key_in_the_environment_writes_it_nowhere(tmp_path):
    env = {**os.environ, "SELFPREF_BACKENDS": FAKE_BACKEND, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "SELFPREF_STORE": str(tmp_path / "cache" / "calls.sqlite"), "OPENAI_API_KEY": SECRET,
           "WANDB_DIR": str(tmp_path / "wandb")}
    cmd = [sys.executable, "run.py", "-m", "hydra.searchpath=[file://tests/conf]", "evaluator=fake",
           "source=human,fake_other", "dataset.n_articles=2", "show_progress=false",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "sweep" / "0" / "summary.json").exists()
    assert list((tmp_path / "sweep").rglob("*.wandb")), "expected W&B offline files to search"
    assert grep_tree(tmp_path, SECRET) == []
    assert SECRET not in proc.stdout + proc.stderr


def test_redact_hides_secrets_only():
    cfg = {"evaluator": {"api_key_env": "OPENAI_API_KEY", "max_new_tokens": 100, "context_tokens": 32768,
                         "max_concurrency": 8, "apiKey": SECRET},
           "summaries": {"max_new_tokens": 100}, "tokens": {"prompt": 12, "completion": 3},
           "source": {"key": "gpt4", "name": "paper_gpt4"}, "OPENAI_API_KEY": SECRET, "hf_token": "hf_x",
           "wandb": {"token_count": 5, "access_token": "t0k"}, "note": SECRET,
           "ids": ["42c027e4ff9730fbb3de84c1af0d2c506e67c57f"]}
    out = redact(cfg)
    # Token counts, a variable's *name*, a source key and a hex article id are not secrets.
    assert out["evaluator"]["api_key_env"] == "OPENAI_API_KEY"
    assert out["evaluator"]["max_new_tokens"] == 100 and out["evaluator"]["context_tokens"] == 32768
    assert out["summaries"] == {"max_new_tokens": 100} and out["tokens"] == {"prompt": 12, "completion": 3}
    assert out["source"] == {"key": "gpt4", "name": "paper_gpt4"} and out["wandb"]["token_count"] == 5
    assert out["ids"] == cfg["ids"]
    # Values under keys that hold secrets, and key-shaped values anywhere, are.
    for path in (("evaluator", "apiKey"), ("OPENAI_API_KEY",), ("hf_token",), ("wandb", "access_token"), ("note",)):
        node = out
        for k in path:
            node = node[k]
        assert node == REDACTED, path
    assert SECRET not in repr(out)
