"""A new backend in one file, registered only by its entry point (pyproject.toml beside it): the fake backend,
except that asked which summary is longer it names the one with more words, confidently."""

from __future__ import annotations

from tests.fakes import FakeModel, _answers_at, pairwise_parts


class LongerJudge(FakeModel):
    def answer_distributions(self, requests):
        for req in requests:
            prompt = "\n".join(m.content for m in req.messages)
            parts = pairwise_parts(prompt)
            if parts is None or "longer in terms of word count" not in prompt:
                yield next(iter(super().answer_distributions([req])))
                continue
            _, first, second = parts
            yield req, _answers_at(req, 1 if len(first.split()) >= len(second.split()) else 2, 0.97)
