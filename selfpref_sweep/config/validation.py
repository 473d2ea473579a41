"""One validation layer at the entry (run.py), before a cell plans or runs anything.

Hydra and the typed schema (config/__init__.py) already reject a wrong type (`dataset.n_articles=abc`), an
unknown choice (`evaluator=gtp4`) and a misspelt key without `+`. Two things get through them:

* values of the right type but out of range (`judge.min_answer_mass=7`, `dataset.n_articles=-2`);
* keys added with `+`: Hydra applies `+key=value` with OmegaConf's `force_add`, which lifts struct mode
  along the path, so `+judge.min_mass=0.2` lands in the typed `judge` node and is silently ignored.

`validate_config` walks the composed config alongside the schema's dataclasses: every numeric field has a
range (RANGES, or UNBOUNDED where any integer is fine, like seeds), a few strings have a closed set of
values, and any key that a dataclass does not declare is rejected, naming the valid ones. Dict-typed
fields (`label.display_names`, `prompts.pairwise`, ...) stay open: their keys are data.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..errors import ConfigError
from . import (ArticlesConfig, BootstrapConfig, Config, DatasetConfig, FinetuneTaskConfig, JudgeConfig,
               LoraHyperparameters, ModelConfig, ModelPoolConfig, OpenAIFinetuneConfig, SpecificityMargin,
               SummariesConfig, WandbConfig, WeightsConfig, enum_value)

MAX_TOP_LOGPROBS = 20  # the OpenAI API's limit


@dataclass(frozen=True)
class Range:
    """A closed or half-open interval of allowed numbers; None = unbounded on that side."""

    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False  # for the wording only: the schema's type already enforces it

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            return (f"{kind} in {'(' if self.low_open else '['}{_num(self.low)}, "
                    f"{_num(self.high)}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {_num(self.high)}"
        return kind


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


COUNT = Range(low=1, integer=True)  # how many of something: at least one
NON_NEGATIVE_INT = Range(low=0, integer=True)  # offsets, retries, "0 = off" switches
POSITIVE = Range(low=0, low_open=True)  # rates, seconds
NON_NEGATIVE = Range(low=0)
PROBABILITY = Range(low=0, high=1)
OPEN_UNIT = Range(low=0, high=1, low_open=True, high_open=True)

# (schema class, field) -> allowed range. A null is allowed exactly where the schema says Optional.
RANGES: Dict[Tuple[type, str], Range] = {
    (ModelConfig, "context_tokens"): COUNT,
    (ModelConfig, "generate_batch"): COUNT,
    (ModelConfig, "prefix_cache_mb"): NON_NEGATIVE,
    (ModelConfig, "vllm_memory_fraction"): Range(low=0, high=1, low_open=True),
    (ModelPoolConfig, "budget_gb"): NON_NEGATIVE,
    (SpecificityMargin, "paper"): Range(low=0, high=0.5, low_open=True),  # a shift on a 0-1 scale around 0.5
    (SpecificityMargin, "logodds"): POSITIVE,
    (ModelConfig, "max_concurrency"): COUNT,
    (ModelConfig, "top_logprobs"): Range(low=0, high=MAX_TOP_LOGPROBS, integer=True),
    (ModelConfig, "timeout_s"): POSITIVE,
    (ModelConfig, "batch_invariant_chunk"): Range(low=1, high=4096, integer=True),
    (ModelConfig, "forward_tokens"): Range(low=1, high=2 ** 20, integer=True),
    (ModelConfig, "max_retries"): NON_NEGATIVE_INT,
    (ModelConfig, "retry_backoff_s"): NON_NEGATIVE,
    (ModelConfig, "sample_fallback_k"): NON_NEGATIVE_INT,
    (ModelConfig, "batch_poll_s"): POSITIVE,
    (ModelConfig, "batch_poll_max_s"): POSITIVE,
    (ModelConfig, "batch_wait_timeout_s"): POSITIVE,
    (ModelConfig, "batch_max_requests"): Range(low=1, high=50000, integer=True),
    (ModelConfig, "batch_price_factor"): NON_NEGATIVE,
    (ModelConfig, "price_per_mtok_prompt"): NON_NEGATIVE,
    (ModelConfig, "price_per_mtok_completion"): NON_NEGATIVE,
    (ModelConfig, "price_per_mtok_training"): NON_NEGATIVE,
    (DatasetConfig, "n_articles"): COUNT,
    (DatasetConfig, "offset"): NON_NEGATIVE_INT,
    (LoraHyperparameters, "r"): COUNT,
    (LoraHyperparameters, "alpha"): COUNT,
    (LoraHyperparameters, "dropout"): Range(low=0, high=1, high_open=True),
    (OpenAIFinetuneConfig, "n_epochs"): COUNT,
    (OpenAIFinetuneConfig, "batch_size"): COUNT,
    (OpenAIFinetuneConfig, "learning_rate_multiplier"): POSITIVE,
    (OpenAIFinetuneConfig, "poll_interval_s"): POSITIVE,
    (OpenAIFinetuneConfig, "wait_timeout_s"): POSITIVE,
    (FinetuneTaskConfig, "n_articles"): COUNT,
    (FinetuneTaskConfig, "lr"): POSITIVE,
    (FinetuneTaskConfig, "weight_decay"): NON_NEGATIVE,
    (FinetuneTaskConfig, "epochs"): COUNT,
    (FinetuneTaskConfig, "batch_size"): COUNT,
    (FinetuneTaskConfig, "max_steps"): COUNT,
    (SummariesConfig, "max_new_tokens"): COUNT,
    (ArticlesConfig, "chars_per_token"): POSITIVE,
    (ArticlesConfig, "max_tokens"): COUNT,
    (JudgeConfig, "min_answer_mass"): PROBABILITY,
    (JudgeConfig, "competence_sample"): NON_NEGATIVE_INT,
    (JudgeConfig, "competence_threshold"): NON_NEGATIVE,  # log-odds of the right answer
    (JudgeConfig, "competence_max_excluded"): PROBABILITY,
    (JudgeConfig, "calibration_bins"): Range(low=2, high=100, integer=True),
    (JudgeConfig, "surface_folds"): Range(low=2, high=50, integer=True),
    (BootstrapConfig, "n_resamples"): COUNT,
    (BootstrapConfig, "confidence"): OPEN_UNIT,
}
# Numeric fields where any value of the type is meaningful.
UNBOUNDED = {(Config, "seed"), (DatasetConfig, "seed"), (FinetuneTaskConfig, "seed")}
# String fields with a closed set of values (enums are checked by the schema itself).
CHOICES: Dict[Tuple[type, str], Tuple[str, ...]] = {
    (WandbConfig, "mode"): ("offline", "online", "disabled"),
    (WeightsConfig, "format"): ("gguf_parts", "gguf_file", "gguf_assembler"),
}


def validate_config(cfg: DictConfig) -> None:
    """Raise ConfigError naming every out-of-range value and unknown key (with the valid range or keys)."""
    problems: List[str] = []
    _check_node(cfg, Config, "", problems)
    problems += _cross_checks(cfg)
    if problems:
        many = len(problems) > 1
        raise ConfigError(("Invalid configuration: " if many else "") + " ".join(problems))


# --------------------------------------------------------------------------------------- the walk
def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def schema_fields(schema: type) -> Dict[str, Any]:
    """field name -> resolved type of a schema dataclass."""
    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema)}


def _value(node: DictConfig, key: str) -> Tuple[bool, Any]:
    """(readable, value): values that are `???` or an unresolvable interpolation are left to the code that
    needs them, which names what to set."""
    if OmegaConf.is_missing(node, key):
        return False, None
    try:
        return True, node[key]
    except OmegaConfBaseException:
        return False, None


def _check_node(node: Any, schema: type, path: str, problems: List[str]) -> None:
    if not isinstance(node, DictConfig):
        return
    fields = schema_fields(schema)
    where = path.rstrip(".") or "the top level"
    for key in node.keys():
        if key not in fields:
            _, value = _value(node, str(key))
            near = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean {path}{near[0]}?" if near else ""
            problems.append(f"Unknown config key {path}{key} (value {value!r}): {where} takes only "
                            f"{', '.join(fields)}.{hint}")
    for name, tp in fields.items():
        if name not in node:
            continue
        ok, value = _value(node, name)
        if not ok or value is None:
            continue
        tp = _unwrap_optional(tp)
        full = f"{path}{name}"
        if dataclasses.is_dataclass(tp):
            _check_node(value, tp, f"{full}.", problems)
        elif typing.get_origin(tp) in (dict, Dict):
            inner = _unwrap_optional(typing.get_args(tp)[1])
            if dataclasses.is_dataclass(inner) and isinstance(value, DictConfig):
                for k in value.keys():
                    ok_k, v = _value(value, str(k))
                    if ok_k:
                        _check_node(v, inner, f"{full}.{k}.", problems)
        elif (schema, name) in RANGES:
            rng = RANGES[(schema, name)]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not rng.contains(value):
                null = " or null" if _is_optional(schema, name) else ""
                problems.append(f"{full}={value} is out of range: it must be {rng.describe()}{null}.")
        elif (schema, name) in CHOICES:
            valid = CHOICES[(schema, name)]
            if str(enum_value(value)) not in valid:
                problems.append(f"{full}={value!r} is not valid: it must be one of {', '.join(valid)}.")


def _is_optional(schema: type, name: str) -> bool:
    tp = schema_fields(schema)[name]
    return typing.get_origin(tp) is typing.Union and type(None) in typing.get_args(tp)


# --------------------------------------------------------------------------------- across fields
def _cross_checks(cfg: DictConfig) -> List[str]:
    """Values valid alone but not together with the prompts they pick."""
    problems: List[str] = []
    try:
        prompts = cfg.prompts
        setting = str(enum_value(cfg.setting.name))
        questions = list(cfg.setting.questions)
    except OmegaConfBaseException:
        return problems
    if not questions:
        problems.append("setting.questions=[] is empty: it must list at least one question "
                        "(recognition, preference).")
    have = list((prompts.get(setting) or {}).keys())
    unknown = [q for q in questions if q not in have]
    if unknown:
        problems.append(f"setting.questions={questions} has {unknown}, which the {setting} setting has no "
                        f"prompt for: valid questions are {', '.join(have)}.")
    for group in ("dataset", "finetune_dataset"):
        node = cfg.get(group)
        if node is None:
            continue
        ok, task = _value(node, "task")
        tasks = list((prompts.get("summarize") or {}).keys())
        if ok and task not in tasks:
            problems.append(f"{group}.task={task!r} has no summarization prompt: valid tasks are "
                            f"{', '.join(tasks)}.")
    ok, competence = _value(cfg.judge, "competence") if "judge" in cfg else (False, None)
    # the control asks its question in the cell's setting (competence.py): that setting's prompt
    if ok and str(enum_value(competence)) != "off" and "competence" not in (prompts.get(setting) or {}):
        problems.append(f"judge.competence={enum_value(competence)} needs the prompt prompts.{setting}.competence, "
                        f"which prompts={prompts.get('name')} does not have: add it, or set judge.competence=off.")
    problems += _bad_patterns(cfg)
    return problems


def _bad_patterns(cfg: DictConfig) -> List[str]:
    """summaries.preamble_patterns that are not regular expressions."""
    ok, patterns = _value(cfg.summaries, "preamble_patterns") if "summaries" in cfg else (False, None)
    problems = []
    for i, pattern in enumerate((patterns if ok else None) or []):
        try:
            re.compile(str(pattern))
        except re.error as exc:
            problems.append(f"summaries.preamble_patterns[{i}]={str(pattern)!r} is not a regular expression "
                            f"({exc}).")
    return problems


def unchecked_numeric_fields() -> List[str]:
    """Numeric schema fields with neither a range nor an UNBOUNDED entry (the tests keep this empty)."""
    missing: List[str] = []
    seen: set = set()

    def visit(schema: type) -> None:
        if schema in seen:
            return
        seen.add(schema)
        for name, tp in schema_fields(schema).items():
            tp = _unwrap_optional(tp)
            if dataclasses.is_dataclass(tp):
                visit(tp)
            elif typing.get_origin(tp) in (dict, Dict):
                inner = _unwrap_optional(typing.get_args(tp)[1])
                if dataclasses.is_dataclass(inner):
                    visit(inner)
            elif tp in (int, float) and (schema, name) not in RANGES and (schema, name) not in UNBOUNDED:
                missing.append(f"{schema.__name__}.{name}")

    visit(Config)
    return missing
