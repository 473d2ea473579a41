"""A stand-in for OpenAI's files and fine-tuning endpoints (plus a minimal chat-completions endpoint for
the base model's summaries), on 127.0.0.1, for testing the OpenAI trainer offline.

The paths, request bodies and response objects follow the official API as the `openai` client sends
and parses them:

  POST /v1/files                          multipart: file=<jsonl>, purpose=fine-tune -> file object
  GET  /v1/files/{id}                     file object (status "processed")
  POST /v1/fine_tuning/jobs               JSON {model, training_file, seed, suffix, metadata, method?} -> job
  GET  /v1/fine_tuning/jobs               ?limit=&metadata[k]=v -> {"object": "list", "data": [...]}
  GET  /v1/fine_tuning/jobs/{id}          job; its status advances one stage per retrieve:
                                          validating_files -> queued -> running (x run_polls) -> succeeded
  GET  /v1/fine_tuning/jobs/{id}/events   metrics events {"type": "metrics", "data": {"step", "train_loss"}}
  POST /v1/chat/completions               the article's first sentence (for the base model's summaries)

Every request is recorded in `server.requests`; the uploaded JSONL rows are validated (chat format,
assistant answer "1"/"2") and kept. `hold = True` keeps jobs running (to test a restart), `fail_next`
makes the next job fail, and `rate_limit_next = k` answers the next k requests (to paths starting
with `rate_limit_path`) 429 with `Retry-After: <retry_after>`.

    with StandIn() as api:
        api.base_url   # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl, urlparse

from tests.loopback import JsonHandler, LoopbackServer

STAGES = ("validating_files", "queued", "running")


class StandIn(LoopbackServer):
    def __init__(self, run_polls: int = 2):
        self.run_polls = run_polls
        self.hold = False
        self.fail_next = False
        self.rate_limit_next = 0
        self.retry_after = "0"
        self.rate_limit_path = "/v1/"
        self.requests: list[dict[str, Any]] = []
        self.files: dict[str, dict[str, Any]] = {}
        self.file_rows: dict[str, list[dict]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self._polls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._serve(self._handler(), name="finetune-standin")

    # ---------------------------------------------------------------- lifecycle
    def count(self, method: str, path_prefix: str) -> int:
        return sum(1 for r in self.requests if r["method"] == method and r["path"].startswith(path_prefix))

    # ---------------------------------------------------------------- objects
    def _job_view(self, job: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in job.items() if not k.startswith("_")}

    def _advance(self, job: dict[str, Any]) -> None:
        jid = job["id"]
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return
        self._polls[jid] = self._polls.get(jid, 0) + 1
        n = self._polls[jid]
        if job["_fail"] and n >= 2:
            job.update(status="failed", finished_at=int(time.time()),
                       error={"code": "invalid_training_file", "message": "stand-in failure", "param": None})
        elif self.hold or n < len(STAGES) + self.run_polls:
            job["status"] = STAGES[min(n, len(STAGES) - 1)]
        else:
            suffix = job.get("_suffix") or "ft"
            job.update(status="succeeded", finished_at=int(time.time()), trained_tokens=1234,
                       fine_tuned_model=f"ft:{job['model']}:standin:{suffix}:{jid[-8:]}")

    def _events(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        n = len(self.file_rows.get(job["training_file"], []))
        events = [{"object": "fine_tuning.job.event", "id": f"ftevent-{job['id'][-6:]}-{s}",
                   "created_at": job["created_at"],
                   "level": "info", "message": f"Step {s}/{n}: training loss={0.7 / s:.4f}", "type": "metrics",
                   "data": {"step": s, "train_loss": round(0.7 / s, 4), "total_steps": n}} for s in range(1, n + 1)]
        events.append({"object": "fine_tuning.job.event", "id": f"ftevent-{job['id'][-6:]}-0",
                       "created_at": job["created_at"], "level": "info", "message": "Created fine-tuning job",
                       "type": "message", "data": {}})
        return list(reversed(events))  # newest first, as the API lists them

    # ---------------------------------------------------------------- HTTP
    def _handler(self):
        standin = self

        class Handler(JsonHandler):
            def _rate_limited(self) -> bool:
                """Answer 429 (and drain the request body) while `rate_limit_next` lasts."""
                with standin._lock:
                    if standin.rate_limit_next <= 0 or not urlparse(self.path).path.startswith(
                            standin.rate_limit_path):
                        return False
                    standin.rate_limit_next -= 1
                    standin.requests.append({"method": self.command, "path": urlparse(self.path).path,
                                             "rate_limited": True})
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(429, {"error": {"message": "Rate limit reached (stand-in)", "type": "requests",
                                           "code": "rate_limit_exceeded", "param": None}},
                           headers={"Retry-After": standin.retry_after})
                return True

            def _record(self, body: Any) -> dict[str, Any]:
                url = urlparse(self.path)
                rec = {"method": self.command, "path": url.path, "query": dict(parse_qsl(url.query)), "body": body,
                       "authorization": self.headers.get("Authorization"),
                       "content_type": self.headers.get("Content-Type")}
                with standin._lock:
                    standin.requests.append(rec)
                return rec

            def do_GET(self):  # noqa: N802
                if self._rate_limited():
                    return
                rec = self._record(None)
                parts = rec["path"].strip("/").split("/")
                with standin._lock:
                    if parts[:2] == ["v1", "files"] and len(parts) == 3:
                        f = standin.files.get(parts[2])
                        return self._send(200, f) if f else self._error(404, "No such file")
                    if parts[:3] == ["v1", "fine_tuning", "jobs"]:
                        if len(parts) == 3:
                            meta = {k[len("metadata["):-1]: v for k, v in rec["query"].items()
                                    if k.startswith("metadata[")}
                            jobs = [standin._job_view(j) for j in standin.jobs.values()
                                    if all((j.get("metadata") or {}).get(k) == v for k, v in meta.items())]
                            return self._send(200, {"object": "list", "data": list(reversed(jobs)), "has_more": False})
                        job = standin.jobs.get(parts[3])
                        if job is None:
                            return self._error(404, f"No such job {parts[3]}")
                        if len(parts) == 4:
                            standin._advance(job)
                            return self._send(200, standin._job_view(job))
                        if len(parts) == 5 and parts[4] == "events":
                            return self._send(200, {"object": "list", "data": standin._events(job), "has_more": False})
                self._error(404, f"stand-in has no GET {rec['path']}")

            def do_POST(self):  # noqa: N802
                if self._rate_limited():
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                ctype = self.headers.get("Content-Type", "")
                path = urlparse(self.path).path
                if path == "/v1/files":
                    if not ctype.startswith("multipart/form-data"):
                        self._record(None)
                        return self._error(400, "files.create must be multipart/form-data")
                    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                        f"Content-Type: {ctype}\r\n\r\n".encode() + raw)
                    fields: dict[str, Any] = {}
                    for part in msg.iter_parts():
                        name = part.get_param("name", header="content-disposition")
                        fields[name] = (part.get_filename(), part.get_payload(decode=True))
                    self._record({"purpose": fields.get("purpose", (None, b""))[1].decode(),
                                  "filename": fields.get("file", (None, None))[0]})
                    if fields.get("purpose", (None, b""))[1] != b"fine-tune":
                        return self._error(400, "purpose must be fine-tune")
                    name, content = fields["file"]
                    try:
                        rows = [json.loads(line) for line in content.decode().splitlines() if line.strip()]
                    except json.JSONDecodeError as exc:
                        return self._error(400, f"invalid JSONL: {exc}")
                    for row in rows:
                        msgs = row.get("messages")
                        if (not isinstance(msgs, list) or [m["role"] for m in msgs] != ["system", "user", "assistant"]
                                or msgs[-1]["content"] not in ("1", "2")):
                            return self._error(400, f"bad training row: {str(row)[:200]}")
                    fid = f"file-{uuid.uuid4().hex[:24]}"
                    with standin._lock:
                        standin.file_rows[fid] = rows
                        standin.files[fid] = {"id": fid, "object": "file", "bytes": len(content),
                                              "created_at": int(time.time()), "filename": name,
                                              "purpose": "fine-tune", "status": "processed", "status_details": None}
                        return self._send(200, standin.files[fid])
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = None
                self._record(body)
                if path == "/v1/fine_tuning/jobs":
                    if not isinstance(body, dict) or not body.get("model") or not body.get("training_file"):
                        return self._error(400, "model and training_file are required")
                    with standin._lock:
                        if body["training_file"] not in standin.files:
                            return self._error(400, f"invalid training_file: {body['training_file']}")
                        jid = f"ftjob-{uuid.uuid4().hex[:24]}"
                        method = body.get("method") or {"type": "supervised", "supervised": {"hyperparameters": {
                            "n_epochs": "auto", "batch_size": "auto", "learning_rate_multiplier": "auto"}}}
                        job = {"id": jid, "object": "fine_tuning.job", "model": body["model"],
                               "created_at": int(time.time()), "finished_at": None, "fine_tuned_model": None,
                               "organization_id": "org-standin", "result_files": [], "status": "validating_files",
                               "validation_file": None, "training_file": body["training_file"],
                               "hyperparameters": method.get("supervised", {}).get("hyperparameters", {}),
                               "method": method, "trained_tokens": None, "error": None, "seed": body.get("seed"),
                               "metadata": body.get("metadata"), "estimated_finish": None, "integrations": [],
                               "_fail": standin.fail_next, "_suffix": body.get("suffix")}
                        standin.fail_next = False
                        standin.jobs[jid] = job
                        return self._send(200, standin._job_view(job))
                if path == "/v1/chat/completions":
                    text = body["messages"][-1]["content"]
                    article = text.split("Article:\n", 1)[-1].split("\n\n", 1)[0]
                    first = article.replace("\n", " ").split(". ")[0].strip()
                    return self._send(200, {
                        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                        "created": int(time.time()), "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                     "message": {"role": "assistant", "content": f"Stand-in: {first}"}}],
                        "usage": {"prompt_tokens": len(text.split()), "completion_tokens": len(first.split()),
                                  "total_tokens": len(text.split()) + len(first.split())}})
                self._error(404, f"stand-in has no POST {path}")

        return Handler
