"""The documentation site as a reader gets it: built in silence, every public name of the API
reference documented once, and the Runtime page, opened in a real headless Chromium, showing
signatures laid out on lines of their own that fit the page, with the sections of a
docstring (Args, Returns, Raises) as tables.

``.ci/run`` builds the site once and names its folder in ``TOOLNEXUS_TEST_SITE``; elsewhere
the tests build it (``properdocs``, from the docs extra)."""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from _browser import chromium
from _services import missing

ROOT = Path(__file__).resolve().parent.parent
#: Wide enough for the navigation, the page and its table of contents side by side.
WINDOW = (1280, 1000)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("TOOLNEXUS_TEST_SITE")
    if given:
        return Path(given)
    if shutil.which("properdocs", path=os.path.dirname(sys.executable)) is None:
        missing("properdocs is not installed: pip install -e '.[docs]'")
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "properdocs", "build", "--strict", "--quiet", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    # --quiet leaves only what a newcomer would be told besides the build: nothing.
    assert (built.stdout + built.stderr).strip() == "", built.stdout + built.stderr
    return folder


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium(tmp_path_factory.mktemp("chromium-profile"), WINDOW) as driver:
        yield driver


def test_each_public_name_has_one_entry_in_the_api_reference(site: Path) -> None:
    import toolnexus

    anchors: collections.Counter[str] = collections.Counter()
    for page in (site / "reference").rglob("index.html"):
        anchors.update(re.findall(r'<h\d id="toolnexus\.([A-Za-z_]+)"', page.read_text(encoding="utf-8")))
    twice = sorted(name for name, count in anchors.items() if count > 1)
    assert twice == [], f"documented more than once: {twice}"
    assert anchors["Agent"] == 1 and anchors["agent"] == 1
    assert {"Client", "Runtime", "RunStream", "Agent"} <= set(anchors) & set(toolnexus.__all__)


def test_the_runtime_page_shows_signatures_that_fit_and_sections_as_tables(
    site: Path, browser: Any, tmp_path: Path
) -> None:
    browser.get((site / "reference" / "runtime" / "index.html").as_uri())
    signatures = browser.execute_script(
        "return [...document.querySelectorAll('.doc-signature')].map(s => {"
        " const code = s.querySelector('code');"
        " return {id: s.previousElementSibling ? s.previousElementSibling.id : '',"
        " lines: code.textContent.trim().split('\\n').length,"
        " overflow: code.scrollWidth - code.clientWidth}; })"
    )
    shot = tmp_path / "runtime-reference.png"
    browser.save_screenshot(str(shot))
    by_id = {entry["id"]: entry for entry in signatures}
    runtime = by_id["toolnexus.Runtime"]
    assert runtime["lines"] > 20, f"the Runtime signature is not one parameter a line: {runtime} ({shot})"
    sideways = [entry["id"] for entry in signatures if entry["overflow"] > 0]
    assert sideways == [], f"signatures that scroll sideways: {sideways} ({shot})"
    tables = browser.execute_script(
        "return [...document.querySelectorAll('.doc-section-title')].filter(t => {"
        " const next = t.closest('p').nextElementSibling;"  # the theme wraps a table to scroll it
        " return next && (next.tagName === 'TABLE' || next.querySelector('table') !== null); })"
        ".map(t => t.textContent)"
    )
    assert "Raises:" in tables, f"no docstring section rendered as a table ({shot})"
    assert shot.stat().st_size > 10_000
