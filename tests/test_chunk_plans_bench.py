"""bench/chunk_plans.py counts a plan's tokens and forwards as the local backend computes them: its count for the
fixed-chunk plan must be what the chunk schedule actually runs, or its estimates for other plans mean nothing."""

from __future__ import annotations

import sys

import pytest

from selfpref_sweep.cell.judging import Pair, pairwise_requests
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.models.local import LocalModel
from selfpref_sweep.models.local.key_blocks import query_width
from tests.conftest import REPO
from tests.test_batch_invariance import BF16

sys.path.insert(0, str(REPO / "bench"))
import chunk_plans  # noqa: E402


@pytest.mark.real_model
def test_the_default_plan_counts_what_the_schedule_runs(compose_cfg):
    cfg = compose_cfg([*BF16, "dataset.n_articles=2"])
    spec = resolve_cell(cfg)
    model = LocalModel(spec.evaluator, model_cache=cfg.paths.model_cache, show_progress=False)
    handle = CachedModel(model.identity, lambda: model, store=None)
    from selfpref_sweep.cell.dataset_loaders import load_dataset

    articles = [(a.id, a.text[:700]) for a in load_dataset(spec.dataset).articles]
    requests = []
    for i, (article_id, text) in enumerate(articles):
        for other in (articles[(i + 1) % 2][1][:300], text[200:420]):
            for question in ("recognition", "preference"):
                requests += pairwise_requests(handle, spec.prompts, question, Pair(article_id, text, text[:200], other)
                                              ).values()
    ids = [model.encode(model.render(r.messages)) for r in requests]
    # the load-time probes run their own forwards: run them before counting
    assert isinstance(model.rows_invariant, bool) and isinstance(model.head_rows_invariant, bool)
    model.__dict__["split_free"] = False  # the chunk schedule (a CPU's fallback), whatever the probe found
    model.prefix_lru.clear()
    model.tokens_computed = model.forwards = 0
    list(model.answer_distributions(requests))

    tokens, forwards = chunk_plans.plan(ids, lambda p: chunk_plans.fixed_starts(p, None, model.chunk),
                                        model.forward_tokens, query_width if model.key_blocks else (lambda n: n))
    assert tokens == model.tokens_computed
    assert tokens < sum(map(len, ids))  # the prompts share chunks
    if model.rows_invariant:  # else every piece runs alone, which the plan's grouping does not model
        assert forwards == model.forwards
    # Every plan runs each distinct prefix at least once; starts after blank lines recompute less here (the
    # prompts branch after "Summary1:" and "Summary2:", each after a blank line).
    blank, _ = chunk_plans.plan(ids, lambda p: chunk_plans.blank_line_starts(p, model._token_text, model.chunk),
                                model.forward_tokens)
    assert chunk_plans.trie_tokens(ids) <= blank < tokens
