"""A tiny tree in the authors' layout (articles, summaries and judgement files, some xz-compressed), with the
defects of the real data planted where the importer must handle them, and the numbers each file should give."""

from __future__ import annotations

import json
import lzma
import random
from pathlib import Path

ARTICLES = {"xsum": [f"x{i}" for i in range(14)], "cnn": [f"c{i}" for i in range(14)]}
SOURCES = ("human", "claude", "gpt35", "gpt4", "llama")
FT_GPT = ("xsum_2_ft_gpt35", "xsum_10_ft_gpt35", "cnn_2_ft_gpt35")


def write(root: Path, rel: str, data, xz: bool = False) -> Path:
    path = root / (rel + (".xz" if xz else ""))
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data)
    if xz:
        with lzma.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _gpt_row(rng: random.Random, key: str, model: str, lean: float) -> dict:
    """A GPT pairwise row: top tokens and stored scores (the authors' top-2 reading)."""
    rec, pref = min(0.99, max(0.01, lean + rng.uniform(-0.2, 0.2))), min(0.99, max(0.01, lean + rng.uniform(-0.2, 0.2)))
    return {"key": key, "model": model, "forward_detection": "1", "backward_detection": rng.choice("12"),
            "forward_detection_probability": 0.9, "detection_score": rec,
            "forward_comparison": "1", "backward_comparison": rng.choice("12"),
            "forward_comparison_probability": 0.8, "backward_comparison_probability": 0.7, "self_preference": pref}


def _llama_row(rng: random.Random, key: str, model: str) -> dict:
    """A Llama pairwise row with raw outputs and the authors' swapped, unrenormalised stored scores."""
    out = {}
    for q in ("detection", "comparison"):
        for order in ("forward", "backward"):
            p1 = rng.uniform(0.1, 0.8)
            out[f"{order}_{q}_output"] = {"1": p1, "2": rng.uniform(0.05, 0.95 - p1)}
    raw_own = {q: 0.5 * (out[f"forward_{q}_output"]["1"] + out[f"backward_{q}_output"]["2"])
               for q in ("detection", "comparison")}
    return {"key": key, "model": model, **out, "detection_score": raw_own["comparison"],
            "self_preference": raw_own["detection"], "forward_detection": "1", "backward_detection": "1",
            "forward_comparison": "1", "backward_comparison": "1"}


def renormalised(row: dict, q: str) -> float:
    """The project's reading of a Llama row (what the importer must compute)."""
    f, b = row[f"forward_{q}_output"], row[f"backward_{q}_output"]
    return 0.5 * (f["1"] / (f["1"] + f["2"]) + b["2"] / (b["1"] + b["2"]))


def _pairwise(root: Path, rng: random.Random) -> dict:
    rows = {}
    for ds, ids in ARTICLES.items():
        for ev, lean in (("gpt35", 0.55), *((m, 0.55 + 0.05 * k) for k, m in enumerate(FT_GPT))):
            n = int(ev.split("_")[1]) if "_ft_" in ev else 0
            rows[(ds, ev)] = [_gpt_row(rng, a, s, lean) for a in ids[n:] for s in SOURCES if s != "gpt35"]
        rows[(ds, "llama")] = [_llama_row(rng, a, s) for a in ids for s in SOURCES if s != "llama"]
    # Defects: a dropped row (their code could not read an answer) and a non-answer token stored as 0.
    rows[("xsum", "gpt35")] = [r for r in rows[("xsum", "gpt35")] if not (r["key"] == "x3" and r["model"] == "human")]
    bad = next(r for r in rows[("xsum", "gpt35")] if r["key"] == "x0" and r["model"] == "claude")
    bad.update(forward_comparison="I", self_preference=0.0)
    for (ds, ev), data in rows.items():
        write(root, f"results/{ds}/{ev}_results.json", data, xz=ev == "llama")
    return rows


def _individual(root: Path, rng: random.Random) -> dict:
    rows = {}
    for ds, ids in ARTICLES.items():
        rec = [{"key": a, "model": "gpt35", "target_model": t, "recognition_score": rng.uniform(0.1, 0.9),
                "ground_truth": int(t == "gpt35")} for a in ids for t in SOURCES]
        score = [{"key": a, "model": "gpt35", "target_model": t,
                  "scores": {str(k): rng.uniform(0, 1) for k in range(1, 6)}} for a in ids for t in SOURCES]
        for r in score:
            s = r["scores"]
            r["score"] = sum(int(k) * v for k, v in s.items()) / sum(s.values())
        rows[(ds, "recognition")], rows[(ds, "score")] = rec, score
        write(root, f"individual_setting_results/recognition_results/{ds}/gpt35_results.json", rec)
        write(root, f"individual_setting_results/score_results/{ds}/gpt35_results.json", score)
    return rows


def _labels(root: Path, rng: random.Random) -> dict:
    rows = {}
    for label in ("correct", "wrong"):
        data = [{"key": a, "model": s, "forward_comparison": "1", "backward_comparison": "2",
                 "self_preference": rng.uniform(0.2, 0.9)} for a in ARTICLES["xsum"] for s in SOURCES if s != "gpt35"]
        rows[label] = data
        write(root, f"label_results/{label}_label_results/xsum/gpt35_results.json", data)
    return rows


def build(root: Path, seed: int = 0) -> dict:
    """The tree under ``root``; returns the rows written, by file."""
    rng = random.Random(seed)
    for ds, ids in ARTICLES.items():
        write(root, f"articles/{ds}_train_articles.json", {a: f"Article {a}." for a in ids})
        for s in SOURCES:
            words = {"human": 12, "claude": 20, "gpt35": 16, "gpt4": 18, "llama": 25}[s]
            write(root, f"summaries/{ds}/{ds}_train_{s}_responses.json",
                  {a: " ".join(["word"] * (words + i)) for i, a in enumerate(ids)})
    return {"pairwise": _pairwise(root, rng), "individual": _individual(root, rng), "label": _labels(root, rng)}
