"""Plan mode (`plan=true`): what a cell would cost, without spending anything.

Each cell lists the model calls its run would make that the store does not already hold, with
estimated tokens and cost (from the models' price table; local models cost nothing). Summaries not
yet generated make the judge prompts unknown, so those are estimated from the article and typical
summary lengths. Nothing loads a model or reaches a network; API keys are not needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from .articles import usable_articles
from .config import enum_value
from .data import load_dataset, selection_warnings
from .judging import Pair, assign_labels, flatten, request_plan
from .models import load_model
from .models.cached import CachedModel
from .store import Store
from .summaries import clean, dataset_summaries, generation_request

CHARS_PER_TOKEN = 4.0  # a rough rule for English text; good enough for a budget
SUMMARY_TOKENS_GUESS = 45  # a one-sentence or highlights summary, when not generated yet
PLAN_FILE = "plan.json"


def _tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def _request_tokens(req) -> int:
    if getattr(req, "messages", None):
        return sum(_tokens(m.content) for m in req.messages) + 10  # + chat-template overhead
    return _tokens(req.prompt or "")


class _Ledger:
    def __init__(self, model: CachedModel, model_cfg: DictConfig):
        self.model, self.cfg = model, model_cfg
        self.calls = self.cached = self.prompt_tokens = self.completion_tokens = 0

    def add(self, n_calls: int, prompt_tokens: int, completion_tokens: int) -> None:
        self.calls += n_calls
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens

    def cost(self) -> Optional[float]:
        if self.cfg.backend == "local":
            return 0.0
        p, c = self.cfg.get("price_per_mtok_prompt"), self.cfg.get("price_per_mtok_completion")
        if p is None or c is None:
            return None  # no price known for this model
        return (self.prompt_tokens * p + self.completion_tokens * c) / 1e6


def plan_cell(cfg: DictConfig, run_dir: Path) -> Dict[str, Any]:
    from .cell import cell_description, display_name  # the cell's own rules

    cell = cell_description(cfg)
    prompts = OmegaConf.to_container(cfg.prompts, resolve=True)
    store = Store(cfg.store.path)
    from .finetune import eval_dataset_cfg, finetune_plan, format_plan, planned_evaluator_cfg

    ft_plan = finetune_plan(cfg)  # None when finetune_task=none; never trains
    dataset_cfg = eval_dataset_cfg(cfg)
    dataset = load_dataset(dataset_cfg)
    articles, _, _ = usable_articles(cfg, dataset.articles)
    evaluator = load_model(cfg.evaluator, store, cfg.paths.model_cache, False)  # identity only; nothing loads
    ledgers = {"evaluator": _Ledger(evaluator, cfg.evaluator)}
    max_new = int(cfg.summaries.max_new_tokens)

    def summaries_of(model: CachedModel, model_cfg: DictConfig, ledger: _Ledger) -> Dict[str, Optional[str]]:
        out = {}
        for a in articles:
            req = generation_request(model, model_cfg, prompts, dataset.task, a, max_new)
            hit = model.cached(req)
            if hit is None:
                ledger.add(1, _request_tokens(req), SUMMARY_TOKENS_GUESS)
                pending.add(a.id)
            out[a.id] = None if hit is None else hit.text
        return out

    pending = set()  # articles with a summary still to generate: their judge prompts are not known yet
    own = summaries_of(evaluator, cfg.evaluator, ledgers["evaluator"])
    if enum_value(cfg.source.kind) == "model":
        source = load_model(cfg.source.model, store, cfg.paths.model_cache, False)
        ledgers["source"] = _Ledger(source, cfg.source.model)
        other = summaries_of(source, cfg.source.model, ledgers["source"])
    else:
        other = dataset_summaries(cfg.source, dataset, articles)

    # The same clean-up as the cell, so the judge prompts are exactly the ones it will send.
    own, _ = clean(own, cfg.summaries.standardize)
    other, _ = clean(other, cfg.summaries.standardize)
    known = [Pair(a.id, a.text, own[a.id], other[a.id]) for a in articles if own[a.id] and other[a.id]]
    labels = assign_labels(cell["label"], known, display_name(cfg, cfg.evaluator), display_name(cfg, cfg.source),
                           int(cfg.seed))
    questions = list(cfg.setting.questions)
    judge_model = evaluator
    if ft_plan is not None:  # the judge is the fine-tuned model: a different identity, so nothing is cached yet
        judge_model = load_model(planned_evaluator_cfg(cfg), store, cfg.paths.model_cache, False)
    requests = flatten(request_plan(judge_model, prompts, cell["setting"], questions, known, labels))
    judge = ledgers["evaluator"]
    for req in requests:
        if judge_model.cached(req) is None:
            judge.add(1, _request_tokens(req), 1)
    per_article = len(requests) // max(1, len(known)) if known else 2 * len(questions)
    judged_exactly = {p.article_id for p in known}
    for a in articles:
        if a.id in pending and a.id not in judged_exactly:  # its judge prompts are not known yet: estimate
            tokens = _tokens(a.text) + 2 * SUMMARY_TOKENS_GUESS + 150
            judge.add(per_article, per_article * tokens, per_article)

    costs = [lg.cost() for lg in ledgers.values()]
    plan = {
        "status": "plan",
        "cell": cell,
        "n_articles": len(dataset.articles),
        "n_empty_articles": len(dataset.articles) - len(articles),
        "warnings": selection_warnings(dataset_cfg, dataset),
        "uncached_calls": sum(lg.calls for lg in ledgers.values()),
        "prompt_tokens_est": sum(lg.prompt_tokens for lg in ledgers.values()),
        "completion_tokens_est": sum(lg.completion_tokens for lg in ledgers.values()),
        "cost_usd_est": None if any(c is None for c in costs) else round(sum(costs), 4),
        "finetune": ft_plan,
        "by_model": {role: {"model": lg.model.identity.label, "uncached_calls": lg.calls,
                            "prompt_tokens_est": lg.prompt_tokens, "completion_tokens_est": lg.completion_tokens,
                            "cost_usd_est": lg.cost()} for role, lg in ledgers.items()},
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / PLAN_FILE).write_text(json.dumps(plan, indent=2) + "\n")
    store.close()
    print(format_plan_line(plan))
    for w in plan["warnings"]:
        print(f"        warning: {w}")
    if ft_plan is not None:
        print(f"        {format_plan(ft_plan)}")
    return plan


def _money(x: Optional[float]) -> str:
    return "cost unknown (no price in config)" if x is None else f"~${x:,.2f}"


def format_plan_line(plan: Dict[str, Any]) -> str:
    c = plan["cell"]
    return (f"[plan] {c['evaluator']} vs {c['source']} on {c['dataset']} ({c['setting']}, label={c['label']}, "
            f"finetune={c['finetune_task']}): {plan['uncached_calls']} calls not cached, "
            f"~{plan['prompt_tokens_est']:,} prompt + ~{plan['completion_tokens_est']:,} completion tokens, "
            f"{_money(plan['cost_usd_est'])}")


def summarize_plans(sweep_dir: Path) -> List[Dict[str, Any]]:
    """Print the whole grid's plan (called at the end of a plan=true multirun)."""
    plans = [json.loads(p.read_text()) for p in sorted(Path(sweep_dir).glob(f"*/{PLAN_FILE}"),
                                                       key=lambda p: int(p.parent.name) if p.parent.name.isdigit()
                                                       else 0)]
    if not plans:
        return plans
    total_cost = [p["cost_usd_est"] for p in plans]
    print(f"\n== plan for {len(plans)} cells ({sweep_dir}) ==")
    for i, p in enumerate(plans):
        print(f"  {i:>3}. {format_plan_line(p)[7:]}")
        if p.get("finetune"):
            from .finetune import format_plan

            print(f"       {format_plan(p['finetune'])}")
    print(f"  total: {sum(p['uncached_calls'] for p in plans):,} calls not cached, "
          f"~{sum(p['prompt_tokens_est'] for p in plans):,} prompt + "
          f"~{sum(p['completion_tokens_est'] for p in plans):,} completion tokens, "
          f"{_money(None if any(c is None for c in total_cost) else sum(total_cost))}. Nothing was spent.")
    return plans
