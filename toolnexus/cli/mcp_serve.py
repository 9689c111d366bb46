"""``toolnexus mcp serve TEAM.toml``: a team served as an MCP server over stdin and stdout,
for desktop clients that start their servers as processes (CONTRACT §18b "stdio").

The team's entry agent (or ``--agent NAME``) is the one MCP tool, both eras. Its questions
are ``input_required`` with a ``requestState`` sealed with ``TOOLNEXUS_MCP_SECRET`` (random
per process when unset, so a retry must then reach the same process); with ``--state`` the
runs are durable, and another process serving the same state and secret can take the
retry. stdout carries only messages; logs go to stderr. The command ends, status 0, at the
end of its input.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Callable

from ..errors import ConfigError

#: The variable the secret of the requestState comes from.
SECRET_VARIABLE = "TOOLNEXUS_MCP_SECRET"


def add_commands(commands: Any, connection: Callable[[argparse.ArgumentParser], None]) -> None:
    """``toolnexus mcp serve``, on the ``toolnexus`` parser's subparsers (``connection`` adds
    the model endpoint flags)."""
    group = commands.add_parser("mcp", help="serve a team over MCP", description="Model Context Protocol commands.")
    verbs = group.add_subparsers(dest="mcp_command", metavar="VERB", required=True)
    serve = verbs.add_parser(
        "serve",
        help="serve a team's entry agent as an MCP tool over stdin and stdout",
        description="Serve the entry agent of TEAM (or --agent NAME) as one MCP tool over stdin and stdout, for an MCP "
        f"client that starts it (both protocol eras). Its questions are sealed with ${SECRET_VARIABLE} (random when "
        "unset). Logs go to stderr; the command ends at the end of its input.",
    )
    serve.add_argument("team", metavar="TEAM.toml")
    serve.add_argument("--agent", help="the agent to serve (default: the team's entry)")
    serve.add_argument("--state", metavar="FILE", help="keep the runs in this SQLite file (or postgresql:// URL)")
    connection(serve)


def serve(team: Any, agent: str, runtime_options: dict[str, Any]) -> int:
    """Serve ``agent`` of the loaded ``team`` on this process's stdin and stdout.

    Raises:
        ConfigError: ``agent`` is not in the team.
    """
    from .. import Runtime
    from ..mcp import _serve_stdio
    from ..mcp._serving import MAX_BODY, build

    if agent not in team.registry:
        raise ConfigError(f"--agent {agent!r} is not defined in the team (agents: {', '.join(sorted(team.registry))})")
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    secret = os.environ.get(SECRET_VARIABLE) or None
    runtime = Runtime(team.registry, **runtime_options)
    try:
        served = build(
            [agent], runtime=runtime, secret=secret, name=agent, version=None, ttl_ms=300000, state_ttl_s=3600,
            runtime_options={},
        )
        _serve_stdio.serve(served.responder, sys.stdin.buffer, sys.stdout.buffer, max_body=MAX_BODY)
    finally:
        if "state" in runtime_options:
            runtime.release()  # suspended runs stay in the state for a later retry
        else:
            runtime.close(runtime.root, force=True)
    return 0
