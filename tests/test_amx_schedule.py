"""A CPU's choice of batch-invariant schedule where the default's probes fail (models/local/cpu_schedules.py).

No AMX machine is needed: the choice is tested with stubbed probe verdicts (an AMX Xeon's: `split_free` and
`rows_invariant` false), and the "slabs" schedule is run for real on this CPU, where it must be bit-identical
however the work is batched, like the default."""

from __future__ import annotations

import json
import logging

import pytest

from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models import model_identity
from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding, Message
from selfpref_sweep.models.local import LocalModel, cpu_schedules, local_model
from selfpref_sweep.models.local.cpu_schedules import SCHEDULE_KEYS, SCHEDULE_ROWS, SCHEDULE_SLABS, choice_key, choose
from selfpref_sweep.models.local.probes import FILE

DEFAULT = "chunks64k512h16d8w512"
NAMED = {SCHEDULE_KEYS: DEFAULT, SCHEDULE_SLABS: "chunks64k512s64h16d8w512", SCHEDULE_ROWS: "chunks64x8h16d8"}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The machine's choice recorded under tmp_path (not the user's model cache), read afresh."""
    monkeypatch.setenv("SELFPREF_MODEL_CACHE", str(tmp_path))
    cpu_schedules.recorded_choice.cache_clear()
    yield tmp_path
    cpu_schedules.recorded_choice.cache_clear()


class Stub(cpu_schedules.CpuSchedules):
    """A loaded LocalModel's state as the choice reads it, with the probes' verdicts given."""

    def __init__(self, identity, rows_invariant: bool, candidates: dict[str, bool]):
        self.identity, self.cfg, self.device, self.chunk = identity, None, "cpu", 64
        self.cpu_choice, self.rows_invariant, self.candidates = SCHEDULE_KEYS, rows_invariant, candidates
        self.probed = 0

    def _candidate_verdicts(self) -> dict[str, bool]:
        self.probed += 1
        return self.candidates

    def schedule_for(self, choice: str) -> str:
        return NAMED[choice]


def _evaluator(compose_cfg, *overrides):
    return resolve_cell(compose_cfg(["evaluator=smollm135", "evaluator.dtype=bfloat16", *overrides])).evaluator


def test_the_fastest_candidate_whose_probe_passed_is_chosen():
    amx = {"split_free": False, "rows_invariant": False}
    assert choose({**amx, "split_free_slabs": True}) == SCHEDULE_SLABS
    assert choose({**amx, "split_free_slabs": False, "rows_invariant_fixed": True}) == SCHEDULE_ROWS
    assert choose({**amx, "split_free_slabs": False, "rows_invariant_fixed": False}) == SCHEDULE_KEYS


@pytest.mark.parametrize("candidates, chosen", [
    ({"split_free_slabs": True}, SCHEDULE_SLABS),
    ({"split_free_slabs": False, "rows_invariant_fixed": True}, SCHEDULE_ROWS),
    ({"split_free_slabs": False, "rows_invariant_fixed": False}, SCHEDULE_KEYS)])
def test_amx_like_verdicts_pick_and_record_a_schedule_named_in_the_cache_key(compose_cfg, folder, caplog,
                                                                             candidates, chosen):
    cfg = _evaluator(compose_cfg)
    before = model_identity(cfg)
    assert before.schedule == DEFAULT  # nothing recorded yet: the identity the first load keeps
    stub = Stub(before, rows_invariant=False, candidates=candidates)
    with caplog.at_level(logging.INFO, logger=cpu_schedules.__name__):
        assert stub._choose_cpu_schedule() == chosen
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    line = warned[0].getMessage()
    assert "probe split_free failed" in line and "probe rows_invariant failed" in line
    assert "bf16 GEMM blocking by row count (oneDNN/AMX)" in line and f"chosen instead: {chosen}" in line
    if chosen != SCHEDULE_SLABS:
        assert "probe split_free_slabs failed (SDPA split by length" in line
    key = choice_key(before, 64)
    assert json.loads((folder / FILE).read_text()) == {key: chosen}

    caplog.clear()  # a second load on this machine: said once already, so not warned again
    with caplog.at_level(logging.INFO, logger=cpu_schedules.__name__):
        stub._choose_cpu_schedule()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]

    cpu_schedules.recorded_choice.cache_clear()  # a later process: its identity names the choice
    after = model_identity(cfg)
    assert after.schedule == NAMED[chosen]

    def request(identity):
        return AnswerRequest(identity, (Message("user", "q"),), JudgeDecoding(("1", "2")))

    assert (request(after).cache_key() == request(before).cache_key()) == (chosen == SCHEDULE_KEYS)


def test_invariant_machines_keep_today_s_default_and_probe_no_candidate(compose_cfg, folder):
    """Where pieces can share a forward (`rows_invariant`), today's fallback is kept: no candidate probed,
    nothing recorded, the identity as it was."""
    cfg = _evaluator(compose_cfg)
    stub = Stub(model_identity(cfg), rows_invariant=True, candidates={"split_free_slabs": True})
    assert stub._choose_cpu_schedule() == SCHEDULE_KEYS
    assert stub.probed == 0 and not (folder / FILE).exists()
    assert model_identity(cfg).schedule == DEFAULT


def test_no_choice_where_the_config_or_the_device_fixes_the_schedule(compose_cfg, folder):
    """A recorded choice applies to the CPU default only: not with `batch_invariant_rows` given, nor with
    batch-invariant computation off."""
    cfg = _evaluator(compose_cfg)
    (folder / FILE).write_text(json.dumps({choice_key(model_identity(cfg), 64): SCHEDULE_SLABS}))
    cpu_schedules.recorded_choice.cache_clear()
    assert model_identity(cfg).schedule == "chunks64k512s64h16d8w512"
    assert model_identity(_evaluator(compose_cfg, "evaluator.batch_invariant_rows=4")).schedule == "chunks64x4h16d4"
    assert model_identity(_evaluator(compose_cfg, "evaluator.batch_invariant=false")).schedule == ""
    stub = Stub(model_identity(cfg), rows_invariant=False, candidates={"split_free_slabs": True})
    stub.cpu_choice = None  # e.g. rows given: nothing to choose
    assert stub._choose_cpu_schedule() == SCHEDULE_KEYS and stub.probed == 0


def test_a_failed_default_probe_asks_for_the_choice(compose_cfg, monkeypatch):
    """`split_free` false on the default (keys, no slabs) runs the choice once; with slabs on it does not."""
    model = LocalModel.__new__(LocalModel)
    model.key_blocks, model.slab, asked = True, 0, []
    monkeypatch.setattr(model, "_probe", lambda name, params, run: False, raising=False)
    monkeypatch.setattr(model, "_choose_cpu_schedule", lambda: asked.append(1) or SCHEDULE_KEYS, raising=False)
    assert model.split_free is False and asked == [1]
    model = LocalModel.__new__(LocalModel)
    model.key_blocks, model.slab, params = True, 64, []
    monkeypatch.setattr(model, "_probe", lambda name, p, run: params.append(p) or False, raising=False)
    monkeypatch.setattr(model, "_choose_cpu_schedule", lambda: asked.append(1) or SCHEDULE_KEYS, raising=False)
    assert model.split_free is False and asked == [1] and params == ["block512slab64"]


@pytest.mark.real_model
def test_the_slab_schedule_is_bit_identical_however_work_is_batched(compose_cfg, monkeypatch):
    """The "slabs" schedule run on this CPU (forced): its probe passes here, and answer probabilities and text
    scores are the same to the bit in one batch, in two halves, one at a time, and by the chunks."""
    from selfpref_sweep.models.local.precision import native_bf16

    dtype = "bfloat16" if native_bf16() else "float32"
    monkeypatch.setattr(local_model, "machine_choice", lambda identity, chunk: SCHEDULE_SLABS)
    cfg = compose_cfg(["evaluator=smollm135", f"evaluator.dtype={dtype}", "evaluator.batch_invariant=true"])
    model = LocalModel(resolve_cell(cfg).evaluator, model_cache=cfg.paths.model_cache, show_progress=False)
    assert model.slab == 64 and model.key_blocks and model.rows == 0
    assert model.identity.schedule == "chunks64k512s64h16d8w512"
    assert model.split_free  # the slab probe, on this CPU
    torch = model.torch
    ids = torch.randint(0, 30000, (2, 200), generator=torch.Generator().manual_seed(1)).tolist()
    texts = [f"Text {i}: " + model.tokenizer.decode(row) for i, row in enumerate(ids)]
    requests = [AnswerRequest(model.identity, (Message("user", t[:n]),), JudgeDecoding(("1", "2")))
                for t in texts for n in (300, 700)]  # prompts that cross a chunk boundary and share prefixes

    def judged(batches):
        model.prefix_lru.clear()
        return {r: d.probs for batch in batches for r, d in model.answer_distributions(batch)}

    together = judged([requests])
    assert judged([requests[1::2], requests[0::2]]) == together
    assert judged([[r] for r in reversed(requests)]) == together
    model.__dict__["split_free"] = False  # by the chunks, one piece per forward or batched by shape
    assert judged([requests]) == together
