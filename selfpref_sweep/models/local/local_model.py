"""LocalModel, the local backend: Hugging Face transformers on CPU (or a GPU when there is one).

The backend class composes the package's concerns: answer tokens (answer_tokens.py), judging
(answer_reading.py), summaries (decoding.py), scoring a given text (given_text.py), forwards over shared
prefixes (forwards.py), batch-invariant computation (batch_invariant.py), the load-time probes (probes.py) and a
CPU's choice of schedule where the default's probes fail (cpu_schedules.py).
Here: loading, the identity and its schedule, sizing for the device, memory.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from ...errors import ModelUnavailableError
from ..base import ModelAPI, ModelIdentity, adapter_fingerprint, option
from .answer_reading import HEAD_ROWS, AnswerReading
from .answer_tokens import Tokens
from .batch_invariant import GPU_INVARIANT_ROWS, BatchInvariant
from .cpu_schedules import (
    CPU_FIXED_ROWS,
    LINEAR_SLAB,
    SCHEDULE_ROWS,
    SCHEDULE_SLABS,
    CpuSchedules,
    machine_choice,
    use_linear_slabs,
)
from .decoding import Decoding
from .forwards import Forwards
from .given_text import GivenText
from .key_blocks import KEY_BLOCK, use_key_blocks
from .kv_cache import _cache_bytes, _clone_cache
from .precision import resolve_dtype
from .prefix import PrefixLRU
from .probes import Probes
from .weights import local_hf_dir, weights_fingerprint

log = logging.getLogger(__name__)

# Bump when a change here changes any result (1 -> 2: answer probabilities from a float32 output layer;
# 2 -> 3: split answers read at a second position. Unsplit results are bit-identical, but a tokenizer that
# splits " 1" into "▁", "1" now gets other numbers, and a cache entry must hold only what its key says).
BACKEND_VERSION = 3

# See LocalModel.min_extend_saving; chosen with bench/judge_speed.py (README, "Caching and speed").
MIN_EXTEND_SAVING = 32


def attach_adapter(model, adapter_path: str):
    """The base model with a saved LoRA adapter, unmerged, ready for inference."""
    from peft import PeftModel

    tuned = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=False)
    tuned.eval()
    return tuned


class LocalModel(Tokens, AnswerReading, GivenText, Decoding, Forwards, BatchInvariant, Probes, CpuSchedules,
                 ModelAPI):
    poolable = True  # weights in memory: worth keeping between cells (models/pool.py)

    def __init__(self, cfg, model_cache: str, show_progress: bool = True):
        self.cfg = cfg
        self.identity = self.identity_for(cfg)
        # the CPU schedule recorded for this machine (cpu_schedules.py), None where no choice applies: read once
        # per process, so this identity is the one the cache handle made before loading (the identity less its
        # schedule is the base the choice is filed under; a subclass may make its own identity)
        self.cpu_choice = self.cpu_choice_for(cfg, dataclasses.replace(self.identity, schedule=""))
        self.model_cache = model_cache
        self.prefix_reuse = bool(option(cfg, "prefix_reuse", True))
        self.max_batch = 8  # prompts scored together after a shared prefix
        # A shared stretch gets a forward of its own only if that saves this many recomputed tokens: each
        # forward pass reads every weight once, worth about as much as a few dozen tokens on a CPU.
        self.min_extend_saving = MIN_EXTEND_SAVING
        self.generate_batch = int(option(cfg, "generate_batch", 8))
        self.forward_tokens, self.kv_budget_bytes = 1024, 2 * 2 ** 30  # set for the device by _load
        self.chunk = self.invariant_chunk(cfg)  # > 0: batch-invariant computation in chunks of this many tokens
        self.rows = self.invariant_rows(cfg, self.cpu_choice) if self.chunk else 0  # > 0: rows of every forward
        # > 0: the decoder's linear layers in products of this many rows (a CPU's "slabs" schedule)
        self.slab = LINEAR_SLAB if self.cpu_choice == SCHEDULE_SLABS else 0
        # On a CPU, batch-invariant computation pads attention's keys to whole blocks (models/local/key_blocks.py),
        # so that where the device allows (`split_free`) prompts are judged over shared prefixes, as if each alone.
        self.key_blocks = self._key_blocks_for(self.chunk)
        self.prefix_lru = PrefixLRU(int(float(option(cfg, "prefix_cache_mb", 1024)) * 2 ** 20),
                                    clone=_clone_cache, size=_cache_bytes)
        self._answer_ids: dict[str, list[int]] = {}
        self.tokens_computed = 0  # prompt tokens actually run through the model (after prefix reuse)
        self.tokens_requested = 0
        self.second_positions = 0  # prompts whose answer was read at a second position (split answers)
        self.forwards = self.largest_batch = 0  # forwards over prompt pieces run, and the most rows one held
        self._load()

    def _key_blocks_for(self, chunk: int) -> bool:
        return bool(chunk) and not self.rows

    def switch_schedule(self, chunk: int) -> None:
        """Switch the loaded model between batch-invariant computation in chunks of `chunk` tokens (on a CPU with
        attention's keys in whole blocks) and the batched schedule (0), as a config with that chunk would load
        it. For benches that time both on one model: the identity, and so the cache keys, stay as loaded.
        Linear layers in slabs (a CPU's "slabs" schedule) belong to the batch-invariant side only."""
        key_blocks = self._key_blocks_for(chunk)
        if key_blocks != self.key_blocks:
            use_key_blocks(self.model, key_blocks)
        if self.slab and bool(chunk) != bool(self.chunk):
            use_linear_slabs(self.model, bool(chunk))
        self.chunk, self.key_blocks = chunk, key_blocks

    @classmethod
    def identity_for(cls, cfg) -> ModelIdentity:
        base = cls._base_identity(cfg)
        return dataclasses.replace(base, schedule=cls.schedule_of(cfg, cls.cpu_choice_for(cfg, base)))

    @classmethod
    def _base_identity(cls, cfg) -> ModelIdentity:
        return ModelIdentity(name=cfg.name, backend="local", weights=weights_fingerprint(cfg),
                             dtype=resolve_dtype(cfg.dtype), adapter=adapter_fingerprint(cfg),
                             backend_version=BACKEND_VERSION)

    @classmethod
    def schedule_of(cls, cfg, choice: str | None) -> str:
        """The identity's schedule for a config and a CPU choice (None or SCHEDULE_KEYS: the config's own)."""
        chunk = cls.invariant_chunk(cfg)
        if not chunk:
            return ""
        rows = cls.invariant_rows(cfg, choice)
        decode = rows or int(option(cfg, "generate_batch", 8))
        # with key blocks, summaries decode at widths of whole key blocks, query heads folded ("w512"; see
        # `_decodes_any_width`, key_blocks.folded_heads); elsewhere at widths of DECODE_WIDTH. "s64": linear
        # layers in slabs of 64 rows (cpu_schedules.py), named only where a machine's probes chose it
        slab = f"s{LINEAR_SLAB}" if choice == SCHEDULE_SLABS else ""
        fill, width = (f"x{rows}", "") if rows else (f"k{KEY_BLOCK}{slab}", f"w{KEY_BLOCK}")
        return f"chunks{chunk}{fill}h{HEAD_ROWS}d{decode}{width}"

    def schedule_for(self, choice: str) -> str:
        return self.schedule_of(self.cfg, choice)

    @classmethod
    def cpu_choice_for(cls, cfg, base: ModelIdentity) -> str | None:
        """The schedule this machine's probes chose for the model (cpu_schedules.py: keys, slabs or rows), None
        where no choice applies: batch-invariant computation off, `batch_invariant_rows` given, or a GPU."""
        chunk = cls.invariant_chunk(cfg)
        if not chunk or option(cfg, "batch_invariant_rows", None) is not None:
            return None
        import torch

        if torch.cuda.is_available():
            return None
        return machine_choice(base, chunk)

    @classmethod
    def invariant_chunk(cls, cfg) -> int:
        """The chunk of batch-invariant computation, 0 where it is off: `batch_invariant`, whose auto (null)
        is on in a 16-bit type and off in float32 (whose batched results agree to float32 rounding)."""
        on = option(cfg, "batch_invariant", None)
        if on is None:
            on = resolve_dtype(option(cfg, "dtype", "auto")) != "float32"
        return int(option(cfg, "batch_invariant_chunk", 64)) if on else 0

    @classmethod
    def invariant_rows(cls, cfg, choice: str | None = None) -> int:
        """Rows of every batch-invariant forward, 0 where pieces share a forward only as they would run alone:
        `batch_invariant_rows`, whose auto (null) is GPU_INVARIANT_ROWS where the model will run on a GPU, and
        CPU_FIXED_ROWS on a CPU whose probes chose the fixed-row schedule (`choice` SCHEDULE_ROWS)."""
        rows = option(cfg, "batch_invariant_rows", None)
        if rows is None:
            import torch

            rows = GPU_INVARIANT_ROWS if torch.cuda.is_available() else CPU_FIXED_ROWS if choice == SCHEDULE_ROWS else 0
        return int(rows)

    # ------------------------------------------------------------------ the backend contract (base.ModelAPI)
    @classmethod
    def costs_money(cls, cfg) -> bool:
        return False  # runs on this machine

    @classmethod
    def preflight_problems(cls, cfg, model_cache: str) -> list[tuple[str, str]]:
        """Weights that are not on this machine (packages missing, or a hub id with no local copy)."""
        from .weights import weights_problem

        problem = weights_problem(cfg, model_cache)
        return [] if problem is None else [("weights", f"{cfg.name}: weights not available locally: {problem}")]

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        start = time.time()
        if option(self.cfg, "weights"):
            path, kwargs = str(local_hf_dir(self.cfg, self.model_cache)), {}
        else:
            path, kwargs = self.cfg.hf_id, {"revision": option(self.cfg, "revision")}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, self.identity.dtype), **kwargs)
        except OSError as exc:  # no hub here: name the way out instead of a long traceback
            raise ModelUnavailableError(
                f"Could not load model {self.cfg.name!r} from {path!r}: {exc}. Offline machines cannot reach the "
                f"Hugging Face hub; point hf_id at a local copy (e.g. evaluator.hf_id=/models/Llama-2-7b-chat-hf)."
            ) from exc
        adapter = option(self.cfg, "adapter")
        if adapter is not None and adapter.path:  # a fine-tuned evaluator: base + LoRA adapter, kept unmerged
            self.model = attach_adapter(self.model, adapter.path)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model.to(self.device).eval()
        if self.key_blocks:
            use_key_blocks(self.model, True)
        if self.slab:
            use_linear_slabs(self.model, True)
        self._size_for_device()
        if any(t != "full_attention" for t in getattr(self.model.config, "layer_types", None) or []):
            self.prefix_reuse = False  # sliding-window layers keep no full prefix to crop back to
        if self.cfg.chat and not self.tokenizer.chat_template:
            raise ModelUnavailableError(f"Model {self.cfg.name!r} has no chat template; set chat: false and a "
                                        f"completion_prompt to use it as a summary source.")
        log.info("loaded %s in %.1fs on %s", self.identity.label, time.time() - start, self.device)

    def _size_for_device(self) -> None:
        """Work per forward from the device. A CPU is compute-bound from a few hundred tokens per forward (2
        cores: 1.8 ms/token at 1 x 64, 1.3-1.5 at 8 x 64 and 16 x 64, up to 1.9 at 32 x 64; bench/judge_speed.py
        --forward-cost); a GPU needs thousands of tokens and many rows to fill, and the KV caches of a batch may
        take part of the memory left after the weights. The batched schedule's `max_batch` stays 8 on a CPU,
        where its numbers were measured."""
        tokens = option(self.cfg, "forward_tokens", None)
        if self.device == "cuda":
            free, _ = self.torch.cuda.mem_get_info()
            self.forward_tokens, self.kv_budget_bytes = int(tokens or 16384), int(0.4 * free)
            self.max_batch = 32
        else:
            self.forward_tokens, self.kv_budget_bytes = int(tokens or 512), 2 * 2 ** 30

    def memory_bytes(self) -> int:
        """What this loaded model holds in memory: weights, the float32 output layer once built, and the
        prefix LRU (the model pool's budget counts these)."""
        if self.model is None:
            return 0
        total = sum(t.numel() * t.element_size() for t in self.model.parameters())
        if "_head_fp32" in self.__dict__:
            total += sum(t.numel() * t.element_size() for t in self._head_fp32 if t is not None)
        return total + self.prefix_lru.bytes

    def close(self) -> None:
        self.model = None
        self.prefix_lru.clear()
        self.__dict__.pop("_head_fp32", None)
