"""One analysis' result: the loaded records, the estimates made from them, what the design supports, and what
was written. The report items read their tables from it (report_items.py); the job builds it (job/pipeline.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ...reporting.figures import PlotFile
from ...reporting.grouping import GROUPINGS
from ...reporting.items import Design
from ..estimate.collapse import empty_frame as empty_collapse
from ..estimate.estimates import Estimates
from ..estimate.finetune_tests import RECOGNITION_TASKS
from ..estimate.fit import FitResult
from ..estimate.length_control import empty_by_source as empty_length_by_source
from ..estimate.length_control import empty_frame as empty_length_control
from ..estimate.paired import LABEL_COLUMNS
from ..self_bias.net_bias import empty_frame as empty_self_bias
from ..sweep.load import SweepData


@dataclass
class AnalysisResult:
    """One analysis: the loaded records (``data``), the estimates made from them (``est``: estimate.Estimates,
    shared with the coverage study; ``result.est.unit_fits``, ...), what the design supports, and what was
    written."""

    out_dir: Path
    report_md: Path
    report_html: Path
    data: SweepData
    est: Estimates
    design: Design  # what the cells support: decides which report items apply
    plots: list[PlotFile] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # display tables, keyed by short name
    recognition_tasks: tuple[str, ...] = RECOGNITION_TASKS
    # Label conditions against the unlabelled prompt on the same items (paired.label_vs_reference).
    labels: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LABEL_COLUMNS))
    # Per paper unit and scale, the self-preference with the length difference regressed out (length_control.py).
    length_control: pd.DataFrame = field(default_factory=empty_length_control)
    # The same fits per other source: its adjusted preference at equal length, and whether it extrapolates.
    length_control_by_source: pd.DataFrame = field(default_factory=empty_length_by_source)
    # Per judge, group, estimator and scale, the self term net of quality (self_bias/net_bias.py), and the notes on
    # its inputs (judges left out, repeated ratings merged).
    self_bias: pd.DataFrame = field(default_factory=empty_self_bias)
    # Per fine-tuned arm and base model, whether its two questions get one answer (estimate/collapse.py).
    collapse: pd.DataFrame = field(default_factory=empty_collapse)
    self_bias_notes: list[str] = field(default_factory=list)
    wandb_status: str = ""
    files: list[Path] = field(default_factory=list)

    @property
    def replicated(self) -> bool:
        """Whether the sweep's fine-tuned arms have several adapters each: the replicated coverage study then
        labels its rows (calibration.py)."""
        return bool(self.design is not None and self.design.replicated)

    @property
    def adapters(self) -> int:
        """The adapters of the sweep's replicated arms (the fewest; 1 when none is replicated): they choose the
        coverage study whose figures label its rows (calibration.py)."""
        return self.design.adapters_per_arm if self.design is not None else 1

    def headline_fits(self, scale: str = "paper") -> list[FitResult]:
        """The paper-unit fits per setting × label (all datasets) on one scale."""
        return [f for f in self.est.unit_fits if f.group_by == GROUPINGS[0][0] and f.scale == scale]
