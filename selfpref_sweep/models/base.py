"""The small model interface every backend implements, and its request/result types.

Requests are frozen, hashable dataclasses. Their canonical JSON is hashed into the cache key, and it
holds everything that decides a result: the model identity (base weights, adapter, numeric type and
the backend's code version), the prompt, and the decoding settings, which live in one typed object
per request kind (`JudgeDecoding`, `GenerationDecoding`). So a call is never made twice for the same
question to the same model, a fine-tuned model (base + adapter) never shares entries with its base,
and bumping a backend's `BACKEND_VERSION` (after a change to how it computes results) stops old
entries from being served.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class ModelIdentity:
    """Everything that changes a model's outputs: base weights, adapter, numeric type."""

    name: str
    backend: str
    weights: str  # e.g. "hf:meta-llama/Llama-2-7b-chat-hf@main" or "gguf:<module versions>"
    dtype: str = ""
    adapter: str | None = None  # fine-tuned adapter fingerprint; None for the base model
    # The backend's computation version (its module's BACKEND_VERSION): bumped when a change to the
    # backend changes results (e.g. the float32 output layer of the local backend), so old cache
    # entries are not served.
    backend_version: int = 1
    # How a local backend schedules its computation, where that changes results: "" (batched over shared
    # prefixes: results may vary with the batch in the last bits of a 16-bit type) or "chunks<C>[x<R>]d<D>"
    # (batch-invariant: KV caches in fixed chunks of C tokens, forwards of R rows where the device needs a
    # fixed count, summaries decoded D rows at a time). Left out of the cache key when empty, so keys made
    # before this field existed still hold.
    schedule: str = ""

    @property
    def label(self) -> str:
        return self.name if self.adapter is None else f"{self.name}+{self.adapter[:12]}"


@dataclass(frozen=True)
class Message:
    role: str
    content: str


# The layout of the cache key itself; bump it when the key's structure changes.
CACHE_KEY_VERSION = 2


def _key(obj: object) -> str:
    request = asdict(obj)
    model = request.get("model")
    if isinstance(model, dict) and not model.get("schedule"):
        model.pop("schedule", None)  # the default schedule: keys as before the field existed
    blob = json.dumps({"key_version": CACHE_KEY_VERSION, "request": request}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class GenerationDecoding:
    """The settings that change a generated text. Greedy (temperature 0) by default, as in the paper."""

    max_new_tokens: int = 100
    stop: tuple[str, ...] = ()
    temperature: float = 0.0


@dataclass(frozen=True)
class JudgeDecoding:
    """The settings that change an answer distribution: the answers read (every spelling of each
    counts), how many top logprobs an API returns (None: not applicable, e.g. a local model's full
    distribution), and how many samples estimate it when an API gives no logprobs (0: none)."""

    answers: tuple[str, ...]  # e.g. ("1", "2")
    top_logprobs: int | None = None
    sample_fallback_k: int = 0


@dataclass(frozen=True)
class GenerateRequest:
    model: ModelIdentity
    messages: tuple[Message, ...] = ()  # chat models
    prompt: str | None = None  # completion models (no chat template)
    decoding: GenerationDecoding = GenerationDecoding()
    kind: str = "generate"

    @property
    def max_new_tokens(self) -> int:
        return self.decoding.max_new_tokens

    @property
    def stop(self) -> tuple[str, ...]:
        return self.decoding.stop

    def cache_key(self) -> str:
        return _key(self)


@dataclass(frozen=True)
class AnswerRequest:
    """The next-token distribution at the answer position, summed per answer over all spellings."""

    model: ModelIdentity
    messages: tuple[Message, ...]
    decoding: JudgeDecoding
    kind: str = "answer_distribution"

    @property
    def answers(self) -> tuple[str, ...]:
        return self.decoding.answers

    def cache_key(self) -> str:
        return _key(self)


@dataclass(frozen=True)
class SequenceRequest:
    """The log-likelihood of a given continuation after a prompt (the chat messages, rendered with the
    assistant turn opened, or a completion prompt): one scoring pass, no generation."""

    model: ModelIdentity
    continuation: str
    messages: tuple[Message, ...] = ()  # chat models
    prompt: str | None = None  # completion models (no chat template)
    kind: str = "sequence_logprobs"

    def cache_key(self) -> str:
        return _key(self)


@dataclass
class Generation:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Generation:
        return cls(**d)


def spells_answer(token: str, answer: str) -> bool:
    """Whether a token spells an answer: whitespace aside ("1", " 1", "\\n1"), letters in any case ("Yes",
    " yes", "YES"). The one rule every backend reads answers by, so they sum the same spellings."""
    want = answer.strip()
    t = token.strip()
    return t == want or (want.isalpha() and t.lower() == want.lower())


@dataclass
class AnswerDistribution:
    """Raw (un-renormalized) probability of each answer, and how it was obtained."""

    probs: dict[str, float]
    # How the probabilities were read: "full_distribution" (local), "full_distribution+split" (local, with
    # a second position after whitespace-only tokens), "logprobs" (API top_logprobs), "sampled"
    # (estimated from k samples), "unavailable".
    method: str = "full_distribution"
    top_tokens: list[tuple[str, float]] = field(default_factory=list)  # diagnostics
    prompt_tokens: int = 0
    completion_tokens: int = 0
    missing_reason: str | None = None  # why there is no probability on the answers, if so
    # Answers whose probability is an upper bound, not a reading: an API answer absent from the top logprobs
    # is valued at the smallest listed probability, which no unlisted token exceeds. Empty: every value read.
    bounded: list[str] = field(default_factory=list)

    @property
    def mass(self) -> float:
        return float(sum(self.probs.values()))

    def to_json(self) -> dict:
        return {
            "probs": self.probs,
            "method": self.method,
            "top_tokens": [list(t) for t in self.top_tokens],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "missing_reason": self.missing_reason,
            "bounded": list(self.bounded),
        }

    @classmethod
    def from_json(cls, d: dict) -> AnswerDistribution:
        return cls(
            probs={k: float(v) for k, v in d["probs"].items()},
            method=d.get("method", "full_distribution"),
            top_tokens=[(str(t), float(p)) for t, p in d.get("top_tokens", [])],
            prompt_tokens=int(d.get("prompt_tokens", 0)),
            completion_tokens=int(d.get("completion_tokens", 0)),
            missing_reason=d.get("missing_reason"),
            bounded=[str(a) for a in d.get("bounded", [])],  # absent in entries stored before bounds
        )


@dataclass
class SequenceLogprobs:
    """Sum of the continuation's token log-probabilities (natural log) and its token count."""

    total: float
    n_tokens: int
    prompt_tokens: int = 0

    @property
    def mean(self) -> float | None:
        """Mean log-probability per token; None for an empty continuation."""
        return self.total / self.n_tokens if self.n_tokens else None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> SequenceLogprobs:
        return cls(total=float(d["total"]), n_tokens=int(d["n_tokens"]), prompt_tokens=int(d.get("prompt_tokens", 0)))


def option(cfg, key: str, default=None):
    """A model config's setting, for typed configs (dataclasses) and DictConfigs alike."""
    value = getattr(cfg, key, default)
    return default if value is None else value


def adapter_fingerprint(cfg) -> str | None:
    """The fine-tune fingerprint of a model config's adapter (None for a base model)."""
    adapter = getattr(cfg, "adapter", None)
    return None if adapter is None else str(adapter.fingerprint)


SCORES_GIVEN_TEXT = "its backend scores given text"  # the reason of a backend that always can


class ModelAPI(ABC):
    """What a backend does. The methods take a batch so a backend can order or parallelise the
    work (prefix reuse, requests in flight) and yield each result as soon as it has it, so the
    caller can cache it at once and an interruption loses at most the call in progress.

    The backend contract: what the rest of the code may ask of a backend, as classmethods of the model's
    config (no instance, no weights loaded), so no module outside `models/` ever tests a backend's name:
      identity_for(cfg)              the model's identity (every cache key holds it);
      judge_settings(cfg)            judging settings that travel in each JudgeDecoding;
      costs_money(cfg)               whether its calls cost money (judge.competence=auto is on where not);
      top_logprobs(cfg)              how many top logprobs a judging call returns (None: the whole distribution);
      sends_batches(cfg)             whether its uncached calls go as batches (plan mode's price factor);
      sequence_logprobs_support(cfg) whether it can score a given text (familiarity), and why;
      preflight_problems(cfg, model_cache)  (kind, message) of what would make its calls fail, found without
                                     loading it or calling it for real (plan mode);
      poolable                       whether a built instance is worth keeping between cells (models/pool.py).
    The defaults are the cautious answers for an unknown backend: its calls may cost, it returns a whole
    distribution, it scores text if it implements sequence_logprobs, and nothing is checked before a run."""

    identity: ModelIdentity
    poolable: bool = False

    @classmethod
    def identity_for(cls, cfg) -> ModelIdentity:
        raise NotImplementedError(f"{cls.__name__} does not define identity_for(cfg)")

    @classmethod
    def judge_settings(cls, cfg) -> dict[str, object]:
        """The model's judging settings that belong in JudgeDecoding (beyond the answers)."""
        return {}

    @classmethod
    def costs_money(cls, cfg) -> bool:
        """Whether this model's calls cost money. Unknown backends: assumed to."""
        return True

    @classmethod
    def top_logprobs(cls, cfg) -> int | None:
        """How many top logprobs a judging call returns; None: the whole next-token distribution."""
        return None

    @classmethod
    def sends_batches(cls, cfg) -> bool:
        """Whether this model's uncached calls go through a batch API, billed at `batch_price_factor` of the
        price. No, unless the backend has a batch path and the config asks for it (the OpenAI backend:
        `batch: true`, models/openai/openai_batch.py)."""
        return False

    @classmethod
    def preflight_problems(cls, cfg, model_cache: str) -> list[tuple[str, str]]:
        """(kind, message) per problem that would make this model's calls fail (kind: "api_key", "weights",
        ...), found without loading the model or making a real call."""
        return []

    @abstractmethod
    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[tuple[GenerateRequest, Generation]]:
        ...

    @abstractmethod
    def answer_distributions(
        self, requests: Sequence[AnswerRequest]
    ) -> Iterator[tuple[AnswerRequest, AnswerDistribution]]:
        ...

    def sequence_logprobs(self, requests: Sequence[SequenceRequest]
                          ) -> Iterator[tuple[SequenceRequest, SequenceLogprobs]]:
        """Optional: the log-likelihood of each request's continuation. Backends that cannot score a given
        text (chat APIs give logprobs of generated tokens only) leave it out; see sequence_logprobs_support."""
        raise NotImplementedError(f"{type(self).__name__} does not score given text")

    @classmethod
    def sequence_logprobs_support(cls, cfg) -> tuple[bool, str]:
        """(can it score given text?, why): by default, whether the backend implements sequence_logprobs; a
        backend whose answer depends on the config (a server) decides per cfg. The reason names how."""
        if cls.sequence_logprobs is not ModelAPI.sequence_logprobs:
            return True, SCORES_GIVEN_TEXT
        return False, "its backend cannot score given text"

    def close(self) -> None:  # noqa: B027 - an optional hook (release weights / connections), no-op by default
        pass


def unique(requests: Iterable) -> list:
    """Requests in first-seen order without duplicates."""
    seen: dict[object, None] = {}
    for r in requests:
        seen.setdefault(r, None)
    return list(seen)
