"""A stand-in for OpenAI's files and Batch API on 127.0.0.1 that runs each batch line on a real
OpenAI-compatible server (llama.cpp's, tests/openai_server.py), for testing the Batch API path offline.

The paths, request bodies and response objects follow the official API as the `openai` client sends and
parses them:

  POST /v1/files                    multipart: file=<jsonl>, purpose=batch -> file object
  GET  /v1/files/{id}               file object
  GET  /v1/files/{id}/content       the file's bytes (input, output or error JSONL)
  POST /v1/batches                  JSON {input_file_id, endpoint, completion_window, metadata} -> batch
  GET  /v1/batches                  ?limit= -> {"object": "list", "data": [...]} (newest first)
  GET  /v1/batches/{id}             batch: validating -> in_progress -> completed (or expired / failed)
  POST /v1/chat/completions         forwarded to the upstream server (direct calls), counted

A batch's lines run in a worker thread, one by one, each forwarded to the upstream server's
/v1/chat/completions; `lines_served` counts the lines forwarded per custom_id (what OpenAI would bill).
While `hold` is set a created batch stays in_progress without running anything (to kill a client
mid-batch). Faults, for the next batch: `error_next = k` puts its first k lines into the error file
(code server_error), `http_error_next = k` answers the next k with status 500 in the output file,
`drop_next = k` leaves the next k out of both files, `expire_after = k` runs only k lines and then expires
the batch (the rest go to the error file with code batch_expired), `fail_validation_next` fails the next
batch at validation. None of the faulted lines is forwarded.

    with BatchStandIn(upstream_base_url) as api:
        api.base_url   # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from typing import Any
from urllib.parse import parse_qsl, urlparse

from tests.loopback import JsonHandler, LoopbackServer


class BatchStandIn(LoopbackServer):
    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.hold = False
        self.error_next = 0
        self.http_error_next = 0
        self.drop_next = 0
        self.expire_after: int | None = None
        self.fail_validation_next = False
        self.requests: list[dict[str, Any]] = []  # method, path, authorization
        self.files: dict[str, dict[str, Any]] = {}
        self.contents: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.lines_served: Counter = Counter()  # custom_id -> times forwarded upstream
        self.direct_calls = 0  # /v1/chat/completions forwarded upstream
        self.uploaded: list[str] = []  # the uploaded JSONL texts
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._serve(self._handler(), name="batch-standin")

    # ---------------------------------------------------------------- lifecycle
    def __exit__(self, *exc) -> None:
        self.hold = False
        super().__exit__(*exc)
        for worker in self._workers:
            worker.join(timeout=60)

    @property
    def batches_created(self) -> int:
        return len(self.batches)

    def count(self, method: str, path_prefix: str) -> int:
        return sum(1 for r in self.requests if r["method"] == method and r["path"].startswith(path_prefix))

    # ---------------------------------------------------------------- upstream
    def forward(self, body: dict[str, Any]) -> tuple:
        """(status, JSON body) of the upstream server's answer to a chat-completions body."""
        req = urllib.request.Request(f"{self.upstream}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    # ---------------------------------------------------------------- batches
    def _file(self, content: bytes, purpose: str, name: str) -> str:
        fid = f"file-{uuid.uuid4().hex[:24]}"
        self.contents[fid] = content
        self.files[fid] = {"id": fid, "object": "file", "bytes": len(content), "created_at": int(time.time()),
                           "filename": name, "purpose": purpose, "status": "processed", "status_details": None}
        return fid

    def _run(self, batch: dict[str, Any], lines: list[dict[str, Any]], faults: dict[str, Any]) -> None:
        while self.hold:
            time.sleep(0.02)
        out: list[str] = []
        err: list[str] = []
        served = 0
        for i, line in enumerate(lines):
            cid = line["custom_id"]
            rid = f"batch_req_{uuid.uuid4().hex[:16]}"
            if faults["expire_after"] is not None and served >= faults["expire_after"]:
                err.append(json.dumps({"id": rid, "custom_id": cid, "response": None, "error": {
                    "code": "batch_expired", "message": "This request could not be executed before the "
                                                        "completion window expired."}}))
                continue
            if i < faults["error"]:
                err.append(json.dumps({"id": rid, "custom_id": cid, "response": None,
                                       "error": {"code": "server_error", "message": "stand-in line error"}}))
                continue
            if i < faults["error"] + faults["http_error"]:
                out.append(json.dumps({"id": rid, "custom_id": cid, "error": None, "response": {
                    "status_code": 500, "request_id": rid,
                    "body": {"error": {"message": "stand-in 500", "type": "server_error"}}}}))
                continue
            if i < faults["error"] + faults["http_error"] + faults["drop"]:
                continue  # in neither file
            status, body = self.forward(line["body"])
            with self._lock:
                self.lines_served[cid] += 1
            served += 1
            out.append(json.dumps({"id": rid, "custom_id": cid, "error": None,
                                   "response": {"status_code": status, "request_id": rid, "body": body}}))
        with self._lock:
            expired = faults["expire_after"] is not None and served < len(lines)
            batch["output_file_id"] = self._file(("\n".join(out) + "\n").encode(), "batch_output",
                                                 "batch_output.jsonl") if out else None
            batch["error_file_id"] = self._file(("\n".join(err) + "\n").encode(), "batch_output",
                                                "batch_errors.jsonl") if err else None
            batch["request_counts"] = {"total": len(lines), "completed": served, "failed": len(lines) - served}
            batch["status"] = "expired" if expired else "completed"
            batch["expired_at" if expired else "completed_at"] = int(time.time())

    def _create_batch(self, body: dict[str, Any]) -> tuple:
        fid = body.get("input_file_id")
        if fid not in self.contents:
            return 400, {"error": {"message": f"invalid input_file_id {fid}", "type": "invalid_request_error"}}
        if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
            return 400, {"error": {"message": "endpoint/completion_window", "type": "invalid_request_error"}}
        bid = f"batch_{uuid.uuid4().hex[:24]}"
        batch = {"id": bid, "object": "batch", "endpoint": body["endpoint"], "errors": None, "input_file_id": fid,
                 "completion_window": "24h", "status": "validating", "output_file_id": None, "error_file_id": None,
                 "created_at": int(time.time()), "in_progress_at": None, "expires_at": int(time.time()) + 86400,
                 "completed_at": None, "failed_at": None, "expired_at": None, "cancelled_at": None,
                 "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": body.get("metadata")}
        lines = [json.loads(x) for x in self.contents[fid].decode().splitlines() if x.strip()]
        ids = [line.get("custom_id") for line in lines]
        problems = [f"line {i + 1}: bad line" for i, line in enumerate(lines)
                    if line.get("method") != "POST" or line.get("url") != body["endpoint"]
                    or not isinstance(line.get("body"), dict) or not line["body"].get("model")]
        if len(set(ids)) != len(ids) or None in ids:
            problems.append("custom_id values must be unique")
        if self.fail_validation_next:
            self.fail_validation_next = False
            problems.append("stand-in validation failure")
        self.batches[bid] = batch
        if problems:
            batch.update(status="failed", failed_at=int(time.time()), errors={"object": "list", "data": [
                {"code": "invalid_request", "message": p, "line": None, "param": None} for p in problems]})
            return 200, dict(batch)
        batch["request_counts"]["total"] = len(lines)
        faults = {"error": self.error_next, "http_error": self.http_error_next, "drop": self.drop_next,
                  "expire_after": self.expire_after}
        self.error_next = self.http_error_next = self.drop_next = 0
        self.expire_after = None
        batch.update(status="in_progress", in_progress_at=int(time.time()))
        worker = threading.Thread(target=self._run, args=(batch, lines, faults), daemon=True)
        self._workers.append(worker)
        worker.start()
        return 200, dict(batch)

    # ---------------------------------------------------------------- HTTP
    def _handler(self):
        standin = self

        class Handler(JsonHandler):
            def _record(self) -> str:
                path = urlparse(self.path).path
                with standin._lock:
                    standin.requests.append({"method": self.command, "path": path,
                                             "authorization": self.headers.get("Authorization")})
                return path

            def do_GET(self):  # noqa: N802
                path = self._record()
                query = dict(parse_qsl(urlparse(self.path).query))
                parts = path.strip("/").split("/")
                with standin._lock:
                    if parts[:2] == ["v1", "files"] and len(parts) in (3, 4):
                        fid = parts[2]
                        if fid not in standin.files:
                            return self._error(404, f"No such file {fid}")
                        if len(parts) == 4 and parts[3] == "content":
                            return self._send(200, None, raw=standin.contents[fid])
                        return self._send(200, standin.files[fid])
                    if parts[:2] == ["v1", "batches"]:
                        if len(parts) == 2:
                            data = list(reversed(list(standin.batches.values())))[: int(query.get("limit", 20))]
                            return self._send(200, {"object": "list", "data": [dict(b) for b in data],
                                                    "has_more": False})
                        batch = standin.batches.get(parts[2])
                        return self._send(200, dict(batch)) if batch else self._error(404, f"No such batch {parts[2]}")
                self._error(404, f"stand-in has no GET {path}")

            def do_POST(self):  # noqa: N802
                path = self._record()
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ctype = self.headers.get("Content-Type", "")
                if path == "/v1/files":
                    if not ctype.startswith("multipart/form-data"):
                        return self._error(400, "files.create must be multipart/form-data")
                    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                        f"Content-Type: {ctype}\r\n\r\n".encode() + raw)
                    fields: dict[str, Any] = {}
                    for part in msg.iter_parts():
                        name = part.get_param("name", header="content-disposition")
                        fields[name] = (part.get_filename(), part.get_payload(decode=True))
                    if fields.get("purpose", (None, b""))[1] != b"batch":
                        return self._error(400, "purpose must be batch")
                    name, content = fields["file"]
                    try:
                        for line in content.decode().splitlines():
                            if line.strip():
                                json.loads(line)
                    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                        return self._error(400, f"invalid JSONL: {exc}")
                    with standin._lock:
                        standin.uploaded.append(content.decode())
                        fid = standin._file(content, "batch", name)
                        return self._send(200, standin.files[fid])
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    return self._error(400, "invalid JSON")
                if path == "/v1/batches":
                    with standin._lock:
                        code, obj = standin._create_batch(body)
                    return self._send(code, obj)
                if path == "/v1/chat/completions":
                    with standin._lock:
                        standin.direct_calls += 1
                    code, obj = standin.forward(body)
                    return self._send(code, obj)
                self._error(404, f"stand-in has no POST {path}")

        return Handler
