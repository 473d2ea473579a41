"""Batch-invariant judging: what it costs, and whether a request's numbers depend on its batch.

Workload: pairwise judge prompts of N paper_xsum articles x 4 sources (gpt4, gpt35, claude, llama against the
human summary as the "own" one) x 2 orders x 2 questions (N = 5: 80 prompts), judged by a local model in the
dtype given (default: what `auto` picks here). Each mode (`batch_invariant` off = batched over shared
prefixes, on = one prompt at a time in fixed chunks) judges the prompts three ways, each on a fresh prefix
cache:
  all:     every prompt in one call (timed);
  split:   the odd-numbered prompts, then the even-numbered ones (another batch and cache history);
  reverse: one prompt per call, last first.
It counts how many of the prompts get bit-identical answer probabilities in `split` and `reverse` as in
`all`. Needs the paper data:

    python bench/batch_invariance.py [--root ../shared/paper-data] [--evaluator qwen05] [--dtype auto]

Ends with one line per mode:
    mode=<off|on> dtype=<d> s_per_judgement=<x> identical_split=<k>/<n> identical_reverse=<k>/<n> max_diff=<d>
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from selfpref_sweep.cell.dataset_loaders import load_dataset
from selfpref_sweep.config import register_configs
from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.models.local import LocalModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_speed import paper_requests  # noqa: E402  (the same workload as bench/judge_speed.py)

CONF = Path(__file__).resolve().parents[1] / "conf"


def build(args, invariant: bool):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"evaluator={args.evaluator}", f"evaluator.dtype={args.dtype}",
                                           f"evaluator.batch_invariant={str(invariant).lower()}",
                                           "dataset=paper_xsum", f"dataset.root={args.root}",
                                           f"dataset.n_articles={args.n_articles}"])
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    model = LocalModel(cfg.evaluator, model_cache=cfg.paths.model_cache, show_progress=False)
    handle = CachedModel(model.identity, lambda: model, store=None)  # only for its identity in requests
    return model, paper_requests(handle, prompts, load_dataset(cfg.dataset))


def judged(model, batches):
    """Answer probabilities of every request, judged batch by batch on a cold prefix cache."""
    model.prefix_lru.clear()
    out = {}
    for batch in batches:
        out.update({r: d.probs for r, d in model.answer_distributions(batch)})
    return out


def run_mode(args, invariant: bool) -> str:
    model, requests = build(args, invariant)
    list(model.answer_distributions(requests[:1]))  # warm-up (allocator, answer-token tables)
    start = time.time()
    ref = judged(model, [requests])
    seconds = time.time() - start
    split = judged(model, [requests[1::2], requests[0::2]])
    reverse = judged(model, [[r] for r in reversed(requests)])
    same_split = sum(ref[r] == split[r] for r in requests)
    same_reverse = sum(ref[r] == reverse[r] for r in requests)
    worst = max(abs(ref[r][a] - other[r][a]) for other in (split, reverse) for r in requests for a in r.answers)
    n = len(requests)
    return (f"mode={'on' if invariant else 'off'} dtype={model.identity.dtype} s_per_judgement={seconds / n:.3f} "
            f"identical_split={same_split}/{n} identical_reverse={same_reverse}/{n} max_diff={worst:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "paper-data"))
    ap.add_argument("--evaluator", default="qwen05")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--n-articles", type=int, default=5)
    args = ap.parse_args()
    lines = [run_mode(args, invariant) for invariant in (False, True)]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
