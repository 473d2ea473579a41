"""A loopback HTTP server in a daemon thread, as a context manager: the base of the tests' stand-ins for
OpenAI's API (chat, files, batches, fine-tuning). Only ever bound to 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackServer:
    """Subclasses call `_serve(handler_class)` at the end of their __init__; `with` starts and stops it."""

    def _serve(self, handler: type[BaseHTTPRequestHandler], port: int = 0, name: str = "loopback") -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet request handler that answers JSON (or raw bytes), and OpenAI-style errors."""

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, obj: Any, raw: bytes | None = None,
              headers: dict[str, str] | None = None) -> None:
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code: int, message: str) -> None:
        self._send(code, {"error": {"message": message, "type": "invalid_request_error", "code": None,
                                    "param": None}})
