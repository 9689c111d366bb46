"""The ``toolnexus`` command: ``demo``, ``run TEAM.toml "prompt"`` and ``--version``.

Standard library only (``argparse``, ``tomllib``). While a team runs, the live handle
tree (id, state, turns, tokens) is redrawn in place on a terminal and printed as plain
snapshots, one per change, when the output is piped. Approvals are asked at the terminal
(``Approve? [y/n]``), taken from ``--yes``/``--no``, or read as one line from piped stdin.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import sys
import threading
import tomllib
from typing import IO, Any, Callable, Sequence

import attrs

from . import __version__
from .agent import AgentDef
from .data import AgentResult, Answer, Budget, HandleView, Request, make_answer
from .errors import ToolnexusError
from .runtime import Runtime
from .tools import Tool, tool

__all__ = ["main", "load_team", "Team", "TeamFileError", "LiveTree", "Approver", "drive"]

EXIT_DONE, EXIT_ERROR, EXIT_UNFINISHED = 0, 1, 2
REFRESH_S = 0.1

_CSI = "\x1b["


# --- the live handle tree ----------------------------------------------------------------


def tree_lines(views: Sequence[HandleView]) -> list[str]:
    """One aligned line per handle, indented by depth: id, state, turns, tokens."""
    if not views:
        return []
    depth = {view.id: view.id.count("/") for view in views}
    width = max(2 * depth[view.id] + len(view.id) for view in views)
    lines = []
    for view in views:
        label = "  " * depth[view.id] + view.id
        line = f"{label:<{width}}  {view.state:<9}  turns {view.turns:>2}  tokens {view.tokens:>6}"
        if view.pending is not None:
            line += "  (waiting for an answer)"
        lines.append(line.rstrip())
    return lines


class LiveTree:
    """Shows ``rt.handles()`` while a run goes on, from a small refresh thread.

    On a terminal the tree is redrawn in place with ANSI cursor movement; otherwise each
    change is printed once as plain lines (a snapshot followed by an empty line). The
    thread wakes every ``REFRESH_S`` seconds on an ``Event`` and draws only when the tree
    changed; ``stop()`` ends and joins it.
    """

    def __init__(self, rt: Runtime, stream: IO[str], *, tty: bool | None = None, enabled: bool = True) -> None:
        self._rt = rt
        self._out = stream
        self._tty = _is_tty(stream) if tty is None else tty
        self._enabled = enabled
        self._lock = threading.Lock()  # guards: _last, _drawn, _paused, writes to the stream
        self._last: list[str] | None = None
        self._drawn = 0
        self._paused = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LiveTree:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self._enabled or self._thread is not None:
            return
        if self._tty:
            self._write(f"{_CSI}?25l")  # hide the cursor while redrawing
        self._thread = threading.Thread(target=self._loop, name="toolnexus-tree", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Draw the last change, end the refresh thread and wait for it."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.refresh()
        if self._tty:
            self._write(f"{_CSI}?25h")

    def pause(self) -> None:
        """Draw the current tree and stop drawing (so a question can be asked below it)."""
        self.refresh()
        with self._lock:
            self._paused = True
            self._drawn = 0  # what comes next is printed below; start a fresh region
        if self._tty and self._thread is not None:
            self._write(f"{_CSI}?25h")  # the person answering needs to see the cursor

    def unpause(self) -> None:
        with self._lock:
            self._paused = False
            self._last = None
        if self._tty and self._thread is not None:
            self._write(f"{_CSI}?25l")

    def refresh(self) -> None:
        if not self._enabled:
            return
        lines = tree_lines(self._rt.handles())
        with self._lock:
            if self._paused or lines == self._last:
                return
            self._last = lines
            if self._tty:
                self._redraw(lines)
            else:
                self._out.write("\n".join(lines) + "\n\n")
                self._out.flush()

    def _redraw(self, lines: list[str]) -> None:
        columns = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        parts = [f"{_CSI}{self._drawn}F" if self._drawn else "\r"]
        parts += [f"{_CSI}2K{line[:columns]}\n" for line in lines]
        parts.append(f"{_CSI}J")  # clear what a longer previous tree left below
        self._out.write("".join(parts))
        self._out.flush()
        self._drawn = len(lines)

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_S):
            try:
                self.refresh()
            except Exception:  # a display problem must never take the run down
                return

    def _write(self, text: str) -> None:
        with self._lock:
            self._out.write(text)
            self._out.flush()


def _is_tty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


# --- approvals -------------------------------------------------------------------------


class Approver:
    """Answers approval requests: a fixed decision (``--yes``/``--no``), the person at the
    terminal (asked until they type y or n), or one line read from piped stdin. End of
    input declines."""

    def __init__(self, decision: bool | None, stdin: IO[str], out: IO[str]) -> None:
        self._decision = decision
        self._in = stdin
        self._out = out

    def __call__(self, request: Request) -> Answer:
        path = "/".join((request.data or {}).get("path") or [])
        where = f" (from {path})" if path else ""
        self._say(f"\n{request.kind} needed{where}:\n  {request.prompt}\n")
        ok = self._decide()
        return make_answer(request.id, ok) if ok else make_answer(request.id, False, reason="declined")

    def _decide(self) -> bool:
        if self._decision is not None:
            self._say(f"Approve? [y/n] {'y' if self._decision else 'n'} ({'--yes' if self._decision else '--no'})\n\n")
            return self._decision
        interactive = _is_tty(self._in)
        while True:
            self._say("Approve? [y/n] ")
            line = self._in.readline()
            if not line:  # end of input: nobody can say yes
                self._say("(no answer: declined)\n\n")
                return False
            reply = line.strip().lower()
            if not interactive:
                self._say(f"{reply}\n")
            if reply in ("y", "yes"):
                self._say("\n")
                return True
            if reply in ("n", "no") or not interactive:
                self._say("\n")
                return False
            self._say("please answer y or n\n")

    def _say(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def drive(rt: Runtime, entry: str, prompt: str, approver: Callable[[Request], Answer] | None, tree: LiveTree) -> AgentResult:
    """Run ``entry`` on ``prompt``; answer each pending request with ``approver`` and wait
    for the team to settle again. Without an approver a pending result is returned as is."""
    result = rt.run_agent(entry, prompt)
    while result.status == "pending" and result.pending is not None and approver is not None:
        tree.pause()
        try:
            answer = approver(result.pending)
        finally:
            tree.unpause()
        rt.resume(answer)
        result = rt.wait(result.handle_id)
    if result.status != "pending":
        rt.close(result.handle_id)
    return result


def _exit_code(result: AgentResult) -> int:
    if result.status == "done":
        return EXIT_DONE
    if result.status in ("pending", "incomplete"):
        return EXIT_UNFINISHED
    return EXIT_ERROR


def _summary(rt: Runtime, result: AgentResult, out: IO[str]) -> None:
    total = rt.inspect(rt.root).tokens
    out.write(f"\n{result.text}\n\n")
    if result.status != "done":
        limit = f" ({result.limit})" if result.limit else ""
        out.write(f"status: {result.status}{limit}\n")
    out.write(f"total tokens: {total}\n\nfinal tree:\n")
    out.write("\n".join(tree_lines(rt.handles())) + "\n")
    out.flush()


# --- the team file -------------------------------------------------------------------------


class TeamFileError(ToolnexusError):
    """The team file cannot be read or does not describe a runnable team."""


@attrs.frozen
class Team:
    """A team file, checked: the entry agent, the connection options and the registry."""

    entry: str
    connection: dict[str, Any]
    registry: dict[str, AgentDef]


_TOP_KEYS = ("entry", "connection", "agents")
_CONNECTION_KEYS = ("base_url", "model", "style", "api_key_env", "timeout_ms", "retries", "request_params")
_AGENT_KEYS = ("does", "soul", "model", "team", "budget", "tools")
_BUDGET_KEYS = tuple(field.name for field in attrs.fields(Budget))
_STYLES = ("openai", "anthropic")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_END_OF_DOCUMENT = "(at end of document)"


def load_team(path: str) -> Team:
    """Read and check a team file.

    Raises:
        TeamFileError: the file is missing, is not valid TOML (the message names the
            line and the problem) or names unknown keys, agents or tools.
    """
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except OSError as exc:
        raise TeamFileError(f"{path}: cannot read the team file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TeamFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TeamFileError(f"{path}: {_toml_problem(exc, text)}") from None
    return _check_team(path, data)


def _toml_problem(exc: tomllib.TOMLDecodeError, text: str) -> str:
    """``line L, column C: invalid TOML: <problem>`` from tomllib's error (Python 3.11+
    puts the position in the message; 3.14 also has ``lineno``/``colno``)."""
    message = getattr(exc, "msg", None) or str(exc)
    line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    match = _TOML_POSITION.search(message)
    if match:
        message = message[: match.start()]
        line, column = line or int(match.group(1)), column or int(match.group(2))
    elif message.endswith(_END_OF_DOCUMENT):
        message = message[: -len(_END_OF_DOCUMENT)].rstrip()
        line = line or text.count("\n") + (0 if text.endswith("\n") else 1)
        column = column or len(text.rstrip("\n").rsplit("\n", 1)[-1]) + 1
    if line is None:
        return f"invalid TOML: {message}"
    return f"line {line}, column {column}: invalid TOML: {message}"


def _check_team(path: str, data: dict[str, Any]) -> Team:
    def fail(problem: str) -> TeamFileError:
        return TeamFileError(f"{path}: {problem}")

    _unknown(data, _TOP_KEYS, "the top level", fail)
    connection = data.get("connection", {})
    if not isinstance(connection, dict):
        raise fail("[connection] must be a table")
    _unknown(connection, _CONNECTION_KEYS, "[connection]", fail)
    agents = data.get("agents")
    if not isinstance(agents, dict) or not agents:
        raise fail("no agents: define at least one [agents.NAME] table")
    base = os.path.dirname(os.path.abspath(path))
    registry = {name: _agent_def(name, spec, base, fail) for name, spec in agents.items()}
    for name, definition in registry.items():
        for member in definition.team:
            if member not in registry:
                raise fail(f"[agents.{name}]: team member {member!r} is not defined (agents: {', '.join(sorted(registry))})")
    entry = data.get("entry")
    if entry is None:
        if len(registry) != 1:
            raise fail(f'say which agent runs first, e.g. entry = "{next(iter(registry))}"')
        entry = next(iter(registry))
    if not isinstance(entry, str) or entry not in registry:
        raise fail(f"entry {entry!r} is not defined (agents: {', '.join(sorted(registry))})")
    return Team(entry=entry, connection=dict(connection), registry=registry)


def _unknown(table: dict[str, Any], known: tuple[str, ...], where: str, fail: Callable[[str], TeamFileError]) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise fail(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")


def _agent_def(name: str, spec: Any, base: str, fail: Callable[[str], TeamFileError]) -> AgentDef:
    where = f"[agents.{name}]"
    if not isinstance(spec, dict):
        raise fail(f"{where} must be a table")
    _unknown(spec, _AGENT_KEYS, where, fail)
    does = spec.get("does")
    if not isinstance(does, str) or not does.strip():
        raise fail(f'{where}: "does" (one line: what this agent does) is required')
    for key in ("soul", "model"):
        if key in spec and not isinstance(spec[key], str):
            raise fail(f"{where}: {key} must be a string")
    team = spec.get("team", [])
    if not isinstance(team, list) or not all(isinstance(member, str) for member in team):
        raise fail(f"{where}: team must be a list of agent names")
    budget = spec.get("budget")
    if budget is not None:
        if not isinstance(budget, dict):
            raise fail(f"{where}: budget must be a table, e.g. [agents.{name}.budget]")
        _unknown(budget, _BUDGET_KEYS, f"[agents.{name}.budget]", fail)
        for key, value in budget.items():
            if type(value) is not int or value < 0:
                raise fail(f"[agents.{name}.budget]: {key} must be a whole number >= 0")
        budget = Budget(**budget)
    tools = spec.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(ref, str) for ref in tools):
        raise fail(f'{where}: tools must be a list of "module:attribute" strings')
    return AgentDef(
        name,
        does,
        soul=spec.get("soul", ""),
        model=spec.get("model", "inherit"),
        team=tuple(team),
        budget=budget,
        tools=tuple(_import_tool(ref, base, where, fail) for ref in tools),
    )


def _import_tool(ref: str, base: str, where: str, fail: Callable[[str], TeamFileError]) -> Tool:
    """``"module:attribute"``: a ``Tool`` or a plain function; modules next to the team
    file are importable."""
    module_name, _, attribute = ref.partition(":")
    if not module_name or not attribute:
        raise fail(f'{where}: tool {ref!r} must look like "module:attribute"')
    if base not in sys.path:
        sys.path.insert(0, base)
    try:
        value: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
    except Exception as exc:
        raise fail(f"{where}: cannot load tool {ref!r}: {type(exc).__name__}: {exc}") from None
    if isinstance(value, Tool):
        return value
    if callable(value):
        return tool(value)
    raise fail(f"{where}: {ref!r} is neither a Tool nor a function")


# --- the commands -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolnexus",
        description="Synchronous, thread-based LLM agent teams that delegate with a task tool.",
    )
    parser.add_argument("--version", action="version", version=f"toolnexus {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def approvals(command: argparse.ArgumentParser, *, no_input: bool = False) -> None:
        group = command.add_mutually_exclusive_group()
        group.add_argument("--yes", "-y", dest="decision", action="store_const", const=True, help="approve every request")
        group.add_argument("--no", "-n", dest="decision", action="store_const", const=False, help="decline every request")
        if no_input:
            group.add_argument("--no-input", action="store_true", help="never ask: a run that needs an answer stops pending (exit 2)")
        command.add_argument("--no-tree", action="store_true", help="do not show the live handle tree")

    demo = commands.add_parser(
        "demo",
        help="run a scripted team offline: delegation in parallel and an approval",
        description="A coordinator delegates to a researcher and a writer in parallel; publishing needs your approval. "
        "Runs on a built-in scripted model: no network, no key.",
    )
    approvals(demo)
    demo.add_argument("--delay", type=float, default=0.2, metavar="SECONDS", help="time each scripted model reply takes (default 0.2)")

    run = commands.add_parser(
        "run",
        help="run a team from a TOML file on a model endpoint",
        description="Run the entry agent of TEAM (a TOML file) on PROMPT. The key comes from the environment "
        "(OPENAI_API_KEY or ANTHROPIC_API_KEY by style, or [connection] api_key_env). "
        "Exit status: 0 done, 2 pending or incomplete, 1 error.",
    )
    run.add_argument("team", metavar="TEAM.toml")
    run.add_argument("prompt", metavar="PROMPT")
    run.add_argument("--base-url", help="model endpoint (overrides [connection] base_url)")
    run.add_argument("--model", help="model name (overrides [connection] model)")
    run.add_argument("--style", choices=_STYLES, help="wire style (overrides [connection] style)")
    run.add_argument("--entry", help="the agent to run (overrides entry)")
    run.add_argument("--json", action="store_true", help="print the result as JSON (the tree goes to stderr)")
    approvals(run, no_input=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_UNFINISHED
    try:
        if args.command == "demo":
            return _demo(args)
        return _run(args)
    except ToolnexusError as exc:
        sys.stderr.write(f"toolnexus: error: {exc}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("\ntoolnexus: interrupted\n")
        return 130


def _demo(args: argparse.Namespace) -> int:
    from .demo import ENTRY, PROMPT, registry, scripted_model

    out = sys.stdout
    out.write(f"toolnexus {__version__} demo: {ENTRY} delegates to researcher and writer (scripted model, offline)\n")
    out.write(f"prompt: {PROMPT}\n\n")
    out.flush()
    rt = Runtime(registry(), generate=scripted_model(max(0.0, args.delay)))
    return _execute(rt, ENTRY, PROMPT, Approver(args.decision, sys.stdin, out), out, show_tree=not args.no_tree)


def _run(args: argparse.Namespace) -> int:
    team = load_team(args.team)
    entry = args.entry or team.entry
    if entry not in team.registry:
        raise TeamFileError(f"--entry {entry!r} is not defined in {args.team} (agents: {', '.join(sorted(team.registry))})")
    connection = team.connection
    base_url = args.base_url or connection.get("base_url")
    if not base_url:
        raise TeamFileError(f"no model endpoint: give --base-url or set base_url in [connection] of {args.team}")
    model = args.model or connection.get("model")
    if not model and any(definition.model in ("inherit", "") for definition in team.registry.values()):
        raise TeamFileError(f"no model: give --model or set model in [connection] of {args.team}")
    style = args.style or connection.get("style", "openai")
    if style not in _STYLES:
        raise TeamFileError(f"{args.team}: [connection] style must be one of {', '.join(_STYLES)}, not {style!r}")
    options: dict[str, Any] = {"base_url": base_url, "model": model or "default", "style": style}
    key_env = connection.get("api_key_env")
    if key_env:
        if not os.environ.get(key_env):
            raise TeamFileError(f"{args.team}: [connection] api_key_env names {key_env}, which is not set")
        options["api_key"] = os.environ[key_env]
    for key in ("timeout_ms", "retries", "request_params"):
        if key in connection:
            options[key] = connection[key]
    rt = Runtime(team.registry, **options)
    display = sys.stderr if args.json else sys.stdout
    approver = None if args.no_input else Approver(args.decision, sys.stdin, display)
    return _execute(rt, entry, args.prompt, approver, display, show_tree=not args.no_tree, as_json=args.json)


def _execute(
    rt: Runtime,
    entry: str,
    prompt: str,
    approver: Callable[[Request], Answer] | None,
    display: IO[str],
    *,
    show_tree: bool,
    as_json: bool = False,
) -> int:
    from .wire import to_json

    try:
        with LiveTree(rt, display, enabled=show_tree) as tree:
            result = drive(rt, entry, prompt, approver, tree)
        if as_json:
            sys.stdout.write(to_json(result) + "\n")
            sys.stdout.flush()
        else:
            _summary(rt, result, display)
        if result.status == "error":
            sys.stderr.write(f"toolnexus: the run failed: {result.text}\n")
        return _exit_code(result)
    finally:
        rt.close(rt.root, force=True)
