"""Batched greedy summaries against one prompt at a time, on paper_xsum articles.

Both runs decode the same summarization prompts greedily with the same model (qwen05 by default, in its
configured dtype); one with generate_batch=1, one with --batch (the model's generate_batch by default). In
float32 that is one prompt at a time against left-padded batches; in batch-invariant computation (bf16's
default) generate_batch is the fixed row count of every decoding step, so it is 1 row per step against --batch
rows (on a CPU of any padded width, on a GPU of one).
Needs the paper data:

    python bench/generate_speed.py [--root ../shared/paper-data] [--n-articles 16] [--batch 8]

Prints both runs' completion tokens per second, how many batched summaries equal the batch-of-one ones token
for token (in bf16, a near-tie can flip a token when the rounding order changes), and ends with one line:
    speedup=<x> identical=<k>/<n>
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from selfpref_sweep.cell.dataset_loaders import load_dataset  # noqa: E402
from selfpref_sweep.cell.summaries import generation_request  # noqa: E402
from selfpref_sweep.config import register_configs  # noqa: E402
from selfpref_sweep.models.cached import CachedModel  # noqa: E402
from selfpref_sweep.models.local import LocalModel  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(REPO.parent / "shared" / "paper-data"))
    ap.add_argument("--evaluator", default="qwen05")
    ap.add_argument("--n-articles", type=int, default=16)
    ap.add_argument("--batch", type=int, default=None, help="batch size (default: the model's generate_batch)")
    ap.add_argument("--dtype", default=None, help="override the model's dtype (e.g. float32)")
    args = ap.parse_args()

    register_configs()
    overrides = [f"evaluator={args.evaluator}", "dataset=paper_xsum", f"dataset.root={args.root}",
                 f"dataset.n_articles={args.n_articles}"]
    if args.dtype:
        overrides.append(f"evaluator.dtype={args.dtype}")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    dataset = load_dataset(cfg.dataset)
    model = LocalModel(cfg.evaluator, model_cache=cfg.paths.model_cache)
    batch = args.batch or model.generate_batch
    handle = CachedModel(model.identity, lambda: model, store=None)  # only for its identity in requests
    requests = [generation_request(handle, cfg.evaluator, prompts, dataset.task, a, int(cfg.summaries.max_new_tokens))
                for a in dataset.articles]
    lengths = [len(model.encode(model.render(r.messages))) for r in requests]
    print(f"{len(requests)} summaries of paper_xsum articles; prompts {min(lengths)}-{max(lengths)} tokens, "
          f"mean {sum(lengths) / len(lengths):.0f}; max_new_tokens {requests[0].max_new_tokens}")

    list(model.generate(requests[:1]))  # warm-up
    runs = {}
    for size in (1, batch):
        # Batched schedule: one at a time is transformers' generate() on each prompt; batched runs prefill each
        # prompt alone into the (emptied) prefix LRU and decode the batch together. Batch-invariant: the decoding
        # steps' row count (docstring).
        model.generate_batch, model.prefix_reuse = size, size > 1
        model.prefix_lru.clear()
        start = time.time()
        runs[size] = dict(model.generate(requests))
        seconds = time.time() - start
        completion = sum(g.completion_tokens for g in runs[size].values())
        runs[size, "rate"] = completion / seconds
        print(f"batch {size:>2}: {seconds:6.1f} s, {completion} completion tokens, "
              f"{completion / seconds:5.1f} tokens/s, {seconds / len(requests):.2f} s per summary")
    same = sum(runs[1][r].text == runs[batch][r].text for r in requests)
    print(f"speedup={runs[batch, 'rate'] / runs[1, 'rate']:.2f} identical={same}/{len(requests)}")


if __name__ == "__main__":
    main()
