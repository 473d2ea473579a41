"""Which batch-invariant schedule a CPU runs when its kernels break the default's (`CpuSchedules`).

The default on a CPU (keys in whole blocks, judging over shared prefixes: `split_free`) relies on two kernel
properties probed at load: a token's bits do not depend on how its prompt is cut into forwards, and a row of a
batched forward gets the bits it gets alone (`rows_invariant`). Where both fail (seen on an AMX Xeon: oneDNN
picks its bf16 GEMM blocking by the row count) the default falls back to every piece alone in its own forward,
about twice the batched schedule's time. Before that fallback two candidates are probed, fastest first:
- "slabs": the same schedule, with every linear layer of the decoder run as products of exactly LINEAR_SLAB rows
  (the rows padded to whole slabs with zeros), so every GEMM has one shape whatever the forward's; attention
  is already key-blocked. Its probe is `split_free` with the slabs on. Schedule `chunks64k512s64h16d8w512`.
- "rows": the GPU's schedule, every forward exactly CPU_FIXED_ROWS rows of whole chunks (filled up with copies
  of a real row), so every product and attention call is one of a few fixed shapes. Its probe is the fixed-row
  `rows_invariant`. Schedule `chunks64x8h16d8`.
Neither passes: today's fallback ("keys"). A machine where the default passes its probes never probes these,
and its schedule, cache keys and numbers stay as they were.

The choice changes the numbers, so the schedule in the model identity (and every cache key) names it. The
identity is made before the model loads (`LocalModel.identity_for`, also in plan mode), so the choice is
recorded per machine in probes.json under `schedule_folder()` (the model cache's default,
$SELFPREF_MODEL_CACHE), read once per process. The first load on a new machine probes, records the choice and
runs the schedule its identity names (today's fallback); later processes run the chosen one.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import types

from .key_blocks import KEY_BLOCK
from .probes import probe_key, recall, record

log = logging.getLogger(__name__)

LINEAR_SLAB = 64  # rows of every linear product in the "slabs" schedule: whole 16-row AMX tiles, little padding
CPU_FIXED_ROWS = 8  # rows of every forward in the "rows" schedule: 8 x 64 tokens, a CPU's 512-token budget
CHOICE_PROBE = "cpu_schedule"  # the probes.json entry holding a machine's choice
# today's default (or its fallback), and the two candidates, fastest first
SCHEDULE_KEYS, SCHEDULE_SLABS, SCHEDULE_ROWS = "keys", "slabs", "rows"

# The kernels each probe isolates, for the log line of a machine where one fails.
KERNELS = {
    "split_free": "bf16 GEMM blocking by row count (oneDNN/AMX) or SDPA split by length",
    "rows_invariant": "bf16 GEMM blocking by row count (oneDNN/AMX)",
    "split_free_slabs": "SDPA split by length (the linear layers were fixed to one shape)",
    "rows_invariant_fixed": "kernels that vary with a row's place in a fixed-shape batch",
}
DESCRIBED = {
    SCHEDULE_SLABS: f"linear layers in products of exactly {LINEAR_SLAB} rows",
    SCHEDULE_ROWS: f"every forward exactly {CPU_FIXED_ROWS} rows of whole chunks",
    SCHEDULE_KEYS: "every piece alone in its own forward (the slow fallback)",
}


def schedule_folder() -> str:
    """Where a machine's choice is recorded: the model cache's default (conf/config.yaml's paths.model_cache)."""
    return os.environ.get("SELFPREF_MODEL_CACHE") or "~/.cache/selfpref_sweep/models"


def choice_key(identity, chunk: int) -> str:
    return probe_key(identity, "cpu", CHOICE_PROBE, f"chunk{chunk}")


@functools.cache
def recorded_choice(folder: str, key: str) -> str:
    """The schedule recorded for this model on this machine, SCHEDULE_KEYS where none is: read once per process, so the
    identity made before loading and the loaded model's always agree."""
    value = recall(folder, key)
    return value if value in (SCHEDULE_SLABS, SCHEDULE_ROWS) else SCHEDULE_KEYS


def machine_choice(identity, chunk: int) -> str:
    """The schedule recorded for the model (its identity without a schedule) and chunk on this machine."""
    return recorded_choice(schedule_folder(), choice_key(identity, chunk))


def choose(verdicts: dict[str, bool]) -> str:
    """The fastest schedule whose probe passed, from the verdicts of a machine where the default's `split_free`
    and `rows_invariant` failed; SCHEDULE_KEYS (today's fallback) where no candidate's did."""
    if verdicts.get("split_free_slabs"):
        return SCHEDULE_SLABS
    if verdicts.get("rows_invariant_fixed"):
        return SCHEDULE_ROWS
    return SCHEDULE_KEYS


def fallback_line(label: str, device: str, verdicts: dict[str, bool], chosen: str, schedule: str) -> str:
    """The log line of a machine where the default is not invariant: each failed probe with the kernel family
    it isolates, and what was chosen instead."""
    failed = "; ".join(f"probe {name} failed ({KERNELS[name]})" for name, ok in verdicts.items() if not ok)
    return (f"{label}: batch-invariant default not invariant on {device}: {failed}; chosen instead: {chosen} "
            f"({DESCRIBED[chosen]}, schedule {schedule!r})")


def _slab_forward(self, x):
    """nn.Linear.forward as products of exactly LINEAR_SLAB rows: a GEMM's rounding may depend on its row
    count, so every row meets the same shape whatever the forward's (zero rows pad the last slab)."""
    import torch

    flat = x.reshape(-1, x.shape[-1])
    n = flat.shape[0]
    if n % LINEAR_SLAB:
        flat = torch.cat([flat, flat.new_zeros(LINEAR_SLAB - n % LINEAR_SLAB, flat.shape[1])])
    out = torch.cat([torch.nn.functional.linear(flat[i:i + LINEAR_SLAB], self.weight, self.bias)
                     for i in range(0, flat.shape[0], LINEAR_SLAB)])
    return out[:n].reshape(*x.shape[:-1], out.shape[-1])


def use_linear_slabs(model, on: bool) -> None:
    """Run every linear layer of the decoder (a LoRA adapter's too) in slabs of LINEAR_SLAB rows, or as before.
    The output layer stays as it is: answers read it in fixed blocks of their own (answer_reading.py)."""
    import torch

    for module in model.get_decoder().modules():
        if isinstance(module, torch.nn.Linear):
            if on:
                module.forward = types.MethodType(_slab_forward, module)
            else:
                module.__dict__.pop("forward", None)


class CpuSchedules:
    """LocalModel's choice of a CPU schedule where the default's probes fail (see the module note)."""

    @contextlib.contextmanager
    def _trying(self, key_blocks: bool, slab: int):
        """The model's attention and linear layers switched for a candidate's probe, and back."""
        from .key_blocks import use_key_blocks

        saved = self.key_blocks, self.slab
        if key_blocks != saved[0]:
            use_key_blocks(self.model, key_blocks)
        if bool(slab) != bool(saved[1]):
            use_linear_slabs(self.model, bool(slab))
        self.key_blocks, self.slab = key_blocks, slab
        try:
            yield
        finally:
            self.key_blocks, self.slab = saved
            if key_blocks != saved[0]:
                use_key_blocks(self.model, saved[0])
            if bool(slab) != bool(saved[1]):
                use_linear_slabs(self.model, bool(saved[1]))

    def _candidate_verdicts(self) -> dict[str, bool]:
        """The candidates' probes, each remembered like the others, fastest first and only as far as needed."""
        with self._trying(True, LINEAR_SLAB):
            slabs = self._probe("split_free", f"block{KEY_BLOCK}slab{LINEAR_SLAB}", self._split_free_probe)
        if slabs:
            return {"split_free_slabs": True}
        with self._trying(False, 0):
            fixed = self._probe("rows_invariant", f"fixed{CPU_FIXED_ROWS}x{self.chunk}",
                                lambda: self._fixed_rows_probe(CPU_FIXED_ROWS))
        return {"split_free_slabs": False, "rows_invariant_fixed": fixed}

    def _choose_cpu_schedule(self) -> str:
        """Where the default is not split-free: if pieces cannot share a forward either (every piece alone, the
        slow fallback), probe the candidates, record the fastest that passes for this machine's later loads,
        and say once per machine which probes failed and what was chosen. Returns the choice."""
        # no choice here, or today's fallback batches pieces (kept: nothing changes where it is invariant)
        if self.cpu_choice != SCHEDULE_KEYS or self.rows_invariant:
            return SCHEDULE_KEYS
        verdicts = {"split_free": False, "rows_invariant": False, **self._candidate_verdicts()}
        chosen = choose(verdicts)
        key = choice_key(self.identity, self.chunk)
        line = fallback_line(self.identity.label, self.device, verdicts, chosen, self.schedule_for(chosen))
        if record(schedule_folder(), key, chosen):
            later = "; from the next load on (this process keeps the schedule its cache keys name)"
            log.warning("%s%s", line, "" if chosen == SCHEDULE_KEYS else later)
        else:
            log.info("%s", line)
        return chosen
