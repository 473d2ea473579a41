"""The call store (every model call, cached; `calls.py`), its check and salvage after damage (`salvage.py`),
and the claims that keep two launches from running one cell twice (`claims.py`).

    python -m selfpref_sweep.store check PATH          # healthy? calls per model, unreadable entries
    python -m selfpref_sweep.store salvage PATH [NEW]  # every readable call into a fresh store
    python -m selfpref_sweep.store merge DEST SRC...   # per-node stores into one
"""

from .calls import MergeReport, Store, merge_stores

__all__ = ["MergeReport", "Store", "merge_stores"]
