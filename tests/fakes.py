"""A deterministic, weight-free backend for fast tests of everything around the model.

Summaries are the article's first sentence (the classic lead-1 baseline); answer probabilities are a
fixed function of the prompt's hash. Articles containing a marker get special answers, to exercise
exclusions: NO-ANSWER-MASS puts all probability elsewhere, LOW-ANSWER-MASS puts 10% on the answers.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator, Sequence

from selfpref_sweep.models.base import (
    AnswerDistribution,
    AnswerRequest,
    GenerateRequest,
    Generation,
    ModelAPI,
    ModelIdentity,
    SequenceLogprobs,
    adapter_fingerprint,
)

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

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[tuple[GenerateRequest, Generation]]:
        for req in requests:
            text = req.messages[-1].content if req.messages else req.prompt
            article = text.split("Article:\n", 1)[-1].split("\n\nProvide only", 1)[0]
            first = article.replace("\n", " ").split(". ")[0].strip()
            yield req, Generation(text=f"{self.cfg.name} says: {first}", prompt_tokens=len(text.split()),
                                  completion_tokens=len(first.split()))

    def answer_distributions(self, requests: Sequence[AnswerRequest]
                             ) -> Iterator[tuple[AnswerRequest, AnswerDistribution]]:
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
                probs = {a: mass * w / sum(weights) for a, w in zip(req.answers, weights, strict=True)}
            yield req, AnswerDistribution(probs=probs, method="full_distribution",
                                          prompt_tokens=len(prompt.split()))


class RequestBuilder:
    """A stand-in judge for building requests without a model: an identity and the judge decoding."""

    identity = "judge"

    @staticmethod
    def judge_decoding(answers):
        from selfpref_sweep.models.base import JudgeDecoding
        return JudgeDecoding(tuple(answers))


def _answers_at(req: AnswerRequest, position: int, p: float) -> AnswerDistribution:
    """p on the answer naming `position` (1 or 2), the rest of 0.98 on the other answer."""
    probs = {a: (p if i + 1 == position else 0.98 - p) for i, a in enumerate(req.answers)}
    return AnswerDistribution(probs=probs, method="full_distribution")


def pairwise_parts(prompt: str):
    """(article, summary1, summary2) of a pairwise prompt, or None for a one-summary prompt."""
    if "\n\nSummary1:\n" not in prompt:
        return None
    article = prompt.split("Article:\n", 1)[1].split("\n\nSummary1:\n", 1)[0]
    s1 = prompt.split("\n\nSummary1:\n", 1)[1].split("\n\nSummary2:\n", 1)[0]
    s2 = prompt.split("\n\nSummary2:\n", 1)[1].split("\n\nCan you tell me", 1)[0]
    return article, s1, s2


def _competence_parts(prompt: str):
    """(article, summary1, summary2) of a competence-control prompt, or None for any other prompt."""
    if "which summary is a summary of this article" not in prompt:
        return None
    return pairwise_parts(prompt)


def _overlap(summary: str, article: str) -> float:
    words = [w.strip(".,:;!?\"'").lower() for w in summary.split()]
    vocab = {w.strip(".,:;!?\"'").lower() for w in article.split()}
    return sum(w in vocab for w in words) / max(1, len(words))


class OracleJudge(FakeModel):
    """Answers the competence question right (the summary whose words the article holds), confidently."""

    def answer_distributions(self, requests):
        for req in requests:
            parts = _competence_parts("\n".join(m.content for m in req.messages))
            if parts is None:
                yield next(iter(super().answer_distributions([req])))
                continue
            article, s1, s2 = parts
            yield req, _answers_at(req, 1 if _overlap(s1, article) >= _overlap(s2, article) else 2, 0.97)


class CoinJudge(FakeModel):
    """P("1") = P("2") on every question: no idea."""

    def answer_distributions(self, requests):
        for req in requests:
            yield req, _answers_at(req, 1, 0.49)


class FirstJudge(FakeModel):
    """Says "1" whatever it is shown (qwen05's position bias, exaggerated)."""

    def answer_distributions(self, requests):
        for req in requests:
            yield req, _answers_at(req, 1, 0.9)


class FamiliarJudge(FakeModel):
    """Scores given text: each word of the continuation costs log 0.6 when the prompt holds it, log 0.05 when
    not, so a summary copied from the article (the fake's own) is likelier than a paraphrase."""

    SEQUENCE_CALLS = []  # continuations scored (a cached re-run scores none)
    P_IN_PROMPT, P_NOT = 0.6, 0.05  # each word's probability: in the prompt, or not

    def sequence_logprobs(self, requests):
        import math

        for req in requests:
            type(self).SEQUENCE_CALLS.append(req.continuation)
            prompt = " ".join(m.content for m in req.messages) if req.messages else req.prompt
            vocab = {w.strip(".,:;!?\"'").lower() for w in prompt.split()}
            words = [w.strip(".,:;!?\"'").lower() for w in req.continuation.split()]
            total = sum(math.log(self.P_IN_PROMPT) if w in vocab else math.log(self.P_NOT) for w in words)
            yield req, SequenceLogprobs(total=total, n_tokens=len(words), prompt_tokens=len(prompt.split()))


class TopListJudge(FakeModel):
    """An API-like judge: each answer distribution is read from a top-logprobs list by the OpenAI backend's own
    reader. Most lists name one answer only, so the others are bounded by the list's smallest entry, which lies
    far below any log-odds clip (e^-18 to e^-28)."""

    @staticmethod
    def top_list(prompt: str, answers: Sequence[str]):
        import math

        d = hashlib.sha256(prompt.encode()).digest()
        first = d[0] % len(answers)
        top = [(" " + answers[first], math.log(0.5 + d[1] / 600))]
        if d[2] % 4 == 0:  # now and then a second answer is listed too, in another spelling
            top.append((answers[(first + 1) % len(answers)].lower() + "\n", math.log(0.02 + d[3] / 5000)))
        return top + [("The", math.log(0.01)), ("I", math.log(1e-4)), ("\n", -(18 + d[4] / 25))]

    def answer_distributions(self, requests):
        from selfpref_sweep.models.openai.openai_api import distribution_from_top_logprobs

        for req in requests:
            prompt = "\n".join(m.content for m in req.messages)
            yield req, distribution_from_top_logprobs(self.top_list(prompt, req.answers), req.answers,
                                                      prompt_tokens=len(prompt.split()), completion_tokens=1)
