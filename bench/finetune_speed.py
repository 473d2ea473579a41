"""Fine-tuning speed on this machine (qwen05, LoRA r=8 on q/k/v/o, bf16 on CPU).

1. End to end: the wall time of the N=2 recognition fine-tune of qwen05 on paper_xsum through
   `prepare_finetuned_evaluator` (own summaries of the 2 training articles, example construction,
   model load, training, saving), into a fresh adapter cache and, unless --warm-store, a fresh call store
   (so the 2 own summaries are generated too). Target: <= 5 minutes.
2. Seconds per training step on one real training example: our step (loss on the answer token only,
   `logits_to_keep=1`) against a bare peft loop on the same batch (`model(input_ids, labels=labels)` with
   every label but the answer masked: the textbook way, which computes logits at every position).

    python bench/finetune_speed.py [--paper-data ../shared/paper-data] [--steps 3] [--warm-store]
    python bench/finetune_speed.py --skip-e2e --examples DIR/examples.jsonl   # the step comparison only

Prints one line per measurement and a final JSON line. CPU timings are noisy when other jobs share the
machine; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def compose_cfg(paper_data: str, store: str, cache_dir: str):
    from hydra import compose, initialize_config_dir

    from selfpref_sweep.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=[
            "evaluator=qwen05", "finetune_task=recognition", "finetune_task.n_articles=2",
            "finetune_dataset=paper_xsum", "dataset=paper_xsum", f"dataset.root={paper_data}",
            f"store.path={store}", f"finetune_task.cache_dir={cache_dir}", "wandb.mode=disabled",
            "show_progress=false"])


def end_to_end(cfg) -> dict:
    from selfpref_sweep.config.spec import resolve_cell
    from selfpref_sweep.finetune import prepare_finetuned_evaluator
    from selfpref_sweep.models import load_model
    from selfpref_sweep.store import Store

    store = Store(cfg.store.path)
    start = time.time()
    evaluator = load_model(cfg.evaluator, store, cfg.paths.model_cache, False)
    result = prepare_finetuned_evaluator(resolve_cell(cfg), evaluator)
    wall = time.time() - start
    r = result.record
    return {"wall_s": round(wall, 1), "examples_s": r["examples_seconds"], "load_s": r["load_seconds"],
            "train_s": r["seconds"], "n_examples": r["n_examples"], "n_steps": r["n_steps"],
            "s_per_step": r["s_per_step"], "tokens_per_step": r["tokens_per_step"], "loss_curve": r["loss_curve"],
            "peak_rss_gb": r["peak_rss_gb"], "train_dtype": r["train_dtype"], "entry": str(result.entry_dir),
            "own_summary_calls": evaluator.calls}


def step_comparison(cfg, examples_path: Path, steps: int) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model

    from selfpref_sweep.config.spec import resolve_cell
    from selfpref_sweep.finetune.examples import TrainingExample
    from selfpref_sweep.finetune.local_trainer import LoraTrainer, answer_loss, encode_examples, training_dtype
    from selfpref_sweep.models.base import Message

    row = json.loads(examples_path.read_text().splitlines()[0])
    ex = TrainingExample(row["article_id"], row["other"], row["own_position"],
                         tuple(Message(**m) for m in row["messages"]), row["answer"])
    spec = resolve_cell(cfg)
    trainer = LoraTrainer(spec.evaluator, spec.finetune, spec.model_cache, show_progress=False)
    local = trainer.load_model(training_dtype(spec.finetune.settings.dtype, spec.evaluator.dtype, torch))
    (ids, answer_id), = encode_examples(local, [ex])
    lora = cfg.finetune_task.lora
    torch.manual_seed(0)
    model = get_peft_model(local.model, LoraConfig(r=int(lora.r), lora_alpha=int(lora.alpha),
                                                   lora_dropout=float(lora.dropout),
                                                   target_modules=list(lora.target_modules), task_type="CAUSAL_LM"))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def ours():
        return answer_loss(torch, model, [(ids, answer_id)], 0)

    full = torch.tensor([ids + [answer_id]])
    labels = torch.full_like(full, -100)
    labels[0, -1] = answer_id

    def bare():  # the textbook causal-LM step: logits everywhere, loss where the label is not -100
        return model(input_ids=full, labels=labels).loss

    out = {"tokens": len(ids)}
    loops = (("ours", ours), ("bare_peft", bare))
    times = {name: [] for name, _ in loops}
    # The two loops alternate step by step, so a change in the machine's load hits both alike; the first
    # step of each warms up kernels and is not counted.
    for i in range(steps + 1):
        for name, fn in loops:
            t = time.time()
            loss = fn()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if i:
                times[name].append(time.time() - t)
    for name, _ in loops:
        out[f"{name}_s_per_step"] = round(statistics.median(times[name]), 2)
        out[f"{name}_min"] = round(min(times[name]), 2)
        out[f"{name}_all"] = [round(x, 2) for x in times[name]]
    out["speedup"] = round(out["bare_peft_s_per_step"] / out["ours_s_per_step"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper-data", default=str(REPO.parent / "shared" / "paper-data"))
    ap.add_argument("--steps", type=int, default=3, help="timed steps per loop (after one warm-up step)")
    ap.add_argument("--skip-e2e", action="store_true", help="only the per-step comparison (needs --examples)")
    ap.add_argument("--examples", help="examples.jsonl of an existing fine-tune (with --skip-e2e)")
    ap.add_argument("--warm-store", action="store_true",
                    help="use the project's call store (own summaries may be cached) instead of a fresh one")
    args = ap.parse_args()
    if not (Path(args.paper_data) / "articles" / "xsum_train_articles.json").exists():
        sys.exit(f"paper data not found at {args.paper_data} (--paper-data PATH)")
    tmp = Path(tempfile.mkdtemp(prefix="finetune-bench-"))
    store = str(REPO / "outputs" / "cache" / "calls.sqlite") if args.warm_store else str(tmp / "calls.sqlite")
    cfg = compose_cfg(args.paper_data, store, str(tmp / "finetunes"))
    report = {"load_average_start": os.getloadavg()[0]}
    if not args.skip_e2e:
        e2e = end_to_end(cfg)
        report["e2e"] = e2e
        print(f"e2e N=2 recognition fine-tune of qwen05 on paper_xsum: wall_s={e2e['wall_s']} "
              f"(own summaries + examples {e2e['examples_s']}s, load {e2e['load_s']}s, train {e2e['train_s']}s) "
              f"examples={e2e['n_examples']} steps={e2e['n_steps']} s_per_step={e2e['s_per_step']} "
              f"tokens_per_step={e2e['tokens_per_step']} peak_rss_gb={e2e['peak_rss_gb']} "
              f"target<=300s: {'PASS' if e2e['wall_s'] <= 300 else 'FAIL'}", flush=True)
        examples = Path(e2e["entry"]) / "examples.jsonl"
    else:
        found = [Path(args.examples)] if args.examples else sorted(
            Path(os.path.expanduser(str(cfg.paths.model_cache))).glob("finetunes/*/examples.jsonl"))
        if not found or not found[0].exists():
            sys.exit("no fine-tune examples to time: pass --examples PATH/examples.jsonl, or run without --skip-e2e")
        examples = found[0]
    steps = step_comparison(cfg, examples, args.steps)
    report["steps"] = steps
    report["load_average_end"] = os.getloadavg()[0]
    print(f"s_per_step ours={steps['ours_s_per_step']} bare_peft={steps['bare_peft_s_per_step']} "
          f"speedup={steps['speedup']}x (min {steps['ours_min']} vs {steps['bare_peft_min']}) tokens={steps['tokens']} "
          f"(median of {args.steps}, loops interleaved; load avg "
          f"{report['load_average_start']:.1f} -> {report['load_average_end']:.1f})")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
