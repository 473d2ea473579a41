"""A deterministic, weight-free backend for fast tests of everything around the model.

Summaries are the article's first sentence (the classic lead-1 baseline); answer probabilities are a
fixed function of the prompt's hash. Articles containing a marker get special answers, to exercise
exclusions: NO-ANSWER-MASS puts all probability elsewhere, LOW-ANSWER-MASS puts 10% on the answers.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Iterator, Sequence, Tuple

from selfpref_sweep.models.base import (AnswerDistribution, AnswerRequest, Generation, GenerateRequest, ModelAPI,
                                        ModelIdentity, adapter_fingerprint)

CONSTRUCTED = []  # how many times the backend was built (a cached re-run builds none)


class FakeModel(ModelAPI):
    def __init__(self, cfg, model_cache: str, show_progress: bool = True):
        self.cfg = cfg
        self.identity = self.identity_for(cfg)
        CONSTRUCTED.append(cfg.name)

    @classmethod
    def identity_for(cls, cfg) -> ModelIdentity:
        return ModelIdentity(name=cfg.name, backend="fake", weights=f"fake:{cfg.name}", dtype="",
                             adapter=adapter_fingerprint(cfg))

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Tuple[GenerateRequest, Generation]]:
        for req in requests:
            text = req.messages[-1].content if req.messages else req.prompt
            article = text.split("Article:\n", 1)[-1].split("\n\nProvide only", 1)[0]
            first = article.replace("\n", " ").split(". ")[0].strip()
            yield req, Generation(text=f"{self.cfg.name} says: {first}", prompt_tokens=len(text.split()),
                                  completion_tokens=len(first.split()))

    def answer_distributions(self, requests: Sequence[AnswerRequest]
                             ) -> Iterator[Tuple[AnswerRequest, AnswerDistribution]]:
        delay = float(os.environ.get("FAKE_DELAY_S", "0"))  # slow calls, to kill a sweep mid-cell
        for req in requests:
            time.sleep(delay)
            prompt = "\n".join(m.content for m in req.messages)
            if "NO-ANSWER-MASS" in prompt:
                probs = {a: 0.0 for a in req.answers}
            else:
                digest = hashlib.sha256(prompt.encode()).digest()
                weights = [0.2 + digest[k] / 255 for k in range(len(req.answers))]
                mass = 0.1 if "LOW-ANSWER-MASS" in prompt else 0.95
                probs = {a: mass * w / sum(weights) for a, w in zip(req.answers, weights)}
            yield req, AnswerDistribution(probs=probs, method="full_distribution",
                                          prompt_tokens=len(prompt.split()))
