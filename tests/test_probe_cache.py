"""The local backend's load-time probe verdicts are remembered between processes (models/local/probes.py)."""

from __future__ import annotations

import json

from selfpref_sweep.models.base import ModelIdentity
from selfpref_sweep.models.local.probes import FILE, device_kind, probe_key, remembered

IDENTITY = ModelIdentity(name="qwen05", backend="local", weights="gguf:x", dtype="bfloat16")


def test_a_verdict_is_probed_once_then_read(tmp_path):
    calls = []

    def probe():
        calls.append(1)
        return True

    key = probe_key(IDENTITY, "cpu", "split_free", "block512")
    assert remembered(str(tmp_path), key, probe) is True
    assert remembered(str(tmp_path), key, probe) is True
    assert len(calls) == 1 and json.loads((tmp_path / FILE).read_text()) == {key: True}


def test_the_key_holds_what_the_verdict_depends_on():
    key = probe_key(IDENTITY, "cpu", "rows_invariant", "alone64min16")
    for part in ("rows_invariant", "alone64min16", "gguf:x", "bfloat16", device_kind("cpu"), "threads"):
        assert part in key
    other = ModelIdentity(name="qwen05", backend="local", weights="gguf:x", dtype="float32")
    assert probe_key(other, "cpu", "rows_invariant", "alone64min16") != key
    assert probe_key(IDENTITY, "cpu", "rows_invariant", "fixed32x64") != key


def test_a_damaged_file_is_probed_again_and_rewritten(tmp_path):
    (tmp_path / FILE).write_text("{not json")
    key = probe_key(IDENTITY, "cpu", "head_rows_invariant", "rows16")
    assert remembered(str(tmp_path), key, lambda: False) is False
    assert json.loads((tmp_path / FILE).read_text()) == {key: False}
    (tmp_path / FILE).write_text(json.dumps({key: "yes"}))  # not a verdict: probed again
    assert remembered(str(tmp_path), key, lambda: True) is True


def test_an_unwritable_cache_still_gives_the_verdict(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    key = probe_key(IDENTITY, "cpu", "split_free", "block512")
    assert remembered(str(blocker / "models"), key, lambda: True) is True


def test_no_cache_folder_means_probed_each_time_and_nothing_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    key = probe_key(IDENTITY, "cpu", "split_free", "block512")
    assert remembered("", key, lambda: True) is True and not (tmp_path / FILE).exists()
