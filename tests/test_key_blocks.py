"""Key-blocked attention (batch-invariant judging on a CPU) splits a call by the key blocks its queries need:
the split must keep every query's keys, keep the query-width rule in every call, and give the bits of one call
over all keys."""

from __future__ import annotations

import pytest
import torch

from selfpref_sweep.models.local import key_blocks
from selfpref_sweep.models.local.key_blocks import KEY_BLOCK, _query_groups, key_blocked_sdpa, query_width


def _causal(q: int, kv: int, rows: int = 1, pad_right=()) -> torch.Tensor:
    """A bool mask (rows, 1, q, keys padded to whole blocks): the q new tokens are the last of kv positions;
    row r's last pad_right[r] queries (right padding) see nothing, and neither does anyone see them."""
    keys = kv - kv % -KEY_BLOCK
    mask = torch.zeros(rows, 1, q, keys, dtype=torch.bool)
    mask[:, 0, :, :kv] = torch.ones(q, kv, dtype=torch.bool).tril(kv - q)
    for r, n in enumerate(pad_right):
        if n:
            mask[r, 0, q - n:] = False
            mask[r, 0, :, kv - n:kv] = False
    return mask


@pytest.mark.parametrize("q, kv", [(560, 560), (496, 586), (48, 530), (20, 1040), (300, 1100), (100, 664),
                                   (16, 16), (1, 900), (1100, 1100)])
def test_groups_cover_every_query_with_its_keys_and_keep_the_width_rule(q, kv):
    mask = _causal(q, kv)
    groups = _query_groups(mask)
    kept = [i for _, (first, last), _ in groups for i in range(first, last)]
    assert kept == list(range(q))  # every query's output comes from exactly one call, in order
    for (start, stop), (first, last), keys in groups:
        assert start <= first < last <= stop <= q and keys % KEY_BLOCK == 0
        assert query_width(stop - start) == stop - start or (start, stop) == (0, q)
        assert not mask[0, 0, first:last, keys:].any()  # nothing a kept query sees is left out
    needed = [(kv - q + i) // KEY_BLOCK + 1 for i in range(q)]  # blocks up to each query's own position
    work = sum((stop - start) * keys for (start, stop), _, keys in groups)
    assert work <= q * mask.shape[-1]
    if min(needed) < max(needed) and q >= 2 * 16:
        assert len(groups) > 1 and work < q * mask.shape[-1]  # queries before a block boundary skip the blocks after


def test_queries_that_see_nothing_go_with_the_last_group():
    mask = _causal(100, 700, rows=2, pad_right=(0, 30))
    groups = _query_groups(mask)
    assert groups[-1][1][1] == 100 and groups[-1][2] == mask.shape[-1]


def _dtype():
    from selfpref_sweep.models.local.precision import native_bf16

    return torch.bfloat16 if native_bf16() else torch.float32


@pytest.mark.parametrize("rows, q, kv, pad_right", [(1, 560, 560, ()), (1, 496, 586, ()), (2, 48, 530, ()),
                                                    (4, 300, 1100, ()), (3, 120, 600, (0, 40, 100))])
def test_split_calls_give_the_bits_of_one_call_over_all_keys(monkeypatch, rows, q, kv, pad_right):
    """A key block fully masked for a query adds exact zeros to it, so leaving it out changes no bit."""
    torch.manual_seed(0)
    dtype = _dtype()
    query = torch.randn(rows, 14, q, 64, dtype=dtype)
    key, value = (torch.randn(rows, 2, kv, 64, dtype=dtype) for _ in range(2))
    mask = None if not pad_right else _causal(q, kv, rows, pad_right)[..., :kv]
    split, _ = key_blocked_sdpa(None, query, key, value, mask)

    def one_call(m):
        return [((0, m.shape[-2]), (0, m.shape[-2]), m.shape[-1])]

    monkeypatch.setattr(key_blocks, "_query_groups", one_call)
    key_blocks._causal_groups.cache_clear()
    key_blocks._LAST_GROUPS = (lambda: None, [])
    whole, _ = key_blocked_sdpa(None, query, key, value, mask)
    key_blocks._causal_groups.cache_clear()
    assert torch.equal(split, whole)


def test_folded_heads_attend_each_query_head_with_its_own_key_value_head():
    """A decoding step with the query heads of a key-value head folded into its queries: close to unfolded
    attention (a head read with another head's keys would be far off), a row's bits its own whatever the other
    rows, and only one query per row is folded, only within the context."""
    torch.manual_seed(0)
    dtype = _dtype()
    rows, kv = 3, 700
    query = torch.randn(rows, 14, 1, 64, dtype=dtype)
    key, value = (torch.randn(rows, 2, kv, 64, dtype=dtype) for _ in range(2))
    mask = torch.ones(rows, 1, 1, kv, dtype=torch.bool)
    mask[1, ..., 200:650] = False  # a shorter prompt padded to the batch's width
    unfolded, _ = key_blocked_sdpa(None, query, key, value, mask)
    with key_blocks.folded_heads():
        folded, _ = key_blocked_sdpa(None, query, key, value, mask)
        alone, _ = key_blocked_sdpa(None, query[1:2], key[1:2], value[1:2], mask[1:2])
        prefill, _ = key_blocked_sdpa(None, query.expand(-1, -1, 16, -1), key, value, None)
    assert not key_blocks._FOLDING.on
    assert torch.allclose(folded.float(), unfolded.float(), atol=2e-2, rtol=0)
    assert torch.equal(alone, folded[1:2])
    outside, _ = key_blocked_sdpa(None, query.expand(-1, -1, 16, -1), key, value, None)
    assert torch.equal(prefill, outside)  # more than one query per row: not folded
