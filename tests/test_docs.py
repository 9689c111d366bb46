"""Every code block of README.md and docs/ works as written (see ``_docs.py`` for the markers):
Python blocks run, install lines install this project from its source tree, ``toolnexus``
commands parse, TOML parses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import _docs
from _services import service_url

PAGES = _docs.pages()
PYTHON_BLOCKS = _docs.python_blocks(PAGES)
SHELL_BLOCKS = [block for page in PAGES for block in _docs.collect(page) if block.lang in _docs.SHELL]
TOML_BLOCKS = [block for page in PAGES for block in _docs.collect(page) if block.lang == "toml"]
PIP_LINES = [(page, number, line) for page in PAGES for number, line in _docs.pip_lines(page)]


def run_chain(block: _docs.Block, tmp_path: Path) -> None:
    """Run ``block`` (after the blocks it continues) and fail with its output if it fails."""
    blocks = _docs.chain(block)
    for name in sorted({need for each in blocks for need in each.needs("requires")}):
        if _docs.missing_requirement(name):
            pytest.skip(f"{name} is not in this build")
    services = {name: service_url(name) for name in sorted({s for each in blocks for s in each.needs("service")})}
    proc = _docs.run(blocks, services=services, cwd=tmp_path)
    detail = f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{block.name} failed\n{detail}"
    if not any("endpoint" in each.markers for each in blocks):
        missing = _docs.unmet_output(_docs.expected_output([block]), proc.stdout)
        assert missing is None, f"{block.name} does not print {missing!r}, as its comment says\n{detail}"


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[block.name for block in PYTHON_BLOCKS])
def test_python_block_runs(block: _docs.Block, tmp_path: Path) -> None:
    run_chain(block, tmp_path)


@pytest.mark.parametrize("page,number,line", PIP_LINES, ids=[f"{p.name}:{n}" for p, n, _ in PIP_LINES])
def test_install_line_installs_from_the_source_tree(page: Path, number: int, line: str) -> None:
    problem = _docs.pip_problem(line)
    assert problem is None, f"{page.name}:{number}: {line}: {problem}"


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[block.name for block in SHELL_BLOCKS])
def test_toolnexus_commands_in_a_shell_block_parse(block: _docs.Block) -> None:
    for name in block.needs("requires"):
        if _docs.missing_requirement(name):
            pytest.skip(f"{name} is not in this build")
    for number, arguments in _docs.command_lines(block):
        problem = _docs.command_problem(arguments)
        assert problem is None, f"{block.path.name}:{number}: toolnexus {' '.join(arguments)}: {problem}"


@pytest.mark.parametrize("block", TOML_BLOCKS, ids=[block.name for block in TOML_BLOCKS])
def test_toml_block_parses(block: _docs.Block) -> None:
    problem = _docs.toml_problem(block)
    assert problem is None, f"{block.name}: {problem}"


def test_every_page_of_the_site_is_in_its_navigation() -> None:
    site = (_docs.ROOT / "properdocs.yml").read_text(encoding="utf-8")
    pages = sorted(str(p.relative_to(_docs.ROOT / "docs")) for p in (_docs.ROOT / "docs").rglob("*.md"))
    assert pages, "docs/ has no pages"
    assert [page for page in pages if page not in site] == []


def test_every_relative_link_of_the_readme_reaches_a_file() -> None:
    text = (_docs.ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#", 1)[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t and not t.startswith("#")]
    assert targets, "the README links to no page"
    assert [t for t in targets if not (_docs.ROOT / t).exists()] == []
