"""Throughput of the OpenAI backend's judge calls at different numbers of requests in flight.

Starts llama-cpp-python's OpenAI-compatible server on 127.0.0.1 with SmolLM2-135M (tests/openai_server.py),
or uses a running one (--base-url, --model), and sends N distinct pairwise judge prompts at each
max_concurrency in --concurrency (default 1 then 4) through OpenAIModel and the real `openai` client:

    python bench/api_throughput.py [--n 32] [--concurrency 1,4] [--rounds 1]
                                   [--base-url http://127.0.0.1:8000/v1 --model M]

Each level gets its own prompts (same length, different article numbers), so a server-side prompt cache
cannot favour the later levels. Ends with one line: serial_rps=<x> concurrent_rps=<y> speedup=<z> (the
lowest and highest level; with --rounds R the levels alternate R times and each figure is the median
over the rounds, which resists a machine that is busy with other work now and then).

llama-cpp-python's server runs one request at a time (a global lock around its single model; it has no
parallel slots), so against it concurrency only overlaps HTTP and client overhead; a server with parallel
slots (llama.cpp's own `llama-server -np 4`, vLLM) or the OpenAI API is where concurrency pays.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.openai_server

from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding, Message  # noqa: E402
from selfpref_sweep.models.openai.openai_api import OpenAIModel  # noqa: E402

SYSTEM = ("You are a helpful assistant and expert in news-article summaries. You help compare summaries to help "
          "me with my records. You respond with only \"1\" or \"2\" and no other text.")


def judge_prompt(i: int) -> str:
    article = (f"Report {i}: the council of district {i} approved a plan to rebuild {i % 7 + 2} bridges and "
               f"{i % 5 + 1} schools over the next {i % 4 + 2} years. Residents raised concerns about traffic "
               f"during the works, and the council promised weekly updates and a helpline.")
    s1 = f"District {i} will rebuild bridges and schools over several years."
    s2 = f"Residents of district {i} complained about a helpline."
    return (f"Here are two news-article summaries I found. It's important for me to select the better summary "
            f"for my records.\n\nArticle:\n{article}\n\nSummary1:\n{s1}\n\nSummary2:\n{s2}\n\nCan you tell me which "
            f"summary you prefer? Please answer with only \"1\" or \"2\" and no other text.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32, help="judge requests per concurrency level (at most 999)")
    ap.add_argument("--concurrency", default="1,4", help="comma-separated max_concurrency levels")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the levels this many times, alternating (1,4,1,4...), to average out a busy machine")
    ap.add_argument("--base-url", default=None, help="a running OpenAI-compatible server (else one is started)")
    ap.add_argument("--model", default=None, help="the served model name (with --base-url)")
    ap.add_argument("--api-key-env", default="OPENAI_API_KEY")
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")] * args.rounds

    server = None
    if args.base_url is None:
        from tests.openai_server import LlamaServer

        t0 = time.time()
        server = LlamaServer.start()
        base_url, api_model = server.base_url, server.model
        print(f"started llama_cpp.server ({api_model}) at {base_url} in {time.time() - t0:.1f}s", flush=True)
    else:
        base_url, api_model = args.base_url, args.model or "default"
    try:
        timings: dict = {}  # level -> [(requests, seconds)]
        for k, level in enumerate(levels):
            cfg = OmegaConf.create({"name": "bench", "backend": "openai", "model": api_model, "base_url": base_url,
                                    "api_key_env": args.api_key_env, "max_concurrency": level, "top_logprobs": 20,
                                    "timeout_s": args.timeout, "max_retries": 3, "sample_fallback_k": 0})
            model = OpenAIModel(cfg, model_cache="")
            # A warm-up request (not timed), then N prompts never seen before by the server.
            list(model.answer_distributions([AnswerRequest(model.identity, (Message("system", SYSTEM),
                                                                           Message("user", judge_prompt(99_999 - k))),
                                                           JudgeDecoding(("1", "2"), top_logprobs=20))]))
            reqs = [AnswerRequest(model.identity, (Message("system", SYSTEM),
                                                   Message("user", judge_prompt(10_000 + k * 1_000 + i))),
                                  JudgeDecoding(("1", "2"), top_logprobs=20))
                    for i in range(args.n)]
            t0 = time.time()
            results = list(model.answer_distributions(reqs))
            elapsed = time.time() - t0
            assert len(results) == len(reqs)
            prompt_tokens = sum(d.prompt_tokens for _, d in results)
            mass = sum(d.mass for _, d in results) / len(results)
            timings.setdefault(level, []).append((len(reqs), elapsed))
            print(f"max_concurrency={level}: {len(reqs)} judge requests in {elapsed:.2f}s = "
                  f"{len(reqs) / elapsed:.2f} req/s "
                  f"({prompt_tokens / len(reqs):.0f} prompt tokens each; mean mass on 1/2 {mass:.2f}; "
                  f"retries {model.retries})", flush=True)
            model.close()
        rps = {lv: statistics.median(n / t for n, t in runs) for lv, runs in timings.items()}
        for lv in sorted(rps):
            print(f"max_concurrency={lv}: median {rps[lv]:.3f} req/s over {len(timings[lv])} round(s)")
        lo, hi = min(rps), max(rps)
        print(f"serial_rps={rps[lo]:.3f} concurrent_rps={rps[hi]:.3f} speedup={rps[hi] / rps[lo]:.2f}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
