"""Does the in-process vLLM backend give a request the same bits whatever shared its batch, came before it, or was
cached? For each mode (`vllm_reproducible` true and false) the same judge, familiarity and summary requests run
in five compositions, and each result is compared with the request run alone on an empty prefix cache:

  all at once | reversed | in halves | in two uneven parts (3 and the rest) | (the reference: each alone, cold)

Run it in vLLM's virtualenv (docs/vllm.md), on qwen05 by default:

    .venv-vllm/bin/python bench/vllm_invariance.py --dtype float32 --articles 3

Prints one Markdown table: per mode and kind, the results bit-identical to the request alone, and the seconds of
the all-at-once pass (a cold prefix cache). Judge prompts share their article (4 per article), so the fast mode's
prefix cache has something to reuse.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from selfpref_sweep.cell.dataset_loaders import load_dataset  # noqa: E402
from selfpref_sweep.cell.judging import pairwise_requests  # noqa: E402
from selfpref_sweep.cell.pairs import Pair  # noqa: E402
from selfpref_sweep.config import register_configs  # noqa: E402
from selfpref_sweep.models.base import Message, SequenceRequest  # noqa: E402
from selfpref_sweep.models.cached import CachedModel  # noqa: E402


def requests(cfg, identity, n_articles: int):
    """Judge requests (4 per article: both orders x both questions), familiarity and summary requests."""
    from selfpref_sweep.cell.summaries import generation_request

    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    dataset = load_dataset(cfg.dataset)
    handle = CachedModel(identity, lambda: None, store=None)
    articles = dataset.articles[:n_articles]
    judge = [r for a in articles for q in ("recognition", "preference") for r in pairwise_requests(
        handle, prompts, q, Pair(a.id, a.text, a.reference, a.text.split(". ")[0] + ".")).values()]
    texts = [SequenceRequest(identity, text, messages=(Message("user", f"Summarize: {a.text}"),))
             for a in articles for text in (a.reference, a.text.split(". ")[0] + ".")]
    summaries = [generation_request(handle, cfg.evaluator, prompts, dataset.task, a, 24) for a in articles]
    return judge, texts, summaries


def compositions(items):
    n = len(items)
    yield "all", [items]
    yield "reversed", [items[::-1]]
    yield "halves", [items[: n // 2], items[n // 2:]]
    yield "uneven", [items[:3], items[3:]]


def measure(model, kind: str, items, run) -> dict:
    """Per composition, how many results equal the request alone on an empty cache; seconds of `all`."""
    def empty():
        if model.llm is not None:
            model.llm.reset_prefix_cache()

    alone = {}
    for r in items:
        empty()
        alone.update(run([r]))
    out = {}
    for name, parts in compositions(items):
        empty()
        start = time.perf_counter()
        got = {k: v for part in parts for k, v in run(part).items()}
        if name == "all":
            out["seconds"] = time.perf_counter() - start
        out[name] = sum(got[r.cache_key()] == alone[r.cache_key()] for r in items)
    out["n"] = len(items)
    print(kind, out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen05")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--articles", type=int, default=3)
    ap.add_argument("--eager", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    from selfpref_sweep.models.vllm.vllm_engine import VLLMModel

    register_configs()
    rows = []
    for reproducible in (True, False):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[f"evaluator={args.model}", "evaluator.backend=vllm", "dataset=demo",
                                               f"evaluator.dtype={args.dtype}",
                                               f"evaluator.vllm_enforce_eager={args.eager}",
                                               f"evaluator.vllm_reproducible={reproducible}"])
        model = VLLMModel(cfg.evaluator, model_cache=cfg.paths.model_cache, show_progress=False)
        judge, texts, summaries = requests(cfg, model.identity, args.articles)
        kinds = {
            "judge": (judge, lambda rs, model=model: {r.cache_key(): d.probs
                                                      for r, d in model.answer_distributions(rs)}),
            "familiarity": (texts, lambda rs, model=model: {r.cache_key(): s.total
                                                            for r, s in model.sequence_logprobs(rs)}),
            "summaries (text)": (summaries, lambda rs, model=model: {r.cache_key(): g.text
                                                                     for r, g in model.generate(rs)}),
        }
        mode = "reproducible" if reproducible else "fast (vllm_reproducible=false)"
        for kind, (items, run) in kinds.items():
            m = measure(model, kind, items, run)
            rows.append(f"| {mode} | {kind} | {m['all']}/{m['n']} | {m['reversed']}/{m['n']} | {m['halves']}/{m['n']} "
                        f"| {m['uneven']}/{m['n']} | {m['seconds']:.1f} |")
        model.close()
    print(f"\n{args.model}, {args.dtype}, {args.articles} demo articles; bit-identical to the request alone on an "
          "empty cache:\n\n| mode | kind | all at once | reversed | halves | uneven | seconds (all, cold) |\n"
          "|---|---|---|---|---|---|---|\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
