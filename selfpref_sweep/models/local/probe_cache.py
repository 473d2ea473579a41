"""The local backend's load-time probes, remembered between processes (models/local/).

Whether output-layer rows, batched rows, or a prompt cut into pieces give the same bits as one alone is a property
of the model's shapes, its numeric type, the device's kernels and the torch build, not of a run. Each probe runs
once per such combination and its verdict is kept in `probes.json` beside the converted weights, so a second load
in a new process skips it. The key holds everything the verdict depends on: the model's identity (weights,
dtype, adapter), the probe's own parameters, the device kind (CPU model and its vector extensions, or the GPU's
name and compute capability), torch's version and its thread count (oneDNN may split reductions by threads).

Two processes writing at once may each keep only their own new verdict (last replace wins); the lost one is
probed again on the next load, never read wrong.
"""

from __future__ import annotations

import json
import logging
import platform
from functools import lru_cache
from pathlib import Path
from typing import Callable

from ...errors import StorageError
from ...records.atomic import atomic_write_json
from .precision import cpu_flags

log = logging.getLogger(__name__)

FILE = "probes.json"
_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "asimd", "sve")


@lru_cache(maxsize=None)
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
