"""``toolnexus replay TEAM.toml RUN``: a stored run replayed with the team file's code.

The journal answers every model step, so the command needs no key and no endpoint: only
the state the run is kept in, and the team file (its agents, tools and ``[connection]``
model and style, which are part of every request). Exit status: 0 same, 3 diverged, 1
when it cannot replay (no state, an unknown run): the command line turns the
``ToolnexusError`` raised here into one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

import attrs

from .._team.runtime import Runtime
from ..data import ReplayReport
from . import stored as clistate
from .teamfile import STYLES, TeamFileError, load_team

EXIT_SAME, EXIT_DIVERGED = 0, 3


def add_command(commands: Any) -> None:
    """``replay`` on the ``toolnexus`` parser's subparsers."""
    command = commands.add_parser(
        "replay",
        help="replay a stored run with the team file's code, asking no model",
        description="Replay RUN (a handle id such as root/lead.1, printed by run) from the state it is kept in, "
        "with TEAM's agents and tools as they are now: every model step is answered by the run's journal, "
        "so no model is asked and no key is needed. Prints same, or where the run first differs. "
        "Exit status: 0 same, 3 diverged, 1 error.",
    )
    command.add_argument("team", metavar="TEAM.toml")
    command.add_argument("run", metavar="RUN")
    command.add_argument("--state", metavar="FILE", help="the state the run is kept in (overrides [state] path)")
    command.add_argument("--tools", choices=("recorded", "live"), default="recorded",
                         help="serve the recorded tool results (default), or run today's tools and compare")
    command.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """The ``replay`` command.

    Raises:
        ToolnexusError: the run cannot be replayed (exit status 1).
    """
    with contextlib.closing(load_team(args.team)) as team:
        state = args.state or team.state
        if not state:
            raise TeamFileError(f"no state to replay from: give --state FILE or set [state] path in {args.team}")
        connection = team.connection
        style = connection.get("style", "openai")
        if style not in STYLES:
            raise TeamFileError(f"{args.team}: [connection] style must be one of {', '.join(STYLES)}, not {style!r}")
        options = {"model": connection.get("model") or "default", "style": style}
        rt = Runtime(team.registry, **options, state=clistate.existing_state(state), recover="leave")
        try:
            report = rt.replay(args.run, tools=args.tools)
        finally:
            rt.release()
    sys.stdout.write(_json(report) if args.json else _text(report))
    return EXIT_SAME if report.same else EXIT_DIVERGED


def _text(report: ReplayReport) -> str:
    divergence = report.divergence
    if divergence is None:
        return f"same: {report.run}, {report.steps} model steps replayed\n"
    lines = [
        f"diverged: {divergence.handle}, step {divergence.step}, {divergence.kind}"
        + (f" (call {divergence.call_id})" if divergence.call_id else ""),
        f"  field:    {divergence.field or '-'}",
        f"  recorded: {json.dumps(divergence.recorded, ensure_ascii=False)}",
        f"  actual:   {json.dumps(divergence.actual, ensure_ascii=False)}",
    ]
    return "\n".join(lines) + "\n"


def _json(report: ReplayReport) -> str:
    result = report.result
    body = {
        "run": report.run,
        "same": report.same,
        "divergence": attrs.asdict(report.divergence) if report.divergence is not None else None,
        "status": result.status if result is not None else None,
        "text": result.text if result is not None else None,
        "tokens": report.tokens,
        "cost": report.cost,
        "steps": report.steps,
    }
    return json.dumps(body, ensure_ascii=False) + "\n"
