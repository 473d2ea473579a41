"""Attention whose numbers do not depend on how a prompt is cut into forwards (batch-invariant judging on a CPU).

A 16-bit forward's rounding depends on its shapes. On a CPU the linear layers give a token's row the same bits
in a matrix product of any row count from 16 on (oneDNN), so a token's numbers depend on how its prompt was
cut into forwards, and on which rows shared them, only through attention. PyTorch's CPU attention kernel
(flash, with a mask) walks the keys in blocks of 512 and the queries in blocks of 32 (64 or 256 for longer
pieces): a row's softmax and its product with the values are summed block by block, so the same query meets
other rounding when the keys end elsewhere (a partial last block) or when its query block holds only 1-3 rows
(another matrix kernel). Measured with random bf16 tensors of qwen05's attention shape (bench/chunk_plans.py
--attention): keys padded to a multiple of 512 with masked zeros, every slice of 16 or more queries whose count
leaves 0 or at least 16 over a multiple of 32 came out bit-identical to the same queries in one call over all
keys (60 of 60); padded to 256 or 64, 40-42 of 60; unpadded, 4 of 60.

So `key_blocked_sdpa` pads the keys (and the mask) of every attention call to a multiple of KEY_BLOCK, and
the local backend gives every forward a width `query_width(n)`: right-padded where the count would leave 1-15
rows in a last query block (the padding's outputs are never read, and its keys are cropped from the cache or
sit after every real position, which causal attention hides). A fully masked key block adds exact zeros. Then
a token's numbers are those of its prompt run in one forward, however the prompt was cut and batched; the
backend probes that at load (`LocalModel.split_free`) and falls back to fixed chunks where it does not hold.
"""

from __future__ import annotations

KEY_BLOCK = 512  # keys per block of PyTorch's CPU flash attention (kv_split_size)
QUERY_BLOCK = 32  # its smallest query block; the larger ones (64, 256) are multiples of it
MIN_ROWS = 16  # last query blocks of 1-3 rows were measured to round otherwise; 16 as for the linear layers

NAME = "key_blocked_sdpa"


def query_width(n: int) -> int:
    """The width of a forward of n new tokens: n, or right-padded until the last query block holds 0 or at
    least MIN_ROWS rows (at most 15 more tokens)."""
    over = n % QUERY_BLOCK
    return n if over == 0 or over >= MIN_ROWS else n - over + MIN_ROWS


def key_blocked_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """SDPA on keys padded to a multiple of KEY_BLOCK (zeros, masked), always with an explicit mask (causal where
    the model passed none), so every call walks whole key blocks. Grouped-query models attend without copying
    their key and value heads (`enable_gqa`: the same bits as transformers' repeated heads here, 10-15% faster)."""
    import torch

    if kwargs.get("softcap") is not None:
        raise ValueError("key-blocked attention (batch-invariant local judging) does not support soft-capped "
                         "attention; set batch_invariant: false for this model.")
    q, kv = query.shape[2], key.shape[2]
    if attention_mask is None:  # causal; the new tokens are the last q of the kv positions
        attention_mask = torch.ones(q, kv, dtype=torch.bool, device=query.device).tril(kv - q)[None, None]
    elif attention_mask.dtype != torch.bool:
        attention_mask = attention_mask == 0  # an additive float mask: 0 where attended
    pad = -kv % KEY_BLOCK
    if pad:
        zeros = key.new_zeros(*key.shape[:2], pad, key.shape[3])
        key, value = torch.cat([key, zeros], dim=2), torch.cat([value, zeros], dim=2)
        attention_mask = torch.cat([attention_mask, attention_mask.new_zeros(*attention_mask.shape[:-1], pad)], dim=-1)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def use_key_blocks(model, on: bool) -> None:
    """Switch a loaded transformers model's attention to `key_blocked_sdpa` (registered on first use) or back
    to SDPA."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, key_blocked_sdpa)
        AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME if on else "sdpa")
