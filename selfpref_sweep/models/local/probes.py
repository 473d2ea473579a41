"""The local backend's load-time probes (`Probes`), each verdict remembered between processes.

Whether output-layer rows, batched rows, or a prompt cut into pieces give the same bits as one alone is a property
of the model's shapes, its numeric type, the device's kernels and the torch build, not of a run. Each probe runs
once per such combination and its verdict is kept in `probes.json` beside the converted weights, so a second load
in a new process skips it. The key holds everything the verdict depends on: the model's identity (weights,
dtype, adapter), the probe's own parameters, the device kind (CPU model and its vector extensions, or the GPU's
name and compute capability), torch's version and its thread count (oneDNN may split reductions by threads).

Two processes writing at once may each keep only their own new verdict (last replace wins); the lost one is
probed again on the next load, never read wrong. The same file, under the model cache's default folder, holds a
machine's choice of CPU schedule where the default's probes fail (`recall`, `record`; cpu_schedules.py).
"""

from __future__ import annotations

import json
import logging
import platform
from collections.abc import Callable
from functools import cache, cached_property
from pathlib import Path

from ...errors import StorageError
from ...records.atomic import atomic_write_json
from .answer_reading import HEAD_ROWS
from .batch_invariant import MIN_BATCHED_LENGTH
from .key_blocks import KEY_BLOCK
from .kv_cache import _clone_cache, _returned_cache, _row_cache, _stack_padded
from .precision import cpu_flags

log = logging.getLogger(__name__)

FILE = "probes.json"
_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "asimd", "sve")


@cache
def device_kind(device: str) -> str:
    """What picks the kernels: a GPU's name and compute capability, or a CPU's model and vector extensions."""
    import torch

    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        return f"cuda:{torch.cuda.get_device_name()}:sm{major}{minor}"
    text = _cpuinfo()
    model = next((line.partition(":")[2].strip() for line in text.splitlines()
                  if line.partition(":")[0].strip() == "model name"), platform.machine())
    flags = cpu_flags(text)
    return f"cpu:{model}:{'+'.join(f for f in _CPU_FLAGS if f in flags)}"


def probe_key(identity, device: str, probe: str, params: str) -> str:
    import torch

    return "|".join([probe, params, identity.name, identity.weights, identity.dtype, str(identity.adapter),
                     device_kind(device), torch.__version__, f"threads{torch.get_num_threads()}"])


def remembered(folder: str, key: str, run: Callable[[], bool]) -> bool:
    """The verdict stored under `key` in folder/probes.json, or `run()`'s, stored there for the next load. No
    folder (a model built without a cache, as tests' stubs are): probed, not stored."""
    if not folder:
        return bool(run())
    path = Path(folder).expanduser() / FILE
    known = _read(path)
    if isinstance(known.get(key), bool):
        log.info("probe verdict from %s: %s", path, key.split("|")[0])
        return known[key]
    verdict = bool(run())
    _write(path, {**_read(path), key: verdict})
    return verdict


def recall(folder: str, key: str) -> str | None:
    """A value recorded under `key` in folder/probes.json (a machine's choice of schedule), None where none is."""
    value = _read(Path(folder).expanduser() / FILE).get(key)
    return value if isinstance(value, str) else None


def record(folder: str, key: str, value: str) -> bool:
    """Record `value` under `key` in folder/probes.json; whether it is new there (not recorded before)."""
    path = Path(folder).expanduser() / FILE
    known = _read(path)
    if known.get(key) == value:
        return False
    _write(path, {**known, key: value})
    return True


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or damaged: probe again and write a whole new file
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, data)
    except (OSError, StorageError) as exc:  # a read-only cache: the verdict holds for this process only
        log.warning("could not remember probe verdicts in %s: %s", path, exc)


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


class Probes:
    """LocalModel's load-time probes: whether output-layer rows, rows of one shape, or a prompt cut into pieces get
    the bits they get alone on this device; each verdict remembered (`remembered`)."""

    def _probe(self, name: str, params: str, run: Callable[[], bool]) -> bool:
        """A load-time probe's verdict, remembered with the converted weights for this model, device kind and
        torch (the verdict cache above): a second load in a new process skips it."""
        return remembered(self.model_cache, probe_key(self.identity, self.device, name, params), run)

    @cached_property
    def head_rows_invariant(self) -> bool:
        return self._probe("head_rows_invariant", f"rows{HEAD_ROWS}", self._head_rows_probe)

    def _head_rows_probe(self) -> bool:
        """Whether a row's distribution from a HEAD_ROWS-row product is the same beside any companions: random
        states read as rows 0..n-1, as rows 1..n, and one of them among copies of itself."""
        torch = self.torch
        states = torch.randn(HEAD_ROWS + 1, self._head_fp32[0].shape[1], generator=torch.Generator().manual_seed(0)
                             ).to(self.device, self.model.get_output_embeddings().weight.dtype)
        first, second = self._probs(states[:HEAD_ROWS]), self._probs(states[1:])
        alone = self._probs(states[1:2].expand(HEAD_ROWS, -1).contiguous())[0]
        same = torch.equal(first[1:], second[:HEAD_ROWS - 1]) and torch.equal(alone, first[1])
        log.info("%s: output-layer rows %s read together on %s", self.identity.label, "are" if same else "are not",
                 self.device)
        return same

    @cached_property
    def split_free(self) -> bool:
        """Whether, with key blocks, this device gives a prompt's tokens the same bits however the prompt is cut
        into forwards and batched (models/local/key_blocks.py): then batch-invariant judging and scoring run over shared
        prefixes like the batched schedule, with its numbers those of each prompt alone in one forward. Checked
        once: a prompt that crosses a key block, in one forward, in three pieces, and its last piece as a shorter
        row right-padded beside another prompt's on the same prefix."""
        if not self.key_blocks:
            return False
        # with linear layers in slabs (a CPU's "slabs" schedule, cpu_schedules.py) the probe is that schedule's
        slab = f"slab{self.slab}" if self.slab else ""
        same = self._probe("split_free", f"block{KEY_BLOCK}{slab}", self._split_free_probe)
        if not same and not self.slab:
            self._choose_cpu_schedule()  # the fallback below may be slow: probe and record a faster schedule
        return same

    def _split_free_probe(self) -> bool:
        torch = self.torch
        n, cuts = KEY_BLOCK + 48, (240, 400)  # pieces of 240, 160 and 160 tokens: query widths as they are
        ids = torch.randint(0, min(len(self.tokenizer), 32000), (2, n), generator=torch.Generator().manual_seed(0)
                            ).tolist()
        whole = self._forward_rows([ids[0]], None).last_hidden_state[0]
        cache, pieces = None, []
        for start, stop in zip((0,) + cuts, cuts + (n,), strict=True):
            if start == cuts[-1]:
                prefix = _clone_cache(cache)
            out = self._forward_rows([ids[0][start:stop]], cache)
            cache = _returned_cache(out)
            pieces.append(out.last_hidden_state[0])
        short = 50  # 50 tokens of the first prompt's last piece, padded to the other row's 160
        pair = self._forward_rows([ids[0][cuts[-1]:cuts[-1] + short] + [self._pad_id] * (n - cuts[-1] - short),
                                   ids[1][cuts[-1]:]], _clone_cache(prefix, batch=2))
        same = (torch.equal(torch.cat(pieces), whole)
                and torch.equal(pair.last_hidden_state[0, :short], whole[cuts[-1]:cuts[-1] + short]))
        log.info("%s: a prompt's numbers %s on how it is cut into forwards on %s", self.identity.label,
                 "do not depend" if same else "depend", self.device)
        return same

    @cached_property
    def rows_invariant(self) -> bool:
        """Whether pieces may share a forward on this device, checked once (a failure means one piece per
        forward, as batch-invariant computation always did): with a fixed row count, whether a row comes out
        the same beside other rows; else whether rows come out of a batched forward as each does alone."""
        if self.rows:
            same = self._probe("rows_invariant", f"fixed{self.rows}x{self.chunk}", self._fixed_rows_probe)
        else:
            same = self._probe("rows_invariant", f"alone{self.chunk}min{MIN_BATCHED_LENGTH}", self._alone_rows_probe)
        log.info("%s: rows of one shape %s batched on %s", self.identity.label, "are" if same else "are not",
                 self.device)
        return same

    def _fixed_rows_probe(self, n: int = 0) -> bool:
        """In forwards of n rows (default `rows`): a chunk on no cache, then a chunk on that cache, each run for
        rows 0..n-1 and for rows 1..n; every row both batches hold (at another place, beside other rows) must
        match."""
        torch = self.torch
        n = n or self.rows
        rows = torch.randint(0, min(len(self.tokenizer), 32000), (n + 1, 2 * self.chunk),
                             generator=torch.Generator().manual_seed(0)).tolist()
        same, caches = True, []
        for piece in (slice(0, self.chunk), slice(self.chunk, 2 * self.chunk)):
            outs = [self._forward_rows([r[piece] for r in part], caches[k] if caches else None)
                    for k, part in enumerate((rows[:n], rows[1:]))]
            same = same and torch.equal(outs[0].last_hidden_state[1:], outs[1].last_hidden_state[:n - 1])
            caches = [_returned_cache(out) for out in outs]
        return same

    def _alone_rows_probe(self) -> bool:
        """Rows of one shape (of at least MIN_BATCHED_LENGTH new tokens) against each alone: a chunk on no
        cache, then tails of a few lengths on it, in batches of 2 and 3. True on the CPUs measured (oneDNN)."""
        torch = self.torch
        tails = (MIN_BATCHED_LENGTH, MIN_BATCHED_LENGTH + 5, self.chunk)
        rows = torch.randint(0, min(len(self.tokenizer), 32000), (3, self.chunk + max(tails)),
                             generator=torch.Generator().manual_seed(0)).tolist()
        alone = [self._run_rows([row[:self.chunk]], None) for row in rows]
        together = self._run_rows([row[:self.chunk] for row in rows], None)
        same = True
        for n, t in ((3, tails[0]), (2, tails[1]), (3, tails[2])):
            batch = self._forward_rows([r[self.chunk:self.chunk + t] for r in rows[:n]],
                                       _stack_padded([_row_cache(together, r) for r in range(n)], self.chunk))
            for r in range(n):
                own = self._forward_rows([rows[r][self.chunk:self.chunk + t]], _clone_cache(alone[r]))
                same = same and torch.equal(own.last_hidden_state[0], batch.last_hidden_state[r])
        return same
