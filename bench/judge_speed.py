"""Time the local backend's judging: the default schedule against the batched one, and against scratch.

Workload: 5 paper_xsum articles x 4 sources (gpt4, gpt35, claude, llama against the human summary as the
"own" one) x 2 orders x 2 questions = 80 prompts, 52,560 tokens, 12,449 distinct prefix tokens with qwen05's
tokenizer. The same loaded model judges them three ways, each from a cold prefix cache:
  default:  what the evaluator's config gives (in bf16: batch-invariant; on a CPU whose kernels allow it, over
            the shared-prefix trie with attention's keys in whole blocks, else in chunks of 64 tokens);
  batched:  batch_invariant=false (the shared-prefix trie, batches of 8, plain attention);
  scratch:  every prompt from scratch (extrapolated from --scratch-sample prompts).
Needs the paper data:

    python bench/judge_speed.py [--root ../shared/paper-data] [--scratch-sample 8] [--forward-cost]

--forward-cost also prints what one forward costs per token by its size (rows x tokens on a 512-token cache),
which sizes a forward's token budget for the device (models/local/, `forward_tokens`).

--repeats N times each path N times, alternating (default, batched, batched, default, ...), so neither gains
from running second (the machine's own drift shows as the spread between repeats); the summary line then
reports the mean of each, and each default run's time over its neighbouring batched run's.

Ends with one line: s_per_judgement=<default> batched=<b> ratio_vs_batched=<default / batched>
ratio_vs_scratch=<batched / scratch>.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from selfpref_sweep.cell.dataset_loaders import load_dataset
from selfpref_sweep.cell.judging import Pair, pairwise_requests
from selfpref_sweep.cell.prompts import standardize
from selfpref_sweep.config import register_configs
from selfpref_sweep.models.cached import CachedModel
from selfpref_sweep.models.local import LocalModel

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


def workload(evaluator: str, root: str, n_articles: int):
    """The composed config (the evaluator on paper_xsum), its prompts and the dataset."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"evaluator={evaluator}", "dataset=paper_xsum", f"dataset.root={root}",
                                           f"dataset.n_articles={n_articles}"])
    return cfg, OmegaConf.to_container(cfg.prompts, resolve=True), load_dataset(cfg.dataset)


def timed(model, requests):
    """Answer probabilities of every request from a cold prefix cache, with wall and CPU seconds."""
    model.prefix_lru.clear()
    model.tokens_computed = model.tokens_requested = 0
    t0, c0 = time.time(), time.process_time()
    probs = {r: d.probs for r, d in model.answer_distributions(requests)}
    return probs, time.time() - t0, time.process_time() - c0


def forward_cost(model) -> None:
    """Milliseconds per token of one forward by its shape, on a 512-token cache (random tokens)."""
    import torch

    from selfpref_sweep.models.local.kv_cache import _clone_cache

    ids = torch.randint(0, 30000, (600,), generator=torch.Generator().manual_seed(0)).tolist()
    base = model._run_rows([ids[:512]], None)
    for rows, tokens in ((1, 1), (1, 8), (1, 32), (1, 64), (8, 32), (8, 64), (16, 64), (32, 64)):
        best = min(_time(lambda tokens=tokens, rows=rows: model._forward_rows([ids[512:512 + tokens]] * rows,
                                                                              _clone_cache(base, batch=rows)))
                   for _ in range(3))
        print(f"forward of {rows} x {tokens} tokens: {best * 1e3:.0f} ms, {best * 1e3 / (rows * tokens):.2f} ms/token")


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "paper-data"))
    ap.add_argument("--evaluator", default="qwen05")
    ap.add_argument("--n-articles", type=int, default=5)
    ap.add_argument("--scratch-sample", type=int, default=8, help="how many of the prompts to also time from scratch")
    ap.add_argument("--forward-cost", action="store_true", help="also time single forwards by their size")
    ap.add_argument("--repeats", type=int, default=1, help="time each path this many times, alternating")
    args = ap.parse_args()

    cfg, prompts, dataset = workload(args.evaluator, args.root, args.n_articles)
    t0 = time.time()
    model = LocalModel(cfg.evaluator, model_cache=cfg.paths.model_cache)
    print(f"model loaded in {time.time() - t0:.1f}s ({model.identity.dtype}, schedule {model.identity.schedule!r}; "
          f"split-free on this device: {model.split_free}; CPU schedule recorded for this machine: "
          f"{model.cpu_choice})")  # keys: the default or its fallback; slabs, rows: models/local/cpu_schedules.py
    handle = CachedModel(model.identity, lambda: model, store=None)  # only for its identity in requests
    requests = paper_requests(handle, prompts, dataset)
    print(f"{len(requests)} judge prompts")
    if args.forward_cost:
        forward_cost(model)

    list(model.answer_distributions(requests[:2]))  # warm-up (allocator, answer-token tables, row probe)
    chunk, seconds, default = model.chunk, {"default": [], "batched": []}, None
    order = [p for k in range(args.repeats) for p in (("default", "batched"), ("batched", "default"))[k % 2]]
    for path in order:
        model.switch_schedule(chunk if path == "default" else 0)
        model.forwards = model.largest_batch = 0
        probs, wall, cpu = timed(model, requests)
        seconds[path].append(wall)
        if path == "default":
            again = "" if default is None else f"; answers bit-identical to the first run: {probs == default}"
            default = default or probs
            print(f"default ({model.identity.schedule or 'batched'}): {wall:.1f}s wall ({cpu:.1f}s CPU) for "
                  f"{len(requests)} judgements; tokens requested {model.tokens_requested}, computed "
                  f"{model.tokens_computed}; {model.forwards} forwards of up to {model.largest_batch} rows{again}")
        else:
            batched = probs
            print(f"batched (max_batch {model.max_batch}): {wall:.1f}s wall ({cpu:.1f}s CPU); "
                  f"tokens computed {model.tokens_computed}")
    default_s, batched_s = (sum(seconds[p]) / len(seconds[p]) for p in ("default", "batched"))
    if args.repeats > 1:  # each default run against the batched run beside it, so drift cancels within a pair
        pairs = sorted(d / b for d, b in zip(seconds["default"], seconds["batched"], strict=True))
        print(f"default / batched, run by run: {', '.join(f'{r:.3f}' for r in pairs)} "
              f"(median {statistics.median(pairs):.3f})")
    model.switch_schedule(0)

    sample = requests[: args.scratch_sample]
    model.prefix_reuse = False
    scratch, scratch_s, scratch_cpu = timed(model, sample)
    scale = len(requests) / len(sample)
    worst = max(abs(batched[r][a] - scratch[r][a]) for r in sample for a in r.answers)
    gap = max(abs(batched[r][a] - default[r][a]) for r in requests for a in r.answers)
    print(f"from scratch: {scratch_s * scale:.1f}s wall ({scratch_cpu * scale:.1f}s CPU, extrapolated from "
          f"{len(sample)} prompts); max |p_batched - p_scratch| = {worst:.2e}; max |p_batched - p_default| = {gap:.2e}")
    model.switch_schedule(chunk)
    print(f"s_per_judgement={default_s / len(requests):.3f} batched={batched_s / len(requests):.3f} "
          f"ratio_vs_batched={default_s / batched_s:.3f} ratio_vs_scratch={batched_s / (scratch_s * scale):.3f}")


if __name__ == "__main__":
    main()
