"""Machine keys: the plain values the CSVs and regressions.json carry beside every display label, so that a
program never parses a display string."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...reporting.grouping import BY_CONDITION, BY_EVALUATOR, GROUPINGS, condition_groups
from ..estimate.fit import MIXED_BY_VARIANT, OLS_BY_VARIANT, OLS_ITEM, OLS_PLAIN
from ..estimate.resample import RESAMPLE_CORRECTED, RESAMPLE_OLS
from ..estimate.units import VARIANT_KEYS

# Beside every display label ("pairwise / none / in_domain", an evaluator variant's name) the CSVs and
# regressions.json carry these plain values, None where one does not apply (a fit's group has no evaluator; a
# paper unit has no single source and both scales as columns), so a program never parses a display string.
GROUP_KEYS = ("setting", "label", "dataset", "transfer")
MACHINE_KEYS = ("level", "method_key", "scale", *GROUP_KEYS, *VARIANT_KEYS, "source")
METHOD_KEYS = {OLS_PLAIN: "ols", OLS_BY_VARIANT: "ols_clustered_by_variant", MIXED_BY_VARIANT: "mixedlm_by_variant",
               OLS_ITEM: "ols_variant_effects_clustered_by_article",
               RESAMPLE_OLS: "ols_dataset_term_article_resample",
               RESAMPLE_CORRECTED: "ols_error_corrected_dataset_term_article_resample"}


def group_keys(*frames: pd.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    """(grouping, group label) -> the group's GROUP_KEYS, for every group the fits make of these frames
    (condition_groups, within dataset and within transfer); a key the grouping does not split by is None."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for frame in frames:
        for within in ("dataset", "transfer"):
            if frame.empty or within not in frame:
                continue
            for name, label, sub in condition_groups(frame, within=within):
                first = sub.iloc[0]
                by = {GROUPINGS[0][0]: BY_CONDITION, BY_EVALUATOR: (*BY_CONDITION, "evaluator")}.get(
                    name, (*BY_CONDITION, within))
                out[(name, label)] = {k: (first[k] if k in by else None) for k in (*GROUP_KEYS, "evaluator")}
    return out


def keyed_record(record: dict[str, Any], groups: dict[tuple[str, str], dict[str, Any]],
                 **fixed: Any) -> dict[str, Any]:
    """``record`` with every MACHINE_KEYS key added where absent: a fit's group keys from ``groups`` (see
    group_keys), its method's key, else ``fixed`` (e.g. level) or None. Existing values are kept."""
    out = dict(record)
    found = groups.get((record.get("group_by"), record.get("group")), {})
    for key in (*GROUP_KEYS, "evaluator"):
        out.setdefault(key, found.get(key, fixed.get(key)))
    if "method" in record:
        out.setdefault("method_key", METHOD_KEYS.get(record["method"]))
    for key in MACHINE_KEYS:
        out.setdefault(key, fixed.get(key))
    return out


def with_machine_keys(df: pd.DataFrame, groups: dict[tuple[str, str], dict[str, Any]], **fixed: Any) -> pd.DataFrame:
    """keyed_record for every row of a frame; the key columns follow the frame's own."""
    cols = [*df.columns, *(k for k in MACHINE_KEYS if k not in df.columns)]
    return pd.DataFrame([keyed_record(r, groups, **fixed) for r in df.to_dict(orient="records")], columns=cols)
