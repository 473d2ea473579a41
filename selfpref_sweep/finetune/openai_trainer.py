"""OpenAI trainer: fine-tuning jobs for API evaluators (the paper fine-tuned gpt-3.5-turbo-1106 this way).

Flow, with every id persisted in `openai_job.json` inside the fine-tune's cache entry (keyed like a
local adapter) the moment the API returns it:

  1. write the examples as chat-format JSONL (system, user, assistant = the answer);
  2. upload it (`files.create(purpose="fine-tune")`), wait until the file is processed;
  3. create the job (`fine_tuning.jobs.create`, seeded, metadata `selfpref_spec` = the entry's hash);
  4. poll `fine_tuning.jobs.retrieve` until it succeeds, fails or is cancelled;
  5. read the training-loss curve from the job's metrics events; cache the fine-tuned model id.

A restarted sweep resumes: with a job id on file it only polls; with a file id but no job id (killed
between the two calls) it first looks for a job carrying the entry's metadata before creating one, so
a sweep never pays for a second job. Waiting longer than `finetune_task.openai.wait_timeout_s` raises
`FinetunePending` (the job keeps running; re-run to resume). A failed or cancelled job is reported with
the API's error and not retried automatically (delete the state file to start a new job).

Hyperparameters left null are omitted, so the API's defaults apply (as in the paper, which recorded none).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..config import AdapterConfig, ModelConfig
from ..config.spec import FinetuneSpec
from ..errors import ConfigError, ModelUnavailableError, SelfprefError
from ..records.atomic import atomic_write_json, atomic_write_text
from .examples import ExampleSet
from .trainer import Trainer

log = logging.getLogger(__name__)

STATE = "openai_job.json"
TRAINING_FILE = "training.jsonl"
T = TypeVar("T")


class FinetunePending(SelfprefError):
    """The fine-tuning job has not finished within the wait; a re-run resumes polling it."""


class FinetuneFailed(SelfprefError):
    pass


def training_jsonl(examples: ExampleSet, seed: int) -> str:
    """One `{"messages": [...]}` row per example (shuffled with the seed), as the API's chat format wants."""
    rows = [json.dumps({"messages": ex.chat()}, ensure_ascii=False) for ex in examples.shuffled(seed)]
    return "\n".join(rows) + "\n"


def _get(obj: Any, name: str, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


class OpenAITrainer(Trainer):
    """Fine-tunes an OpenAI-backend evaluator through the fine-tuning API (or a compatible stand-in)."""

    kind = "openai"
    persistent_workdir = True  # the job state must survive restarts

    def __init__(self, base: ModelConfig, finetune: FinetuneSpec, model_cache: str, show_progress: bool = True,
                 client=None, sleep: Callable[[float], None] = None):
        super().__init__(base, finetune, model_cache, show_progress)
        self.o = finetune.settings.openai
        self._client = client
        self._sleep = sleep or time.sleep
        self.api_calls = 0

    # ------------------------------------------------------------------ config
    @property
    def base_model(self) -> str:
        if not self.base.model:
            raise ConfigError(f"Evaluator {self.base.name!r} (backend openai) has no `model` to fine-tune.")
        return str(self.base.model)

    def hyperparameters(self) -> dict[str, Any]:
        hp = {k: getattr(self.o, k) for k in ("n_epochs", "batch_size", "learning_rate_multiplier")}
        return {"method": "openai_supervised", "base_model": self.base_model,
                **{k: v for k, v in hp.items() if v is not None}}

    def steps(self, n_examples: int) -> int | None:
        return None  # decided by the API

    @property
    def client(self):
        if self._client is None:
            import openai

            from ..models.openai.openai_api import DEFAULT_BASE_URL, NO_KEY, is_loopback

            base_url = str(self.base.base_url or DEFAULT_BASE_URL).rstrip("/")
            env = str(self.base.api_key_env or "OPENAI_API_KEY")
            key = os.environ.get(env, "").strip()
            if not key:
                if not is_loopback(base_url):
                    raise ModelUnavailableError(
                        f"Fine-tuning {self.base.name!r} calls {base_url} but the environment variable "
                        f"{env} (its API key) is not set.")
                key = NO_KEY
            self._client = openai.OpenAI(api_key=key, base_url=base_url,
                                         timeout=float(self.base.timeout_s or 60.0), max_retries=0)
        return self._client

    # ------------------------------------------------------------------ state
    def state(self, workdir: Path) -> dict[str, Any]:
        path = Path(workdir) / STATE
        if not path.is_file():
            return {}
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            log.warning("unreadable %s; ignoring it", path)
            return {}

    def _save(self, workdir: Path, state: dict[str, Any]) -> None:
        state["updated_at"] = time.time()
        atomic_write_json(Path(workdir) / STATE, state)

    def status(self, entry) -> str:
        if entry.record() is not None:
            return "ready"
        st = self.state(entry.dir)
        if st.get("job_id"):
            return f"job {st['job_id']} {st.get('status', 'created')} (a run resumes polling it)"
        if st.get("file_id"):
            return f"training file {st['file_id']} uploaded, no job yet"
        return "absent"

    # ------------------------------------------------------------------ calls
    def _call(self, fn: Callable[[], T], what: str) -> T:
        """fn() under the backend's retry policy (models/retry.py): transient errors are retried,
        honouring Retry-After; others, and a fault that outlasts the retries, raise at once."""
        from ..models.retry import is_transient, retrying

        def attempt() -> T:
            self.api_calls += 1
            return fn()

        policy = retrying(self.base.max_retries, self.base.retry_backoff_s, retry_on=is_transient, sleep=self._sleep,
                          before_sleep=lambda state: log.warning(
                              "OpenAI fine-tuning: %s failed (%s); retry %d", what,
                              type(state.outcome.exception()).__name__, state.attempt_number))
        failure: str | None = None
        try:
            return policy(attempt)
        except Exception as exc:  # noqa: BLE001 - reported below, outside the except block
            failure = f"OpenAI fine-tuning: {what} failed: {type(exc).__name__}: {getattr(exc, 'message', None) or exc}"
        # Raised outside `except`, so it does not carry the openai error (and its request headers) as context.
        raise ModelUnavailableError(failure)

    def _upload(self, workdir: Path, text: str) -> str:
        f = self._call(lambda: self.client.files.create(
            file=(TRAINING_FILE, text.encode("utf-8"), "application/jsonl"), purpose="fine-tune"), "file upload")
        file_id = _get(f, "id")
        deadline = time.time() + 300
        while _get(f, "status") not in (None, "processed") and time.time() < deadline:
            if _get(f, "status") == "error":
                raise FinetuneFailed(f"OpenAI rejected the training file {file_id}: {_get(f, 'status_details')}")
            self._sleep(min(5.0, float(self.o.poll_interval_s)))
            f = self._call(lambda: self.client.files.retrieve(file_id), "file status")
        return str(file_id)

    def _find_job(self, digest: str, file_id: str | None) -> Any | None:
        """A job this entry already created (killed before its id was saved), found by metadata or file."""
        page = self._call(lambda: self.client.fine_tuning.jobs.list(limit=100, metadata={"selfpref_spec": digest[:64]}),
                          "job list")
        for job in _get(page, "data", None) or []:
            meta = _get(job, "metadata") or {}
            if ((_get(meta, "selfpref_spec") == digest[:64] or (file_id and _get(job, "training_file") == file_id))
                    and _get(job, "status") not in ("failed", "cancelled")):
                return job
        return None

    def _create(self, file_id: str, digest: str) -> Any:
        # suffix: at most 18 characters (the API's historical limit), readable in the model id.
        suffix = self.finetune.task.value[:9] + f"-{digest[:8]}"
        kwargs: dict[str, Any] = dict(model=self.base_model, training_file=file_id,
                                      seed=int(self.finetune.settings.seed), suffix=suffix,
                                      metadata={"selfpref_spec": digest[:64]})
        hp = {k: v for k, v in self.hyperparameters().items() if k not in ("method", "base_model")}
        if hp:
            kwargs["method"] = {"type": "supervised", "supervised": {"hyperparameters": hp}}
        return self._call(lambda: self.client.fine_tuning.jobs.create(**kwargs), "job creation")

    def loss_curve(self, job_id: str) -> list[float]:
        """The training loss per step, from the job's metrics events (oldest first)."""
        try:
            events = self._call(lambda: self.client.fine_tuning.jobs.list_events(job_id, limit=1000), "job events")
        except ModelUnavailableError as exc:
            log.warning("no loss curve for %s: %s", job_id, exc)
            return []
        points = {}
        for ev in events:  # the page iterates over every page
            data = _get(ev, "data") or {}
            step, loss = _get(data, "step"), _get(data, "train_loss")
            if step is not None and loss is not None:
                points[int(step)] = round(float(loss), 6)
        return [points[s] for s in sorted(points)]

    # ------------------------------------------------------------------ train
    def train(self, examples: ExampleSet, workdir: Path, digest: str = "") -> dict[str, Any]:
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        state = self.state(workdir)
        start = time.time()
        seed = int(self.finetune.settings.seed)
        text = training_jsonl(examples, seed)
        if state.get("examples_sha256") and state["examples_sha256"] != examples.fingerprint():
            log.warning("the training examples changed since job %s was created; resuming that job anyway",
                        state.get("job_id") or state.get("file_id"))
        if state.get("status") in ("failed", "cancelled"):
            raise FinetuneFailed(f"OpenAI fine-tuning job {state.get('job_id')} {state['status']}: "
                                 f"{state.get('error')}. Delete {workdir / STATE} to start a new job.")
        if not state:
            state = {"spec_sha256": digest, "base_model": self.base_model, "examples_sha256": examples.fingerprint(),
                     "n_examples": len(examples.examples), "created_at": time.time()}
            self._save(workdir, state)
        if not state.get("job_id"):
            atomic_write_text(workdir / TRAINING_FILE, text)
            found = self._find_job(digest, state.get("file_id")) if state.get("file_id") else None
            if found is not None:
                log.info("resuming fine-tuning job %s found by its metadata", _get(found, "id"))
                state["job_id"] = str(_get(found, "id"))
            else:
                if not state.get("file_id"):
                    state["file_id"] = self._upload(workdir, text)
                    self._save(workdir, state)
                job = self._create(state["file_id"], digest)
                state["job_id"] = str(_get(job, "id"))
            state["status"] = "created"
            self._save(workdir, state)
            print(f"[selfpref_sweep] OpenAI fine-tuning job {state['job_id']} ({len(examples.examples)} examples, "
                  f"base {self.base_model}); its id is saved in {workdir / STATE}")
        job = self._poll(workdir, state, start)
        curve = self.loss_curve(state["job_id"])
        created, finished = _get(job, "created_at"), _get(job, "finished_at")
        return {
            "trainer": self.kind,
            "model_id": state["fine_tuned_model"],
            "job_id": state["job_id"],
            "file_id": state.get("file_id"),
            "loss_curve": curve,
            "n_steps": len(curve) or None,
            "seconds": round(float(finished) - float(created), 1) if created and finished else
            round(time.time() - start, 1),
            "wait_seconds": round(time.time() - start, 1),
            "trained_tokens": _get(job, "trained_tokens"),
            "api_hyperparameters": _jsonable(_get(job, "hyperparameters")),
            "api_calls": self.api_calls,
        }

    def _poll(self, workdir: Path, state: dict[str, Any], start: float):
        deadline = start + float(self.o.wait_timeout_s)
        job_id = state["job_id"]
        while True:
            job = self._call(lambda: self.client.fine_tuning.jobs.retrieve(job_id), "job status")
            status = str(_get(job, "status"))
            if status != state.get("status"):
                state["status"] = status
                self._save(workdir, state)
                log.info("fine-tuning job %s: %s", job_id, status)
            if status == "succeeded":
                state["fine_tuned_model"] = str(_get(job, "fine_tuned_model"))
                self._save(workdir, state)
                return job
            if status in ("failed", "cancelled"):
                err = _get(job, "error")
                state["error"] = _jsonable(err)
                self._save(workdir, state)
                raise FinetuneFailed(f"OpenAI fine-tuning job {job_id} {status}: {_get(err, 'message', err)}. "
                                     f"Delete {workdir / STATE} to start a new job.")
            if time.time() >= deadline:
                raise FinetunePending(f"OpenAI fine-tuning job {job_id} is still {status} after "
                                      f"{self.o.wait_timeout_s:.0f}s; it keeps running. Re-run the same command to "
                                      f"resume polling it (the job id is saved in {workdir / STATE}).")
            self._sleep(float(self.o.poll_interval_s))

    def tuned_model(self, entry, record: dict[str, Any]) -> ModelConfig:
        """The API's fine-tuned model id, plus the adapter fingerprint so that the identity names the
        fine-tune even if two fine-tunes returned one id (the paper's random and always-1 controls did)."""
        return dataclasses.replace(self.base, model=record["model_id"],
                                   adapter=AdapterConfig(fingerprint=entry.fingerprint(self.kind)))


def _jsonable(obj: Any) -> Any:
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    return str(obj)
