"""Time one path of bench/judge_speed.py's workload with the code of another checkout, in a process of its own.

To compare this commit's default with a path as an earlier commit ran it (an issue's "today's batched path"),
on the same machine and within the same hour:

    git worktree add /tmp/then 1629581
    for round in 1 2 3 4; do
      python bench/judge_speed_at.py --tree /tmp/then --path batched
      python bench/judge_speed_at.py --tree . --path default
    done

The checkout's own package and its bench/judge_speed.py (for the workload: 5 paper_xsum articles x 4 sources x 2
orders x 2 questions, 80 prompts) are imported, so the code timed is that commit's throughout. Each run loads
the model, warms it up on two prompts, clears the prefix cache and times the 80 judgements. Ends with one line:
RESULT <tree> <path> wall <s> s_per_judgement <s> computed <tokens>.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]), help="the checkout whose code runs")
    ap.add_argument("--path", choices=("default", "batched"), default="default",
                    help="batched: evaluator.batch_invariant=false")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "paper-data"))
    ap.add_argument("--evaluator", default="qwen05")
    ap.add_argument("--n-articles", type=int, default=5)
    args = ap.parse_args()

    tree = Path(args.tree).resolve()
    sys.path[:0] = [str(tree / "bench"), str(tree)]  # that checkout's package and bench, before any installed one
    import judge_speed as js
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    js.register_configs()
    overrides = [f"evaluator={args.evaluator}", "dataset=paper_xsum", f"dataset.root={args.root}",
                 f"dataset.n_articles={args.n_articles}"]
    if args.path == "batched":
        overrides.append("evaluator.batch_invariant=false")
    with initialize_config_dir(config_dir=str(tree / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    model = js.LocalModel(cfg.evaluator, model_cache=cfg.paths.model_cache)
    handle = js.CachedModel(model.identity, lambda: model, store=None)  # only for its identity in requests
    requests = js.paper_requests(handle, OmegaConf.to_container(cfg.prompts, resolve=True),
                                 js.load_dataset(cfg.dataset))
    list(model.answer_distributions(requests[:2]))  # warm-up (allocator, answer-token tables, load-time probes)
    model.prefix_lru.clear()
    model.tokens_computed = 0
    start = time.time()
    for _ in model.answer_distributions(requests):
        pass
    wall = time.time() - start
    print(f"code: {sys.modules['selfpref_sweep'].__file__}; schedule: {model.identity.schedule or 'batched'}")
    print(f"RESULT {tree} {args.path} wall {wall:.2f} s_per_judgement {wall / len(requests):.4f} "
          f"computed {model.tokens_computed}", flush=True)


if __name__ == "__main__":
    main()
