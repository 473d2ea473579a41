"""Batch-invariant judging: in a 16-bit type a request's numbers depend only on its own tokens, never on the
batch it shared or on what the prefix cache held, so a sweep that is killed and resumed (or split another way)
gives the numbers of one that ran through. The real-model tests run in bf16 where this machine computes it
natively (as `dtype: auto` would pick); elsewhere emulated bf16 is dozens of times slower, so they run the same
batch-invariant schedule in float32 (forced on), which checks the mechanism, not the bf16 kernels."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from selfpref_sweep.cell.judging import Pair, pairwise_requests
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models import model_identity
from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding, Message, ModelIdentity, SequenceRequest
from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.models.local import LocalModel
from tests.conftest import REPO


def _invariant_judge() -> list:
    from selfpref_sweep.models.local.precision import native_bf16

    dtype = "bfloat16" if native_bf16() else "float32"
    return ["evaluator=smollm135", f"evaluator.dtype={dtype}", "evaluator.batch_invariant=true"]


BF16 = _invariant_judge()


def test_auto_is_on_in_16_bit_types_and_off_in_float32(compose_cfg):
    def schedule(*overrides):
        return model_identity(resolve_cell(compose_cfg(["evaluator=smollm135", *overrides])).evaluator).schedule

    # keys in blocks of 512; 8 decode rows of whole blocks
    assert schedule("evaluator.dtype=bfloat16") == "chunks64k512h16d8w512"
    assert schedule("evaluator.dtype=float32") == ""
    assert schedule("evaluator.dtype=float32", "evaluator.batch_invariant=true",
                    "evaluator.batch_invariant_chunk=32", "evaluator.generate_batch=4") == "chunks32k512h16d4w512"
    assert schedule("evaluator.dtype=bfloat16", "evaluator.batch_invariant=false") == ""
    # a fixed row count per forward (a GPU's auto) is part of what the numbers depend on
    assert schedule("evaluator.dtype=bfloat16", "evaluator.batch_invariant_rows=32") == "chunks64x32h16d32"
    assert schedule("evaluator.dtype=float32", "evaluator.batch_invariant_rows=32") == ""


def test_the_default_schedule_leaves_cache_keys_as_they_were():
    """Keys made before the schedule field existed still hold; a batch-invariant model's keys differ."""
    import hashlib

    def old_key(req):  # the key as computed before the field existed
        d = json.loads(json.dumps({"key_version": 2, "request": {
            "model": {"name": "m", "backend": "local", "weights": "w", "dtype": "bfloat16", "adapter": None,
                      "backend_version": 3},
            "messages": [{"role": "user", "content": "q"}],
            "decoding": {"answers": ["1", "2"], "top_logprobs": None, "sample_fallback_k": 0},
            "kind": "answer_distribution"}}))
        return hashlib.sha256(json.dumps(d, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def request(schedule):
        model = ModelIdentity("m", "local", "w", "bfloat16", None, 3, schedule=schedule)
        return AnswerRequest(model, (Message("user", "q"),), JudgeDecoding(("1", "2")))

    assert request("").cache_key() == old_key(request(""))
    assert request("chunks64").cache_key() != request("").cache_key()


@pytest.mark.real_model
@pytest.mark.parametrize("rows", [None, "chunks", 4], ids=["split-free", "key-blocked-chunks", "fixed-rows"])
def test_a_request_s_numbers_do_not_depend_on_its_batch_or_the_cache(compose_cfg, rows, monkeypatch):
    """Every way batch-invariant pieces share a forward: over shared prefixes with attention's keys in whole
    blocks (a CPU's auto, where the load-time probe finds a prompt's numbers independent of its cuts); in chunks
    with pieces of one shape batched as each would run alone (a CPU's fallback, forced here); and in forwards
    of a fixed row count with tails padded to whole chunks (a GPU's auto, forced here). Every answer also gets a
    second position (forced: its most probable whitespace token), which runs on the row's own cache."""
    from selfpref_sweep.models.local import answer_reading

    monkeypatch.setattr(answer_reading, "split_tokens", lambda ws_probs, **_: sorted(ws_probs, key=lambda t: -t[1])[:1])
    fixed = [f"evaluator.batch_invariant_rows={rows}"] if isinstance(rows, int) else []
    cfg = compose_cfg([*BF16, *fixed, "dataset.n_articles=2"])
    spec = resolve_cell(cfg)
    model = LocalModel(spec.evaluator, model_cache=cfg.paths.model_cache, show_progress=False)
    assert model.chunk == 64 and model.rows == (rows if isinstance(rows, int) else 0)
    assert model.key_blocks == (not isinstance(rows, int))
    if rows == "chunks":
        model.__dict__["split_free"] = False
    handle = CachedModel(model.identity, lambda: model, store=None)
    from selfpref_sweep.cell.dataset_loaders import load_dataset

    # Half of each article: prompts of several chunks still, and half the compute of a float32 CPU run.
    articles = [(a.id, a.text[:500]) for a in load_dataset(spec.dataset).articles]
    requests = []
    for i, (article_id, text) in enumerate(articles):
        other = articles[(i + 1) % len(articles)][1][:300]
        for question in ("recognition", "preference"):
            requests += pairwise_requests(handle, spec.prompts, question, Pair(article_id, text, text[:200], other)
                                          ).values()

    def judged(batches):
        model.prefix_lru.clear()
        return {r: d.probs for batch in batches for r, d in model.answer_distributions(batch)}

    together = judged([requests])
    assert model.second_positions == len(requests)
    if model.rows_invariant and not model.split_free:  # chunks of one shape from several prompts shared a forward
        assert model.largest_batch > 1
        assert not isinstance(rows, int) or model.largest_batch == rows  # every forward filled to the fixed count
    assert judged([requests[1::2], requests[0::2]]) == together  # another batch and cache history
    assert judged([[r] for r in reversed(requests)]) == together  # one at a time, last first
    if model.split_free:  # each prompt alone in one forward, and by the fixed chunks: the same bits
        model.prefix_reuse = False
        assert judged([requests]) == together
        model.prefix_reuse, model.__dict__["split_free"] = True, False
        assert judged([requests]) == together
        model.__dict__["split_free"] = True

    texts = [SequenceRequest(model.identity, text[:150], messages=(Message("user", f"Summarize: {text}"),))
             for _, text in articles]
    model.prefix_lru.clear()
    scored = {r: s.total for r, s in model.sequence_logprobs(texts)}
    model.prefix_lru.clear()
    assert {r: s.total for t in reversed(texts) for r, s in model.sequence_logprobs([t])} == scored
    if model.split_free:
        model.prefix_lru.clear()
        model.__dict__["split_free"] = False
        assert {r: s.total for r, s in model.sequence_logprobs(texts)} == scored


def _sweep_cmd(tmp_path, name):
    # Summaries of 30 tokens (not the paper's 100): a kill's bits do not depend on their length, and the judge
    # prompts that hold them get shorter.
    return [sys.executable, "run.py", "-m", *BF16, "source=human", "setting=pairwise", "summaries.max_new_tokens=30",
            "dataset.n_articles=2", "show_progress=false", "hydra.callbacks.analysis.enabled=false",
            f"hydra.sweep.dir={tmp_path / name}", "hydra.sweep.subdir=${hydra.job.override_dirname}"]


def _env(store):
    return {**os.environ, "WANDB_MODE": "disabled", "SELFPREF_STORE": str(store)}


def _rows(store) -> int:
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as db:
            return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.Error:
        return 0


def _killed_at(cmd, store, rows: int, timeout_s: float = 600) -> bool:
    """Start the sweep and SIGKILL it (its whole process group) once the store holds `rows` calls; False when
    it finished first. Between reads of the store it waits on the process itself, so an exit ends the wait."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(store), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if _rows(store) >= rows:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        try:
            proc.wait(0.05)  # far shorter than a call: the kill lands right after the call it waits for
            return False
        except subprocess.TimeoutExpired:
            continue
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    raise AssertionError(f"the sweep neither finished nor stored {rows} calls within {timeout_s:.0f} s")


def _scores(sweep_dir):
    """Every item's per-order answer readings, by cell and article."""
    out = {}
    for path in sweep_dir.glob("*/results.jsonl"):
        for line in path.read_text().splitlines():
            item = json.loads(line)
            out[(path.parent.name, item["article_id"])] = {q: item[q] for q in ("recognition", "preference")}
    return out


def _rows_through_first(store, kind: str) -> int:
    """How many calls the store held once it had stored its first call of this kind."""
    with sqlite3.connect(store) as db:
        return db.execute("SELECT COUNT(*) FROM calls WHERE rowid <= (SELECT MIN(rowid) FROM calls WHERE kind = ?)",
                          (kind,)).fetchone()[0]


@pytest.mark.real_model
def test_a_killed_and_resumed_bf16_sweep_matches_an_uninterrupted_one(tmp_path):
    """A sweep SIGKILLed once its first familiarity call is stored, then run again on the same store, writes the
    uninterrupted sweep's readings to the bit: the stored calls come from the cache, the killed cell's other
    familiarity calls are made in another batch. The calls before the first familiarity call are stored in bursts
    (every judge call at once here) a kill does not split, so one kill there proves what the earlier two (at a
    quarter and half of the calls) did, for one process and model load less. One cell: a second one ran after the
    kill, whole, which tests/test_launchers.py's killed sweep checks (every cell, no call repeated)."""
    through = subprocess.run(_sweep_cmd(tmp_path, "through"), cwd=REPO, env=_env(tmp_path / "a.sqlite"),
                             capture_output=True, text=True, timeout=900)
    assert through.returncode == 0, through.stderr[-3000:]
    total, kill_at = _rows(tmp_path / "a.sqlite"), _rows_through_first(tmp_path / "a.sqlite", "sequence_logprobs")
    assert 0 < kill_at < total
    assert _killed_at(_sweep_cmd(tmp_path, "resumed"), tmp_path / "b.sqlite", kill_at), \
        "the sweep finished before it could be killed"
    resumed = subprocess.run(_sweep_cmd(tmp_path, "resumed"), cwd=REPO, env=_env(tmp_path / "b.sqlite"),
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected, got = _scores(tmp_path / "through"), _scores(tmp_path / "resumed")
    assert len(expected) == 2 and got == expected  # 2 articles, item for item, to the bit


@pytest.mark.real_model
def test_fixed_rows_read_the_same_numbers_as_rows_alone(compose_cfg):
    """Padding tails to whole chunks and filling forwards with copies changes rounding only: in float32 the
    answer probabilities and text log-likelihoods agree with one prompt per forward to float32 precision (a
    misplaced read position or a pad seen by a real token would move them far more)."""
    base = ["evaluator=smollm135", "evaluator.dtype=float32", "evaluator.batch_invariant=true", "dataset.n_articles=2"]

    def run(rows):
        cfg = compose_cfg([*base, f"evaluator.batch_invariant_rows={rows}"])
        spec = resolve_cell(cfg)
        model = LocalModel(spec.evaluator, model_cache=cfg.paths.model_cache, show_progress=False)
        handle = CachedModel(model.identity, lambda: model, store=None)
        from selfpref_sweep.cell.dataset_loaders import load_dataset

        articles = load_dataset(spec.dataset).articles
        requests = [r for i, a in enumerate(articles) for r in pairwise_requests(
            handle, spec.prompts, "recognition", Pair(a.id, a.text, a.text[:200], articles[i - 1].text[:250])).values()]
        texts = [SequenceRequest(model.identity, a.text[:150], messages=(Message("user", f"Summarize: {a.text}"),))
                 for a in articles]
        probs = {r.cache_key(): d.probs for r, d in model.answer_distributions(requests)}
        totals = {r.messages: s.total for r, s in model.sequence_logprobs(texts)}  # results come in schedule order
        return [probs[r.cache_key()] for r in requests], [totals[t.messages] for t in texts], model.largest_batch

    alone, fixed = run(0), run(3)
    assert fixed[2] == 3
    for a, f in zip(alone[0], fixed[0], strict=True):
        assert a.keys() == f.keys() and all(abs(a[k] - f[k]) < 1e-4 for k in a)
    assert fixed[1] == pytest.approx(alone[1], rel=1e-4)


def _summary_requests(compose_cfg, overrides, n_articles=4, new_tokens=24):
    from selfpref_sweep.cell.dataset_loaders import load_dataset
    from selfpref_sweep.cell.summaries import generation_request

    cfg = compose_cfg([*overrides, f"dataset.n_articles={n_articles}"])
    spec = resolve_cell(cfg)
    model = LocalModel(spec.evaluator, model_cache=cfg.paths.model_cache, show_progress=False)
    handle = CachedModel(model.identity, lambda: model, store=None)
    dataset = load_dataset(spec.dataset)
    requests = [generation_request(handle, spec.evaluator, spec.prompts, dataset.task, a, new_tokens)
                for a in dataset.articles]
    return model, requests


@pytest.mark.real_model
def test_batch_invariant_summaries_do_not_depend_on_their_batch(compose_cfg):
    """Summaries decoded in batches of a fixed row count whose rows share a width: the same tokens whichever
    prompts shared the batch, and whatever the prefix cache held."""
    model, requests = _summary_requests(compose_cfg, [*BF16, "evaluator.generate_batch=3"])

    def generated(batches):
        model.prefix_lru.clear()
        return {r.cache_key(): (g.text, g.completion_tokens) for batch in batches for r, g in model.generate(batch)}

    together = generated([requests])
    assert len(together) == len(requests) and all(text for text, _ in together.values())
    assert generated([[r] for r in reversed(requests)]) == together
    assert generated([requests[1::2], requests[0::2]]) == together
    model.kv_budget_bytes = 1  # every prompt through its chunks alone, each row decoded as soon as it is ready
    assert generated([requests]) == together


@pytest.mark.real_model
def test_batch_invariant_summaries_are_greedy_decoding(compose_cfg):
    """In float32 the padded, masked, batched decoding gives transformers' own greedy generate() of each prompt
    alone, token for token (a wrong position or an unmasked pad would not)."""
    model, requests = _summary_requests(compose_cfg, ["evaluator=smollm135", "evaluator.dtype=float32",
                                                      "evaluator.batch_invariant=true", "evaluator.generate_batch=2"],
                                        n_articles=3)
    ours = {r.cache_key(): g.completion_tokens for r, g in model.generate(requests)}
    torch = model.torch
    for req in requests:
        ids = model.encode(model.render(req.messages))
        with torch.inference_mode():
            out = model.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                       max_new_tokens=req.max_new_tokens, do_sample=False, temperature=None,
                                       top_p=None, top_k=None, eos_token_id=model._stop_ids,
                                       pad_token_id=model._pad_id)
        new = out[0, len(ids):].tolist()
        stops = set(model._stop_ids)
        expected = new[:next((i + 1 for i, t in enumerate(new) if t in stops), len(new))]
        assert ours[req.cache_key()] == len(expected)
        assert model._generation(req, ids, expected).text == dict(
            (r.cache_key(), g.text) for r, g in model.generate([req]))[req.cache_key()]


@pytest.mark.real_model
def test_rows_of_every_width_decode_together_with_the_bits_of_their_own(compose_cfg, monkeypatch):
    """With key blocks (a CPU) a row decodes at any width of whole key blocks with the bits of its own width, so
    prompts of different widths share one decoding batch: each row's next-token logits at every step are those
    of the prompt decoded alone, to the bit."""
    model, requests = _summary_requests(compose_cfg, [*BF16, "evaluator.generate_batch=2"], n_articles=1)
    assert model.key_blocks and model.split_free
    torch = model.torch
    ids = torch.randint(0, 30000, (2, 700), generator=torch.Generator().manual_seed(0)).tolist()
    prompts = [ids[0][:120], ids[1]]  # widths 512 and 1024
    assert [model._decode_width(len(p)) for p in prompts] == [512, 1024]
    steps, batches = [], []
    forward, decode = model.model.forward, model._decode_rows_greedy

    def recorded(*args, **kwargs):
        out = forward(*args, **kwargs)
        steps.append(out.logits[:, -1].clone())
        return out

    def counted(lengths, *args):
        batches.append(len(lengths))
        return decode(lengths, *args)

    monkeypatch.setattr(model.model, "forward", recorded)
    monkeypatch.setattr(model, "_decode_rows_greedy", counted)

    def run(group):
        steps.clear()
        made = [g.completion_tokens for _, g in model._invariant_generate([(requests[0], p) for p in group])]
        return made, torch.stack(steps)

    alone = [run([p]) for p in prompts]
    batches.clear()
    made, together = run(prompts)
    assert batches == [2]  # one batch held both widths
    rows = []
    for n, logits in alone:  # the batch's rows in the order they were ready: each prompt's row is its nearest
        rows.append(min((0, 1), key=lambda r: (together[0, r].float() - logits[0, 0].float()).abs().max().item()))
        assert torch.equal(together[:len(logits), rows[-1]], logits[:, 0])
        assert made[rows[-1]] == n[0]
    assert sorted(rows) == [0, 1]
