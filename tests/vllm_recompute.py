"""In vLLM's virtualenv: a cell's stored judge and familiarity calls, made again by the in-process vLLM backend
in other batch compositions and orders, compared bit for bit with what the cell stored. tests/vllm_driver.py runs
`recompute` on the engine its cell ran on; standalone, on an engine of its own:

    python tests/vllm_recompute.py STORE MODEL_CACHE N OVERRIDE...

Prints one JSON object: per kind, how many results equal the stored ones in each composition.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from selfpref_sweep.config import register_configs
from selfpref_sweep.models.base import AnswerRequest, JudgeDecoding, Message, SequenceRequest
from selfpref_sweep.models.vllm.vllm_engine import VLLMModel

CONF = Path(__file__).resolve().parents[1] / "conf"


def stored_calls(store, identity, n=None):
    """The first n (None: all) judge and familiarity calls a cell stored, as requests for `identity`, each with
    its stored value. Also tests/test_vllm.py's, which runs them through the HF backend."""
    judge, texts = [], []
    with sqlite3.connect(store) as conn:
        for kind, request, value in conn.execute("SELECT kind, request, value FROM calls ORDER BY rowid"):
            request, value = json.loads(request), json.loads(value)
            messages = tuple(Message(**m) for m in request["messages"])
            if kind == "answer_distribution" and (n is None or len(judge) < n):
                decoding = JudgeDecoding(**{**request["decoding"], "answers": tuple(request["decoding"]["answers"])})
                judge.append((AnswerRequest(identity, messages, decoding), value))
            elif kind == "sequence_logprobs" and (n is None or len(texts) < n):
                texts.append((SequenceRequest(identity, request["continuation"], messages), value))
    return judge, texts


def compositions(run, calls) -> dict:
    """How many results equal the stored ones: all at once; in halves, the second half first."""
    requests = [r for r, _ in calls]
    half = len(requests) // 2
    whole = dict(run(requests))
    halves = {**dict(run(requests[half:])), **dict(run(requests[:half]))}
    return {"n": len(calls),
            "all_at_once": sum(whole[r] == v for r, v in calls),
            "halves_reversed": sum(halves[r] == v for r, v in calls)}


def recompute(model, store, n: int) -> dict:
    """The first n stored judge and familiarity calls, made again by `model` (a VLLMModel) in other batch
    compositions and orders: per kind, how many equal the stored ones. Also tests/vllm_driver.py's, which
    passes the backend its cell ran on."""
    judge, texts = stored_calls(store, model.identity, n)
    judge = [(r, v["probs"]) for r, v in judge]
    texts = [(r, v["total"]) for r, v in texts]
    return {
        "judge": compositions(lambda rs: ((r, d.probs) for r, d in model.answer_distributions(rs)), judge),
        "familiarity": compositions(lambda rs: ((r, s.total) for r, s in model.sequence_logprobs(rs)), texts),
    }


def main(store: str, model_cache: str, n: int, overrides) -> None:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["evaluator=qwen05", "evaluator.backend=vllm", *overrides])
    model = VLLMModel(cfg.evaluator, model_cache=model_cache, show_progress=False)
    result = recompute(model, store, n)
    model.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
