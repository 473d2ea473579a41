"""Verdict words come from tests stated beside them, never from two point estimates compared bare (issue: "the
judge answers these questions alike" on 38 vs 39 of 40; "one common line" where the interaction rejected).

A dose-response sweep with replicated fine-tunes is drawn by the planted-bias simulator and analysed; every line
of its report.md that carries a verdict word must carry the test or interval that decided it."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from selfpref_sweep.analysis.job.pipeline import run_analysis
from selfpref_sweep.analysis.study.simulate import SimulationSpec, write_sweep
from selfpref_sweep.measurements.placebo import placebo_report as Q

VERDICTS = ("one common line", "no common line", "positive shift", "negative shift", "inconclusive",
            "alike", "more closely", "specific to recognition", "not told apart", "told apart", "undetermined")
# What may stand beside a verdict: a p-value, an interval, or the named test whose figures are in the same row.
EVIDENCE = re.compile(r"p = [0-9]|\bp\b.*[0-9]\.[0-9]|\[[-+−]?[0-9.]+, [-+−]?[0-9.]+\]|McNemar p|"
                      r"upper bound (on the difference )?[-0-9]|TOST|interaction test")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("verdicts") / "sweep"
    spec = SimulationSpec(n_articles=10, recognition_variants=3, control_variants=2, adapters_per_arm=2,
                          adapter_sd=0.1, seed=3)
    write_sweep(spec, out)
    result = run_analysis([out], wandb_cfg={"mode": "disabled"})
    return result.report_md.read_text(encoding="utf-8")


def _verdict_lines(report: str) -> list[str]:
    """The lines that give a reading of this sweep: table rows and the summary box's bullets (the method prose
    says what each outcome would mean, which is no verdict)."""
    return [ln for ln in report.splitlines() if (ln.startswith("|") or ln.startswith("- **"))
            and any(v in ln for v in VERDICTS)]


def test_every_verdict_line_states_its_test(report: str) -> None:
    lines = _verdict_lines(report)
    assert any("common line" in ln or "shift" in ln for ln in lines), "the specificity section gives verdicts"
    bare = [ln for ln in lines if not EVIDENCE.search(ln)]
    assert not bare, "verdict without its test:\n" + "\n".join(bare[:5])


def test_the_finder_finds_a_bare_verdict() -> None:
    assert not EVIDENCE.search("| cell 1 | the judge answers every question alike |")
    assert EVIDENCE.search("| one common line: the shift is within ±0.05 (TOST p = 0.010) |")


def test_replicated_arms_get_their_own_section(report: str) -> None:
    section = report.split("## Fine-tuned vs base, per arm", 1)[1].split("\n## ", 1)[0]
    assert "| 2 |" in section  # two adapters per arm
    assert "Training randomness is not covered" not in report


def test_placebo_readings_carry_mcnemars_p() -> None:
    rows, cells = [], [{"cell_id": "c", "evaluator_variant": "e", "setting": "pairwise", "label": "none",
                        "source": "s", "dataset": "d", "pl_enabled": True, "pl_reason": "on"}]
    # Preference agrees with recognition on 39 of 40 items, the placebo on 38. Compared bare, "preference follows
    # recognition more closely"; one discordant item is no evidence of it (McNemar p = 1). The placebo follows
    # recognition nearly as far as preference does, and 40 items show it: alike (its lead is bounded under half
    # preference's link beyond chance), never "apart".
    for i, (rec, pref, pl) in enumerate([(1, 1, 1)] * 38 + [(1, 1, -1), (1, -1, -1)]):
        rows.append({**cells[0], "article_id": f"a{i}", "rec_logodds": rec, "pref_logodds": pref, "pl_logodds": pl})
    table = Q.sensitivity_table(type("D", (), {"cells": pd.DataFrame(cells), "items": pd.DataFrame(rows)})())
    row = table.iloc[0]
    assert row["reading (test: p; bound)"].startswith(Q.ALIKE)
    assert "McNemar p = 1 on 1 discordant item" in row["reading (test: p; bound)"]
    assert row["only preference agrees / only the placebo"] == "1 / 0"
