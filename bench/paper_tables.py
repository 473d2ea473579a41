"""The tables of docs/results/paper_reanalysis.md, from an imported and analysed sweep of the paper's judgements.

    python -m selfpref_sweep.imports paper ../shared/paper-data --out SWEEP
    python -m selfpref_sweep.analysis SWEEP --wandb-mode disabled
    python bench/paper_tables.py SWEEP

Prints Markdown: the base evaluators' pooled numbers (the authors' mean beside the project's reading and its
article-clustered interval), the paper's fine-tune trend, the label conditions, the fine-tune tests per base
evaluator and the length-controlled preference, each straight from the sweep's files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

BASES = ("gpt4", "gpt35", "llama")


def _f(x, digits: int = 3) -> str:
    return "—" if x is None or pd.isna(x) else f"{float(x):.{digits}f}"


def _p(p) -> str:
    return "—" if p is None or pd.isna(p) else ("<0.001" if float(p) < 0.001 else f"{float(p):.3f}")


def _ci(lo, hi) -> str:
    return "—" if lo is None or pd.isna(lo) else f"[{_f(lo)}, {_f(hi)}]"


def _md(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False) if not df.empty else "_(none)_"


def base_table(table: pd.DataFrame, setting: str) -> pd.DataFrame:
    rows = []
    sub = table[(table["source"] == "all") & (table["setting"] == setting) & (table["label"] == "none")
                & table["evaluator"].isin(BASES)]
    for (ev, ds), g in sub.groupby(["evaluator", "dataset"], sort=False):
        row = {"evaluator": ev, "dataset": ds}
        for q in ("recognition", "preference"):
            r = g[g["question"] == q].iloc[0]
            row[f"{q}: authors"] = _f(r["authors_mean"])
            row[f"{q}: project [95% CI]"] = f"{_f(r['mean'])} {_ci(r['ci_low'], r['ci_high'])}"
            row[f"{q}: n (excluded)"] = f"{int(r['n'])} ({int(r['excluded'])})"
        rows.append(row)
    return pd.DataFrame(rows)


def trend_table(regressions: dict) -> pd.DataFrame:
    rows = []
    for t in regressions.get("paper_trend", []):
        rows.append({"setting": t["setting"], "evaluator": t["evaluator"], "fine-tunes": t["transfer"],
                     "points": t["n_points"], "slope (paper's OLS) [95% CI]":
                     f"{_f(t['slope'])} {_ci(t['slope_ci_low'], t['slope_ci_high'])}",
                     "r [95% CI]": f"{_f(t['r'])} {_ci(t['r_ci_low'], t['r_ci_high'])}",
                     "corrected slope [95% CI]": ("" if t["transfer"] != "all" else
                                                  f"{_f(t['corrected_slope'])} "
                                                  f"{_ci(t['corrected_ci_low'], t['corrected_ci_high'])}")})
    return pd.DataFrame(rows)


def label_table(analysis: Path) -> pd.DataFrame:
    path = analysis / "label_comparison.csv"
    if not path.is_file():
        return pd.DataFrame()
    df = pd.read_csv(path)
    rows = []
    for _, r in df.iterrows():
        rows.append({"dataset": r["dataset"], "evaluator": r["evaluator_variant"], "label": r["label"],
                     "articles": r["n_articles"],
                     "preference [95% CI]":
                         f"{_f(r['pref_paper_mean'])} {_ci(r['pref_paper_ci_low'], r['pref_paper_ci_high'])}",
                     "no label": _f(r["pref_ref_paper_mean"]),
                     "Δ [95% CI]":
                         f"{_f(r['dpref_paper_mean'])} {_ci(r['dpref_paper_ci_low'], r['dpref_paper_ci_high'])}",
                     "Holm p": _p(r.get("dpref_paper_p_holm"))})
    return pd.DataFrame(rows)


def tests_table(regressions: dict, section: str, fields: tuple) -> pd.DataFrame:
    rows = []
    for r in regressions.get(section, []):
        if r.get("level") != "unit" and r.get("level") != "paper unit":
            continue
        if "evaluator" not in str(r.get("group_by")) or r.get("scale") != "paper":
            continue
        row = {"group": r["group"]}
        for name, est, lo, hi in fields:
            row[name] = f"{_f(r.get(est))} {_ci(r.get(lo), r.get(hi))}"
        row["p"] = _p(r.get("p"))
        if "verdict" in r:
            row["reading"] = r["verdict"]
        rows.append(row)
    return pd.DataFrame(rows)


def length_table(analysis: Path) -> pd.DataFrame:
    path = analysis / "length_control.csv"
    if not path.is_file():
        return pd.DataFrame()
    df = pd.read_csv(path)
    base = df[~df["evaluator_variant"].astype(str).str.contains(r"\[ft") & (df["label"] == "none")]
    if "scale" in base:
        base = base[base["scale"] == "paper"]
    cols = [c for c in ("setting", "dataset", "evaluator_variant", "n_articles", "raw", "raw_ci_low", "raw_ci_high",
                        "controlled", "controlled_ci_low", "controlled_ci_high", "controlled_p", "length_coef",
                        "length_coef_ci_low", "length_coef_ci_high") if c in base]
    return base[cols].round(3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep")
    args = parser.parse_args()
    sweep = Path(args.sweep)
    table = pd.read_csv(sweep / "paper_table.csv", dtype={"evaluator": str})
    regressions = json.loads((sweep / "analysis" / "regressions.json").read_text())
    print("## Base evaluators, pairwise (pooled over the four other sources)\n")
    print(_md(base_table(table, "pairwise")))
    print("\n## Base evaluators, individual\n")
    print(_md(base_table(table, "individual")))
    print("\n## The paper's fine-tune trend\n")
    print(_md(trend_table(regressions)))
    print("\n## Labels\n")
    print(_md(label_table(sweep / "analysis")))
    print("\n## Interaction per base evaluator (paper unit, paper scale)\n")
    print(_md(tests_table(regressions, "interaction", (
        ("interaction [95% CI]", "estimate", "ci_low", "ci_high"),
        ("slope, controls", "slope_control", "slope_control_ci_low", "slope_control_ci_high"),
        ("slope, recognition", "slope_recognition", "slope_recognition_ci_low", "slope_recognition_ci_high")))))
    print("\n## Specificity per base evaluator (paper unit, paper scale)\n")
    print(_md(tests_table(regressions, "specificity", (("shift [95% CI]", "shift", "ci_low", "ci_high"),))))
    print("\n## Length-controlled self-preference (base evaluators)\n")
    print(_md(length_table(sweep / "analysis")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
