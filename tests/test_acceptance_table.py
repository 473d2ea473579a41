"""The coverage runs side by side (analysis/study/acceptance.py): grouped cells, and the rows the report would
print off target without a label."""

from __future__ import annotations

import json

from selfpref_sweep.analysis.estimate.resample import RESAMPLE_CORRECTED
from selfpref_sweep.analysis.study import acceptance
from selfpref_sweep.analysis.study.calibration import calibration_label
from selfpref_sweep.analysis.study.coverage import FAILS, HOLDS


def _row(key, kind, rate, verdict, setting="pairwise", n=10):
    return {"setting": setting, "n_articles": n, "key": key, "label": key.replace("|", " "), "kind": kind,
            "rate": rate, "se": 0.01, "verdict": verdict, "trials": 400, "no_interval": 0, "reps": 200}


def _payload(k, sd, rows):
    return {"command": "x", "design": {"adapters_per_arm": k, "adapter_sd": sd}, "rows": rows}


def test_groups_and_gaps(tmp_path):
    slope = "rs|slope|paper unit|all|paper"
    a = _payload(3, 0.4, [_row("arm|dnull|rec|paper", "coverage", 0.95, HOLDS),
                          _row("arm|dalt|rec|paper", "coverage", 0.88, FAILS),
                          _row(slope, "coverage", 0.80, FAILS), _row("acc|all", "coverage", 0.998, FAILS),
                          _row("cell|rec|paper", "coverage", 0.90, FAILS)])
    b = _payload(2, 0.0, [_row("arm|dnull|rec|paper", "coverage", 0.96, HOLDS, "individual", 20)])
    text = acceptance.markdown([a, b], "cmd")
    head = [line for line in text.splitlines() if line.startswith("| report rows")][0]
    assert "3 adapters, SD 0.4, pairwise, 10 articles (200 reps)" in head
    assert "2 adapters, SD 0, individual, 20 articles" in head
    arm_null = [line for line in text.splitlines()
                if line.startswith("| arm Δ recognition CI (adapters pooled), true Δ = 0")][0]
    assert "95.0–95.0% (1 hold, 0 undecided, 0 not)" in arm_null and "96.0–96.0%" in arm_null
    gaps = acceptance.label_gaps(a["rows"], adapters=3)
    # The shipped 3-adapter designs find the arm's recognition interval on target: a gap, on the liberal side.
    assert any(g.startswith("arm Δ recognition, any level, its method: under-covers") for g in gaps)
    assert any(g.startswith("cell rec paper: 90.0%") and g.endswith("(no label covers this row)") for g in gaps)
    # The classifier's interval over both orders is labelled by its own table text, not counted as a gap.
    assert not any(g.startswith("acc all") for g in gaps) and "`acc|all`, the recognition classifier" in text
    shipped = calibration_label("resampled slope", "paper unit", RESAMPLE_CORRECTED, True, adapters=3)
    flagged = any(g.startswith("resampled slope, paper unit") for g in gaps)
    assert flagged == (not shipped.startswith(("under-covers", "far too narrow")))
    path = tmp_path / "a.json"
    path.write_text(json.dumps(a))
    assert acceptance.main([str(path), "--out-md", str(tmp_path / "out.md")]) == 0
    assert (tmp_path / "out.md").read_text().startswith("## Coverage across designs")
    assert acceptance.main([str(tmp_path / "missing.json")]) == 2
