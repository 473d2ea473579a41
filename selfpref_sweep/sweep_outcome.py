"""The end of a sweep: which cells failed, said in one paragraph, and said by the exit status too.

A failing cell does not stop a sweep (`cli.run_job` records its error in the cell directory and goes on),
so without this a sweep whose cells all failed would end with status 0. `SweepOutcomeCallback` (listed
first in conf/config.yaml's callbacks, so Hydra runs it after the analysis at the end of a multirun) reads
the cell directories, prints the paragraph, and remembers the failures; `cli.main` then exits with 1 (2 when a
damaged call store is why: a clear error the user fixes, as for a single run).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from .records.schema import ERROR_FILE
from .records.sweep_dirs import find_cell_dirs

_failed: list[Path] = []  # failed cell directories of the sweeps this process ran
_damaged_stores: list[str] = []  # call stores those cells found damaged
_DAMAGED_STORE = re.compile(r"The call store (.+?) is damaged \(")


@dataclass
class SweepOutcome:
    sweep_dir: Path
    n_cells: int
    failed: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the first line of each failed cell's error

    @property
    def damaged_store(self) -> str | None:
        """The call store that the cells found damaged, if that is why any failed."""
        for error in self.errors:
            found = _DAMAGED_STORE.search(error)
            if error.startswith("StoreDamagedError") and found:
                return found.group(1)
        return None

    def paragraph(self) -> str:
        """One paragraph: how many cells failed, of what, where the details are, and what to do."""
        kinds = Counter(e.split(":", 1)[0] for e in self.errors)
        by_kind = "; ".join(f"{n} x {kind}" for kind, n in kinds.most_common())
        first = self.errors[0] if self.errors else ""
        where = ", ".join(f"{p.relative_to(self.sweep_dir).as_posix()}/{ERROR_FILE}" for p in self.failed[:5])
        more = f" and {len(self.failed) - 5} more" if len(self.failed) > 5 else ""
        return (f"{len(self.failed)} of {self.n_cells} cells failed ({by_kind}). First error: {first} "
                f"Details are in {where}{more} under {self.sweep_dir}; the report lists the failed cells and no "
                f"fit uses them. " + self._what_to_do())

    def _what_to_do(self) -> str:
        store = self.damaged_store
        if store is not None:  # the cache itself broke: re-running alone would fail again
            return (f"The call store {store} is damaged: run `python -m selfpref_sweep.store salvage {store}`, which "
                    f"keeps every call that can still be read, then re-run the same command; only the lost calls are "
                    f"made again.")
        return ("Every finished model call is cached, so re-running the same command after fixing the cause repeats "
                "only the work that failed.")


def sweep_outcome(sweep_dir: Path) -> SweepOutcome:
    cells = find_cell_dirs(sweep_dir) if sweep_dir.is_dir() else []
    failed = [c for c in cells if (c / ERROR_FILE).is_file()]
    errors = []
    for cell in failed:
        text = (cell / ERROR_FILE).read_text(encoding="utf-8", errors="replace").strip()
        errors.append(text.splitlines()[0] if text else "unknown error")
    return SweepOutcome(sweep_dir, len(cells), failed, errors)


def failed_cells() -> list[Path]:
    return list(_failed)


def exit_status() -> int:
    """0 when every cell of this process's sweeps finished; 2 when a damaged call store stopped them (the
    user's fix, as for any clear error); 1 for other failed cells."""
    if not _failed:
        return 0
    return 2 if _damaged_stores else 1


class SweepOutcomeCallback(Callback):
    """Hydra callback: after a multirun, print a paragraph about the failed cells (if any) and record them
    for the exit status."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        outcome = sweep_outcome(Path(str(config.hydra.sweep.dir)))
        if outcome.failed:
            _failed.extend(outcome.failed)
            if outcome.damaged_store:
                _damaged_stores.append(outcome.damaged_store)
            print(f"\nSWEEP FAILED: {outcome.paragraph()}\n", file=sys.stderr)
