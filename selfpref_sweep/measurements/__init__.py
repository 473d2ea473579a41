"""Measurements beyond the cell's two questions, as plug-ins: each asks the judge something else about the
cell's pairs (the judge-competence control, familiarity, ...) and records it beside the two questions.

A measurement is one folder: its cell side is a class with the interface below (`<name>_cell.py`); its report
side (`<name>_report.py`, named by the class's `report_module`) is what the analysis imports, and imports
nothing of the cell's model stack (the folder's `__init__.py` imports nothing, so loading it does not either).
The registry `MEASUREMENTS` names it (name -> "module:Class", imported only when used; a plug-in adds one through
an entry point of the group `selfpref_sweep.measurements` or `$SELFPREF_MEASUREMENTS="name=module:Class,..."`,
never under a built-in's name: registry.py). Every place that handles a measurement loops over the registry:
the cell (its requests go to the judge in the cell's batch), plan mode (its calls are counted), the cell record
(its item field and its summary.json block), the printed cell result, the analysis frames (its cell and item
columns), the W&B item table, the item viewer, and the report (its items, figures and data files).

The report module may define:
- `ITEMS`: its report items (reporting.items.ReportItem), each after the core item it names (`after`) or else
  with the other measurements' items;
- `PLOTS`: {figure stem: draw(cells, path) -> PlotFile}, the figures its items show;
- `recorded(cells)`: whether some cell recorded it (default: its `<prefix>_enabled` column is true somewhere),
  which the report's design reads as `name in design.measured`;
- `data_files(result)` / `json_sections(result)`: its CSV files and regressions.json sections.
Only the measurement's folder writes its column names; the rest of the analysis asks its report module.

To add one, create its folder, add one line to `MEASUREMENTS` (or declare its entry point) and, if it has settings,
one to `MEASUREMENT_SETTINGS` (or an entry point of the group `selfpref_sweep.measurement_settings`) naming its
settings dataclass; read them with `settings(spec.judge, name)`. A built-in's settings are typed fields of `judge`
(config.JudgeConfig is composed of them at import: `judge.placebo`, ...), a plug-in's the open block
`judge.measurements.<name>` checked against its dataclass (`+judge.measurements.<name>.mode=on`); neither edits a
schema.

This module is the measurements' interface and registry: the cell (its records, the printed result), the config
(the settings) and the analysis read it, so it imports nothing of them (tests/test_architecture.py: it sits below
the config; each measurement's folder sits above the cell).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..registry import Registry

# name -> "module:Class"; order is the order of the printed result and of the analysis columns.
MEASUREMENTS: dict[str, str] = {
    "competence": "selfpref_sweep.measurements.competence.competence_cell:CompetenceMeasurement",
    "familiarity": "selfpref_sweep.measurements.familiarity.familiarity_cell:FamiliarityMeasurement",
    "placebo": "selfpref_sweep.measurements.placebo.placebo_cell:PlaceboMeasurement",
    "recognition_classifier":
        "selfpref_sweep.measurements.recognition_classifier.classifier_cell:RecognitionClassifierMeasurement",
    "surface_baseline": "selfpref_sweep.measurements.surface_baseline.surface_cell:SurfaceBaselineMeasurement",
}
ENV_VAR = "SELFPREF_MEASUREMENTS"
# name -> "module:Class" of its settings: a dataclass whose fields carry their defaults and ranges (schema_fields.py),
# in a module of its own that imports nothing but schema_fields. A built-in's are typed fields of `judge`
# (config.JudgeConfig is composed of them at import, schema_fields.composed), listed in the order of their fields in
# the config (kept from when they were its base classes; a new one's go last). A plug-in declares its settings the
# same way, through the registry below (an entry point or $SELFPREF_MEASUREMENT_SETTINGS), and they are read from
# the open block judge.measurements.<name>, so the schema does not change with what is installed.
MEASUREMENT_SETTINGS: dict[str, str] = {
    "surface_baseline": "selfpref_sweep.measurements.surface_baseline.surface_settings:SurfaceSettings",
    "recognition_classifier":
        "selfpref_sweep.measurements.recognition_classifier.classifier_settings:ClassifierSettings",
    "placebo": "selfpref_sweep.measurements.placebo.placebo_settings:PlaceboSettings",
    "familiarity": "selfpref_sweep.measurements.familiarity.familiarity_settings:FamiliaritySettings",
    "competence": "selfpref_sweep.measurements.competence.competence_settings:CompetenceSettings",
}


@dataclass
class Stage:
    """A measurement's work for one cell: on or off and why, the answer requests that go to the judge in the
    cell's batch, and whatever else the measurement needs to score them (`state`)."""

    enabled: bool
    reason: str
    answer_items: list[Any] = field(default_factory=list)  # cell.judging.ItemRequests
    state: Any = None  # the measurement's own object (e.g. the competence control, the familiarity stage)
    records: dict[str, Any] = field(default_factory=dict)  # article id -> the item's record, once scored

    def plan_block(self, n_requests: int) -> dict[str, Any]:
        return {"enabled": self.enabled, "requests": n_requests, "reason": self.reason}


class Measurement(ABC):
    """One measurement. `item_key` names its field in each results.jsonl line, `summary_key` its block in
    summary.json; `prefix` prefixes its columns in the analysis frames and the W&B item table."""

    name: str
    item_key: str
    summary_key: str
    prefix: str
    brief = False  # its line is printed by default, not only with verbose=true (the judge-competence control)
    omit_missing: bool = False  # True: an article without a record gets no field (else the field is null)
    report_module: str = ""  # its report side, beside the class's module (".familiarity_report"); "": none
    # Its settings are declared in the settings registry (MEASUREMENT_SETTINGS, SETTINGS_REGISTRY), not here: the
    # config reads them without importing the measurement.

    # --- the cell -------------------------------------------------------------------------------------
    @abstractmethod
    def prepare(self, inputs: Any, judge, judge_cfg) -> Stage:
        """The stage's requests for the cell (`inputs`: its cell.inputs.CellInputs; `judge` is a CachedModel or plan
        mode's stand-in)."""

    @abstractmethod
    def score(self, judge, stage: Stage, dists: Mapping, min_mass: float) -> dict[str, Any]:
        """article id -> the item's record, from the answer distributions of the cell's batch (`dists`); a
        measurement that asks more of the judge (e.g. scoring given text) makes those calls here."""

    @abstractmethod
    def summarize(self, stage: Stage, inputs: Any, n_items: int) -> dict[str, Any]:
        """summary.json's block."""

    def summarize_items(self, stage: Stage, inputs: Any, items: Sequence[Any]) -> dict[str, Any]:
        """summary.json's block, for a measurement that also reads the cell's own verdicts (`items`: the
        cell's record.Item list, recognition and preference included); by default `summarize`."""
        return self.summarize(stage, inputs, len(items))

    def n_requests(self, stage: Stage) -> int:
        """The judge calls the stage makes, cached or not (plan mode counts them)."""
        return sum(len(slots) for item in stage.answer_items for slots in item.by_question.values())

    def shown_summaries(self, stage: Stage) -> Sequence[Any]:
        """Summary sets the stage shows beyond the cell's own and other (their standardization is recorded)."""
        return ()

    # --- the record, read back ------------------------------------------------------------------------
    def format(self, block: dict[str, Any] | None) -> str | None:
        """The block's line in the printed cell result (None: nothing to print)."""
        return None

    def cell_columns(self, block: dict[str, Any]) -> dict[str, Any]:
        """The summary.json block flattened into the analysis' cell frame ({} block: an older cell)."""
        return {}

    def item_columns(self, record: Any) -> dict[str, Any]:
        """The item's record flattened into the analysis' item frame and the W&B item table."""
        return {}

    def table_columns(self, record: Any) -> dict[str, Any]:
        """The item's record in the W&B item table (by default its analysis columns)."""
        return self.item_columns(record)

    def view(self, record: Any) -> dict[str, Any] | None:
        """The item's record as the item viewer shows it (a small label -> value dict), None: not shown."""
        return None

    # column names (the frames list them even when no cell has the measurement)
    cell_column_names: Sequence[str] = ()
    item_column_names: Sequence[str] = ()


REGISTRY = Registry("measurement", Measurement, MEASUREMENTS, ENV_VAR, "selfpref_sweep.measurements")
SETTINGS_REGISTRY = Registry("measurement's settings", object, MEASUREMENT_SETTINGS, "SELFPREF_MEASUREMENT_SETTINGS",
                             "selfpref_sweep.measurement_settings")


def measurement(name: str) -> Measurement:
    return REGISTRY.resolve(name)()


def registered() -> list[Measurement]:
    """Every registered measurement: built-ins first, then the entry points', then the environment's. Resolved
    once per set of entries (the cell's records and the readers ask per item); measurements keep their per-cell
    state in their Stage, so one instance serves every cell."""
    return list(_registered(tuple((name, e.target) for name, e in REGISTRY.entries().items())))


@functools.lru_cache(maxsize=8)
def _registered(entries: tuple[tuple[str, str], ...]) -> tuple[Measurement, ...]:
    return tuple(measurement(name) for name, _ in entries)


def settings_class(name: str) -> type | None:
    """The dataclass a measurement declares its settings with (SETTINGS_REGISTRY: built-ins, entry points, the
    environment), its module imported now; None when it declares none. A ConfigError when it is not a dataclass."""
    entries = SETTINGS_REGISTRY.entries()
    if name not in entries:
        return None
    found = SETTINGS_REGISTRY.resolve(name)
    if not dataclasses.is_dataclass(found):
        raise ConfigError(f"The settings of measurement {name!r} name {entries[name].target!r}, which is not a "
                          f"dataclass (its fields are the settings, each with its default).")
    return found


def settings(judge_cfg: Any, name: str) -> Any:
    """A measurement's settings: `judge.<name>` when the typed schema has it, else `judge.measurements.<name>`:
    for a measurement that declares settings (settings_class), an instance of them with the block's values over
    their defaults (the defaults alone when the block is absent); else the block as given (None when absent)."""
    if hasattr(judge_cfg, name):
        return getattr(judge_cfg, name)
    block = getattr(judge_cfg, "measurements", None) or {}
    given = block.get(name) if hasattr(block, "get") else None
    schema = settings_class(name)
    if schema is None:
        return given
    from omegaconf import OmegaConf

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), given or {}))


def number(value: Any) -> float:
    """A record's number as a float; NaN when absent, null, not a number or not finite (older or damaged
    records; metrics may be null)."""
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def flag(value: Any) -> bool | None:
    """A record's yes/no value as a bool (numpy's bool too); None when absent or not a bool (older records)."""
    return bool(value) if isinstance(value, (bool, np.bool_)) else None


def block(record: Any, *path: str) -> dict[str, Any]:
    """A nested dict of a record, {} when absent or malformed (older cells lack the newer blocks)."""
    node: Any = record
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


CI_FIELDS = {"mean": "mean", "ci_low": "ci_low", "ci_high": "ci_high"}


def interval_text(stats: Mapping[str, Any]) -> str:
    """" [low, high]" of a block's interval for a printed result; "" when it has none."""
    return "" if stats.get("ci_low") is None else f" [{stats['ci_low']:.3f}, {stats['ci_high']:.3f}]"


def estimate_text(stats: Mapping[str, Any], key: str = "mean") -> str:
    """A block's estimate with its interval for a printed result ("0.512 [0.501, 0.523]"); "n/a" without one."""
    return "n/a" if stats.get(key) is None else f"{stats[key]:.3f}{interval_text(stats)}"


def numbers(source: dict[str, Any], prefix: str, fields: Mapping[str, str]) -> dict[str, float]:
    """{prefix_column: the block's number under key} for each column: key of ``fields`` (NaN when absent)."""
    return {f"{prefix}_{column}": number(source.get(key)) for column, key in fields.items()}
