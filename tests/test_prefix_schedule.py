import random

import pytest

from selfpref_sweep.models.local.prefix import Extend, Score, computed_tokens, schedule


def simulate(prompts, steps):
    """Run a schedule against a model-free 'cache' (a token list) and check every step's premise."""
    cache, scored = [], []
    for step in steps:
        if len(cache) > step.start:
            del cache[step.start:]
        assert len(cache) == step.start, "a step starts beyond the cache"
        if isinstance(step, Extend):
            assert cache == list(prompts[step.prompt][: step.start])
            cache.extend(prompts[step.prompt][step.start : step.end])
        else:
            assert isinstance(step, Score) and step.prompts
            for i in step.prompts:
                assert list(prompts[i][: step.start]) == cache, "scored on a cache that is not its prefix"
                assert len(prompts[i]) > step.start, "nothing left to score"
            scored.extend(step.prompts)
    return scored


def trie_size(prompts):
    return len({tuple(p[:k]) for p in prompts for k in range(1, len(p) + 1)})


@pytest.mark.parametrize("seed", range(20))
def test_schedule_scores_each_prompt_once_computing_each_prefix_once(seed):
    rng = random.Random(seed)
    stems = [[rng.randrange(5) for _ in range(rng.randrange(1, 6))] for _ in range(4)]
    prompts = []
    for _ in range(rng.randrange(1, 30)):
        p = rng.choice(stems) + [rng.randrange(4) for _ in range(rng.randrange(0, 6))] + [99]
        if p not in prompts:
            prompts.append(p)
    steps = schedule(prompts, max_batch=3)
    assert sorted(simulate(prompts, steps)) == list(range(len(prompts)))
    assert all(len(s.prompts) <= 3 for s in steps if isinstance(s, Score))
    # no prompt is a prefix of another (all end in 99), so the work is exactly the trie's size
    assert computed_tokens(prompts, steps) == trie_size(prompts)


def test_judge_shaped_prompts_batch_the_branches():
    header, own, tail = [1, 2, 3, 4, 5], [10, 11], [50, 51]
    others = [[20 + k, 30 + k] for k in range(4)]
    prompts = [header + own + o + tail for o in others] + [header + o + own + tail for o in others]
    steps = schedule(prompts)
    assert sorted(simulate(prompts, steps)) == list(range(8))
    scores = [s for s in steps if isinstance(s, Score)]
    # the 4 pairs led by the own summary, and the 4 led by the others: two batched forwards
    assert sorted(len(s.prompts) for s in scores) == [4, 4]
    assert computed_tokens(prompts, steps) == trie_size(prompts)


def test_prefix_prompts_and_duplicates_are_still_scored():
    prompts = [[1, 2], [1, 2, 3], [1, 2], [7]]
    steps = schedule(prompts)
    assert sorted(simulate(prompts, steps)) == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        schedule([[1], []])


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("min_saving", [4, 16, 1000])
def test_min_saving_only_extends_what_pays_and_still_scores_everything(seed, min_saving):
    rng = random.Random(seed)
    stems = [[rng.randrange(5) for _ in range(rng.randrange(1, 12))] for _ in range(4)]
    prompts = []
    for _ in range(rng.randrange(1, 30)):
        p = rng.choice(stems) + [rng.randrange(4) for _ in range(rng.randrange(0, 8))] + [99]
        if p not in prompts:
            prompts.append(p)
    steps = schedule(prompts, max_batch=3, min_saving=min_saving)
    assert sorted(simulate(prompts, steps)) == list(range(len(prompts)))
    assert all(len(s.prompts) <= 3 for s in steps if isinstance(s, Score))
    exact = schedule(prompts, max_batch=3)
    assert computed_tokens(prompts, steps) >= computed_tokens(prompts, exact) == trie_size(prompts)
    assert sum(isinstance(s, Extend) for s in steps) <= sum(isinstance(s, Extend) for s in exact)
    for step in steps:
        if isinstance(step, Extend):  # every Extend saves at least min_saving recomputed tokens
            below = [p for p in prompts if p[: step.end] == prompts[step.prompt][: step.end]]
            assert (step.end - step.start) * (len(below) - 1) >= min_saving


def test_short_shared_stretches_are_not_a_forward_of_their_own():
    # Judge-shaped: a long article, then summaries; two of the other summaries start with the same two
    # tokens ("The man"). The exact trie extends those 2 tokens on their own; with min_saving they are
    # recomputed in both rows, and the branch's prompts are scored in one batch instead of three steps.
    header, own, tail = list(range(100, 160)), [10, 11, 12, 13, 14, 15, 16, 17], [50, 51]
    others = [[7, 8, 20], [7, 8, 21], [30, 31, 32], [40, 41, 42]]
    prompts = [header + o + own + tail for o in others] + [header + own + o + tail for o in others]
    exact, merged = schedule(prompts), schedule(prompts, min_saving=8)
    assert sorted(simulate(prompts, merged)) == list(range(8))
    extends = [(s.start, s.end) for s in merged if isinstance(s, Extend)]
    assert extends == [(0, 60), (60, 68)]  # the article, then the own summary (7 × 8 tokens saved)
    assert len([s for s in merged if isinstance(s, Score)]) == 2
    assert len(merged) < len(exact)
    # "The man" recomputed once more in each branch (after the article, and after the own summary)
    assert computed_tokens(prompts, merged) == computed_tokens(prompts, exact) + 2 + 2
