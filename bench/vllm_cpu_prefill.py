"""vLLM's prefill rate on this machine: 8 prompts of ~1,000 tokens at once, one answer token each (top-20
logprobs, as judging asks), twice with fresh prompts so the prefix cache does not help. Run it in the vLLM
virtualenv on a model directory, e.g. qwen05 as the local backend converts it (see docs/vllm.md):

    .venv-vllm/bin/python bench/vllm_cpu_prefill.py ~/.cache/selfpref_sweep/models/qwen05-float32-<hash> \
        [--dtype float32] [--eager]

Prints the engine's start-up time and, per round, prompt tokens per second. On 2 AVX2-only cores (float32,
--eager) it printed 61 and 72 tokens/s after a 69 s start (an earlier run: 60 and 61 after 70 s).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a Hugging Face model directory")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--eager", action="store_true", help="vLLM's enforce_eager: no torch.compile")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    import vllm

    start = time.time()
    llm = vllm.LLM(model=args.model, dtype=args.dtype, enforce_eager=args.eager, gpu_memory_utilization=0.3,
                   max_model_len=4096, seed=0, enable_prefix_caching=True, max_logprobs=20)
    print(f"engine started in {time.time() - start:.1f} s", flush=True)
    words = (REPO / "README.md").read_text().split()
    params = vllm.SamplingParams(max_tokens=1, logprobs=20, temperature=0)
    for r in range(args.rounds):
        prompts = [" ".join(words[r * 997 + i * 50:r * 997 + i * 50 + 500]) for i in range(8)]
        start = time.time()
        out = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.time() - start
        n = sum(len(o.prompt_token_ids) for o in out)
        print(f"round {r}: {n} prompt tokens in {seconds:.1f} s = {n / seconds:.0f} tokens/s", flush=True)


if __name__ == "__main__":  # vLLM's engine starts a process by spawn, which re-imports this module
    main()
