"""The cell spec: the Hydra config resolved once, at the entry point, into typed, frozen facts.

Every stage takes the narrow typed arguments it needs from here (a model config, the evaluation
dataset, the questions, ...) instead of re-deriving them from the whole config: which dataset the
cell evaluates on (after the fine-tuning articles, when they come from the same list), what the
evaluator is fine-tuned on, the transfer condition, the display names of the label experiment.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue, OmegaConfBaseException

from ..errors import ConfigError
from ..models.local.precision import AUTO, resolve_dtype
from ..records.schema import CellCoordinates, Transfer, transfer_of
from . import (
    PREFERENCE_PROMPT_TASKS,
    RECOGNITION_PROMPT_TASKS,
    ArticlesConfig,
    BootstrapConfig,
    Config,
    DatasetConfig,
    DatasetKind,
    FinetuneTaskConfig,
    FinetuneTaskName,
    JudgeConfig,
    LabelName,
    ModelConfig,
    SettingName,
    SourceConfig,
    SourceKind,
    SummariesConfig,
    WandbConfig,
)
from .origins import OWN_DATASET, OWN_GENERATED, own_origin, paper_key_of


@dataclass(frozen=True)
class FinetuneSpec:
    """What the evaluator is fine-tuned on, and how."""

    task: FinetuneTaskName
    settings: FinetuneTaskConfig  # n_articles, seed, others, trainer hyperparameters, inverse check
    dataset: DatasetConfig  # the fine-tune dataset, selecting exactly its first n_articles training articles
    question: str  # the prompts.pairwise key of the training prompt
    cache_root: Path  # where fine-tuned models are cached

    @property
    def n_articles(self) -> int:
        return int(self.dataset.n_articles)

    @property
    def train_end(self) -> int:
        """Index (in the dataset's article order) just past the training articles."""
        return int(self.dataset.offset or 0) + self.n_articles


@dataclass(frozen=True)
class CellSpec:
    coordinates: CellCoordinates
    evaluator: ModelConfig  # the base model: writes the own summaries (and judges, unless fine-tuned)
    source: SourceConfig
    dataset: DatasetConfig  # the evaluation dataset (offset past the training articles when in-domain)
    setting: SettingName
    questions: tuple[str, ...]
    label: LabelName
    own_display_name: str  # what the label experiment calls the evaluator / the source
    other_display_name: str
    finetune: FinetuneSpec | None
    prompts: Mapping[str, Any]
    summaries: SummariesConfig
    judge: JudgeConfig
    articles: ArticlesConfig
    bootstrap: BootstrapConfig
    store_path: str
    model_cache: str
    model_pool_gb: float  # the process's model pool budget (models/pool.py)
    wandb: WandbConfig
    seed: int
    show_progress: bool
    plan: bool
    config: Mapping[str, Any]  # the whole resolved config, plain data (logged to W&B after redaction)
    verbose: bool = False  # print every line of the cell's result
    same_model_reason: str | None = None  # in a sweep: why the source is the evaluator's own (then skipped)

    @property
    def source_model(self) -> ModelConfig | None:
        return self.source.model if self.source.kind == SourceKind.model else None

    @property
    def transfer(self) -> Transfer:
        return Transfer(self.coordinates.transfer)

    @property
    def judge_variant(self) -> str:
        """The judging model: the evaluator, plus its fine-tune (task, N, dataset) if any."""
        ft = self.finetune
        if ft is None:
            return self.evaluator.name
        return f"{self.evaluator.name}+ft_{ft.task.value}_n{ft.n_articles}_{ft.dataset.name}"

    @property
    def skip_reason(self) -> str | None:
        """Why this grid point is not a cell of the design, if it is not."""
        if self.label != LabelName.none and self.setting != SettingName.pairwise:
            return (f"label={self.label.value} tags the two summaries of the pairwise preference prompt; "
                    f"it does not apply to setting={self.setting.value}")
        return self.same_model_reason


# ------------------------------------------------------------------------------------ resolution
def resolve_cell(cfg: DictConfig, sweeping: bool = False) -> CellSpec:
    """The typed cell spec of a composed config. Unset required values become a ConfigError that names them.
    A source that is the evaluator's own model is refused (ConfigError); inside a sweep, which crosses
    evaluators with sources, that grid point is skipped instead, with the same reason."""
    typed = _typed(cfg)
    own_other = own_is_other(typed.evaluator, typed.source)
    if own_other and not sweeping:
        raise ConfigError(own_other)
    _own_summaries_need_no_finetune(typed.evaluator, typed.finetune_task.name)
    finetune = _finetune_spec(typed)
    dataset = _evaluation_dataset(typed.dataset, finetune)
    finetune_dataset = None if finetune is None else finetune.dataset.name
    coordinates = CellCoordinates(
        evaluator=typed.evaluator.name, source=typed.source.name, dataset=typed.dataset.name,
        setting=typed.setting.name.value, label=typed.label.name.value, finetune_task=typed.finetune_task.name.value,
        finetune_dataset=finetune_dataset, finetune_n_articles=None if finetune is None else finetune.n_articles,
        transfer=transfer_of(typed.finetune_task.name.value, finetune_dataset, typed.dataset.name).value)
    names = typed.label.display_names
    return CellSpec(
        coordinates=coordinates, evaluator=typed.evaluator, source=typed.source, dataset=dataset,
        setting=typed.setting.name, questions=tuple(typed.setting.questions), label=typed.label.name,
        own_display_name=names.get(typed.evaluator.name) or typed.evaluator.display_name or typed.evaluator.name,
        other_display_name=names.get(typed.source.name) or typed.source.display_name or typed.source.name,
        finetune=finetune, prompts=OmegaConf.to_container(cfg.prompts, resolve=True),
        summaries=typed.summaries, judge=typed.judge, articles=typed.articles, bootstrap=typed.bootstrap,
        store_path=str(typed.store.path), model_cache=str(typed.paths.model_cache),
        model_pool_gb=float(typed.model_pool.budget_gb), wandb=typed.wandb,
        seed=int(typed.seed), show_progress=bool(typed.show_progress), plan=bool(typed.plan),
        verbose=bool(typed.verbose),
        config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), same_model_reason=own_other)


def own_is_other(evaluator: ModelConfig, source: SourceConfig) -> str | None:
    """Why a cell's "other" summaries are the evaluator's own, if they are: the source is the evaluator's model
    (the paper's summaries it wrote, or the same API model, Hugging Face id or weights), or the very summaries
    `evaluator.own_summaries` takes. None for a valid pairing."""
    origin, own_key = own_origin(evaluator), paper_key_of(evaluator)
    other_key = {SourceKind.reference: "human", SourceKind.imported: source.key}.get(source.kind)
    if origin.kind == OWN_DATASET and origin.key == other_key:
        return (f"evaluator.own_summaries={origin.name} and source={source.name} are the same summaries; "
                f"pick another source.")
    if origin.kind == OWN_DATASET and own_key and origin.key != own_key:
        return (f"evaluator.own_summaries={origin.name} are not {evaluator.name}'s: its published summaries "
                f"are paper_{own_key} (a path to a JSON file takes any summaries).")
    if own_key and other_key == own_key:
        return (f"source={source.name} holds {evaluator.name}'s own published summaries, so evaluator="
                f"{evaluator.name} would judge its own text against its own text. Pick another source (e.g. "
                f"source=human); to judge the paper's exact inputs, set "
                f"evaluator.own_summaries=paper_{own_key} with another source.")
    if source.kind == SourceKind.model and source.model is not None:
        same = same_model_field(evaluator, source.model)
        if same:
            return (f"source={source.name} is the evaluator's own model ({same}); pick another source "
                    f"(e.g. source=human).")
    return None


def _own_summaries_need_no_finetune(evaluator: ModelConfig, finetune_task: FinetuneTaskName) -> None:
    origin = own_origin(evaluator)
    if origin.kind != OWN_GENERATED and finetune_task != FinetuneTaskName.none:
        raise ConfigError(f"evaluator.own_summaries={origin.name} with finetune_task={finetune_task.value} is not "
                          f"supported: the fine-tuning examples use the evaluator's generated summaries. Drop one "
                          f"of them.")


def same_model_field(a: ModelConfig, b: ModelConfig) -> str | None:
    """What makes two model configs the same model, if anything: the same API model on the same server, the
    same Hugging Face id or the same packaged weights (under whatever names)."""
    if a.backend != b.backend:
        return None
    if a.model and a.model == b.model and a.base_url == b.base_url:
        return f"model={a.model}"
    if a.hf_id and a.hf_id == b.hf_id and a.revision == b.revision:
        return f"hf_id={a.hf_id}"
    if a.weights and b.weights and not a.hf_id and not b.hf_id and a.weights == b.weights:
        return f"weights {', '.join(a.weights.modules) or a.weights.file}"
    return None


def _typed(cfg: DictConfig) -> Config:
    try:
        typed = OmegaConf.to_object(cfg)
    except (MissingMandatoryValue, InterpolationResolutionError) as exc:
        key = getattr(exc, "full_key", None) or "?"
        detail = str(exc).splitlines()[0]
        raise ConfigError(f"The config value {key} is not set ({detail}); set it on the command line, e.g. "
                          f"{key}=...") from None
    if not isinstance(typed, Config):  # composed without the schema (a hand-made config)
        raise ConfigError("The config was not composed with the selfpref_sweep schema (conf/config.yaml's "
                          "base_config).")
    typed.judge.familiarity_reference = reference_model_config(typed.judge.familiarity_reference)
    # dtype auto becomes this machine's bf16 or float32 here, once, so every identity and cache key holds
    # the dtype the model really runs in.
    for model in (typed.evaluator, typed.source.model, typed.judge.familiarity_reference):
        if model is not None and model.dtype == AUTO:
            model.dtype = resolve_dtype(model.dtype)
    return typed


def reference_model_config(value: Any) -> ModelConfig | None:
    """judge.familiarity_reference as a typed model config (the schema keeps it an open block, so a model
    config composes into it: `+model@judge.familiarity_reference=smollm135`); None when unset."""
    if value is None or isinstance(value, ModelConfig):
        return value
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), value)
        return OmegaConf.to_object(merged)
    except (OmegaConfBaseException, ValueError, TypeError) as exc:  # an unknown key, a wrong type, no name, a
        # bare string (judge.familiarity_reference=smollm135 names no model group): OmegaConf says which
        detail = str(exc).splitlines()[0]
        raise ConfigError(f"judge.familiarity_reference is not a model config ({detail}); name one, e.g. "
                          f"+model@judge.familiarity_reference=smollm135.") from None


def _finetune_spec(c: Config) -> FinetuneSpec | None:
    task = c.finetune_task
    if task.name == FinetuneTaskName.none:
        return None
    if task.n_articles is None or int(task.n_articles) < 1:
        raise ConfigError(f"finetune_task={task.name.value} needs finetune_task.n_articles >= 1 (the paper used 2, "
                          f"10 and 500), got {task.n_articles}.")
    # null finetune_dataset: the cell's own dataset, from its first article (in-domain).
    base = c.finetune_dataset if c.finetune_dataset is not None else dataclasses.replace(c.dataset, offset=0)
    root = base.root
    if base.kind == DatasetKind.paper and not root:
        root = os.environ.get("SELFPREF_PAPER_DATA") or (c.dataset.root if c.dataset.kind == DatasetKind.paper
                                                          else None)
    dataset = dataclasses.replace(base, n_articles=int(task.n_articles), root=root)
    question = task.question or ("recognition" if task.name in RECOGNITION_PROMPT_TASKS else
                                 "preference" if task.name in PREFERENCE_PROMPT_TASKS else task.name.value)
    cache_root = Path(task.cache_dir or Path(str(c.paths.model_cache)).expanduser() / "finetunes").expanduser()
    return FinetuneSpec(task=task.name, settings=task, dataset=dataset, question=question, cache_root=cache_root)


def dataset_identity(d: DatasetConfig) -> dict[str, Any]:
    """What selects a dataset's articles and summaries, independent of where its files live."""
    keys = {DatasetKind.demo: (), DatasetKind.paper: ("paper_name",),
            DatasetKind.hf: ("hf_path", "hf_name", "split", "id_field", "text_field", "summary_field")}[d.kind]
    return {"name": d.name, "kind": d.kind.value, "task": d.task, "seed": d.seed, "offset": int(d.offset or 0),
            **{k: getattr(d, k) for k in keys}}


def same_articles(a: DatasetConfig, b: DatasetConfig) -> bool:
    """Whether two dataset configs draw from the same article list in the same order."""
    ia, ib = dataset_identity(a), dataset_identity(b)
    for key in ("offset", "name"):
        ia.pop(key), ib.pop(key)
    return ia == ib


def _evaluation_dataset(dataset: DatasetConfig, finetune: FinetuneSpec | None) -> DatasetConfig:
    """The cell's dataset, starting after the training articles when it draws from the same article list
    as the fine-tune dataset (the paper's keys[N:] filter); unchanged otherwise."""
    if finetune is None or not same_articles(finetune.dataset, dataset):
        return dataset
    return dataclasses.replace(dataset, offset=max(int(dataset.offset or 0), finetune.train_end))
