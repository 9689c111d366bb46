"""The code blocks of README.md and docs/: found, checked and run, so an example cannot go stale.

A fenced block may carry markers in an HTML comment on the line right above its fence
(invisible on GitHub and on the site)::

    <!-- docs: endpoint continue service=postgresql requires=toolnexus.flask -->

- ``continue``: the block runs after the blocks before it on the same page (back to the
  first one without ``continue``), in one interpreter, as a reader pastes them in turn;
- ``endpoint``: it talks to a real model server: it runs against a ``ScriptedLLMServer``
  whose URL replaces the endpoint URLs written in the block (``http://localhost:11434/v1``...);
- ``service=NAME[,NAME]``: it needs PostgreSQL (``postgresql``), Redis (``redis``) or the
  reference MCP server (``mcp-everything``): the test services' URLs replace the ones written
  in the block; without the service the block skips (and fails under ``CI=true``);
- ``requires=NAME[,NAME]``: it shows a part that may not be installed yet: a module
  (``toolnexus.flask``), an attribute (``toolnexus.Runtime.stream``) or a command of the
  command line (``cli.backup``); the block skips while one is missing;
- ``file=NAME``: the block is a module of the example (``team.py``): written to the folder
  the next blocks run in, not run by itself; ``worker=MODULE``: a Celery worker on that
  module runs beside the block (``celery -A MODULE worker -P threads``).

Python blocks run in a fresh interpreter in an empty folder; a ``print(...)`` line with a
trailing comment in a block that runs offline says what it prints (``print(x)  # 6``), and
that line must appear in the output, in order; so must every line of a text block marked
``output`` right after it. Shell blocks are not run: each ``pip
install`` in them (and in the prose) must install from the source tree, never the package
of that name on PyPI, and each ``toolnexus`` command must parse. TOML blocks must parse.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "_docs_run.py"
PYTHON = ("python", "py", "pycon")
SHELL = ("bash", "sh", "shell", "console")
TIMEOUT_S = 90

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^\n]*$")
_MARKER = re.compile(r"^\s*<!--\s*docs:(?P<body>.*?)-->\s*$")
_EXPECTED = re.compile(r"^\s*print\(.*\)\s+#\s?(?P<text>.+?)\s*$")


@dataclass
class Block:
    """One fenced code block: where it is, its language, its text and its markers."""

    path: Path
    line: int  # the line of the block's first line of code (1-based)
    lang: str
    code: str
    markers: dict[str, str] = field(default_factory=dict)
    printed: list[str] = field(default_factory=list)  # from a text block marked ``output``

    @property
    def name(self) -> str:
        try:
            shown = self.path.relative_to(ROOT)
        except ValueError:
            shown = Path(self.path.name)
        return f"{shown}:{self.line}"

    def needs(self, key: str) -> list[str]:
        value = self.markers.get(key, "")
        return [each for each in value.split(",") if each]


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page of docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def collect(path: Path) -> list[Block]:
    """Every fenced block of one Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not (lines[end].strip().startswith(fence) and lines[end].strip().strip(fence[0]) == ""):
            body.append(lines[end][len(indent):] if lines[end].startswith(indent) else lines[end].lstrip())
            end += 1
        marker = _MARKER.match(lines[index - 1]) if index > 0 else None
        blocks.append(Block(path, index + 2, opening["lang"].lower(), "\n".join(body) + "\n", _markers(marker["body"] if marker else "")))
        index = end + 1
    return blocks


def _markers(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for token in text.split():
        key, _, value = token.partition("=")
        found[key] = value
    return found


def python_blocks(paths: list[Path]) -> list[Block]:
    """The Python blocks that run (``file=`` blocks run only as part of a chain); a text
    block marked ``output`` right after one is what that block prints."""
    found = []
    for path in paths:
        previous: Block | None = None
        for block in collect(path):
            if block.lang in PYTHON:
                previous = block
                if "file" not in block.markers:
                    found.append(block)
            elif "output" in block.markers and previous is not None:
                previous.printed.extend(line.rstrip() for line in block.code.splitlines())
    return found


def chain(block: Block) -> list[Block]:
    """The blocks that run for ``block``: itself and, with ``continue``, the ones before it
    on its page back to the first without ``continue`` (``file=`` blocks included)."""
    before = [each for each in collect(block.path) if (each.lang in PYTHON or "file" in each.markers) and each.line < block.line]
    run = [block]
    current = block
    while "continue" in current.markers and before:
        current = before.pop()
        run.insert(0, current)
    return run


def missing_requirement(name: str) -> bool:
    """Whether ``name`` (a module, a module's attribute, or ``cli.COMMAND``) is missing."""
    if name.startswith("cli."):
        return name.removeprefix("cli.") not in cli_commands()
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return True
            target = getattr(target, attribute)
        return False
    return True


def cli_commands() -> dict[str, object]:
    """The command line's subcommands and their parsers."""
    from toolnexus.cli import commands as cli

    parser = cli._parser()
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            return dict(choices)
    return {}


def expected_output(blocks: list[Block]) -> list[list[str]]:
    """The lines the blocks say they print: those of ``print(...)  # text`` comments, and
    those of each ``output`` text block (each list in order)."""
    commented = [m["text"] for block in blocks for line in block.code.splitlines() if (m := _EXPECTED.match(line))]
    return [commented] + [block.printed for block in blocks if block.printed]


def unmet_output(expected: list[list[str]], stdout: str) -> str | None:
    """The first expected line missing from ``stdout`` (each list in order), or None."""
    for wanted in expected:
        lines = iter(line.rstrip() for line in stdout.splitlines())
        for want in wanted:
            if not any(line == want for line in lines):
                return want
    return None


def run(blocks: list[Block], *, services: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``blocks`` (one chain) in a fresh interpreter in ``cwd``."""
    endpoint = any("endpoint" in block.markers for block in blocks)
    worker = next((block.markers["worker"] for block in blocks if block.markers.get("worker")), None)
    payload = {
        "blocks": [{"path": str(b.path), "line": b.line, "code": b.code, "file": b.markers.get("file")} for b in blocks],
        "endpoint": endpoint,
        "services": services,
        "worker": worker,
    }
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(RUNNER)],
        input=json.dumps(payload),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


# --- install lines and commands ---------------------------------------------------------------

_PIP = re.compile(r"\bpip3?\s+install\b(?P<args>[^`\n&|;]*)")
_INLINE = re.compile(r"`([^`\n]+)`")


def pip_lines(path: Path) -> list[tuple[int, str]]:
    """Every ``pip install ...`` on a page, in shell blocks and in inline code, with its line."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for match in _PIP.finditer(line):
            found.append((number, "pip install" + match["args"].rstrip()))
    return found


def pip_problem(line: str) -> str | None:
    """Why ``pip install ...`` would not install this project from its source tree, or None.

    Installing other packages by name is fine (``pip install opentelemetry-exporter-otlp``);
    naming ``toolnexus`` is not: on PyPI that name is another project.
    """
    try:
        words = shlex.split(line)[2:]
    except ValueError as exc:
        return f"cannot be split as a shell line: {exc}"
    for word in words:
        if word.startswith("-"):
            continue
        name = re.split(r"[\[<>=!~ ]", word, maxsplit=1)[0].lower()
        if name in ("toolnexus", "toolnexus-sync"):
            return f"{word!r} installs the package of that name from PyPI, another project: install from the source tree (pip install -e '.[...]')"
    if not any(not w.startswith("-") for w in words):
        return "installs nothing"
    return None


def command_lines(block: Block) -> list[tuple[int, list[str]]]:
    """The ``toolnexus ...`` commands of a shell block (continuation lines joined, ``&&`` split)."""
    joined: list[tuple[int, str]] = []
    pending = ""
    start = block.line
    for offset, line in enumerate(block.code.splitlines()):
        if not pending:
            start = block.line + offset
        pending += line.rstrip("\\").strip() + " " if line.rstrip().endswith("\\") else line.strip()
        if not line.rstrip().endswith("\\"):
            joined.append((start, pending))
            pending = ""
    commands = []
    for number, text in joined:
        text = text.split("#", 1)[0] if not text.startswith("#") else ""
        for part in re.split(r"&&|\|\||;|\|", text):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            if words[:1] == ["toolnexus"] or words[:3] == ["python", "-m", "toolnexus"]:
                commands.append((number, words[3:] if words[0] == "python" else words[1:]))
    return commands


def command_problem(arguments: list[str]) -> str | None:
    """Why the command line would refuse ``arguments``, or None."""
    from toolnexus.cli import commands as cli

    parser = cli._parser()
    parser.exit_on_error = False
    for action in parser._actions:
        for sub in (getattr(action, "choices", None) or {}).values():
            sub.exit_on_error = False
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(arguments)
    except SystemExit as exc:  # argparse exits for --help, --version and some errors
        return None if exc.code == 0 else f"exit {exc.code}"
    except Exception as exc:  # argparse.ArgumentError and friends
        return str(exc)
    return None


def toml_problem(block: Block) -> str | None:
    try:
        tomllib.loads(block.code)
    except tomllib.TOMLDecodeError as exc:
        return str(exc)
    return None
