"""Helpers for the Batch API tests, and a child process that judges through a CachedModel in batch mode
(the acceptance test kills it mid-batch):

    python -m tests.openai_batch_child BASE_URL STORE_PATH
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from selfpref_sweep.models.base import GenerateRequest, GenerationDecoding, Message
from tests.openai_server import ARTICLES, few_shot_judge_requests

KEY_ENV = "SELFPREF_TEST_BATCH_KEY"
SECRET = "sk-test-BATCHSECRET789"  # a fake key; must never reach the store, the batch records or the uploads



def model_cfg(base_url: str, batch: bool = True, **over):
    cfg = {"name": "smol_batch", "backend": "openai", "model": "smollm135", "base_url": base_url,
           "api_key_env": KEY_ENV, "max_concurrency": 1, "top_logprobs": 20, "timeout_s": 60.0, "max_retries": 2,
           "retry_backoff_s": 0.05, "sample_fallback_k": 0, "batch": batch, "batch_poll_s": 0.05,
           "batch_poll_max_s": 0.2, "batch_wait_timeout_s": 300.0}
    cfg.update(over)
    return OmegaConf.create(cfg)


def judge_requests(identity, n: int = 8):
    return few_shot_judge_requests(identity)[:n]


def generate_requests(identity):
    return [GenerateRequest(identity, (Message("system", "Summarize the article in one sentence."),
                                       Message("user", f"Article:\n{article}")),
                            decoding=GenerationDecoding(max_new_tokens=12))
            for article, _, _ in ARTICLES]


def main(argv) -> int:
    from selfpref_sweep.models.cached import CachedModel
    from selfpref_sweep.models.openai.openai_api import OpenAIModel
    from selfpref_sweep.store import Store

    base_url, store_path = argv
    cfg = model_cfg(base_url)
    store = Store(store_path)
    cached = CachedModel(OpenAIModel.identity_for(cfg), lambda: OpenAIModel(cfg), store, show_progress=False)
    out = cached.answer_distributions(judge_requests(cached.identity))
    print(f"judged {len(out)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
