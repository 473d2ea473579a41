"""A canned OpenAI-compatible server on 127.0.0.1 for the tests of what a server does NOT offer: the
completions endpoint's echo (prompt logprobs), and the `logprobs` parameter itself (reasoning models answer
it with HTTP 400). It answers instantly and deterministically, and counts what it is asked:

  POST /v1/chat/completions  with logprobs: 400 (refuse_logprobs) or the first token's top logprobs over
                             "1"/"2" (P("1") from the prompt's hash); without, max_tokens=1: `n` sampled
                             answers ("1" or "2", seeded by the prompt and a counter); otherwise a fixed
                             short summary.
  POST /v1/completions       `completions`: "refuse" (400 naming echo), "ignore" (200 with no logprobs),
                             "generated_only" (the prompt echoed, logprobs of the generated token only), or
                             "missing" (404, as OpenAI answers for a chat model).
  GET  /v1/models            one model.

    with StandIn(refuse_logprobs=True) as api:
        api.base_url            # http://127.0.0.1:<port>/v1
        api.logprob_requests    # chat requests that asked for logprobs

Command line (for trying the tool's handling by hand):
    python -m tests.openai_standin --refuse-logprobs --port 8124
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import threading
from collections import Counter
from typing import Any

from tests.loopback import JsonHandler, LoopbackServer

MODEL = "standin-model"
SUMMARY = "The article reports a short event in a town."
REFUSAL = {"error": {"message": "Unsupported parameter: 'logprobs' is not supported with this model.",
                     "type": "invalid_request_error", "param": "logprobs", "code": "unsupported_parameter"}}
NO_ECHO = {"error": {"message": "The 'echo' parameter is not supported with this model.",
                     "type": "invalid_request_error", "param": "echo", "code": "unsupported_parameter"}}
NOT_FOUND = {"error": {"message": "This is a chat model and not supported in the v1/completions endpoint.",
                       "type": "invalid_request_error", "param": "model", "code": None}}


def _p_one(messages: list[dict[str, Any]]) -> float:
    """A deterministic P("1") in [0.2, 0.8] from the prompt."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).digest()
    return 0.2 + 0.6 * digest[0] / 255


def _usage(completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": 10, "completion_tokens": completion_tokens, "total_tokens": 10 + completion_tokens}


class StandIn(LoopbackServer):
    def __init__(self, refuse_logprobs: bool = False, completions: str = "refuse", port: int = 0):
        if completions not in ("refuse", "ignore", "generated_only", "missing"):
            raise ValueError(completions)
        self.refuse_logprobs = refuse_logprobs
        self.completions = completions
        self.counts: Counter = Counter()  # path -> POSTs
        self.logprob_requests = 0  # chat requests carrying logprobs
        self.auth_headers: list[str] = []
        self._draws = 0
        self._lock = threading.Lock()
        self._serve(self._handler(), port, "openai-standin")

    # ------------------------------------------------------------------ answers
    def chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body.get("messages") or []
        if body.get("logprobs"):
            with self._lock:
                self.logprob_requests += 1
            if self.refuse_logprobs:
                return 400, REFUSAL
            p = _p_one(messages)
            top = [{"token": "1", "logprob": math.log(p), "bytes": None},
                   {"token": "2", "logprob": math.log(1 - p), "bytes": None}]
            top.sort(key=lambda t: -t["logprob"])
            content = [{"token": top[0]["token"], "logprob": top[0]["logprob"], "bytes": None, "top_logprobs": top}]
            return 200, _completion(body, [top[0]["token"]], {"content": content})
        if int(body.get("max_tokens") or 0) == 1:  # sampling an answer
            with self._lock:
                self._draws += 1
                rng = random.Random(f"{json.dumps(messages, sort_keys=True)}:{self._draws}")
            p = _p_one(messages)
            return 200, _completion(body, ["1" if rng.random() < p else "2" for _ in range(int(body.get("n") or 1))])
        return 200, _completion(body, [SUMMARY], completion_tokens=9)

    def legacy_completions(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.completions == "refuse":
            return 400, NO_ECHO
        if self.completions == "missing":
            return 404, NOT_FOUND
        text, logprobs = " x", None
        if self.completions == "generated_only":
            text = str(body.get("prompt", "")) + " x"
            logprobs = {"tokens": [" x"], "token_logprobs": [-1.5], "top_logprobs": [{" x": -1.5}],
                        "text_offset": [len(text) - 2]}
        return 200, {"id": "cmpl-standin", "object": "text_completion", "created": 0, "model": MODEL,
                     "choices": [{"index": 0, "text": text, "finish_reason": "length", "logprobs": logprobs}],
                     "usage": _usage(1)}

    # ------------------------------------------------------------------ HTTP
    def _handler(self):
        api = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "me"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                path = self.path.rstrip("/")
                with api._lock:
                    api.counts[path] += 1
                    api.auth_headers.append(self.headers.get("Authorization", ""))
                if path.endswith("/chat/completions"):
                    self._send(*api.chat(body))
                elif path.endswith("/completions"):
                    self._send(*api.legacy_completions(body))
                else:
                    self._send(404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}})

        return Handler


def _completion(body: dict[str, Any], texts: list[str], logprobs: Any = None,
                completion_tokens: int = 1) -> dict[str, Any]:
    choices = [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "length",
                "logprobs": logprobs} for i, t in enumerate(texts)]
    return {"id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": body.get("model", MODEL),
            "choices": choices, "usage": _usage(completion_tokens * len(texts))}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="A canned OpenAI-compatible server on 127.0.0.1 (tests only).")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--refuse-logprobs", action="store_true", help="answer HTTP 400 to any logprobs request")
    ap.add_argument("--completions", default="refuse", choices=("refuse", "ignore", "generated_only", "missing"))
    args = ap.parse_args()
    api = StandIn(refuse_logprobs=args.refuse_logprobs, completions=args.completions, port=args.port)
    with api:
        print(f"serving {MODEL} at {api.base_url}; Ctrl-C stops it", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            api.thread.join()


if __name__ == "__main__":
    main()
