"""The report's first screen: the summary box opens report.md and report.html, and each of its verdicts reads
an interval (a cell's CI against 0.5, the headline slope's CI against 0), never two point estimates."""

from __future__ import annotations

import re
from pathlib import Path

from selfpref_sweep.analysis.job.pipeline import run_analysis

from .test_analysis import NO_WANDB, planted_sweep, write_cell

HEADINGS = ("What was run", "The numbers", "Judge controls", "What it can conclude", "What it cannot conclude")


def _box(result) -> dict[str, str]:
    md = result.report_md.read_text()
    top = md.split("\n## ", 2)[1]  # the first section after the title
    assert top.startswith("Summary\n")
    return dict(re.findall(r"^- \*\*(.+?)\.\*\* (.*)$", top, flags=re.M))


def test_the_report_opens_with_the_box_and_folds_the_rest(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_cell(sweep, 0, source="human", rec=0.62, pref=0.51)
    write_cell(sweep, 1, source="paper_gpt4", rec=0.50, pref=0.49)
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    box = _box(result)
    assert tuple(box) == HEADINGS
    assert "2 complete cell(s)" in box["What was run"] and "human, paper_gpt4" in box["What was run"]
    assert "recognition 0.620 (95% CI [" in box["The numbers"]
    # The human cell's recognition CI lies above 0.5 (five items, 0.58-0.66); nothing else does.
    assert "Recognition: in 1 cell(s) the judge tells its own summary apart" in box["What it can conclude"]
    assert "Preference:" not in box["What it can conclude"]
    assert "at least 3 paper units" in box["What it cannot conclude"]  # one paper unit: no regression
    html = result.report_html.read_text()
    assert html.index('class="summary"') < html.index("<details>")
    assert html.count("<details>") == html.count("</details>") > 2


def test_a_slope_verdict_comes_from_its_interval(tmp_path: Path) -> None:
    rising = run_analysis([planted_sweep(tmp_path / "up", slope=0.8)], wandb_cfg=NO_WANDB)
    # the reading is the corrected fit's (the one the report names), not the paper's plain OLS
    assert "preference rises with recognition (corrected slope 95% CI [" in _box(rising)["What it can conclude"]
    assert "corrected fit: slope" in _box(rising)["The numbers"]
    flat = run_analysis([planted_sweep(tmp_path / "flat", slope=0.0, noise=0.05)], wandb_cfg=NO_WANDB)
    from selfpref_sweep.analysis.report.summary_box import _corrected_slopes

    fits = _corrected_slopes(flat)
    assert fits
    if all(f.ci_low <= 0 <= f.ci_high for f in fits):
        assert "the corrected slope's CI includes 0" in _box(flat)["What it cannot conclude"]
        assert "rises with recognition" not in _box(flat)["What it can conclude"]


def test_a_sweep_of_failed_cells_says_so_in_one_line(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_cell(sweep, 0, status=None, error="boom")
    result = run_analysis([sweep], wandb_cfg=NO_WANDB)
    assert _box(result) == {"What was run": "1 cell directories, none complete: nothing to conclude."}


def test_the_first_screen_in_a_real_browser(tmp_path: Path) -> None:
    """Chromium shows the box on the first screen and the sections folded. $SELFPREF_REPORT points it at another
    report.html (e.g. a real smoke sweep's), $SELFPREF_SCREENSHOT saves the first screen (docs/report_smoke.png)."""
    import os

    from .test_items_view import _browser

    page = os.environ.get("SELFPREF_REPORT")
    if not page:
        sweep = tmp_path / "s"
        write_cell(sweep, 0, source="human", rec=0.62, pref=0.51)
        write_cell(sweep, 1, source="paper_gpt4", rec=0.50, pref=0.49)
        page = str(run_analysis([sweep], wandb_cfg=NO_WANDB).report_html)
    browser = _browser()
    try:
        from selenium.webdriver.common.by import By

        browser.get(Path(page).resolve().as_uri())
        box = browser.find_element(By.CLASS_NAME, "summary")
        assert box.is_displayed() and box.location["y"] + box.size["height"] < 900  # all of it on the first screen
        assert "What it cannot conclude" in box.text
        folded = browser.find_elements(By.TAG_NAME, "details")
        assert folded and not any(d.get_attribute("open") for d in folded)
        tables = [t for t in browser.find_elements(By.TAG_NAME, "table") if t.is_displayed()]
        assert tables == []  # every table is inside a folded section until it is opened
        if os.environ.get("SELFPREF_SCREENSHOT"):
            browser.save_screenshot(os.environ["SELFPREF_SCREENSHOT"])
    finally:
        browser.quit()
