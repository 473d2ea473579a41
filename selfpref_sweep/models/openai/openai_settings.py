"""The OpenAI backend's settings (OpenAI, OpenAI-compatible servers and the Batch API; openai_api.py,
openai_batch.py): fields of a model config, each with its default and its allowed range."""

from __future__ import annotations

from dataclasses import dataclass

from ...schema_fields import COUNT, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, Range, Switch, ranged

MAX_TOP_LOGPROBS = 20  # the OpenAI API's limit

# Whether an OpenAI-compatible server scores given text (prompt logprobs from its completions endpoint): auto =
# asked once per process, one small probe request (never to api.openai.com, which refuses); on = the server does
# (vLLM, llama.cpp's servers), no probe; off = it does not, or do not use it.
EchoLogprobsMode = Switch


@dataclass
class OpenAISettings:
    model: str | None = None  # the API's model name, e.g. gpt-4-turbo
    base_url: str | None = None  # None: api.openai.com; else any OpenAI-compatible server
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable, never stored
    max_concurrency: int = ranged(8, COUNT)  # requests in flight per model
    top_logprobs: int = ranged(20, Range(low=0, high=MAX_TOP_LOGPROBS, integer=True))  # the API's largest
    timeout_s: float = ranged(60.0, POSITIVE)
    max_retries: int = ranged(6, NON_NEGATIVE_INT)
    # First wait before a retry, in seconds; it doubles each retry (with jitter), up to 30 s. A Retry-After
    # from the server takes precedence.
    retry_backoff_s: float = ranged(0.5, NON_NEGATIVE)
    # >0: estimate answer probabilities from k samples when no logprobs
    sample_fallback_k: int = ranged(0, NON_NEGATIVE_INT)
    # API backends: the server's calls cost nothing (a server of one's own: vLLM, llama.cpp). Then
    # judge.competence=auto turns the competence control on, as for local judges, and plan mode prices it at $0.
    free: bool = False
    # API backends: familiarity through the completions endpoint (echo=True: the prompt's token logprobs).
    echo_logprobs: EchoLogprobsMode = EchoLogprobsMode.auto
    # API backends, familiarity of a chat model: the served model's Jinja chat template (its text, or a path to a
    # file holding it), rendered here to turn chat messages into the completions endpoint's prompt. null: chat
    # models are not scored (the completions endpoint takes a raw prompt only).
    chat_template: str | None = None
    # OpenAI Batch API (backend openai; models/openai/openai_batch.py): a cell's uncached calls go as batches (JSONL
    # upload, one batch per at most batch_max_requests lines, 24 h window) at batch_price_factor of the price.
    # Each batch id is recorded in batch_dir (null: beside the call store, <store>.batches/), so a re-run
    # resumes polling the same batch. Polls wait batch_poll_s, doubling up to batch_poll_max_s; after
    # batch_wait_timeout_s the run stops (the batch goes on; a re-run resumes it).
    batch: bool = False
    batch_poll_s: float = ranged(10.0, POSITIVE)
    batch_poll_max_s: float = ranged(300.0, POSITIVE)
    batch_wait_timeout_s: float = ranged(26 * 3600.0, POSITIVE)
    batch_max_requests: int = ranged(50000, Range(low=1, high=50000, integer=True))  # OpenAI's limit per batch
    # the Batch API's price relative to direct calls (OpenAI: half)
    batch_price_factor: float = ranged(0.5, NON_NEGATIVE)
    batch_dir: str | None = None
    # USD per million tokens, for the cost estimate
    price_per_mtok_prompt: float | None = ranged(None, NON_NEGATIVE)
    price_per_mtok_completion: float | None = ranged(None, NON_NEGATIVE)
    # OpenAI fine-tuning, per trained token (x epochs)
    price_per_mtok_training: float | None = ranged(None, NON_NEGATIVE)
