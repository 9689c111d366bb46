"""The ``toolnexus`` command: ``demo``, ``run TEAM.toml "prompt"``, ``answer``, ``retry``,
``show``, ``prune``, ``backup``, ``replay``, ``eval``, ``mcp serve`` and ``--version`` (the
stored-tree commands live in ``stored``, ``replay`` in ``replaying``, the MCP server in
``mcp_serve``).

Standard library only (``argparse``, ``tomllib``). The live tree and the approval prompts
live in ``console``; team files are read and checked by ``teamfile``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from typing import IO, Any, Callable, Iterator, Sequence

import attrs

from .. import __version__
from . import mcp_serve as climcp
from . import replaying as clireplay
from . import stored as clistate
from .console import Approver, LiveTree, dollars, run_views, tree_lines
from ..data import AgentResult, Answer, Request, make_answer
from ..errors import ToolnexusError, UnknownRequest
from ..evals import command as eval_command
from .._model.transport.failures import REFUSED_HINT
from .._team.runtime import Runtime
from .teamfile import STYLES, Team, TeamFileError, load_team

__all__ = ["main", "load_team", "Team", "TeamFileError", "LiveTree", "Approver", "drive", "tree_lines"]

EXIT_DONE, EXIT_ERROR, EXIT_UNFINISHED = 0, 1, 2
_DATA_HELP = (
    "what the answer carries with --yes, as JSON: the fields of a form an MCP server asks for, "
    'e.g. \'{"approve": true, "note": "ok"}\''
)
#: Ctrl-C, and a reader that closed the pipe early: as a shell reports SIGINT and SIGPIPE.
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141
#: The library's hint after ``connection refused``, as a command's options say it.
REFUSED_HINT_HERE = (
    "is a model server listening there? give --base-url URL (or base_url in [connection]) to reach another"
)


def drive(
    rt: Runtime,
    entry: str,
    prompt: str,
    approver: Callable[[Request], Answer] | None,
    tree: LiveTree,
    *,
    keep_failed: bool = False,
) -> AgentResult:
    """Run ``entry`` on ``prompt``; answer each pending request with ``approver`` and wait
    for the team to settle again. Without an approver a pending result is returned as is;
    with ``keep_failed`` a failed run stays open too, for ``toolnexus retry``."""
    handle = rt.spawn(rt.root, entry)
    tree.follow(handle.id)
    rt.wake(handle, prompt)
    result = rt.wait(handle)
    while result.status == "pending" and result.pending is not None and approver is not None:
        tree.pause(result)
        try:
            answer = approver(result.pending)
        finally:
            tree.unpause()
        rt.resume(answer)
        result = rt.wait(handle)
    if result.status != "pending" and not (keep_failed and result.status == "error"):
        rt.close(handle)
    return result


def _exit_code(result: AgentResult) -> int:
    if result.status == "done":
        return EXIT_DONE
    if result.status in ("pending", "incomplete"):
        return EXIT_UNFINISHED
    return EXIT_ERROR


def _summary(rt: Runtime, result: AgentResult, top: str | None, out: IO[str], *, show_tree: bool = True) -> None:
    """The result, the run's totals and (with ``show_tree``) its final tree (this command's run only)."""
    views = run_views(rt, top)
    out.write(f"\n{result.text}\n\n")
    if result.status != "done":
        limit = f" ({result.limit})" if result.limit else ""
        out.write(f"status: {result.status}{limit}\n")
    if views:
        out.write(f"total tokens: {views[0].tokens}\n")  # the top handle's: its own and its teammates'
        if views[0].cost is not None:
            out.write(f"total cost: {dollars(views[0].cost)}\n")
        if views[0].unmeasured_calls:  # the totals above are a lower bound
            out.write(f"model calls without usage (counted 0): {views[0].unmeasured_calls}\n")
    if show_tree:
        out.write("\nfinal tree:\n")
        out.write("\n".join(tree_lines(views)) + "\n")
    out.flush()


# --- the commands -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolnexus",
        description="Synchronous, thread-based LLM agent teams that delegate with a task tool.",
    )
    parser.add_argument("--version", action="version", version=f"toolnexus {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    _add_running_commands(commands)
    _add_continuing_commands(commands)
    clistate.add_commands(commands)
    clireplay.add_command(commands)
    eval_command.add_command(commands, _connection_flags)
    climcp.add_commands(commands, _connection_flags)
    return parser


def _approval_flags(command: argparse.ArgumentParser, *, no_input: bool = False) -> None:
    """How a command that runs a team answers the requests its run asks."""
    group = command.add_mutually_exclusive_group()
    group.add_argument("--yes", "-y", dest="decision", action="store_const", const=True, help="approve every request")
    group.add_argument("--no", "-n", dest="decision", action="store_const", const=False, help="decline every request")
    if no_input:
        group.add_argument(
            "--no-input", action="store_true", help="never ask: a run that needs an answer stops pending (exit 2)"
        )
    command.add_argument("--no-tree", action="store_true", help="do not show the live handle tree")


def _continuing_flags(command: argparse.ArgumentParser) -> None:
    """What the commands that continue a stored run take besides their own arguments."""
    command.add_argument("--state", metavar="FILE", help="the state the run is kept in (overrides [state] path)")
    _connection_flags(command)
    command.add_argument("--json", action="store_true", help="print the result as JSON (the tree goes to stderr)")
    command.add_argument("--no-tree", action="store_true", help="do not show the live handle tree")


def _add_running_commands(commands: Any) -> None:
    """demo and run: the commands that start a team."""
    demo = commands.add_parser(
        "demo",
        help="run a scripted team offline: delegation in parallel and an approval",
        description="A coordinator delegates to a researcher and a writer in parallel; publishing needs your approval. "
        "Runs on a built-in scripted model: no network, no key.",
    )
    _approval_flags(demo)
    demo.add_argument(
        "--delay", type=float, default=0.2, metavar="SECONDS", help="time each scripted model reply takes (default 0.2)"
    )

    run = commands.add_parser(
        "run",
        help="run a team from a TOML file on a model endpoint",
        description="Run the entry agent of TEAM (a TOML file) on PROMPT. The key comes from the environment "
        "(OPENAI_API_KEY or ANTHROPIC_API_KEY by style, or the variable [connection] api_key_env names, "
        "which must be upper case and end in _KEY or _TOKEN). "
        "Exit status: 0 done, 2 pending or incomplete, 1 error. "
        'A team file is code: tools = ["module:attr"] imports and runs that Python module, and the tools '
        "it names are the model's to call. Run only team files you would run as scripts.",
    )
    run.add_argument("team", metavar="TEAM.toml")
    run.add_argument("prompt", metavar="PROMPT")
    _connection_flags(run)
    run.add_argument("--entry", help="the agent to run (overrides entry)")
    run.add_argument("--json", action="store_true", help="print the result as JSON (the tree goes to stderr)")
    run.add_argument(
        "--state",
        metavar="FILE",
        help="keep the run in this SQLite file (or postgresql:// URL), so a pending run outlives the command "
        "(overrides [state] path)",
    )
    _approval_flags(run, no_input=True)


def _add_continuing_commands(commands: Any) -> None:
    """answer and retry: the commands that continue a stored run."""
    answer = commands.add_parser(
        "answer",
        help="answer a request a run left pending in a state, and continue it",
        description="Continue the run that stopped on REQUEST_ID (see `toolnexus run ... --state FILE --no-input`). "
        "Exit status as for run.",
    )
    answer.add_argument("team", metavar="TEAM.toml")
    answer.add_argument("request_id", metavar="REQUEST_ID")
    decision = answer.add_mutually_exclusive_group(required=True)
    decision.add_argument("--yes", "-y", dest="decision", action="store_const", const=True, help="approve the request")
    decision.add_argument("--no", "-n", dest="decision", action="store_const", const=False, help="decline the request")
    answer.add_argument("--data", type=_json_value, metavar="JSON", help=_DATA_HELP)
    _continuing_flags(answer)

    retry = commands.add_parser(
        "retry",
        help="try a run that failed (the model down, a commit failed) again, from what it recorded",
        description="Try the failed last turn of HANDLE (printed by run or answer) again: "
        "recorded model replies are not asked again and finished tool calls, an approved one included, "
        "are not run again. Exit status as for run.",
    )
    retry.add_argument("team", metavar="TEAM.toml")
    retry.add_argument("handle", metavar="HANDLE")
    _continuing_flags(retry)


def _connection_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--base-url", help="model endpoint (overrides [connection] base_url)")
    command.add_argument("--model", help="model name (overrides [connection] model)")
    command.add_argument("--style", choices=STYLES, help="wire style (overrides [connection] style)")


def main(argv: Sequence[str] | None = None) -> int:
    """The console script; returns the exit status."""
    try:
        try:
            return _command(argv)
        finally:
            sys.stdout.flush()  # here, where a reader that went away can be told from a failure
    except BrokenPipeError:
        return _reader_gone()


def _command(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_UNFINISHED
    try:
        if args.command == "demo":
            return _demo(args)
        if args.command in ("show", "prune", "backup"):
            command: Callable[[argparse.Namespace], int] = getattr(clistate, args.command)
            return command(args)
        if args.command == "answer":
            return _answer(args)
        if args.command == "retry":
            return _retry(args)
        if args.command == "replay":
            return clireplay.run(args)
        if args.command == "eval":
            return eval_command.run(args, _connection_options)
        if args.command == "mcp":
            return _mcp_serve(args)
        return _run(args)
    except ToolnexusError as exc:
        sys.stderr.write(f"toolnexus: error: {exc}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("\ntoolnexus: interrupted\n")
        return EXIT_INTERRUPTED


def _reader_gone() -> int:
    """The reader of the output went away (``toolnexus demo | head -3``): the run was
    stopped on the way out; say nothing more, and send what is still buffered nowhere, so
    that the interpreter's last flush has nothing to complain about."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, OSError, ValueError):
                os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def _demo(args: argparse.Namespace) -> int:
    from .demo import ENTRY, PROMPT, registry, scripted_model

    out = sys.stdout
    out.write(f"toolnexus {__version__} demo: {ENTRY} delegates to researcher and writer (scripted model, offline)\n")
    out.write(f"prompt: {PROMPT}\n\n")
    out.flush()
    rt = Runtime(registry(), generate=scripted_model(max(0.0, args.delay)))
    approver = Approver(args.decision, sys.stdin, out)
    return _execute(rt, lambda tree: drive(rt, ENTRY, PROMPT, approver, tree), out, show_tree=not args.no_tree)


def _run(args: argparse.Namespace) -> int:
    with contextlib.closing(load_team(args.team)) as team:  # its MCP servers end with the command
        entry = args.entry or team.entry
        if entry not in team.registry:
            agents = ", ".join(sorted(team.registry))
            raise TeamFileError(f"--entry {entry!r} is not defined in {args.team} (agents: {agents})")
        state = args.state or team.state
        options = _connection_options(args, team)
        if state:
            options.update(state=state, recover=ONLY_ITS_OWN)
        rt = Runtime(team.registry, **options)
        display = sys.stderr if args.json else sys.stdout
        approver = None if args.no_input else Approver(args.decision, sys.stdin, display)
        work = lambda tree: drive(rt, entry, args.prompt, approver, tree, keep_failed=bool(state))  # noqa: E731
        return _execute(
            rt, work, display, show_tree=not args.no_tree, as_json=args.json, resume_hint=_Hint(args, state)
        )


def _answer(args: argparse.Namespace) -> int:
    with contextlib.closing(load_team(args.team)) as team:  # its MCP servers end with the command
        rt, state = _continuing(args, team, "answer from")
        try:
            request = next((r for r in rt.open_requests() if r.id == args.request_id), None)
            if request is None:
                why = "answered, cancelled, or never asked"
                raise UnknownRequest(f"no run in {state} is waiting on request {args.request_id!r} ({why})")
        except BaseException:
            rt.release()
            raise
        data = args.data if args.decision else None
        answer = make_answer(request.id, args.decision, data=data, reason=None if args.decision else "declined")
        path = (request.data or {}).get("path") or []
        top = "/".join(path[:2])
        display = sys.stderr if args.json else sys.stdout

        def continued(tree: LiveTree) -> AgentResult:
            tree.follow(top)
            rt.resume(answer)  # a continuation that fails keeps the answer applied: retry goes on from there
            return _settled(rt, top)

        return _execute(
            rt, continued, display, show_tree=not args.no_tree, as_json=args.json, resume_hint=_Hint(args, state)
        )


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


def _mcp_serve(args: argparse.Namespace) -> int:
    with contextlib.closing(load_team(args.team)) as team:  # its MCP servers end with the command
        options = _connection_options(args, team)
        state = args.state or team.state
        if state:
            options["state"] = state
        return climcp.serve(team, args.agent or team.entry, options)


def _retry(args: argparse.Namespace) -> int:
    with contextlib.closing(load_team(args.team)) as team:
        rt, state = _continuing(args, team, "retry from")
        top = "/".join(args.handle.split("/")[:2])
        display = sys.stderr if args.json else sys.stdout

        def retried(tree: LiveTree) -> AgentResult:
            tree.follow(top)
            if _recover_run(rt, top):  # its process died mid-turn: it goes on from its journal here
                return _settled(rt, top)
            rt.retry(args.handle)  # a task call it retries tries its failed child again too
            if top != args.handle:
                rt.wait(args.handle)
                if rt.wait(top).status == "error":
                    rt.retry(top)  # the turn above goes on from the task call that waited for it
            return _settled(rt, top)

        return _execute(
            rt, retried, display, show_tree=not args.no_tree, as_json=args.json, resume_hint=_Hint(args, state)
        )


#: How run, answer and retry open a state: a turn another process left is recovered only
#: by a command that names its run (``retry``), never taken over by an unrelated one.
ONLY_ITS_OWN = "leave"


def _continuing(args: argparse.Namespace, team: Team, doing: str) -> tuple[Runtime, str]:
    """The runtime of a command that continues a stored run, and the state's name."""
    state: str | None = args.state or team.state
    if not state:
        raise TeamFileError(f"no state to {doing}: give --state FILE or set [state] path in {args.team}")
    options = _connection_options(args, team)
    return Runtime(team.registry, **options, state=clistate.existing_state(state), recover=ONLY_ITS_OWN), state


def _recover_run(rt: Runtime, top: str) -> bool:
    """Take over the turns of the run ``top`` whose process died (deepest first), to go on
    from their journals here; whether there were any."""
    running = [view.id for view in reversed(run_views(rt, top)) if view.state == "running"]
    return any([rt.recover(handle_id) for handle_id in running])


def _settled(rt: Runtime, top: str) -> AgentResult:
    """Wait for the run's top handle; close it unless it waits for an answer or can be retried."""
    result = rt.wait(top)
    if result.status not in ("pending", "error"):
        rt.close(top)
    return result


class _Hint:
    """What a printed follow-up command needs: the team file, the state, the connection flags."""

    def __init__(self, args: argparse.Namespace, state: str | None) -> None:
        self.team, self.state, self.flags = args.team, state, clistate.connection_flags(args)


def _connection_options(args: argparse.Namespace, team: Team) -> dict[str, Any]:
    connection = team.connection
    base_url = args.base_url or connection.get("base_url")
    if not base_url:
        raise TeamFileError(f"no model endpoint: give --base-url or set base_url in [connection] of {args.team}")
    model = args.model or connection.get("model")
    if not model and any(definition.model in ("inherit", "") for definition in team.registry.values()):
        raise TeamFileError(f"no model: give --model or set model in [connection] of {args.team}")
    style = args.style or connection.get("style", "openai")
    if style not in STYLES:
        raise TeamFileError(f"{args.team}: [connection] style must be one of {', '.join(STYLES)}, not {style!r}")
    options: dict[str, Any] = {"base_url": base_url, "model": model or "default", "style": style}
    key_env = connection.get("api_key_env")
    if key_env:
        if not os.environ.get(key_env):
            raise TeamFileError(f"{args.team}: [connection] api_key_env names {key_env}, which is not set")
        options["api_key"] = os.environ[key_env]
    for key in ("timeout", "retries", "request_params"):
        if key in connection:
            options[key] = connection[key]
    if team.prices:
        options["prices"] = team.prices
    return options


def _execute(
    rt: Runtime,
    work: Callable[[LiveTree], AgentResult],
    display: IO[str],
    *,
    show_tree: bool,
    as_json: bool = False,
    resume_hint: _Hint | None = None,
) -> int:
    from ..wire import to_json

    durable = resume_hint is not None and resume_hint.state is not None
    tree = LiveTree(rt, display, enabled=show_tree, one_run=True)
    try:
        with tree:
            result = work(tree)
            tree.caught_up(result)  # every line of what led to it is out before the summary
        if as_json:
            sys.stdout.write(to_json(result) + "\n")
            sys.stdout.flush()
        shown = attrs.evolve(result, text=result.text.replace(REFUSED_HINT, REFUSED_HINT_HERE))
        if not as_json:
            _summary(rt, shown, tree.following, display, show_tree=show_tree)
        if result.status == "error":
            sys.stderr.write(f"toolnexus: the run failed: {shown.text}\n")
        if durable and resume_hint is not None:
            _follow_up(result, resume_hint, display)
        return _exit_code(result)
    except (KeyboardInterrupt, BrokenPipeError) as stopped:
        if durable and resume_hint is not None and tree.following is not None:
            with _no_second_interrupt():
                _stop_run(rt, tree.following, resume_hint, display if isinstance(stopped, KeyboardInterrupt) else None)
        raise
    finally:
        if durable:
            rt.release()  # the pending run stays in the state for `toolnexus answer`
        else:
            rt.close(rt.root, force=True)


def _stop_run(rt: Runtime, top: str, hint: _Hint, out: IO[str] | None) -> None:
    """The command is stopped (Ctrl-C, or its reader went away): every turn of its run
    that runs here ends ``interrupted`` in the state, ancestors first, keeping its journal
    for ``toolnexus retry``; then ``out`` is told the command that continues the run."""
    for view in run_views(rt, top):
        if view.state == "running":
            rt.interrupt(view.id, retryable=True)  # its task children too (an ended one is left as it is)
    result = rt.wait(top, timeout=0)
    if out is None:
        return
    assert hint.state is not None
    if result.status == "pending" and result.pending is not None:
        clistate.answer_hint(result.pending, hint.team, hint.state, hint.flags, out)
    elif result.status in ("interrupted", "error"):
        clistate.retry_hint(top, hint.team, hint.state, hint.flags, out, stopped=result.status == "interrupted")


@contextlib.contextmanager
def _no_second_interrupt() -> Iterator[None]:
    """Ctrl-C again while a stopped run is written down is ignored (on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _follow_up(result: AgentResult, hint: _Hint, out: IO[str]) -> None:
    """Print the command that continues a run the state keeps: an answer, or a retry."""
    assert hint.state is not None
    if result.status == "pending" and result.pending is not None:
        clistate.answer_hint(result.pending, hint.team, hint.state, hint.flags, out)
    elif result.status == "error" and result.handle_id:
        clistate.retry_hint(result.handle_id, hint.team, hint.state, hint.flags, out)
