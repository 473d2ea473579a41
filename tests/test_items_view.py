"""items.html: the data it gathers from a sweep's files, and the page itself in a real headless browser."""

import json
import os
import shutil
from pathlib import Path

import pytest

from selfpref_sweep.analysis.report.items_view import collect_items, write_items_html

DEMO = {a["id"]: a for a in json.loads((Path(__file__).resolve().parents[1] / "selfpref_sweep" / "data"
                                        / "demo_articles.json").read_text())}
INJECTION = " </script><b>not bold</b>"  # markup in an article must be shown as text


def _order(p_own, mass=0.95, chosen="own"):
    return {"probs": {"1": p_own * mass, "2": (1 - p_own) * mass}, "mass": mass, "p_own": p_own,
            "chosen": chosen, "method": "full_distribution"}


def _question(score, reason=None, fwd=0.6, bwd=0.4):
    return {"score": None if reason else score, "excluded": reason is not None, "exclusion_reason": reason,
            "consistent": None, "orders": {"forward": _order(fwd), "backward": _order(bwd, chosen="other")}}


def _row(aid, rec, pref, reason=None, competence=None, dataset="demo"):
    demo = DEMO[aid]
    row = {"article_id": aid, "evaluator": "ev", "source": "human", "dataset": dataset, "article_truncated": False,
           "article": demo["article"] + INJECTION, "own_summary": f"Own summary: {demo['title']}.",
           "other_summary": demo["summary"], "recognition": _question(rec, reason),
           "preference": _question(pref, reason)}
    if competence is not None:
        row["competence"] = competence
    return row


def make_sweep(root: Path) -> Path:
    """Two complete cells (one item excluded, one with a competence block) and a failed cell."""
    sweep = root / "sweep"
    cells = {
        "0": ({"evaluator": "ev", "source": "human", "dataset": "demo", "setting": "pairwise", "label": "none",
               "finetune_task": "none"},
              [_row("demo-01", 0.71, 0.62), _row("demo-02", 0.31, 0.92),
               _row("demo-03", 0.5, 0.5, reason="low_answer_mass")]),
        "1": ({"evaluator": "ev", "source": "other", "dataset": "demo", "setting": "pairwise", "label": "none",
               "finetune_task": "recognition", "finetune_n_articles": 10, "transfer": "in_domain"},
              [_row("demo-01", 0.55, 0.15, competence={"score": 0.875, "excluded": False,
                                                              "orders": {"forward": {"p_own": 0.9}}}),
               _row("demo-02", 0.95, 0.45)]),
    }
    for name, (cell, rows) in cells.items():
        d = sweep / name
        (d / ".hydra").mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": "complete", "cell": cell}))
        (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    failed = sweep / "2"
    (failed / ".hydra").mkdir(parents=True)
    (failed / "cell.error.txt").write_text("DataError: boom")
    return sweep


def test_collect_items_reads_cells_items_and_dedups_articles(tmp_path):
    data = collect_items([make_sweep(tmp_path)])
    assert [c["status"] for c in data["cells"]] == ["complete", "complete", "failed"]
    assert [c["n_items"] for c in data["cells"]] == [3, 2, 0]
    assert data["cells"][0]["n_unreadable_lines"] == 1  # counted, not silently dropped
    assert "ft recognition N=10, in_domain" in data["cells"][1]["label"]
    assert len(data["items"]) == 5
    # one copy per article, not per cell
    assert sorted(data["articles"]) == ["demo/demo-01", "demo/demo-02", "demo/demo-03"]
    excluded = [it for it in data["items"] if it["questions"]["recognition"]["excluded"]]
    assert ([(it["article_id"], it["questions"]["recognition"]["reason"]) for it in excluded]
            == [("demo-03", "low_answer_mass")])
    parts = data["items"][0]["questions"]["recognition"]["parts"]
    assert [(p["name"], p["p_own"], p["mass"]) for p in parts] == [("forward", 0.6, 0.95), ("backward", 0.4, 0.95)]
    # each measurement's record, as its plug-in shows it; none where the item has no record
    assert data["items"][3]["measurements"] == {"competence": {"P(correct)": 0.875, "forward P(correct)": 0.9}}
    assert data["items"][0]["measurements"] == {}


def test_page_embeds_data_safely(tmp_path):
    sweep = make_sweep(tmp_path)
    page = write_items_html([sweep], sweep).read_text()
    # An article containing "</script>" must not end the data element early.
    assert page.count("</script>") == 2 and "<\\/script>" in page


def _browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("no Chromium + chromedriver installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def test_items_page_filters_and_sorts_in_a_real_browser(tmp_path):
    sweep = make_sweep(tmp_path)
    page = write_items_html([sweep], sweep)
    browser = _browser()
    try:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        browser.get(page.resolve().as_uri())
        rows = lambda: browser.find_elements(By.CSS_SELECTOR, "tr.item")  # noqa: E731
        assert len(rows()) == 5
        assert browser.find_element(By.ID, "count").text == "5 of 5 items"

        Select(browser.find_element(By.ID, "filter-cell")).select_by_value("1")
        assert [r.get_attribute("data-cell") for r in rows()] == ["1", "1"]
        assert "competence P(correct): 0.875" in rows()[0].text  # the competence control, when the cell has one

        Select(browser.find_element(By.ID, "filter-cell")).select_by_value("all")
        Select(browser.find_element(By.ID, "filter-exclusion")).select_by_value("reason:low_answer_mass")
        assert len(rows()) == 1 and "low_answer_mass" in rows()[0].text and "demo-03" in rows()[0].text

        Select(browser.find_element(By.ID, "filter-exclusion")).select_by_value("included")
        Select(browser.find_element(By.ID, "sort")).select_by_value("preference:desc")
        scores = [float(r.get_attribute("data-preference")) for r in rows()]
        assert scores == sorted(scores, reverse=True) == [0.92, 0.62, 0.45, 0.15]
        Select(browser.find_element(By.ID, "sort")).select_by_value("recognition:asc")
        scores = [float(r.get_attribute("data-recognition")) for r in rows()]
        assert scores == sorted(scores) and len(scores) == 4

        # The texts open on demand; the article is shown as text, never as markup.
        first = rows()[0]
        detail = first.find_element(By.XPATH, "following-sibling::tr[1]")
        assert not detail.is_displayed()
        first.find_element(By.CSS_SELECTOR, "button.toggle").click()
        assert detail.is_displayed()
        assert INJECTION.strip() in detail.text and "Own summary:" in detail.text
        assert len(detail.find_elements(By.TAG_NAME, "b")) == 3  # the three headings; the article's <b> is text

        shot = tmp_path / "items.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        if os.environ.get("SELFPREF_SCREENSHOT"):  # README's screenshot: SELFPREF_SCREENSHOT=docs/items.png
            shutil.copy(shot, os.environ["SELFPREF_SCREENSHOT"])
    finally:
        browser.quit()
