"""A small fault-injecting HTTP proxy for the OpenAI backend tests (loopback only).

It forwards every request to an upstream OpenAI-compatible server on 127.0.0.1 and, for a seeded
fraction of the POSTs, answers with a fault instead:

  "429"            429 Too Many Requests with `Retry-After: 0` or `1`
  "500"            500 Internal Server Error
  "502" "503"      502 Bad Gateway, 503 Service Unavailable (a proxy or load balancer in front of the server)
  "drop"           closes the connection at once, without a response
  "malformed"      forwards, then returns a 200 whose body is cut off mid-JSON
  "timeout"        holds the connection for `delay_s` (beyond the client's timeout), then drops it
  "strip_logprobs" forwards, then returns the 200 response with every choice's `logprobs` removed
  "400" "401" "403" "404"  that client error, as OpenAI words it (with `fault_rate=1.0`: a revoked
                   key, an unknown model...)

The decision for the i-th POST depends only on the seed and i, so a run is reproducible up to the
order in which concurrent requests arrive; `schedule` fixes the decisions of the first POSTs outright
(a fault name, or None to forward), so a test can be sure each fault it names happens. Counts of what it did are kept
for the assertions, and the Authorization headers it saw are kept so a test can check the key really was sent.

    with FaultProxy("http://127.0.0.1:8000", faults=("429", "500"), fault_rate=0.3, seed=0) as proxy:
        client = OpenAI(base_url=proxy.base_url + "/v1", ...)
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

FAULTS = ("429", "500", "502", "503", "timeout", "drop", "strip_logprobs", "malformed", "400", "401", "403", "404")
_CLIENT_ERRORS = {
    "400": ("Invalid value for 'messages' (injected).", "invalid_request_error"),
    "401": ("Incorrect API key provided (injected).", "invalid_request_error"),
    "403": ("You are not allowed to use this model (injected).", "permission_error"),
    "404": ("The model `x` does not exist or you do not have access to it (injected).", "invalid_request_error"),
}
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class FaultProxy:
    def __init__(self, upstream: str, faults: Sequence[str] = ("429", "500", "timeout"), fault_rate: float = 0.3,
                 seed: int = 0, delay_s: float = 5.0, max_consecutive: int | None = None,
                 schedule: Sequence[str | None] = ()):
        parsed = urlparse(upstream)
        if parsed.hostname not in _LOOPBACK:
            raise ValueError(f"FaultProxy only forwards to loopback addresses, not {parsed.hostname!r}")
        unknown = (set(faults) | {f for f in schedule if f}) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; valid: {FAULTS}")
        self.upstream_host = parsed.hostname
        self.upstream_port = parsed.port or 80
        self.faults = tuple(faults)
        self.schedule = tuple(schedule)
        self.fault_rate = fault_rate
        self.delay_s = delay_s
        self.seed = seed
        self.counts: Counter = Counter()  # fault name (or "forwarded") -> how many times
        self.auth_headers: list[str] = []
        self._n = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ decisions
    def decide(self) -> str | None:
        """The fault for the next POST, or None to forward it untouched."""
        with self._lock:
            i = self._n
            self._n += 1
        if i < len(self.schedule):
            return self.schedule[i]
        rng = random.Random(f"{self.seed}:{i}")
        if self.faults and rng.random() < self.fault_rate:
            return rng.choice(self.faults)
        return None

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    # ------------------------------------------------------------------ handler
    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _reply(self, status: int, body: bytes, headers: dict | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    self.close_connection = True

            def _error(self, status: int, message: str, kind: str, headers: dict | None = None) -> None:
                body = json.dumps({"error": {"message": message, "type": kind, "code": None}}).encode()
                self._reply(status, body, headers)

            def _forward(self, method: str, body: bytes):
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=300)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("host", "connection", "accept-encoding", "content-length")}
                    headers["Content-Length"] = str(len(body))
                    conn.request(method, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    return resp.status, resp.read()
                finally:
                    conn.close()

            def do_GET(self) -> None:
                status, data = self._forward("GET", b"")
                self._reply(status, data)

            def do_POST(self) -> None:
                body = self._body()
                with proxy._lock:
                    proxy.auth_headers.append(self.headers.get("Authorization", ""))
                fault = proxy.decide()
                proxy._count(fault or "forwarded")
                if fault == "429":
                    wait = random.Random(f"{proxy.seed}:ra:{proxy.counts['429']}").choice(["0", "1"])
                    self._error(429, "Rate limit reached (injected)", "rate_limit_error", {"Retry-After": wait})
                elif fault in ("500", "502", "503"):
                    self._error(int(fault), "The server had an error (injected)", "server_error")
                elif fault == "drop":
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(2)
                elif fault in _CLIENT_ERRORS:
                    self._error(int(fault), *_CLIENT_ERRORS[fault])
                elif fault == "timeout":
                    time.sleep(proxy.delay_s)  # the client gives up first
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(2)
                else:
                    status, data = self._forward("POST", body)
                    if fault == "strip_logprobs" and status == 200:
                        payload = json.loads(data)
                        for choice in payload.get("choices", []):
                            choice["logprobs"] = None
                        data = json.dumps(payload).encode()
                    if fault == "malformed" and status == 200:
                        data = data[: len(data) // 2]
                    self._reply(status, data)

        return Handler
