"""The documentation site as a reader gets it: built in silence, every public name of the API
reference documented once, every public method of the classes users drive documented (what
it takes, returns and raises) and on the reference's pages, and the Runtime page, opened in
a real headless Chromium, showing signatures laid out on lines of their own that fit the
page, with the sections of a docstring (Args, Returns, Raises) as tables.

``.ci/run`` builds the site once and names its folder in ``TOOLNEXUS_TEST_SITE``; elsewhere
the tests build it (``properdocs``, from the docs extra)."""

from __future__ import annotations

import collections
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

import toolnexus
import toolnexus.mcp
from _browser import chromium
from _services import missing

ROOT = Path(__file__).resolve().parent.parent
#: Wide enough for the navigation, the page and its table of contents side by side.
WINDOW = (1280, 1000)
#: The classes a user drives, by the name the reference gives them (under ``toolnexus.``).
DRIVEN = {
    "Client": toolnexus.Client,
    "Runtime": toolnexus.Runtime,
    "Agent": toolnexus.Agent,
    "RunStream": toolnexus.RunStream,
    "mcp.MCPServer": toolnexus.mcp.MCPServer,
}
#: Methods with nothing to raise: closing is idempotent and quiet, metrics are rendered from
#: memory, and an MCP call turns every failure into an error result.
RAISE_NOTHING = {
    "Client.close", "Client.metrics", "Runtime.metrics", "Agent.close", "RunStream.close",
    "mcp.MCPServer.close", "mcp.MCPServer.call",
}


def public_members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties of ``cls`` (its own and inherited), as functions."""
    for name, member in inspect.getmembers(cls):
        if name.startswith("_"):
            continue
        if isinstance(member, property) and member.fget is not None:
            yield name, member.fget
        elif inspect.isfunction(member):
            yield name, member


def missing_sections(function: Any, qualified: str) -> list[str]:
    """What a method's docstring leaves out: an Args entry for each parameter, a Returns
    section when it returns something, a Raises section unless it has nothing to raise."""
    doc = inspect.getdoc(function) or ""
    signature = inspect.signature(function)
    gaps = []
    parameters = [p for p in signature.parameters.values() if p.name not in ("self", "cls")]
    args = doc.split("Args:", 1)[1].split("\n\n", 1)[0] if "Args:" in doc else ""
    for parameter in parameters:
        if not re.search(rf"^\s+\**{parameter.name}( \(.*\))?:", args, re.MULTILINE):
            gaps.append(f"Args: {parameter.name}")
    if signature.return_annotation not in (None, "None") and "Returns:" not in doc:
        gaps.append("Returns:")
    if qualified not in RAISE_NOTHING and "Raises:" not in doc:
        gaps.append("Raises:")
    return gaps


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
    anchors: collections.Counter[str] = collections.Counter()
    for page in (site / "reference").rglob("index.html"):
        anchors.update(re.findall(r'<h\d id="toolnexus\.([A-Za-z_]+)"', page.read_text(encoding="utf-8")))
    twice = sorted(name for name, count in anchors.items() if count > 1)
    assert twice == [], f"documented more than once: {twice}"
    assert anchors["Agent"] == 1 and anchors["agent"] == 1
    assert {"Client", "Runtime", "RunStream", "Agent"} <= set(anchors) & set(toolnexus.__all__)


def test_every_public_method_of_the_driven_classes_says_what_it_takes_returns_and_raises() -> None:
    gaps = {}
    for label, cls in DRIVEN.items():
        for name, function in public_members(cls):
            if not inspect.getdoc(function):
                gaps[f"{label}.{name}"] = ["no docstring"]
            elif not isinstance(inspect.getattr_static(cls, name), property):
                missing = missing_sections(function, f"{label}.{name}")
                if missing:
                    gaps[f"{label}.{name}"] = missing
    assert gaps == {}


def test_every_public_method_of_the_driven_classes_has_its_entry_in_the_api_reference(site: Path) -> None:
    anchors: set[str] = set()
    for page in (site / "reference").rglob("index.html"):
        anchors.update(re.findall(r'id="(toolnexus\.[A-Za-z_.]+)"', page.read_text(encoding="utf-8")))
    expected = {f"toolnexus.{label}.{name}" for label, cls in DRIVEN.items() for name, _ in public_members(cls)}
    assert sorted(expected - anchors) == []


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
