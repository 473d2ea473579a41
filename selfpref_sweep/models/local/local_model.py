"""Local backend: Hugging Face transformers on CPU (or a GPU when there is one).

Judging reads the full next-token distribution at the answer position and sums, for each answer,
the probability of every vocabulary token that spells it ("1", " 1", ...). A batch of judge prompts
is walked over its shared prefixes (models/local/prefix.py): each distinct prefix (chat header + article,
then the first summary) goes through the model once into the KV cache, and the prompts that branch
off at the same point are scored together in one padded batch on a read-only expansion of that cache.
The caches of the prefixes computed are kept between calls in a bounded LRU (`prefix_cache_mb`), so the
next cell of a sweep (same articles, another source) starts from its articles' prefixes.

Summaries are decoded greedily in left-padded batches of prompts of similar length (`generate_batch`);
each row stops at its own end-of-turn token. Which prompts share a batch is not part of a summary's cache
key: a row never attends to another row (its padding is masked and its positions start at its first real
token), so the batch changes a summary only through floating-point rounding order, as the thread count
does; keying on it would instead make a re-run over another article subset regenerate (and possibly
change) summaries that earlier cells already judged. bench/generate_speed.py counts how many batched
summaries equal the batch-of-one decoding token for token.

Split answers: some tokenizers write " 1" as a whitespace-only piece and then the digit (Llama-2's
sentencepiece emits "▁", then "1"), so part of the answer's mass sits one position further on. Where the
whitespace-only tokens carry at least SPLIT_MIN_MASS at the answer position, the most probable of them
(largest first, until the whitespace mass left unread is below SPLIT_MIN_MASS, at most SPLIT_MAX_TOKENS)
each get a second position on the batch's own KV cache, and P(a) = sum of P(spellings of a) + sum over
those w of P(w) * P(spellings of a | prompt + w). Such a result's method is SPLIT_METHOD; every other
prompt is read exactly as before (one position, FULL_METHOD).

Batch-invariant computation (`batch_invariant`; auto: on in bf16/fp16, off in float32). In a 16-bit type a
matrix product's rounding depends on its shapes, so a prompt scored in a batch of 8 after a shared prefix gets
other numbers (measured here: up to 2e-2 in an answer probability) than the same prompt scored alone or after
another prefix, and which batch a prompt lands in depends on what an earlier, perhaps killed, run cached. In
this mode every prompt runs alone: its KV cache is built in fixed chunks of `batch_invariant_chunk` tokens from
position 0 (chunk k always one forward of exactly those tokens on the cache of chunks < k), the prefix LRU
holds and serves only caches at chunk boundaries, and the rest of the prompt is one forward of its own. So
the same tokens always meet the same shapes, and a result depends on its own prompt alone. The pieces are
not run one prompt at a time, though: every chunk at one depth has one shape, and so has every tail of one
length on one boundary. How such pieces share a forward depends on the device:
- On a CPU (`batch_invariant_rows: 0`) attention pads its keys to whole blocks of 512 and every forward's width
  leaves 0 or 16+ rows in its last query block (models/local/key_blocks.py): then a token's numbers do not depend on
  how its prompt was cut into forwards or what shared them (`split_free`, probed once per model; true on the
  CPUs measured), and prompts are judged and scored over their shared prefixes like the batched schedule (the
  prefix trie; the answers read HEAD_ROWS at a time, each second position on its row's own cache cut to its
  prompt), with each prompt's numbers those of it alone in one forward, which are also the chunks' numbers.
  Where the probe fails, the chunks run: the device gives each row of a batched forward the bits it gives alone
  (`rows_invariant`, probed once per model; true on the CPUs measured for pieces of 16 tokens or more), so
  pieces from many prompts share a forward, up to the device's token budget (`forward_tokens`), with results
  bit-identical to one prompt per forward. Summaries use the chunks either way.
- On a GPU a matrix product's kernel, and so its rounding, depends on the row count (cuBLAS picks tiles and
  split-K by shape), so rows cannot share a forward of a varying size. There every forward has exactly
  `batch_invariant_rows` rows (auto: GPU_INVARIANT_ROWS), filled with copies of a real one, and every tail is
  right-padded to whole chunks (attention is causal: no real position sees a pad). Each forward is then one
  of a fixed set of shapes, and a row's output depends on its own tokens only (probed once per model: a row
  gets the same bits beside other companions). The numbers are a function of the prompt and that row count,
  which the identity's schedule names ("chunks64x32").
The float32 output layer reads the tails' last positions in products of exactly HEAD_ROWS rows (filled up with
copies of a real row): a product's rounding depends on its row count, and one of 16 rows costs about what 3
single rows cost. Rows of several prompts share a product where the device gives a row the same bits beside
any companions (probed once per model, `head_rows_invariant`); elsewhere each row fills a product with copies
of itself, which gives the same bits more slowly. The schedule names the block ("h16").
Summaries are decoded in batches of a fixed row count (`batch_invariant_rows` on a GPU, else `generate_batch`)
whose rows share one width: each prompt's cache is built on its chunks and padded to its width (a function of
its own length: the next multiple of DECODE_WIDTH tokens, with key blocks of KEY_BLOCK), each new token at the
same cache slot in every row, the padding masked and each row's positions its own. Rows of one width decode
together, their tails right-padded to it; with key blocks rows of every width do, at the widest one's, their
caches padded with zeros, where a row gets the bits of its own width (`_decodes_any_width`). Every decoding
step is then one fixed shape, and a summary depends on its own prompt only. The identity's `schedule`
("chunks64k512h16d8w512", on a GPU "chunks64x32h16d32") keeps these results apart from batched ones in the call
cache. bench/judge_speed.py, bench/batch_invariance.py, bench/generate_speed.py and bench/gpu_judge.py measure
the cost.

Scoring a given text (`sequence_logprobs`, the familiarity stage) walks the same schedule over the
requests' prompts, so an article's prompt goes through the model once for all the texts scored after it;
each text is then run on a copy of that cache and its tokens' log-probabilities are read at every position.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import time
from functools import cached_property
from itertools import groupby
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

from ...errors import ModelUnavailableError
from ..base import (AnswerDistribution, AnswerRequest, Generation, GenerateRequest, ModelAPI, ModelIdentity,
                   SequenceLogprobs, SequenceRequest, adapter_fingerprint, option, spells_answer)
from .key_blocks import KEY_BLOCK, folded_heads, query_width, use_key_blocks
from .precision import resolve_dtype
from .prefix import Extend, PrefixLRU, Score, schedule
from .probe_cache import probe_key, remembered
from .weights import local_hf_dir, weights_fingerprint

log = logging.getLogger(__name__)

# Bump when a change here changes any result (1 -> 2: answer probabilities from a float32 output layer;
# 2 -> 3: split answers read at a second position. Unsplit results are bit-identical, but a tokenizer that
# splits " 1" into "▁", "1" now gets other numbers, and a cache entry must hold only what its key says).
BACKEND_VERSION = 3

FULL_METHOD = "full_distribution"  # the answer position's full next-token distribution
SPLIT_METHOD = "full_distribution+split"  # ... plus a second position after whitespace-only tokens
# Whitespace mass below this is left unread (a negligible share next to judge.min_answer_mass), so the
# second position runs only for prompts whose model actually starts its answer with whitespace.
SPLIT_MIN_MASS = 0.01
SPLIT_MAX_TOKENS = 4

# See LocalModel.min_extend_saving; chosen with bench/judge_speed.py (README, "Caching and speed").
MIN_EXTEND_SAVING = 32

# Batch-invariant computation batches rows of at least this many new tokens only: a matrix product of fewer
# rows takes other kernels here (oneDNN, bf16: a 1-token row alone differs from the same row in a batch of 2,
# a 3-token one from it in a batch of 4), while from 16 rows on the measured products gave each row the same
# bits in any batch. Shorter tails run alone, as before.
MIN_BATCHED_LENGTH = 16

# Rows of every batch-invariant forward on a GPU (batch_invariant_rows auto): with 64-token chunks, 2,048 tokens
# per forward, enough to keep a 7B model's matrix products efficient while the padding rows stay few.
GPU_INVARIANT_ROWS = 32

# Batch-invariant summaries without key blocks (a GPU): a prompt's cache is padded to the next multiple of this
# many tokens (rounded up to whole chunks), and prompts of one such width decode together. Wider steps group more
# prompts per width (more rows per decoding step) for more padded positions in each prompt's last forward. With
# key blocks (a CPU) the step is KEY_BLOCK and rows of every width decode together (`_decodes_any_width`).
DECODE_WIDTH = 256

# Rows of every output-layer product that reads batch-invariant answer distributions. A float32 product of 1
# row rounds otherwise than the same row among 8 or more (oneDNN here), but among a fixed count a row gets the
# same bits whatever its companions; and the product is memory-bound at one row (2 AVX-512 cores, a float32
# matrix of qwen05's head's shape, 151,936 x 896: 49 ms for 1 row, 111 ms for 8, 134 ms for 16), so blocks of
# 16 read the rows of several prompts at a third of the cost each.
HEAD_ROWS = 16

# End-of-turn markers of the chat templates we know; generation stops at any that the vocabulary has.
_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "</s>")


def answer_token_ids(decoded_vocab: Sequence[str], answer: str, special_ids: set) -> List[int]:
    """Ids of every token that spells `answer`, whitespace aside ("1", " 1", "\\n1"); letters
    match in any case ("Yes", " yes", "YES")."""
    return [i for i, text in enumerate(decoded_vocab) if i not in special_ids and spells_answer(text, answer)]


def whitespace_token_ids(decoded_vocab: Sequence[str], special_ids: set,
                         decode_in_context: Callable[[List[int]], List[str]]) -> List[int]:
    """Ids of the tokens whose text is whitespace only (" ", "\\n", sentencepiece's "▁"). A token that
    decodes to "" alone is decoded again after a word (`decode_in_context`): sentencepiece drops a
    leading "▁" at the start of a text, so "▁" alone reads as "" but adds a space after a word."""
    def blank(text: str) -> bool:
        return bool(text) and not text.strip()

    ids = [i for i, t in enumerate(decoded_vocab) if i not in special_ids and blank(t)]
    empty = [i for i, t in enumerate(decoded_vocab) if i not in special_ids and t == ""]
    if empty:
        ids += [i for i, t in zip(empty, decode_in_context(empty)) if blank(t)]
    return sorted(ids)


def stop_token_ids(tokenizer) -> List[int]:
    """The tokens generation stops at: the tokenizer's end of sequence and every end-of-turn marker it has."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in _END_OF_TURN if t in vocab)
    return sorted(ids)


def tokenizer_whitespace_ids(tokenizer, decoded_vocab: Sequence[str]) -> List[int]:
    """`whitespace_token_ids` of a Hugging Face tokenizer, a token that decodes to "" read after a word."""
    special = set(tokenizer.all_special_ids)
    word = next((i for i, t in enumerate(decoded_vocab) if i not in special and t.isalnum()), None)

    def decode_in_context(ids: List[int]) -> List[str]:
        if word is None:
            return [""] * len(ids)
        lead = tokenizer.decode([word])
        texts = tokenizer.batch_decode([[word, i] for i in ids])
        return [t[len(lead):] if t.startswith(lead) else "" for t in texts]

    return whitespace_token_ids(decoded_vocab, special, decode_in_context)


def split_tokens(ws_probs: Sequence[Tuple[int, float]], min_mass: float = SPLIT_MIN_MASS,
                 max_tokens: int = SPLIT_MAX_TOKENS) -> List[Tuple[int, float]]:
    """The whitespace-only tokens worth a second position, from (id, probability) pairs: the most
    probable first, until the whitespace mass left is below `min_mass`, at most `max_tokens`."""
    left = sum(p for _, p in ws_probs)
    chosen = []
    for i, p in sorted(ws_probs, key=lambda t: -t[1]):
        if left < min_mass or len(chosen) == max_tokens:
            break
        chosen.append((i, p))
        left -= p
    return chosen


def attach_adapter(model, adapter_path: str):
    """The base model with a saved LoRA adapter, unmerged, ready for inference."""
    from peft import PeftModel

    tuned = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=False)
    tuned.eval()
    return tuned


class LocalModel(ModelAPI):
    poolable = True  # weights in memory: worth keeping between cells (models/pool.py)

    def __init__(self, cfg, model_cache: str, show_progress: bool = True):
        self.cfg = cfg
        self.identity = self.identity_for(cfg)
        self.model_cache = model_cache
        self.prefix_reuse = bool(option(cfg, "prefix_reuse", True))
        self.max_batch = 8  # prompts scored together after a shared prefix
        # A shared stretch gets a forward of its own only if that saves this many recomputed tokens: each
        # forward pass reads every weight once, worth about as much as a few dozen tokens on a CPU.
        self.min_extend_saving = MIN_EXTEND_SAVING
        self.generate_batch = int(option(cfg, "generate_batch", 8))
        self.forward_tokens, self.kv_budget_bytes = 1024, 2 * 2 ** 30  # set for the device by _load
        self.chunk = self.invariant_chunk(cfg)  # > 0: batch-invariant computation in chunks of this many tokens
        self.rows = self.invariant_rows(cfg) if self.chunk else 0  # > 0: every such forward has this many rows
        # On a CPU, batch-invariant computation pads attention's keys to whole blocks (models/local/key_blocks.py), so
        # that where the device allows (`split_free`) prompts are judged over shared prefixes, as if each alone.
        self.key_blocks = self._key_blocks_for(self.chunk)
        self.prefix_lru = PrefixLRU(int(float(option(cfg, "prefix_cache_mb", 1024)) * 2 ** 20),
                                    clone=_clone_cache, size=_cache_bytes)
        self._answer_ids: Dict[str, List[int]] = {}
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
        it. For benches that time both on one model: the identity, and so the cache keys, stay as loaded."""
        key_blocks = self._key_blocks_for(chunk)
        if key_blocks != self.key_blocks:
            use_key_blocks(self.model, key_blocks)
        self.chunk, self.key_blocks = chunk, key_blocks

    @classmethod
    def identity_for(cls, cfg) -> ModelIdentity:
        chunk = cls.invariant_chunk(cfg)
        rows = cls.invariant_rows(cfg) if chunk else 0
        decode = rows or int(option(cfg, "generate_batch", 8))
        # with key blocks, summaries decode at widths of whole key blocks, query heads folded ("w512"; see
        # `_decodes_any_width`, key_blocks.folded_heads); elsewhere at widths of DECODE_WIDTH
        fill, width = (f"x{rows}", "") if rows else (f"k{KEY_BLOCK}", f"w{KEY_BLOCK}")
        schedule = f"chunks{chunk}{fill}h{HEAD_ROWS}d{decode}{width}" if chunk else ""
        return ModelIdentity(name=cfg.name, backend="local", weights=weights_fingerprint(cfg),
                             dtype=resolve_dtype(cfg.dtype), adapter=adapter_fingerprint(cfg),
                             backend_version=BACKEND_VERSION, schedule=schedule)

    @classmethod
    def invariant_chunk(cls, cfg) -> int:
        """The chunk of batch-invariant computation, 0 where it is off: `batch_invariant`, whose auto (null)
        is on in a 16-bit type and off in float32 (whose batched results agree to float32 rounding)."""
        on = option(cfg, "batch_invariant", None)
        if on is None:
            on = resolve_dtype(option(cfg, "dtype", "auto")) != "float32"
        return int(option(cfg, "batch_invariant_chunk", 64)) if on else 0

    @classmethod
    def invariant_rows(cls, cfg) -> int:
        """Rows of every batch-invariant forward, 0 where pieces share a forward only as they would run alone:
        `batch_invariant_rows`, whose auto (null) is GPU_INVARIANT_ROWS where the model will run on a GPU."""
        rows = option(cfg, "batch_invariant_rows", None)
        if rows is None:
            import torch

            rows = GPU_INVARIANT_ROWS if torch.cuda.is_available() else 0
        return int(rows)

    # ------------------------------------------------------------------ the backend contract (base.ModelAPI)
    @classmethod
    def costs_money(cls, cfg) -> bool:
        return False  # runs on this machine

    @classmethod
    def preflight_problems(cls, cfg, model_cache: str) -> List[Tuple[str, str]]:
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

    # ----------------------------------------------------------------- prompts
    def render(self, messages) -> str:
        return self.tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                                  add_generation_prompt=True, tokenize=False)

    def encode(self, text: str, chat: bool = True) -> List[int]:
        # A chat template already holds any BOS (adding another would repeat the paper's double BOS);
        # a raw completion prompt needs the tokenizer's own (base models go astray without it).
        return self.tokenizer(text, add_special_tokens=not chat)["input_ids"]

    @cached_property
    def _decoded_vocab(self) -> List[str]:
        return self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])

    def _token_text(self, i: int) -> str:
        """A token's text; the output layer may have rows past the tokenizer's vocabulary (padding)."""
        return self._decoded_vocab[i] if i < len(self._decoded_vocab) else f"<id {i}>"

    def answer_ids(self, answer: str) -> List[int]:
        if answer not in self._answer_ids:
            special = set(self.tokenizer.all_special_ids)
            self._answer_ids[answer] = answer_token_ids(self._decoded_vocab, answer, special)
        return self._answer_ids[answer]

    @cached_property
    def _whitespace_ids(self) -> List[int]:
        return tokenizer_whitespace_ids(self.tokenizer, self._decoded_vocab)

    @cached_property
    def _stop_ids(self) -> List[int]:
        return stop_token_ids(self.tokenizer)

    # -------------------------------------------------------------- generation
    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Tuple[GenerateRequest, Generation]]:
        """Greedy decoding in batches of up to `generate_batch` prompts; sorted by length so a batch pads
        little, and grouped by decoding length (a batch shares max_new_tokens)."""
        encoded = []
        for req in requests:
            chat = bool(req.messages)
            encoded.append((req, self.encode(self.render(req.messages) if chat else req.prompt, chat=chat)))
        encoded.sort(key=lambda e: (e[0].max_new_tokens, len(e[1])))
        for _, group in groupby(encoded, key=lambda e: e[0].max_new_tokens):
            group = list(group)
            if self.chunk:
                yield from self._invariant_generate(group)
                continue
            size = max(1, self.generate_batch)
            for k in range(0, len(group), size):
                yield from self._generate_batch(group[k:k + size])

    def _generate_batch(self, batch: List[Tuple[GenerateRequest, List[int]]]
                        ) -> Iterator[Tuple[GenerateRequest, Generation]]:
        """One left-padded batch: the mask hides each row's padding (and generate() derives each row's
        positions from it), and a row that emits a stop token is finished while the others go on.

        Each prompt but its last token is first run alone into its own KV cache (from the prefix LRU where
        it holds the prompt's start, and stored there, so scoring these summaries later starts from it):
        no padding is computed and the prompt is run exactly as a batch of one would. Those caches,
        left-padded to the batch's width, are what the batch decodes on."""
        torch = self.torch
        width = max(len(ids) for _, ids in batch)
        pad = self._pad_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for _, p in batch], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for _, p in batch], device=self.device)
        cache = self._generation_cache(batch, width)
        with torch.inference_mode():
            out = self.model.generate(
                ids, attention_mask=mask, **self._kv(cache), max_new_tokens=batch[0][0].max_new_tokens,
                do_sample=False, temperature=None, top_p=None, top_k=None, eos_token_id=self._stop_ids,
                pad_token_id=pad)
        for row, (req, prompt) in enumerate(batch):
            yield req, self._generation(req, prompt, out[row, width:].tolist())

    def _generation(self, req: GenerateRequest, prompt: List[int], new: List[int]) -> Generation:
        """A row's summary from its new tokens: up to and with its first stop token (what follows is padding)."""
        stops = set(self._stop_ids)
        new = new[:next((i + 1 for i, t in enumerate(new) if t in stops), len(new))]
        completion = self.tokenizer.decode(new, skip_special_tokens=True)
        for stop in req.stop:  # completion models run on; cut where the summary ends
            completion = completion.split(stop)[0]
        return Generation(text=completion.strip(), prompt_tokens=len(prompt), completion_tokens=len(new))

    def _invariant_generate(self, group: List[Tuple[GenerateRequest, List[int]]]
                            ) -> Iterator[Tuple[GenerateRequest, Generation]]:
        """Batch-invariant summaries (one max_new_tokens): each prompt's cache built to its width, then rows
        decoded together as soon as a batch of them is ready, or, when the waiting rows' caches outgrow half the
        KV budget, the fullest batch's rows as they are (the rest at the end). Rows of one width share a batch,
        their last forwards right-padded to it; where rows of every width share one (`_decodes_any_width`), the
        caches are padded with zeros instead, which no real position sees. Which rows share a batch never
        changes a row's bits (every batch is filled to the same row count)."""
        prompts = [ids for _, ids in group]
        widths = [self._decode_width(len(p)) for p in prompts]
        any_width = self._decodes_any_width
        extras = [[] if any_width else [self._pad_id] * (w - len(p)) for p, w in zip(prompts, widths)]
        pending: Dict[int, list] = {}
        for rows, out, cache in self._invariant_runs(prompts, extras):
            for r, i in enumerate(rows):
                key = 0 if any_width else widths[i]
                ready = pending.setdefault(key, [])
                # the row's cache cut to its prompt (its width): a forward's query width may have padded it further
                cut = len(prompts[i]) if any_width else widths[i]
                ready.append((i, out.last_hidden_state[r, self._tail_last(prompts[i])].clone(),
                              _rows_copy(_row_cache(cache, r, cut), 0, 1)))
                if len(ready) == self._decode_rows:
                    yield from self._decode_ready(group, pending.pop(key), widths)
            waiting = sum(widths[i] for ready in pending.values() for i, _, _ in ready) * self._kv_bytes_per_token
            if waiting > self.kv_budget_bytes // 2:
                key = max(pending, key=lambda k: len(pending[k]))
                yield from self._decode_ready(group, pending.pop(key), widths)
        for key, ready in sorted(pending.items()):
            yield from self._decode_ready(group, ready, widths)

    @property
    def _decodes_any_width(self) -> bool:
        """Whether rows of every width share decoding batches. With key blocks, where the device gives a row the
        same bits however far its padding reaches (`split_free`), a row decodes at any width of whole key blocks
        from its own with the bits it gets at its own: every padding block is fully masked and adds exact
        zeros, and its new tokens start a block of their own. So there rows decode at the widest one's width,
        and few prompts of many lengths still fill the batches."""
        return self.key_blocks and self.split_free

    def _decode_ready(self, group, ready: list, widths: List[int]) -> Iterator[Tuple[GenerateRequest, Generation]]:
        width = max(widths[i] for i, _, _ in ready)
        new = self._decode_rows_greedy([len(group[i][1]) for i, _, _ in ready], [h for _, h, _ in ready],
                                       [c for _, _, c in ready], width, group[0][0].max_new_tokens)
        for (i, _, _), tokens in zip(ready, new):
            yield group[i][0], self._generation(group[i][0], group[i][1], tokens)

    def _decode_rows_greedy(self, lengths: List[int], hidden: list, caches: list, width: int, max_new: int
                            ) -> List[List[int]]:
        """Greedy decoding of rows whose caches are up to `width` wide (row r's prompt in its first lengths[r]
        slots, padding after, the cache right-padded to `width`), from each prompt's last hidden state, in one
        batch of exactly `_decode_rows` rows (filled up with copies of the first): every step is one shape, each
        row's new token at slot width + s, its positions continuing its own prompt, its padding masked."""
        torch = self.torch
        n, fill = len(lengths), self._decode_rows - len(lengths)
        lengths, hidden, caches = lengths + lengths[:1] * fill, hidden + hidden[:1] * fill, caches + caches[:1] * fill
        cache = _stack_padded(caches, width, right=True)
        mask = torch.zeros(len(lengths), width + max_new, dtype=torch.long, device=self.device)
        for r, length in enumerate(lengths):
            mask[r, :length] = 1
        positions = torch.tensor(lengths, device=self.device)[:, None]
        stops, new, done = set(self._stop_ids), [[] for _ in range(n)], [False] * n
        with torch.inference_mode(), folded_heads() if self.key_blocks else contextlib.nullcontext():
            token = self.model.get_output_embeddings()(torch.stack(hidden)).argmax(-1)
            for step in range(max_new):
                for r, t in enumerate(token[:n].tolist()):
                    if not done[r]:
                        new[r].append(t)
                        done[r] = t in stops
                if all(done) or step == max_new - 1:
                    break
                mask[:, width + step] = 1
                out = self.model(input_ids=token[:, None], attention_mask=mask[:, :width + step + 1],
                                 position_ids=positions + step, **self._kv(cache), use_cache=True, logits_to_keep=1)
                cache = _returned_cache(out)
                token = out.logits[:, -1].argmax(-1)
        return new

    def _decode_width(self, length: int) -> int:
        """The width of a prompt's cache for batch-invariant decoding: with key blocks whole key blocks (see
        `_decodes_any_width`), else DECODE_WIDTH steps of whole chunks."""
        step = KEY_BLOCK if self.key_blocks else -(-DECODE_WIDTH // self.chunk) * self.chunk
        return -(-length // step) * step

    @property
    def _decode_rows(self) -> int:
        return self.rows or max(1, self.generate_batch)

    def _generation_cache(self, batch: List[Tuple[GenerateRequest, List[int]]], width: int):
        """The KV cache a batch decodes on: each prompt but its last token, left-padded to the batch."""
        if self.prefix_reuse and all(len(p) > 1 for _, p in batch):
            return _stack_padded([self._prompt_cache(p[:-1]) for _, p in batch], width - 1)
        return None

    def _prompt_cache(self, tokens: List[int]):
        """The KV cache of these tokens: from the longest prefix the LRU holds, the rest computed (and the
        whole stored)."""
        n, cache = self.prefix_lru.longest(tokens)
        if n < len(tokens):
            cache = self._extend(tokens[n:], cache)
            self.prefix_lru.put(tokens, cache)
        return cache

    @property
    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else self._stop_ids[0]

    # ------------------------------------------------------------------ judging
    def answer_distributions(self, requests: Sequence[AnswerRequest]
                             ) -> Iterator[Tuple[AnswerRequest, AnswerDistribution]]:
        prompts = [self.encode(self.render(r.messages)) for r in requests]
        if self.chunk:  # batch-invariant: each prompt's numbers as if alone
            runs = self._trie_tails(prompts) if self.split_free else self._chunk_tails(prompts)
            yield from self._read_in_blocks(runs, prompts, requests)
            return
        for rows, last, cache in self._trie_tails(prompts):
            batch = self._distributions(last, cache, [len(prompts[i]) for i in rows], [requests[i] for i in rows])
            for i, dist in zip(rows, batch):
                self.tokens_requested += len(prompts[i])
                yield requests[i], dist

    def _trie_tails(self, prompts: List[List[int]]) -> Iterator[Tuple[List[int], object, object]]:
        """(prompt indices, each one's last hidden state, the batch's cache) per forward that ends prompts: over
        their shared prefixes (models/local/prefix.py), or without prefix reuse each prompt from scratch."""
        if not self.prefix_reuse:
            for i, ids in enumerate(prompts):
                last, cache = self._forward_last([ids], cache=None)
                self.tokens_computed += len(ids)
                yield [i], last, cache
            return
        steps = schedule(prompts, max_batch=self.max_batch, min_saving=self.min_extend_saving)
        for step, cache in self._walk(prompts, steps):
            suffixes = [prompts[i][step.start:] for i in step.prompts]
            last, batch_cache = self._forward_last(suffixes, cache=cache)
            self.tokens_computed += sum(map(len, suffixes))
            yield step.prompts, last, batch_cache

    def _chunk_tails(self, prompts: List[List[int]]) -> Iterator[Tuple[List[int], object, object]]:
        """`_trie_tails` by fixed chunks (`_invariant_runs`): each prompt's tail on its chunk-boundary cache."""
        for rows, out, cache in self._invariant_runs(prompts, [[] for _ in prompts]):
            yield rows, out.last_hidden_state[list(range(len(rows))), [self._tail_last(prompts[i]) for i in rows]], cache

    def _read_in_blocks(self, runs, prompts: List[List[int]], requests: Sequence[AnswerRequest]
                        ) -> Iterator[Tuple[AnswerRequest, AnswerDistribution]]:
        """Batch-invariant answers from runs of (prompt indices, last hidden states, batch cache): the last
        positions read HEAD_ROWS at a time, across runs (`_head_probs`); each row's second position (split answers)
        on its own cache, which keeps its run's batch cache alive until the row is read. With key blocks the
        row's cache is cut to its prompt: the padding after it depends on its batch (trie) or width (chunks)."""
        pending: List[Tuple[int, object, object]] = []
        for rows, last, cache in runs:
            for r, i in enumerate(rows):
                pending.append((i, last[r], _row_cache(cache, r, len(prompts[i]) if self.key_blocks else None)))
            while len(pending) >= HEAD_ROWS:
                yield from self._read_block(pending[:HEAD_ROWS], prompts, requests)
                pending = pending[HEAD_ROWS:]
        if pending:
            yield from self._read_block(pending, prompts, requests)

    def _read_block(self, block, prompts, requests) -> Iterator[Tuple[AnswerRequest, AnswerDistribution]]:
        probs = self._head_probs(self.torch.stack([h for _, h, _ in block]))
        for (i, _, cache), row in zip(block, probs):
            self.tokens_requested += len(prompts[i])
            yield requests[i], self._distributions_of(row[None], cache, [len(prompts[i])], [requests[i]])[0]

    def _head_probs(self, hidden):
        """Next-token distributions of up to HEAD_ROWS hidden states, each from a product (and softmax) of
        exactly HEAD_ROWS rows: the states together, filled up with copies of the first, where a row's bits do
        not depend on its companions here; else each state with copies of itself."""
        torch = self.torch
        n = hidden.shape[0]
        if self.head_rows_invariant:
            return self._probs(torch.cat([hidden, hidden[:1].expand(HEAD_ROWS - n, -1)]))[:n]
        return torch.stack([self._probs(h.expand(HEAD_ROWS, -1).contiguous())[0] for h in hidden])

    def _probe(self, name: str, params: str, run: Callable[[], bool]) -> bool:
        """A load-time probe's verdict, remembered with the converted weights for this model, device kind and
        torch (models/local/probe_cache.py): a second load in a new process skips it."""
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
        return self._probe("split_free", f"block{KEY_BLOCK}", self._split_free_probe)

    def _split_free_probe(self) -> bool:
        torch = self.torch
        n, cuts = KEY_BLOCK + 48, (240, 400)  # pieces of 240, 160 and 160 tokens: query widths as they are
        ids = torch.randint(0, min(len(self.tokenizer), 32000), (2, n), generator=torch.Generator().manual_seed(0)
                            ).tolist()
        whole = self._forward_rows([ids[0]], None).last_hidden_state[0]
        cache, pieces = None, []
        for start, stop in zip((0,) + cuts, cuts + (n,)):
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

    def _bound(self, prompt: List[int]) -> int:
        """The last chunk boundary before the prompt's last token: its cache is built in chunks up to there."""
        return (len(prompt) - 1) // self.chunk * self.chunk

    def _tail_last(self, prompt: List[int]) -> int:
        """The position of the prompt's last real token within its tail forward (right padding follows it)."""
        return len(prompt) - self._bound(prompt) - 1

    # --------------------------------------------------------- batch-invariant computation
    def _invariant_runs(self, prompts: List[List[int]], extras: List[List[int]]
                        ) -> Iterator[Tuple[List[int], object, object]]:
        """Run every prompt as batch-invariant computation does alone, batched where that changes no bit.

        Prompt i's cache is built chunk by chunk up to its boundary b_i (the last multiple of the chunk before
        its last token), then prompt[b_i:] + extras[i] runs as one forward. Chunks of the same depth are one
        shape (the chunk on a cache of depth x chunk), and so are tails of one length on one boundary; on a
        device where rows of one shape come out bit for bit as they do alone (`rows_invariant`), each shape
        runs as a few batches of many rows instead of one forward per prompt. Yields (prompt indices, the
        tails' forward output, its cache) per batch of tails."""
        order = sorted(range(len(prompts)), key=lambda i: prompts[i])
        bounds = [self._bound(p) for p in prompts]
        longest = max((len(p) + len(e) for p, e in zip(prompts, extras)), default=1)
        window = self._window(longest)
        for w in range(0, len(order), window):
            yield from self._invariant_window(prompts, extras, bounds, order[w:w + window])

    def _invariant_window(self, prompts, extras, bounds, window: List[int]) -> Iterator[Tuple[List[int], object, object]]:
        """`_invariant_runs` for some prompts, depth by depth: the tails that start at this depth, then the
        next chunk of every prompt that goes deeper (from the prefix LRU where it holds it)."""
        key = (lambda i, n: tuple(prompts[i][:n])) if self.prefix_reuse else (lambda i, n: (i,) + tuple(prompts[i][:n]))
        level: Dict[tuple, object] = {}
        for depth in range(0, max(bounds[i] for i in window) + 1, self.chunk):
            tails: Dict[int, List[int]] = {}
            for i in window:
                if bounds[i] == depth:
                    tails.setdefault(self._tail_width(len(prompts[i]) - depth + len(extras[i])), []).append(i)
            for width, group in sorted(tails.items()):
                for rows in self._row_batches(group, depth, width):
                    ids = [self._right_padded(prompts[i][depth:] + extras[i], width) for i in rows]
                    out = self._rows_forward(ids, [level[key(i, depth)] for i in rows] if depth else None)
                    self.tokens_computed += sum(len(prompts[i]) - depth for i in rows)
                    yield rows, out, _returned_cache(out)
            level = self._next_level(prompts, [i for i in window if bounds[i] > depth], depth, level, key)

    def _next_level(self, prompts, deeper: List[int], depth: int, level: Dict[tuple, object], key) -> Dict[tuple, object]:
        """The caches one chunk deeper of the given prompts: each distinct one from the LRU or computed, the
        computed ones a few batches of rows (every row one chunk on a cache of `depth` tokens)."""
        nxt: Dict[tuple, object] = {}
        todo: Dict[tuple, int] = {}
        for i in deeper:
            k = key(i, depth + self.chunk)
            if k in nxt or k in todo:
                continue
            stored = self.prefix_lru.longest(prompts[i][:depth + self.chunk], at_least=depth + self.chunk)[1] \
                if self.prefix_reuse else None
            if stored is not None:
                nxt[k] = stored
            else:
                todo[k] = i
        for rows in self._row_batches(list(todo.values()), depth, self.chunk):
            out = self._rows_forward([prompts[i][depth:depth + self.chunk] for i in rows],
                                     [level[key(i, depth)] for i in rows] if depth else None)
            cache = _first_rows(_returned_cache(out), len(rows))
            self.tokens_computed += self.chunk * len(rows)
            for r, i in enumerate(rows):
                nxt[key(i, depth + self.chunk)] = row = _row_cache(cache, r)
                if self.prefix_reuse:
                    self.prefix_lru.put(prompts[i][:depth + self.chunk], row)
        return nxt

    def _row_batches(self, group: List[int], depth: int, length: int) -> Iterator[List[int]]:
        """Batches of one shape (`length` new tokens on a cache of `depth`): the fixed row count where every
        forward has one, else as many rows as the budget allows where rows are invariant; else one."""
        if self.rows:
            size = self.rows if self.rows_invariant else 1
        else:
            size = self._rows(depth, length) if length >= MIN_BATCHED_LENGTH and self.rows_invariant else 1
        for k in range(0, len(group), size):
            yield group[k:k + size]

    def _tail_width(self, length: int) -> int:
        """A tail's width in its forward: whole chunks where every forward has a fixed row count (so every
        forward is one of a few shapes), else its query width (its own length with no key blocks)."""
        return -(-length // self.chunk) * self.chunk if self.rows else self._query_width(length)

    def _query_width(self, length: int) -> int:
        """A forward's width for `length` new tokens: with key blocks its query width (models/local/key_blocks.py),
        else the length itself."""
        return query_width(length) if self.key_blocks else length

    def _right_padded(self, ids: List[int], width: int) -> List[int]:
        return ids + [self._pad_id] * (width - len(ids))

    def _rows_forward(self, ids: List[List[int]], caches: List[object] | None):
        """One forward of pieces of one shape, each row of `ids` on its own cache (None: from position 0).
        Where every forward has a fixed row count, the batch is filled up with copies of its first piece; the
        pieces are the output's first rows."""
        if self.rows and len(ids) < self.rows and self.rows_invariant:
            fill = self.rows - len(ids)
            ids = ids + [ids[0]] * fill
            caches = caches + [caches[0]] * fill if caches else caches
        return self._forward_rows(ids, self._stacked(caches) if caches else None)

    def _stacked(self, caches: List[object]):
        """One batch cache from row caches of one length: a new cache object (a forward extends the one it is
        given, and these rows' caches are read again)."""
        return _clone_cache(caches[0]) if len(caches) == 1 else _stack_padded(caches, caches[0].get_seq_length())

    def _forward_rows(self, ids: List[List[int]], cache):
        """The model's output over rows of equal length, in one batch on `cache` (one row per prompt)."""
        torch = self.torch
        self.forwards += 1
        self.largest_batch = max(self.largest_batch, len(ids))
        with torch.inference_mode():
            return self.model.get_decoder()(input_ids=torch.tensor(ids, device=self.device), **self._kv(cache),
                                            use_cache=True)

    def _run_rows(self, ids: List[List[int]], cache):
        """The cache after running rows of equal length on it."""
        return _returned_cache(self._forward_rows(ids, cache))

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

    def _fixed_rows_probe(self) -> bool:
        """In forwards of `rows` rows: a chunk on no cache, then a chunk on that cache, each run for rows 0..n-1
        and for rows 1..n; every row both batches hold (at another place, beside other rows) must match."""
        torch = self.torch
        n = self.rows
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

    def _rows(self, depth: int, length: int) -> int:
        """Rows per forward of `length` new tokens on a cache of `depth`: within the device's token budget per
        forward and its KV-cache budget."""
        by_tokens = self.forward_tokens // max(1, length)
        by_memory = self.kv_budget_bytes // max(1, (depth + length) * self._kv_bytes_per_token)
        return max(1, min(by_tokens, by_memory))

    def _window(self, longest: int) -> int:
        """How many prompts batch-invariant computation takes at once: their caches fit the KV budget."""
        return max(1, self.kv_budget_bytes // max(1, longest * self._kv_bytes_per_token))

    @cached_property
    def _kv_bytes_per_token(self) -> int:
        c = self.model.config
        layers = getattr(c, "num_hidden_layers", None)
        heads = getattr(c, "num_key_value_heads", None) or getattr(c, "num_attention_heads", None)
        if not layers or not heads:
            return 1024  # a model that does not say (a test stub): any positive size works
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        size = self.torch.finfo(getattr(self.torch, self.identity.dtype)).bits // 8
        return 2 * layers * heads * head_dim * size

    # ------------------------------------------------------- scoring given text
    def sequence_logprobs(self, requests: Sequence[SequenceRequest]
                          ) -> Iterator[Tuple[SequenceRequest, SequenceLogprobs]]:
        """The log-likelihood of each continuation after its prompt (the chat messages with the assistant
        turn opened, as generation renders them). The schedule runs over the prompts alone, so a shared
        prefix never reaches into a continuation and every continuation token is read in a Score step."""
        prompts, texts = [], []
        for r in requests:
            chat = bool(r.messages)
            prompt = self.encode(self.render(r.messages) if chat else (r.prompt or ""), chat=chat)
            # The continuation on its own, as the tokens a generation would have appended after the prompt.
            text = self.tokenizer(r.continuation, add_special_tokens=False)["input_ids"]
            if not prompt:
                raise ValueError("sequence_logprobs needs a non-empty prompt")
            prompts.append(prompt)
            texts.append(text)
        for rows, start, hidden in self._text_runs(prompts, texts):
            for row, i in enumerate(rows):
                first = len(prompts[i]) - 1 - start[row]  # the position that predicts the first text token
                total = self._token_logprobs(hidden[row, first:first + len(texts[i])], texts[i])
                self.tokens_requested += len(prompts[i]) + len(texts[i])
                yield requests[i], SequenceLogprobs(total=total, n_tokens=len(texts[i]), prompt_tokens=len(prompts[i]))

    def _text_runs(self, prompts: List[List[int]], texts: List[List[int]]
                   ) -> Iterator[Tuple[List[int], List[int], object]]:
        """Batches of prompt + text run through the model: (prompt indices, where each row starts in its prompt,
        the last hidden states). Batch-invariant: each row from its prompt's chunk boundary; else the shared-
        prefix schedule over the prompts (without prefix reuse, each prompt from scratch)."""
        if self.chunk and not self.split_free:
            for rows, out, _ in self._invariant_runs(prompts, texts):
                self.tokens_computed += sum(map(len, (texts[i] for i in rows)))
                yield rows, [self._bound(prompts[i]) for i in rows], out.last_hidden_state
            return
        for step, cache in self._text_steps(prompts):
            suffixes = [prompts[i][step.start:] + texts[i] for i in step.prompts]
            self.tokens_computed += sum(map(len, suffixes))
            yield step.prompts, [step.start] * len(step.prompts), self._forward_batch(suffixes, cache).last_hidden_state

    def _text_steps(self, prompts: List[List[int]]) -> Iterator[Tuple[Score, object]]:
        """The Score steps of scoring given texts, each with the cache it starts from: the shared-prefix schedule
        (without prefix reuse, each prompt from scratch)."""
        steps = (schedule(prompts, max_batch=self.max_batch, min_saving=self.min_extend_saving) if self.prefix_reuse
                 else [Score([i], 0) for i in range(len(prompts))])
        yield from self._walk(prompts, steps)

    def _walk(self, prompts: List[List[int]], steps) -> Iterator[Tuple[Score, object]]:
        """Run a schedule's Extend steps into the KV cache and yield each Score step with the cache of the
        shared prefix it starts from (None when it starts from scratch). An Extend starts from the longest
        prefix of its tokens in the LRU of earlier calls, and its result goes into that LRU."""
        cache, cache_len = None, 0
        for step in steps:
            if cache is not None and cache_len > step.start:
                cache.crop(step.start - cache_len)  # back to the shared prefix this step starts from
                cache_len = step.start
            if isinstance(step, Extend):
                tokens = prompts[step.prompt][:step.end]
                n, stored = self.prefix_lru.longest(tokens, at_least=cache_len + 1)
                if stored is not None:
                    cache, cache_len = stored, n
                if cache_len < step.end:
                    cache = self._extend(tokens[cache_len:], cache)
                    self.tokens_computed += step.end - cache_len
                    cache_len = step.end
                    self.prefix_lru.put(tokens, cache)
                continue
            yield from self._score_from_stored(prompts, step, cache if step.start else None)

    def _score_from_stored(self, prompts: List[List[int]], step: Score, cache) -> Iterator[Tuple[Score, object]]:
        """A Score step as scheduled, except that prompts with a longer prefix in the prefix LRU start from
        it: in a later cell an article often has a single new prompt (the new source's summary), which the
        schedule scores from the shared chat header, not from the article an earlier cell computed. Prompts
        that find the same stored prefix are scored together on one clone of it. The last prompt token is
        never taken from the LRU: its position's output is what the step reads."""
        if not len(self.prefix_lru):
            yield step, cache
            return
        rest, found = [], {}
        for i in step.prompts:
            n, stored = self.prefix_lru.longest(prompts[i][:len(prompts[i]) - 1], at_least=step.start + 1)
            if stored is None:
                rest.append(i)
            else:
                found.setdefault(tuple(prompts[i][:n]), (stored, []))[1].append(i)
        if rest:
            yield Score(rest, step.start), cache
        for key, (stored, group) in found.items():
            yield Score(group, len(key)), stored

    def _token_logprobs(self, hidden, tokens: List[int]) -> float:
        """Sum of log P(token_k | hidden_k) over the text, from the float32 output layer."""
        if not tokens:
            return 0.0
        torch = self.torch
        with torch.inference_mode():
            logp = torch.log_softmax(self._logits(hidden), dim=-1)
            picked = logp[torch.arange(len(tokens)), torch.tensor(tokens, device=logp.device)]
            return float(picked.sum())

    def _run_into_cache(self, ids: List[int], cache):
        """The cache after running one row of tokens on it (a forward of exactly these tokens; with key blocks,
        of their query width, the padding cropped off again)."""
        pad = self._query_width(len(ids)) - len(ids)
        cache = _returned_cache(self._forward_rows([ids + [self._pad_id] * pad], cache))
        if pad:
            cache.crop(-pad)
        return cache

    def _extend(self, ids: List[int], cache):
        extended = self._run_into_cache(ids, cache)
        if not _croppable(extended):  # the schedule crops caches back to shared prefixes
            raise ModelUnavailableError(f"{self.cfg.name}: its KV cache cannot be cropped (sliding-window "
                                        f"layers); set prefix_reuse: false for this model.")
        return extended

    def _forward_last(self, suffixes: List[List[int]], cache):
        """The last hidden state after each suffix, all in one right-padded batch on top of a copy
        of the shared prefix's cache, and the batch's own cache (for a second position). Each row is
        read at its last real token."""
        torch = self.torch
        out = self._forward_batch(suffixes, cache)
        with torch.inference_mode():
            last = out.last_hidden_state[torch.arange(len(suffixes)), torch.tensor([len(s) - 1 for s in suffixes])]
        return last, _returned_cache(out)

    def _forward_batch(self, suffixes: List[List[int]], cache):
        """The model's output over the suffixes, in one right-padded batch on the shared prefix's cache.
        With right padding no real token attends to a pad (attention is causal), so no mask is needed.
        The prefix is lent read-only: a new cache object whose layers hold the prefix's tensors expanded
        (not copied) to the batch; the forward concatenates onto them into new tensors, so the prefix
        stays intact for the next batch without a copy of its own."""
        width = self._query_width(max(map(len, suffixes)))
        pad = self._stop_ids[0]
        if cache is not None:
            cache = _clone_cache(cache, batch=len(suffixes))
        return self._forward_rows([s + [pad] * (width - len(s)) for s in suffixes], cache)

    def _second_position(self, cache, lengths: List[int], picks: List[Tuple[int, int]]):
        """The hidden state one position on, for each (row, token) in `picks`: the row's prompt plus
        that token, in one batch on the first batch's cache (consumed: no prompt is recomputed). The
        rows are right-padded to the cache's width, so the mask hides each row's padding and its
        position ids continue from the row's own length."""
        torch = self.torch
        width = cache.get_seq_length()
        cache.batch_select_indices(torch.tensor([row for row, _ in picks], device=self.device))
        mask = torch.zeros(len(picks), width + 1, dtype=torch.long, device=self.device)
        for k, (row, _) in enumerate(picks):
            mask[k, : lengths[row]] = 1
        mask[:, width] = 1
        with torch.inference_mode():
            out = self.model.get_decoder()(
                input_ids=torch.tensor([[tok] for _, tok in picks], device=self.device), attention_mask=mask,
                position_ids=torch.tensor([[lengths[row]] for row, _ in picks], device=self.device),
                **self._kv(cache), use_cache=True)
            return out.last_hidden_state[:, -1]

    def _kv(self, cache) -> Dict[str, object]:
        """The KV-cache keyword argument, by the name this transformers takes: 5.x renamed `past_key_values`
        to `cache` (the old name warns on every call and is removed in 5.40); older releases know only the old."""
        return {self._kv_name: cache}

    @cached_property
    def _kv_name(self) -> str:
        forward = inspect.signature(self.model.get_decoder().forward).parameters
        return "cache" if "cache" in forward else "past_key_values"

    @cached_property
    def _head_fp32(self):
        """A float32 copy of the output layer (~0.5 GB for a 150k vocabulary). A bf16 lm_head rounds
        logits of typical size to steps of 1/8, which would quantize every answer probability."""
        head = self.model.get_output_embeddings()
        bias = getattr(head, "bias", None)
        return head.weight.detach().float(), None if bias is None else bias.detach().float()

    def _logits(self, hidden):
        """Float32 logits of hidden states (one row, or a row per position), soft-capped where the model is."""
        torch = self.torch
        weight, bias = self._head_fp32
        with torch.inference_mode():
            logits = hidden.float() @ weight.T
            if bias is not None:
                logits = logits + bias
            cap = getattr(self.model.config, "final_logit_softcapping", None)
            if cap:
                logits = cap * torch.tanh(logits / cap)
            return logits

    def _probs(self, hidden):
        """The next-token distribution of a hidden state (or of each row of a batch of them)."""
        torch = self.torch
        with torch.inference_mode():
            return torch.softmax(self._logits(hidden), dim=-1)

    def _answer_probs(self, probs, answers: Sequence[str]) -> Dict[str, float]:
        return {a: float(probs[self.answer_ids(a)].sum()) if self.answer_ids(a) else 0.0 for a in answers}

    def _distributions(self, hidden, cache, lengths: List[int], requests: Sequence[AnswerRequest]
                       ) -> List[AnswerDistribution]:
        """One batch's answer distributions, from its last hidden states and its cache; the rows
        whose whitespace-only tokens carry enough mass get a second position (split answers)."""
        # One output-layer product for the whole batch: the float32 head is read once, not once per row.
        return self._distributions_of(self._probs(hidden), cache, lengths, requests)

    def _distributions_of(self, batch_probs, cache, lengths: List[int], requests: Sequence[AnswerRequest]
                          ) -> List[AnswerDistribution]:
        """`_distributions` from the rows' next-token distributions."""
        dists, picks = [], []
        for row, (probs, req) in enumerate(zip(batch_probs, requests)):
            top = probs.topk(5)
            top_tokens = [(self._token_text(i), round(float(p), 6)) for p, i in zip(top.values, top.indices.tolist())]
            dists.append(AnswerDistribution(probs=self._answer_probs(probs, req.answers), method=FULL_METHOD,
                                            top_tokens=top_tokens, prompt_tokens=lengths[row]))
            ws = self._whitespace_ids
            ws_probs = list(zip(ws, probs[ws].tolist())) if ws else []
            picks += [(row, tok, p) for tok, p in split_tokens(ws_probs)]
        if picks:
            second = self._second_position(cache, lengths, [(row, tok) for row, tok, _ in picks])
            for (row, _, p_ws), h in zip(picks, second):
                dist = dists[row]
                after = self._answer_probs(self._probs(h), requests[row].answers)
                dist.probs = {a: dist.probs[a] + p_ws * after[a] for a in dist.probs}
                dist.method = SPLIT_METHOD
            self.second_positions += len({row for row, _, _ in picks})
        return dists

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


def _clone_cache(cache, batch: int = 1):
    """A new cache object on the same tensors (expanded, not copied, to `batch` rows). The cache classes
    used here never change a tensor in place (they concatenate, slice and index into new ones), so the
    clone and the original can each grow or be cropped without touching the other."""
    twin = copy.copy(cache)
    twin.layers = [copy.copy(layer) for layer in cache.layers]
    if batch > 1:
        for layer in twin.layers:
            if getattr(layer, "is_initialized", True) and layer.keys is not None and layer.keys.numel():
                layer.keys = layer.keys.expand(batch, -1, -1, -1)
                layer.values = layer.values.expand(batch, -1, -1, -1)
    return twin


def _stack_padded(caches: List[object], width: int, right: bool = False):
    """One batch cache from single-row caches of up to `width` positions: each row padded with zeros to `width`
    on the left (or the right), where the attention mask hides them; rows stacked in order."""
    import torch

    batch = _clone_cache(caches[0])
    for k, layer in enumerate(batch.layers):
        def stacked(name):
            rows = [getattr(c.layers[k], name) for c in caches]
            return torch.cat([torch.nn.functional.pad(t, (0, 0, 0, width - t.shape[-2]) if right
                                                      else (0, 0, width - t.shape[-2], 0)) for t in rows], dim=0)
        layer.keys, layer.values = stacked("keys"), stacked("values")
    return batch


def _row_cache(cache, row: int, length: int | None = None):
    """Row `row` of a batch cache as a cache of its own, its first `length` positions (all: None); a view."""
    twin = _clone_cache(cache)
    for layer in twin.layers:
        layer.keys, layer.values = layer.keys[row:row + 1, :, :length], layer.values[row:row + 1, :, :length]
    return twin


def _first_rows(cache, n: int):
    """The first `n` rows of a batch cache, copied where the batch has more (filler rows), so the filler rows'
    memory is not held by the caches kept."""
    return cache if cache.layers[0].keys.shape[0] == n else _rows_copy(cache, 0, n)


def _rows_copy(cache, start: int, stop: int):
    """Rows start..stop-1 of a batch cache as a cache of their own, copied (a view would hold the whole batch's
    memory)."""
    twin = _clone_cache(cache)
    for layer in twin.layers:
        layer.keys, layer.values = layer.keys[start:stop].clone(), layer.values[start:stop].clone()
    return twin


def _cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
               if t is not None)


def _returned_cache(out):
    """The KV cache a forward returned: `cache` in transformers 5.x (reading `past_key_values` warns there),
    `past_key_values` before."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def _croppable(cache) -> bool:
    layers = getattr(cache, "layers", None)
    if layers is None:
        return hasattr(cache, "crop")
    return all(type(layer).__name__ == "DynamicLayer" for layer in layers)

