"""Where batch-invariant judging could cut its pieces by fixed rules, and what each plan would cost here.

Batch-invariant judging runs over shared prefixes where the device gives a prompt's tokens the same bits however
the prompt is cut into forwards (`split_free`, models/local/key_blocks.py). Where it does not, the schedule builds each
prompt's KV cache in chunks of 64 tokens from position 0 and runs the rest (its tail) as one forward; pieces of
one shape from many prompts share a forward (models/local/). That fallback's price against the batched trie
is recomputation: where prompts branch inside a chunk, each branch runs that whole chunk. This bench counts,
for the judge_speed workload (80 pairwise prompts, qwen05's tokenizer), the tokens and forwards of other plans
a prompt's own tokens could define:
  fixed C:  chunks of C tokens (what `batch_invariant_chunk` sets);
  blank C:  also a boundary after every blank line (where the prompt template starts an article or a summary,
            so branches start on a boundary), chunks of C tokens from the last boundary.
Forwards are counted as LocalModel groups pieces: one shape (start, length) per forward, as many rows as fit
`forward_tokens` (512 on a CPU) for pieces of 16 tokens or more, else one row.

It then times forwards on this machine (a 1 x 8 and an 8 x 64 forward on a 600-token cache), fits
cost = per_forward + per_token x tokens, and prints each plan's estimate; --measure also times the chunk
schedule (the fallback, forced) once, so the estimate's error is visible.

--attention checks the premise of a split-free plan (any cut of a prompt into pieces giving the same bits):
the linear layers give a row the same bits in a product of any row count from 16 on, so whether a split
changes a token's numbers is up to attention. It compares, for random bf16 queries, keys and values of
qwen05's attention shape, SDPA over a slice of the queries (keys up to the slice's end, the keys padded to a
multiple of B with masked zeros) against the same queries in one call over all keys.

    python bench/chunk_plans.py [--root ../shared/paper-data] [--measure] [--attention]
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from pathlib import Path

from judge_speed import _time, paper_requests, timed, workload

from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.models.local import MIN_BATCHED_LENGTH, LocalModel
from selfpref_sweep.models.local.kv_cache import _clone_cache


def fixed_starts(prompt, text, chunk: int):
    """Piece starts of the default plan: every multiple of the chunk up to the last token."""
    return list(range(0, len(prompt), chunk))


def blank_line_starts(prompt, text, chunk: int):
    """Piece starts after every blank line (a token ending "\\n\\n", or "\\n" after one ending "\\n"), and every
    `chunk` tokens after the last start; each a function of the tokens before it."""
    starts, last = [0], 0
    for j in range(1, len(prompt)):
        here, before = text(prompt[j - 1]), text(prompt[j - 2]) if j >= 2 else ""
        if here.endswith("\n") and (before + here).endswith("\n\n") or j - last == chunk:
            starts.append(j)
            last = j
    return starts


def plan(prompts, starts_of, forward_tokens: int, width=lambda n: n):
    """(tokens computed, forwards) of a plan: each distinct piece (by the tokens up to its end) once, the
    tails one per prompt at their `width` (key_blocks.query_width with attention's keys in blocks), grouped
    into forwards by shape. Tokens are real ones, without a tail's padding."""
    pieces, tails, real = {}, [], 0
    for p in prompts:
        starts = starts_of(p)
        for s, e in zip(starts, starts[1:], strict=False):
            pieces[tuple(p[:e])] = (s, e - s)
        tails.append((starts[-1], width(len(p) - starts[-1])))
        real += len(p) - starts[-1]
    shapes = Counter(pieces.values()) + Counter(tails)
    forwards = sum(-(-n // (max(1, forward_tokens // length) if length >= MIN_BATCHED_LENGTH else 1))
                   for (_, length), n in shapes.items())
    return sum(length for _, length in pieces.values()) + real, forwards


def trie_tokens(prompts) -> int:
    """Distinct prefix tokens: what a plan without any recomputation runs."""
    return len({tuple(p[:n]) for p in prompts for n in range(1, len(p) + 1)})


def forward_costs(model):
    """(seconds per forward, seconds per token) from the best of 3 timings of a 1 x 8 and an 8 x 64 forward
    on a 600-token cache."""
    import torch

    ids = torch.randint(0, 30000, (664,), generator=torch.Generator().manual_seed(0)).tolist()
    base = model._run_rows([ids[:600]], None)
    small, big = ((min(_time(lambda n=n, rows=rows: model._forward_rows([ids[600:600 + n]] * rows,
                                                                         _clone_cache(base, batch=rows)))
                       for _ in range(3)), rows * n) for rows, n in ((1, 8), (8, 64)))
    per_token = (big[0] - small[0]) / (big[1] - small[1])
    return small[0] - per_token * small[1], per_token


def attention_key_blocks(trials: int = 60) -> None:
    """For key blocks B: of random query slices (>= 16 queries, a count whose remainder mod 32 is 0 or >= 16),
    how many come out bit-identical to the same queries in one call over all keys."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    heads, dim, n = 14, 64, 1300
    q, k, v = (torch.randn(1, heads, n, dim, generator=g).bfloat16() for _ in range(3))

    def attend(start, end, block):
        width = -(-end // block) * block
        keys, values = (F.pad(t[:, :, :end], (0, 0, 0, width - end)) for t in (k, v))
        mask = torch.arange(width)[None, :] <= torch.arange(start, end)[:, None]
        return F.scaled_dot_product_attention(q[:, :, start:end], keys, values, attn_mask=mask)

    rng = random.Random(0)
    for block in (1, 64, 256, 512):
        whole, same, tried = attend(0, n, block), 0, 0
        while tried < trials:
            start = rng.randint(0, n - 32)
            end = rng.randint(start + 16, n)
            if 0 < (end - start) % 32 < 16:
                continue
            tried += 1
            same += torch.equal(attend(start, end, block), whole[:, :, start:end])
        print(f"keys padded to a multiple of {block}: {same} of {tried} slices bit-identical")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "paper-data"))
    ap.add_argument("--evaluator", default="qwen05")
    ap.add_argument("--n-articles", type=int, default=5)
    ap.add_argument("--measure", action="store_true", help="also time the chunk schedule once")
    ap.add_argument("--attention", action="store_true", help="also check attention's split invariance")
    args = ap.parse_args()

    cfg, prompts, dataset = workload(args.evaluator, args.root, args.n_articles)
    model = LocalModel(cfg.evaluator, model_cache=cfg.paths.model_cache)
    requests = paper_requests(CachedModel(model.identity, lambda: model, store=None), prompts, dataset)
    ids = [model.encode(model.render(r.messages)) for r in requests]
    text = model._token_text
    width = model._query_width
    per_forward, per_token = forward_costs(model)
    print(f"{len(ids)} prompts, {sum(map(len, ids))} tokens, {trie_tokens(ids)} distinct prefix tokens; "
          f"this machine: {per_forward * 1e3:.0f} ms per forward + {per_token * 1e3:.2f} ms per token")
    print("| plan | tokens | forwards | estimate (s) |\n|---|---|---|---|")
    for name, starts in (("fixed", fixed_starts), ("blank", blank_line_starts)):
        for chunk in (32, 48, 64, 96, 128):
            tokens, forwards = plan(ids, lambda p, s=starts, c=chunk: s(p, text, c), model.forward_tokens, width)
            print(f"| {name} {chunk} | {tokens} | {forwards} | {forwards * per_forward + tokens * per_token:.1f} |")
    if args.measure:
        list(model.answer_distributions(requests[:2]))  # warm-up, as judge_speed does
        model.__dict__["split_free"] = False  # the chunk schedule, whatever the probe found
        _, seconds, _ = timed(model, requests)
        print(f"measured chunk schedule ({model.identity.schedule}): {seconds:.1f} s, {model.tokens_computed} tokens")
    if args.attention:
        attention_key_blocks()


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"({time.time() - t0:.0f} s)")
