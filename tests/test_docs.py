"""The docs: README stays a manual (short, its links resolve), and the docs site builds with --strict (every
page in the nav, no link to a missing page or image)."""

import re
import subprocess
import sys

from tests.conftest import REPO

README_MAX_LINES = 320  # a manual a newcomer reads in five minutes; method, statistics and results live in docs/


def test_readme_is_a_short_manual_whose_links_resolve():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    links = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t and not t.startswith("#")]
    assert links, "README links to its docs"
    missing = [t for t in links if not (REPO / t.split("#")[0]).exists()]
    assert not missing, missing


def test_the_docs_site_builds_strictly(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_every_docs_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    pages = sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))
    assert [p for p in pages if p not in nav] == []
