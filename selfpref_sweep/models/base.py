"""The small model interface every backend implements, and its request/result types.

Requests are frozen, hashable dataclasses. Their canonical JSON (model identity, prompt, decoding
settings) is hashed into the cache key, so a call is never made twice for the same question to the
same model, and a fine-tuned model (base + adapter) never shares entries with its base.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class ModelIdentity:
    """Everything that changes a model's outputs: base weights, adapter, numeric type."""

    name: str
    backend: str
    weights: str  # e.g. "hf:meta-llama/Llama-2-7b-chat-hf@main" or "gguf:<module versions>"
    dtype: str = ""
    adapter: Optional[str] = None  # fine-tuned adapter fingerprint; None for the base model

    @property
    def label(self) -> str:
        return self.name if self.adapter is None else f"{self.name}+{self.adapter[:12]}"


@dataclass(frozen=True)
class Message:
    role: str
    content: str


def _key(obj: object) -> str:
    blob = json.dumps(asdict(obj), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class GenerateRequest:
    """Greedy (temperature 0) generation, as in the paper's summaries."""

    model: ModelIdentity
    messages: Tuple[Message, ...] = ()  # chat models
    prompt: Optional[str] = None  # completion models (no chat template)
    max_new_tokens: int = 100
    temperature: float = 0.0
    stop: Tuple[str, ...] = ()
    kind: str = "generate"

    def cache_key(self) -> str:
        return _key(self)


@dataclass(frozen=True)
class AnswerRequest:
    """The next-token distribution at the answer position, summed per answer over all spellings."""

    model: ModelIdentity
    messages: Tuple[Message, ...]
    answers: Tuple[str, ...]  # e.g. ("1", "2")
    kind: str = "answer_distribution"

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
    def from_json(cls, d: dict) -> "Generation":
        return cls(**d)


@dataclass
class AnswerDistribution:
    """Raw (un-renormalized) probability of each answer, and how it was obtained."""

    probs: Dict[str, float]
    # How the probabilities were read: "full_distribution" (local), "logprobs" (API top_logprobs),
    # "sampled" (estimated from k samples), "unavailable".
    method: str = "full_distribution"
    top_tokens: List[Tuple[str, float]] = field(default_factory=list)  # diagnostics
    prompt_tokens: int = 0
    completion_tokens: int = 0
    missing_reason: Optional[str] = None  # why there is no probability on the answers, if so

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
        }

    @classmethod
    def from_json(cls, d: dict) -> "AnswerDistribution":
        return cls(
            probs={k: float(v) for k, v in d["probs"].items()},
            method=d.get("method", "full_distribution"),
            top_tokens=[(str(t), float(p)) for t, p in d.get("top_tokens", [])],
            prompt_tokens=int(d.get("prompt_tokens", 0)),
            completion_tokens=int(d.get("completion_tokens", 0)),
            missing_reason=d.get("missing_reason"),
        )


class ModelAPI(ABC):
    """What a backend does. Both methods take a batch so a backend can order or parallelise the
    work (prefix reuse, requests in flight) and yield each result as soon as it has it, so the
    caller can cache it at once and an interruption loses at most the call in progress."""

    identity: ModelIdentity

    @abstractmethod
    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Tuple[GenerateRequest, Generation]]:
        ...

    @abstractmethod
    def answer_distributions(
        self, requests: Sequence[AnswerRequest]
    ) -> Iterator[Tuple[AnswerRequest, AnswerDistribution]]:
        ...

    def close(self) -> None:  # release weights / connections
        pass


def unique(requests: Iterable) -> List:
    """Requests in first-seen order without duplicates."""
    seen: Dict[object, None] = {}
    for r in requests:
        seen.setdefault(r, None)
    return list(seen)
