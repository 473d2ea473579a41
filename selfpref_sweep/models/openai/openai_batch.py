"""The OpenAI Batch API for the OpenAI backend (`batch: true` on an API model's config): half the price of
direct calls, results within 24 hours.

`OpenAIModel.generate` / `.answer_distributions` hand their requests (a cell's cache misses) to `run_batch`,
which:

1. writes one JSONL line per request: `custom_id` = the request's cache key, `body` = exactly the JSON the
   direct path sends (`_judge_kwargs`, or the generation settings), and uploads it (`files.create`,
   purpose "batch"), at most `batch_max_requests` lines (and under 190 MB) per batch;
2. creates the batch (`batches.create`, endpoint /v1/chat/completions, window 24h, metadata
   `selfpref_batch` = the batch's digest);
3. polls every batch until it ends (`batch_poll_s`, doubling up to `batch_poll_max_s`; after
   `batch_wait_timeout_s` it raises BatchPending: the batch goes on and a re-run resumes it);
4. downloads the output and error files and parses each line by its `custom_id` with the direct path's own
   code (`_first_token_top_logprobs`, `distribution_from_top_logprobs`, `_usage`), so a batch result equals
   what a direct call would have given. It yields (request, result) pairs, as the direct path does, and
   CachedModel stores each one.

Resume. Each batch is recorded in a small JSON file, `<digest>.json`, in the state directory (`batch_dir`, or
beside the call store: `<store>.batches/`). The digest is a hash of the model identity (base URL, model,
adapter, backend version; never the key), the request kind and the sorted custom ids. The record holds the
input file id, the batch id, its status and the custom ids. Before anything is submitted, every recorded
batch of the same model and kind that has not been served yet and holds some of the requests is resumed
(polled, or only downloaded again when it has ended); only the requests no recorded batch holds go into a
new batch. So a killed sweep, re-run, polls the same batch instead of paying for a second one, and a
re-run killed while it was storing results downloads the output again (free) instead of asking anew.
The record is written after the upload, and `create_attempted` just before `batches.create`: a run killed
(or a create that timed out) between the create and saving its id looks the batch up by its metadata
before it creates one. A file lock on the state directory makes two processes that miss the same requests
(parallel cells) share one batch.

Failures. A line that did not give a result (an entry of the error file, a response other than 200, a
judge response without logprobs, a line missing from both files, the unfinished lines of an expired or
cancelled batch) is asked once more as a direct call, at the regular price, through the direct path with
its retry policy: whatever that call gives is what the cell records (a judge call still without logprobs
is a counted `no_logprobs` outcome, a permanent error stops the cell with ModelUnavailableError, exactly as
without batching). The failed lines are logged with their reasons and counted in the batch's record
(`failed_lines`). A batch that fails validation (status "failed": nothing is run or charged) stops the cell
with the API's errors; its record is kept as failed, and a re-run submits a new batch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from filelock import FileLock

from ...errors import ConfigError, ModelUnavailableError
from ...records.atomic import atomic_write_json
from ..base import AnswerDistribution, AnswerRequest, GenerateRequest, unique
from ..cached import CALL_STORE
from .openai_wire import (
    _cfg_value,
    _first_token_top_logprobs,
    _messages,
    _usage,
    distribution_from_top_logprobs,
    generation_from,
)

log = logging.getLogger(__name__)

ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
METADATA_KEY = "selfpref_batch"
STATE_VERSION = 1
MAX_FILE_BYTES = 190 * 1024 * 1024  # OpenAI takes input files up to 200 MB
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
DEFAULT_DIR = "~/.cache/selfpref_sweep/openai_batches"
KINDS = ("generate", "answer_distribution")


class BatchPending(ModelUnavailableError):
    """A batch has not ended within batch_wait_timeout_s; it goes on, and a re-run resumes polling it."""


# ------------------------------------------------------------------------------------------ settings
def _setting(model, key: str, default, cast):
    try:
        return cast(_cfg_value(model.cfg, key, default))
    except (TypeError, ValueError):
        raise ConfigError(f"Model {model.name!r}: {key} must be a number, not "
                          f"{getattr(model.cfg, key, None)!r}") from None


def state_dir(model) -> Path:
    """Where the model's batches are recorded: batch_dir, else beside the call store being served, else
    ~/.cache/selfpref_sweep/openai_batches (a backend used without a call store)."""
    configured = _cfg_value(model.cfg, "batch_dir", None)
    if configured:
        return Path(str(configured)).expanduser()
    store = CALL_STORE.get()
    if store is not None:
        return store.path.with_name(store.path.name + ".batches")
    return Path(DEFAULT_DIR).expanduser()


def identity_hash(identity) -> str:
    return hashlib.sha256(json.dumps(asdict(identity), sort_keys=True).encode()).hexdigest()


def batch_digest(ident: str, kind: str, custom_ids: Sequence[str]) -> str:
    blob = json.dumps({"identity": ident, "kind": kind, "endpoint": ENDPOINT, "ids": sorted(custom_ids)})
    return hashlib.sha256(blob.encode()).hexdigest()


# -------------------------------------------------------------------------------- request bodies
def generate_body(model, req: GenerateRequest) -> dict[str, Any]:
    """The body OpenAIModel._generate_one sends for this request."""
    body: dict[str, Any] = dict(model=model.api_model, messages=_messages(req), temperature=req.decoding.temperature,
                                max_tokens=req.max_new_tokens)
    if req.stop:
        body["stop"] = list(req.stop)[:4]  # the API takes at most 4
    return body


def judge_body(model, req: AnswerRequest) -> dict[str, Any]:
    """The body OpenAIModel._judge_one sends for this request."""
    return dict(model=model.api_model, **model._judge_kwargs(req))


def request_line(model, kind: str, req) -> str:
    body = generate_body(model, req) if kind == "generate" else judge_body(model, req)
    return json.dumps({"custom_id": req.cache_key(), "method": "POST", "url": ENDPOINT, "body": body},
                      ensure_ascii=False)


# --------------------------------------------------------------------------------- parsing results
def parse_completion(body: Any):
    """A chat-completion JSON body as the client's own response object (the direct path's type)."""
    from openai._models import construct_type
    from openai.types.chat import ChatCompletion

    return construct_type(type_=ChatCompletion, value=body)




def distribution_from(model, req: AnswerRequest, resp) -> AnswerDistribution | None:
    """What OpenAIModel._judge_one makes of a response; None when it has no logprobs (asked again directly)."""
    top = _first_token_top_logprobs(resp)
    if top is None:
        return None
    model._logprobs_seen = True
    prompt_tokens, completion_tokens = _usage(resp)
    return distribution_from_top_logprobs(top, req.answers, prompt_tokens, completion_tokens)


def _line_result(model, kind: str, req, line: dict[str, Any]) -> tuple[object | None, str | None]:
    """(result, None) for a good line, (None, reason) for a failed one."""
    error = line.get("error")
    response = line.get("response")
    if error:
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else str(error)
        return None, f"{code or 'error'}: {message}"
    if not isinstance(response, dict):
        return None, "no response"
    status = response.get("status_code")
    body = response.get("body")
    if status != 200:
        inner = body.get("error") if isinstance(body, dict) else None
        message = inner.get("message") if isinstance(inner, dict) else str(body)[:200]
        return None, f"HTTP {status}: {message}"
    try:
        resp = parse_completion(body)
        result = (generation_from(model.identity.label, req, resp) if kind == "generate"
                  else distribution_from(model, req, resp))
    except (AttributeError, TypeError, ValueError, IndexError, KeyError) as exc:
        return None, f"unreadable response ({type(exc).__name__})"
    if result is None:
        return None, "no_logprobs"
    return result, None


# ------------------------------------------------------------------------------------------ records
def _read_state(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        log.warning("unreadable batch record %s; ignoring it", path)
        return None
    return state if isinstance(state, dict) and state.get("version") == STATE_VERSION else None


def _save_state(directory: Path, state: dict[str, Any]) -> None:
    state["updated_at"] = time.time()
    atomic_write_json(directory / f"{state['digest']}.json", state)


def recorded_batches(directory: Path) -> list[dict[str, Any]]:
    """Every readable batch record in a state directory, oldest first."""
    if not directory.is_dir():
        return []
    states = [s for s in (_read_state(p) for p in sorted(directory.glob("*.json"))) if s is not None]
    return sorted(states, key=lambda s: s.get("created_at", 0.0))


# -------------------------------------------------------------------------------------------- runner
class _Runner:
    def __init__(self, model, kind: str):
        if kind not in KINDS:
            raise ValueError(f"the Batch API serves {KINDS}, not {kind!r}")
        self.model = model
        self.kind = kind
        self.client = model._client
        self.stop = threading.Event()
        self.dir = state_dir(model)
        self.ident = identity_hash(model.identity)
        self.poll_s = max(1e-3, _setting(model, "batch_poll_s", 10.0, float))
        self.poll_max_s = max(self.poll_s, _setting(model, "batch_poll_max_s", 300.0, float))
        self.wait_timeout_s = _setting(model, "batch_wait_timeout_s", 26 * 3600.0, float)
        self.max_requests = max(1, min(50000, _setting(model, "batch_max_requests", 50000, int)))

    def _call(self, fn, what: str):
        return self.model._with_retry(fn, self.stop, what)

    # ------------------------------------------------------------------ submit
    def plan(self, requests: list) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(record, {custom_id: request}) of every batch that serves these requests: recorded ones first,
        then new ones for the rest (created here)."""
        by_id = {req.cache_key(): req for req in requests}
        remaining = set(by_id)
        work: list[tuple[dict[str, Any], dict[str, Any]]] = []
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"Model {self.model.name!r}: cannot create the batch record directory "
                              f"{self.dir} ({exc}); set batch_dir to a writable folder.") from None
        with FileLock(str(self.dir / ".lock"), timeout=600):
            for state in recorded_batches(self.dir):
                if (state.get("identity") != self.ident or state.get("kind") != self.kind or state.get("served")
                        or state.get("status") == "failed"):
                    continue
                mine = remaining.intersection(state.get("custom_ids") or [])
                if not mine:
                    continue
                remaining -= mine
                if not state.get("batch_id"):
                    self._create(state)
                log.info("%s: resuming batch %s (%s) for %d of its %d requests (record %s)",
                         self.model.identity.label, state["batch_id"], state.get("status"), len(mine),
                         len(state["custom_ids"]), self.dir / f"{state['digest']}.json")
                work.append((state, {cid: by_id[cid] for cid in mine}))
            ordered = [cid for cid in by_id if cid in remaining]  # the callers' order
            for chunk in self._chunks([by_id[cid] for cid in ordered]):
                state = self._submit(chunk)
                work.append((state, {req.cache_key(): req for req, _ in chunk}))
        return work

    def _chunks(self, requests: list) -> Iterator[list[tuple[Any, str]]]:
        chunk: list[tuple[Any, str]] = []
        size = 0
        for req in requests:
            line = request_line(self.model, self.kind, req)
            n = len(line.encode("utf-8")) + 1
            if chunk and (len(chunk) >= self.max_requests or size + n > MAX_FILE_BYTES):
                yield chunk
                chunk, size = [], 0
            chunk.append((req, line))
            size += n
        if chunk:
            yield chunk

    def _submit(self, chunk: list[tuple[Any, str]]) -> dict[str, Any]:
        ids = [req.cache_key() for req, _ in chunk]
        digest = batch_digest(self.ident, self.kind, ids)
        state = _read_state(self.dir / f"{digest}.json")
        if state is None or state.get("served") or state.get("status") == "failed":
            state = {"version": STATE_VERSION, "digest": digest, "identity": self.ident,
                     "model": self.model.identity.label, "kind": self.kind, "endpoint": ENDPOINT,
                     "custom_ids": sorted(ids), "created_at": time.time(), "input_file_id": None,
                     "batch_id": None, "status": None, "create_attempted": False, "served": False}
        if not state.get("input_file_id"):
            data = ("\n".join(line for _, line in chunk) + "\n").encode("utf-8")
            uploaded = self._call(lambda: self.client.files.create(
                file=(f"selfpref-{digest[:16]}.jsonl", data, "application/jsonl"), purpose="batch"),
                "uploading a batch input file")
            state["input_file_id"] = uploaded.id
            _save_state(self.dir, state)
        if not state.get("batch_id"):
            self._create(state)
        log.info("%s: batch %s created for %d requests (record %s)", self.model.identity.label,
                 state["batch_id"], len(ids), self.dir / f"{digest}.json")
        return state

    def _find(self, digest: str):
        """A batch this record created, found by its metadata (the run was killed before it saved the id)."""
        page = self._call(lambda: self.client.batches.list(limit=100), "listing batches")
        for batch in getattr(page, "data", None) or []:
            if (getattr(batch, "metadata", None) or {}).get(METADATA_KEY) == digest:
                return batch
        return None

    def _create(self, state: dict[str, Any]) -> None:
        def create():
            if state.get("create_attempted"):
                found = self._find(state["digest"])
                if found is not None:
                    log.info("%s: found batch %s by its metadata", self.model.identity.label, found.id)
                    return found
            state["create_attempted"] = True
            _save_state(self.dir, state)
            return self.client.batches.create(input_file_id=state["input_file_id"], endpoint=ENDPOINT,
                                              completion_window=COMPLETION_WINDOW,
                                              metadata={METADATA_KEY: state["digest"]})

        batch = self._call(create, "creating a batch")
        state["batch_id"] = batch.id
        state["status"] = batch.status
        _save_state(self.dir, state)

    # ------------------------------------------------------------------ wait and read
    def _lines(self, file_id: str | None, what: str) -> list[dict[str, Any]]:
        if not file_id:
            return []
        text = self._call(lambda: self.client.files.content(file_id).text, f"downloading a batch {what} file")
        lines = []
        for raw in text.splitlines():
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                log.warning("%s: an unreadable line in batch %s file %s; its request is asked again",
                            self.model.identity.label, what, file_id)
                continue
            if isinstance(line, dict):
                lines.append(line)
        return lines

    def harvest(self, state: dict[str, Any], batch, mine: dict[str, Any], failed: dict[Any, str]
                ) -> Iterator[tuple[Any, object]]:
        """The results of an ended batch for the requests it serves here; the rest go into `failed`."""
        if batch.status == "failed":
            errors = getattr(getattr(batch, "errors", None), "data", None) or []
            detail = "; ".join(f"line {getattr(e, 'line', '?')}: {getattr(e, 'code', '')} {getattr(e, 'message', '')}"
                               for e in errors[:5]) or "no details given"
            raise ModelUnavailableError(self.model._scrub(
                f"{self.model.identity.label}: batch {batch.id} failed validation ({detail}). Nothing in it ran "
                f"or was charged; a re-run submits a new batch. Set batch=false to call the API directly."))
        done = set()
        reasons: Counter = Counter()
        for line in self._lines(batch.output_file_id, "output") + self._lines(batch.error_file_id, "error"):
            cid = line.get("custom_id")
            req = mine.get(cid)
            if req is None or cid in done:
                continue
            result, reason = _line_result(self.model, self.kind, req, line)
            done.add(cid)
            if result is None:
                failed[req] = self.model._scrub(reason)
                reasons[reason.split(":")[0]] += 1
            else:
                yield req, result
        for cid, req in mine.items():
            if cid not in done:
                failed[req] = f"missing from batch {batch.id} ({batch.status})"
                reasons["missing"] += 1
        if reasons:
            state["failed_lines"] = dict(reasons)
            log.warning("%s: %d of %d lines of batch %s (%s) gave no result (%s); they are asked again directly "
                        "at the regular price", self.model.identity.label, sum(reasons.values()), len(mine),
                        batch.id, batch.status, ", ".join(f"{k}: {v}" for k, v in reasons.most_common()))
        _save_state(self.dir, state)

    def run(self, requests: Sequence) -> Iterator[tuple[Any, object]]:
        requests = unique(requests)
        if not requests:
            return
        work = self.plan(requests)
        failed: dict[Any, str] = {}
        pending = {state["batch_id"]: (state, mine) for state, mine in work}
        delay = self.poll_s
        deadline = time.monotonic() + self.wait_timeout_s
        while pending:
            for batch_id in list(pending):
                state, mine = pending[batch_id]
                batch = self._call(lambda batch_id=batch_id: self.client.batches.retrieve(batch_id), "polling a batch")
                if batch.status != state.get("status"):
                    state["status"] = batch.status
                    _save_state(self.dir, state)
                if batch.status in ENDED:
                    del pending[batch_id]
                    yield from self.harvest(state, batch, mine, failed)
            if not pending:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                ids = ", ".join(f"{b} ({s.get('status')})" for b, (s, _) in pending.items())
                raise BatchPending(
                    f"{self.model.identity.label}: batch {ids} has not ended after {self.wait_timeout_s:.0f} s "
                    f"(batch_wait_timeout_s). It goes on at the API; every result finished before this is cached, "
                    f"and a re-run resumes polling it (its id is recorded in {self.dir}).")
            time.sleep(min(delay, left))
            delay = min(delay * 2, self.poll_max_s)
        if failed:
            again = list(failed)
            direct = (self.model.generate(again, direct=True) if self.kind == "generate"
                      else self.model.answer_distributions(again, direct=True))
            yield from direct
        for state, _ in work:
            state["served"] = True
            _save_state(self.dir, state)


def run_batch(model, requests: Sequence, kind: str) -> Iterator[tuple[Any, object]]:
    """Serve the requests through the Batch API (see the module's docstring); yields (request, result)."""
    return _Runner(model, kind).run(requests)


def batch_status(directory: Path) -> list[dict[str, Any]]:
    """The batch records of a state directory without their id lists (for a look at what is in flight)."""
    return [{k: v for k, v in s.items() if k != "custom_ids"} | {"n_requests": len(s.get("custom_ids") or [])}
            for s in recorded_batches(Path(directory))]


__all__ = ["BatchPending", "batch_digest", "batch_status", "recorded_batches", "run_batch", "state_dir"]
