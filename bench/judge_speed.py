"""Time pairwise judging with prefix reuse against scoring every prompt from scratch.

Workload (issue "Core", item 9): 5 paper_xsum articles x 4 sources (gpt4, gpt35, claude, llama
against the human summary as the "own" one) x 2 orders x 2 questions = 80 prompts, 52,560 tokens,
12,449 distinct prefix tokens with qwen05's tokenizer. Needs the paper data:

    python bench/judge_speed.py [--root ../shared/paper-data] [--scratch-sample 80]

Ends with one line: s_per_judgement=<x> ratio_vs_scratch=<y> (ratio = reuse time / scratch time).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from selfpref_sweep.config import register_configs
from selfpref_sweep.data import load_dataset
from selfpref_sweep.judging import Pair, pairwise_requests
from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.models.local import LocalModel
from selfpref_sweep.prompts import standardize

CONF = Path(__file__).resolve().parents[1] / "conf"


def paper_requests(handle, prompts, dataset) -> list:
    """The workload: per article, the human summary (as "own") against gpt4, gpt35, claude and llama, both
    orders, both questions."""
    requests = []
    for article in dataset.articles:
        own = standardize(dataset.summary("human", article.id))
        for key in ("gpt4", "gpt35", "claude", "llama"):
            pair = Pair(article.id, article.text, own, standardize(dataset.summary(key, article.id)))
            for question in ("recognition", "preference"):
                requests.extend(pairwise_requests(handle, prompts, question, pair).values())
    return requests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "paper-data"))
    ap.add_argument("--evaluator", default="qwen05")
    ap.add_argument("--n-articles", type=int, default=5)
    ap.add_argument("--scratch-sample", type=int, default=80,
                    help="how many of the prompts to also time from scratch (all 80 by default)")
    args = ap.parse_args()

    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"evaluator={args.evaluator}", "dataset=paper_xsum",
                                           f"dataset.root={args.root}", f"dataset.n_articles={args.n_articles}"])
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    dataset = load_dataset(cfg.dataset)
    t0 = time.time()
    model = LocalModel(cfg.evaluator, model_cache=cfg.paths.model_cache)
    print(f"model loaded in {time.time() - t0:.1f}s")
    handle = CachedModel(model.identity, lambda: model, store=None)  # only for its identity in requests
    requests = paper_requests(handle, prompts, dataset)
    print(f"{len(requests)} judge prompts")

    list(model.answer_distributions(requests[:2]))  # warm-up (allocator, answer-token tables)
    model.prefix_lru.clear()  # a cold start: the warm-up's prefixes are not reused
    model.tokens_computed = model.tokens_requested = 0
    t0, c0 = time.time(), time.process_time()
    with_reuse = dict(model.answer_distributions(requests))
    reuse_s, reuse_cpu = time.time() - t0, time.process_time() - c0
    print(f"prefix reuse: {reuse_s:.1f}s wall ({reuse_cpu:.1f}s CPU) for {len(requests)} judgements; "
          f"tokens requested {model.tokens_requested}, computed {model.tokens_computed}")

    sample = requests[: args.scratch_sample]
    model.prefix_reuse = False
    t0, c0 = time.time(), time.process_time()
    scratch = dict(model.answer_distributions(sample))
    scratch_s = (time.time() - t0) * len(requests) / len(sample)
    scratch_cpu = (time.process_time() - c0) * len(requests) / len(sample)
    worst = max(abs(with_reuse[r].probs[a] - scratch[r].probs[a]) for r in sample for a in r.answers)
    print(f"from scratch: {scratch_s:.1f}s wall ({scratch_cpu:.1f}s CPU, extrapolated from {len(sample)} prompts); "
          f"max |p_reuse - p_scratch| = {worst:.2e}")
    print(f"s_per_judgement={reuse_s / len(requests):.3f} ratio_vs_scratch={reuse_s / scratch_s:.3f}")


if __name__ == "__main__":
    main()
