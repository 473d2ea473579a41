"""Plan mode (`plan=true`): what a cell would cost, without spending anything.

The cell's own stages run with a stand-in for each model (`PlanningModel`): it serves what the call
store already holds and, for every call it does not hold, counts the call and its estimated tokens
instead of making it. A summary not generated yet is a placeholder of typical length, so the judge
prompts built on it are counted (and estimated) too. Nothing loads a model or reaches a network; API
keys are not needed. `PlanSummaryCallback` prints the whole grid's plan at the end of a sweep.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from ..cell.inputs import load_articles, prepare_inputs
from ..cell.judging import flatten
from ..cell.preflight import cell_preflight, finetune_cost, grid_preflight
from ..config import SELF_RECOGNITION_TASKS, ModelConfig
from ..config.spec import CellSpec
from ..design.detectable import Design, describe
from ..finetune import finetune_plan, format_plan, planned_judge, planned_training_articles
from ..models import backend_class
from ..models.base import AnswerDistribution, Generation, SequenceLogprobs, unique
from ..models.cached import CachedModel, stored_result
from ..records.atomic import atomic_write_json
from ..records.schema import PLAN_FILE, CellPlan
from ..store import Store
from .runner import judge_cell

CHARS_PER_TOKEN = 4.0  # a rough rule for English text; good enough for a budget
SUMMARY_TOKENS_GUESS = 45  # a one-sentence or highlights summary, when not generated yet
PLACEHOLDER_SUMMARY = ("planned summary " * 200)[: int(SUMMARY_TOKENS_GUESS * CHARS_PER_TOKEN)].strip()


def placeholder_summary(req) -> str:
    """A summary not generated yet: typical length, and distinct per request, so that the judge prompts built
    on two placeholders (both orders of a pair, the competence control's two articles) stay distinct calls."""
    tag = f" {req.cache_key()[:8]}"
    return PLACEHOLDER_SUMMARY[: len(PLACEHOLDER_SUMMARY) - len(tag)] + tag
CHAT_TEMPLATE_TOKENS = 10


def _tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def request_tokens(req) -> int:
    """A request's estimated prompt tokens (a scored continuation included: it runs through the model too)."""
    scored = _tokens(req.continuation) if getattr(req, "continuation", None) else 0
    if getattr(req, "messages", None):
        return sum(_tokens(m.content) for m in req.messages) + CHAT_TEMPLATE_TOKENS + scored
    return _tokens(req.prompt or "") + scored


class PlanningModel:
    """A model stand-in with CachedModel's interface that makes no call: cached results are served,
    and every other call is counted with its estimated tokens."""

    def __init__(self, model_cfg: ModelConfig, store: Store):
        cls = backend_class(model_cfg.backend)
        self.cfg = model_cfg
        self.identity = cls.identity_for(model_cfg)
        self.judge_settings = cls.judge_settings(model_cfg)
        self.store = store
        self.calls = self.prompt_tokens = self.completion_tokens = 0

    judge_decoding = CachedModel.judge_decoding  # the same decoding settings as the run's requests

    def _serve(self, requests, placeholder, completion_tokens: int) -> dict:
        out = {}
        for req in unique(requests):
            hit = stored_result(self.store, req)  # what the run would serve from the cache
            if hit is not None:
                out[req] = hit
                continue
            self.calls += 1
            self.prompt_tokens += request_tokens(req)
            self.completion_tokens += completion_tokens
            out[req] = placeholder(req)
        return out

    def generate(self, requests, desc: str = "") -> dict:
        return self._serve(requests, lambda r: Generation(text=placeholder_summary(r)),
                           SUMMARY_TOKENS_GUESS)

    def answer_distributions(self, requests, desc: str = "") -> dict:
        return self._serve(requests, lambda r: AnswerDistribution({a: 1.0 / len(r.answers) for a in r.answers},
                                                                  "planned"), 1)

    def sequence_logprobs(self, requests, desc: str = "") -> dict:
        return self._serve(requests, lambda r: SequenceLogprobs(total=-1.0, n_tokens=1, prompt_tokens=0), 0)

    def close(self) -> None:
        pass

    def cost(self) -> float | None:
        if not backend_class(self.cfg.backend).costs_money(self.cfg):  # local, or a server marked free
            return 0.0
        p, c = self.cfg.price_per_mtok_prompt, self.cfg.price_per_mtok_completion
        if p is None or c is None:
            return None  # no price known for this model
        # the Batch API: OpenAI bills half
        factor = float(getattr(self.cfg, "batch_price_factor", 0.5)) if self.batch else 1.0
        return (self.prompt_tokens * p + self.completion_tokens * c) / 1e6 * factor

    @property
    def batch(self) -> bool:
        """Whether the run sends this model's uncached calls through the OpenAI Batch API (batch: true)."""
        return backend_class(self.cfg.backend).sends_batches(self.cfg)

    def summary(self) -> dict[str, Any]:
        return {"model": self.identity.label, "uncached_calls": self.calls, "prompt_tokens_est": self.prompt_tokens,
                "completion_tokens_est": self.completion_tokens, "cost_usd_est": self.cost(), "batch": self.batch}


def plan_cell(spec: CellSpec, run_dir: Path) -> dict[str, Any]:
    """The cell's stages with stand-in models: the calls, tokens and cost its run would need."""
    if spec.skip_reason:  # a grid point outside the design: its run would be skipped, at no cost
        return _write_plan(run_dir, CellPlan(spec.coordinates.to_json(), skipped=spec.skip_reason))
    store = Store(spec.store_path)
    try:
        ft_plan = finetune_plan(spec)  # None when finetune_task=none; never trains
        dataset, warnings = load_articles(spec)
        models = {"evaluator": PlanningModel(spec.evaluator, store)}
        if spec.source_model is not None:
            models["source"] = PlanningModel(spec.source_model, store)
        tuned = planned_judge(spec)
        if tuned is not None:  # a different identity: none of its calls is cached before it exists
            models["judge"] = PlanningModel(tuned, store)
        inputs = prepare_inputs(spec, dataset, warnings, models["evaluator"], models.get("source"),
                                planned_training_articles(spec))
        inputs.load_model = _planning_loader(models, store)  # a measurement's further models, counted too
        judged = judge_cell(inputs, models.get("judge", models["evaluator"]), tuned or spec.evaluator)
    finally:
        store.close()
    judge_prompts = flatten(judged.requests)
    preflight = cell_preflight(
        # the models the run would load (a measurement's too, e.g. the familiarity reference); the fine-tuned
        # judge does not exist yet
        [m.cfg for role, m in models.items() if role != "judge"], spec.model_cache, ft_plan, spec.evaluator,
        spec.finetune.settings.openai.n_epochs if spec.finetune else None,
        # a training example is a judge prompt of the same shape, plus its one answer token
        sum(map(request_tokens, judge_prompts)) / len(judge_prompts) + 1 if judge_prompts else None)
    costs = [m.cost() for m in models.values()]
    plan = CellPlan(
        spec.coordinates.to_json(), n_articles=len(inputs.selection.all),
        n_empty_articles=len(inputs.selection.excluded), warnings=inputs.warnings,
        uncached_calls=sum(m.calls for m in models.values()),
        prompt_tokens_est=sum(m.prompt_tokens for m in models.values()),
        completion_tokens_est=sum(m.completion_tokens for m in models.values()),
        cost_usd_est=None if any(c is None for c in costs) else round(sum(costs), 4),
        # the roles whose calls go through the OpenAI Batch API, priced at its rate (batch_price_factor)
        batch_price=[role for role, m in models.items() if m.batch], finetune=ft_plan,
        # each measurement's judge calls (cached or not), included in uncached_calls above
        extra={m.summary_key: stage.plan_block(m.n_requests(stage)) for m, stage in judged.measured},
        preflight=[w.to_json() for w in preflight], by_model={role: m.summary() for role, m in models.items()})
    return _write_plan(run_dir, plan)


def _planning_loader(models: dict[str, PlanningModel], store: Store):
    """Plan mode's CellInputs.load_model: a stand-in per role, kept with the cell's models so that its calls,
    tokens and cost are counted and its weights pre-flighted."""

    def load(model_cfg: ModelConfig, role: str) -> PlanningModel:
        return models.setdefault(role, PlanningModel(model_cfg, store))

    return load


def _write_plan(run_dir: Path, record: CellPlan) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = record.to_json()
    atomic_write_json(run_dir / PLAN_FILE, plan)
    print(format_plan_line(plan))
    for w in plan["warnings"]:
        print(f"        warning: {w}")
    for w in plan["preflight"]:
        print(f"        pre-flight ({w['kind']}): {w['message']}")
    if plan["finetune"] is not None:
        print(f"        {format_plan(plan['finetune'])}")
    return plan


def _money(x: float | None) -> str:
    return "cost unknown (no price in config)" if x is None else f"~${x:,.2f}"


def format_plan_line(plan: dict[str, Any]) -> str:
    c = plan["cell"]
    head = (f"[plan] {c['evaluator']} vs {c['source']} on {c['dataset']} ({c['setting']}, label={c['label']}, "
            f"finetune={c['finetune_task']}): ")
    if plan.get("skipped"):
        return f"{head}skipped: {plan['skipped']}"
    batch = plan.get("batch_price") or []
    return (f"{head}{plan['uncached_calls']} calls not cached, "
            f"~{plan['prompt_tokens_est']:,} prompt + ~{plan['completion_tokens_est']:,} completion tokens, "
            f"{_money(plan['cost_usd_est'])}" + (f" (batch price for {', '.join(batch)})" if batch else ""))


def job_number(cell_dir_name: str) -> float:
    """The Hydra job number that starts a cell folder's name ("3" or "3_dataset=paper_cnn,source=human"), so the
    plan lists the cells in the sweep's order under their own numbers; inf for a name without one."""
    head = cell_dir_name.split("_", 1)[0]
    return int(head) if head.isdigit() else float("inf")


def summarize_plans(sweep_dir: Path) -> list[dict[str, Any]]:
    """Print the whole grid's plan (at the end of a plan=true multirun)."""
    paths = sorted(Path(sweep_dir).glob(f"*/{PLAN_FILE}"), key=lambda p: (job_number(p.parent.name), p.parent.name))
    plans = [json.loads(p.read_text()) for p in paths]
    if not plans:
        return plans
    total_cost = [p["cost_usd_est"] for p in plans]
    print(f"\n== plan for {len(plans)} cells ({sweep_dir}) ==")
    for path, p in zip(paths, plans, strict=True):
        print(f"  {path.parent.name.split('_', 1)[0]:>3}. {format_plan_line(p)[7:]}")
        if p.get("finetune"):
            print(f"       {format_plan(p['finetune'])}")
        for w in p.get("preflight") or []:
            print(f"       pre-flight ({w['kind']}): {w['message']}")
    print(f"  total: {sum(p['uncached_calls'] for p in plans):,} calls not cached, "
          f"~{sum(p['prompt_tokens_est'] for p in plans):,} prompt + "
          f"~{sum(p['completion_tokens_est'] for p in plans):,} completion tokens, "
          f"{_money(None if any(c is None for c in total_cost) else sum(total_cost))} for judging and summaries"
          + (f" ({sum(1 for p in plans if p.get('batch_price'))} of the cells at the Batch API's price)"
             if any(p.get("batch_price") for p in plans) else "") + ". Nothing was spent.")
    if any(p.get("finetune") for p in plans):
        judging = None if any(c is None for c in total_cost) else sum(total_cost)
        tuning = finetune_cost(plans)
        print(f"  with OpenAI fine-tuning: {_money(None if judging is None or tuning is None else judging + tuning)}")
    for line in design_lines(plans):
        print(f"  {line}")
    checks = grid_preflight(plans)
    if checks:
        print("  pre-flight:")
        for line in checks:
            print(f"    {line}")
    return plans


def design_lines(plans: list[dict[str, Any]]) -> list[str]:
    """What the grid's fine-tune design can detect (python -m selfpref_sweep.design, at its default SDs), where it
    has fine-tuned arms: adapters per arm (the fewest distinct fine-tunes of one recipe), evaluation articles (the
    fewest of a fine-tuned cell), recognition and control arms, datasets."""
    tuned = [p for p in plans if p.get("finetune")]
    if not tuned:
        return []
    arms: dict[tuple, set] = {}
    for p in tuned:
        f = p["finetune"]
        key = (f.get("evaluator"), f.get("task"), f.get("n_articles"), f.get("finetune_dataset"))
        arms.setdefault(key, set()).add(f.get("fingerprint"))
    recognition = {t.value for t in SELF_RECOGNITION_TASKS}
    n_rec = sum(1 for key in arms if key[1] in recognition)
    design = Design(adapters=min(len(v) for v in arms.values()),
                    articles=max(2, min(int(p.get("n_articles") or 0) for p in tuned)),
                    datasets=len({p["cell"].get("dataset") for p in tuned}), recognition_arms=n_rec,
                    control_arms=len(arms) - n_rec)
    lines = describe(design, 0.2, 0.25, None, str(tuned[0]["cell"].get("setting")))
    return ["what this fine-tune design can detect (python -m selfpref_sweep.design, its default SDs):",
            *(f"  {line.strip()}" for line in lines)]


class PlanSummaryCallback(Callback):
    """Hydra callback: after a plan=true multirun, print the grid's plan and its total."""

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        if config.get("plan"):
            summarize_plans(Path(str(config.hydra.sweep.dir)))
