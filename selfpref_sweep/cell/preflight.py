"""Pre-flight checks for plan mode: what would make a cell fail, or cost money, before anything is spent.

Per cell, plan mode lists what each model's backend reports (the contract's `preflight_problems`, models/base.py):
  - api_key:      an API model whose key variable is unset (off loopback), so every call would fail;
  - weights:      a local model whose weights are not on this machine (packages missing, or a hub id with
                  no local copy), so loading would fail;
and of the cell's fine-tune:
  - finetune_min_examples: an OpenAI fine-tune with fewer examples than the API accepts;
  - finetune_cost: what an OpenAI fine-tune would cost (trained tokens x epochs x training price).
The grid's total counts the warnings by kind and sums the fine-tuning cost over distinct fine-tunes (cells
that share one train it once). Nothing here loads a model or reaches a network.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..config import ModelConfig

OPENAI_MIN_TRAINING_EXAMPLES = 10  # the fine-tuning API rejects a training file with fewer
ASSUMED_OPENAI_EPOCHS = 3  # the API chooses ("auto") when n_epochs is unset; an estimate needs a number


@dataclass(frozen=True)
class PreflightWarning:
    kind: str  # api_key | weights | finetune_min_examples | finetune_cost
    model: str
    message: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def model_warnings(model: ModelConfig, model_cache: str) -> list[PreflightWarning]:
    """What the model's backend says would make its calls fail (its contract's preflight_problems: an unset
    API key for a server that needs one, weights not on this machine, ...)."""
    from ..models import backend_class

    return [PreflightWarning(kind, model.name, message)
            for kind, message in backend_class(model.backend).preflight_problems(model, model_cache)]


def _of_kind(model: ModelConfig, model_cache: str, kind: str) -> PreflightWarning | None:
    return next((w for w in model_warnings(model, model_cache) if w.kind == kind), None)


def missing_api_key(model: ModelConfig) -> PreflightWarning | None:
    """An API model whose key variable is unset, where the server needs one (anything off loopback)."""
    return _of_kind(model, "", "api_key")


def unavailable_weights(model: ModelConfig, model_cache: str) -> PreflightWarning | None:
    """A local model whose weights are not on this machine."""
    return _of_kind(model, model_cache, "weights")


def finetune_warnings(base: ModelConfig, plan: dict[str, Any] | None, n_epochs: int | None,
                      tokens_per_example: float | None) -> list[PreflightWarning]:
    """Warnings about the cell's fine-tune (from finetune_plan), and its estimated cost in `plan`.

    The cost (OpenAI only; local LoRA costs no money) is n_examples x tokens per example x epochs x the
    model's training price. Tokens per example are estimated from the cell's own judge prompts, which have
    the shape of the training examples (same prompt, articles of the same dataset)."""
    if plan is None or plan.get("trainer") != "openai" or plan.get("status") == "ready":
        return []
    out = []
    n = plan.get("n_examples")
    if n is not None and n < OPENAI_MIN_TRAINING_EXAMPLES:
        out.append(PreflightWarning(
            "finetune_min_examples", base.name,
            f"{base.name}: fine-tune {plan['task']} has {'at most ' if plan.get('n_examples_is_upper_bound') else ''}"
            f"{n} training examples; OpenAI's fine-tuning API needs at least {OPENAI_MIN_TRAINING_EXAMPLES} "
            f"(raise finetune_task.n_articles)"))
    epochs = int(n_epochs) if n_epochs else ASSUMED_OPENAI_EPOCHS
    price = base.price_per_mtok_training
    if n is None or tokens_per_example is None or price is None:
        plan["cost_usd_est"] = None
        why = "no training price in the model's config" if price is None else "example size unknown"
        out.append(PreflightWarning("finetune_cost", base.name, f"{base.name}: fine-tune {plan['task']} would "
                                                               f"start a paid OpenAI job; cost unknown ({why})"))
        return out
    trained_tokens = n * tokens_per_example * epochs
    plan["trained_tokens_est"] = int(trained_tokens)
    plan["cost_usd_est"] = round(trained_tokens * price / 1e6, 4)
    assumed = "" if n_epochs else f", assuming {epochs} epochs (the API's 'auto')"
    out.append(PreflightWarning(
        "finetune_cost", base.name,
        f"{base.name}: fine-tune {plan['task']} would start a paid OpenAI job: ~{int(trained_tokens):,} trained "
        f"tokens, ~${plan['cost_usd_est']:,.2f}{assumed}"))
    return out


def cell_preflight(models: Iterable[ModelConfig], model_cache: str, finetune_plan: dict[str, Any] | None,
                   finetune_base: ModelConfig, n_epochs: int | None,
                   tokens_per_example: float | None) -> list[PreflightWarning]:
    """Every pre-flight warning of one cell, for the models it would load or call."""
    out: list[PreflightWarning] = []
    seen = set()
    for model in models:
        if model is None or model.name in seen:
            continue
        seen.add(model.name)
        out += model_warnings(model, model_cache)
    return out + finetune_warnings(finetune_base, finetune_plan, n_epochs, tokens_per_example)


def grid_preflight(plans: Sequence[dict[str, Any]]) -> list[str]:
    """The grid's pre-flight total: warnings counted by kind (with the models they name), and the fine-tuning
    cost summed over distinct fine-tunes."""
    by_kind: dict[str, list[str]] = {}
    for plan in plans:
        for w in plan.get("preflight") or []:
            by_kind.setdefault(w["kind"], []).append(w["model"])
    lines = []
    for kind, models in sorted(by_kind.items()):
        names = sorted(set(models))
        lines.append(f"{kind}: {_n(len(models), 'cell')} ({', '.join(names)})")
    finetunes = _paid_finetunes(plans)
    if finetunes:
        costs = [f.get("cost_usd_est") for f in finetunes.values()]
        known = sum(c for c in costs if c is not None)
        unknown = sum(1 for c in costs if c is None)
        lines.append(f"OpenAI fine-tuning: {_n(len(finetunes), 'job')}, ~${known:,.2f}"
                     + (f" plus {_n(unknown, 'job')} of unknown cost" if unknown else ""))
    return lines


def finetune_cost(plans: Sequence[dict[str, Any]]) -> float | None:
    """The OpenAI fine-tuning cost of a grid, each distinct fine-tune once; None if any is unknown."""
    costs = [f.get("cost_usd_est") for f in _paid_finetunes(plans).values()]
    return None if any(c is None for c in costs) else float(sum(costs))


def _paid_finetunes(plans: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The grid's OpenAI fine-tunes still to train, by fingerprint (cells sharing one pay for it once)."""
    return {p["finetune"]["fingerprint"]: p["finetune"] for p in plans
            if p.get("finetune") and p["finetune"].get("trainer") == "openai"
            and p["finetune"].get("status") != "ready"}


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}{'' if k == 1 else 's'}"
