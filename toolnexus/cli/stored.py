"""The commands that work on a stored tree: ``show``, ``retry``, ``prune`` and ``backup``,
and the hints that tell a person the command that continues a run.

A state named on these commands must exist already: a mistyped path is an error, never a
new empty file.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import sqlite3
import sys
import time
from typing import IO, Any

from .console import tree_lines
from ..data import Request
from ..errors import StateError, ToolnexusError
from .._team.ownership import orphans
from .._team.record import HandleRecord, view_of
from ..state import SQLiteState, StateStore, open_state


#: The closed runs ``show`` lists without ``--all``: the most recently started ones.
SHOWN_CLOSED_RUNS = 20
#: How long a turn's owner may go without a heartbeat before ``show`` calls the turn
#: orphaned: a runtime's default ``lease``.
_LEASE_S = 15.0

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def existing_state(state: str) -> StateStore:
    """Open a state that must exist: a SQLite path that is missing is a ``StateError``."""
    if not state.startswith(("postgresql://", "postgres://")) and not os.path.exists(state):
        raise StateError(f"no state file {state}: give the path a run was started with (--state)")
    return open_state(state)


def duration(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"90s"`` or a number of seconds, as seconds."""
    found = _DURATION.match(text)
    seconds = float(found.group(1)) * _UNITS[found.group(2)] if found is not None else math.nan
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a duration such as 7d, 12h, 30m or 90s")
    return seconds


def add_commands(commands: Any) -> None:
    """The stored-tree subcommands, on the ``toolnexus`` parser's subparsers."""
    show = commands.add_parser(
        "show",
        help="print the runs of a stored tree and its open requests",
        description="Print the handles of a stored tree (id, state, turns, tokens) and the requests waiting for an "
        f"answer: every run that is not closed, and the {SHOWN_CLOSED_RUNS} most recently started closed ones.",
    )
    show.add_argument("--state", metavar="FILE", required=True, help="the SQLite file (or postgresql:// URL) to read")
    show.add_argument("--runtime-id", default="default", help="which tree of the state (default: default)")
    show.add_argument("--all", action="store_true", help="list every run, every closed one included")

    prune = commands.add_parser(
        "prune",
        help="delete old finished runs from a state",
        description="Delete the runs whose top handle closed more than --older-than ago, each whole: its handles, "
        "events, transcripts, journals and requests. Nothing of a run that is not closed (running, waiting for an "
        "answer, failed or interrupted) is deleted.",
    )
    prune.add_argument("--state", metavar="FILE", required=True, help="the SQLite file (or postgresql:// URL)")
    prune.add_argument("--older-than", type=duration, required=True, metavar="AGE", help="e.g. 7d, 12h, 30m, 90s")
    prune.add_argument("--runtime-id", help="only this tree of the state (default: every tree)")

    backup = commands.add_parser(
        "backup",
        help="copy a SQLite state safely, while it is in use",
        description="Copy a SQLite state file with SQLite's online backup, which is consistent even while runs write "
        "to it (a plain copy of the .db without its -wal file may lose the latest commits).",
    )
    backup.add_argument("--state", metavar="FILE", required=True, help="the SQLite file to copy")
    backup.add_argument("destination", metavar="DEST", help="the new file (must not exist)")


def show(args: argparse.Namespace) -> int:
    from .._stores.sql.owners import SqlOwners
    from .._stores.sql.requests import SqlRequests
    from .._stores.sql.runs import listed_runs

    state = existing_state(args.state)
    try:
        listing = listed_runs(state, args.runtime_id, None if args.all else SHOWN_CLOSED_RUNS)
        out = sys.stdout
        if not listing.records:
            out.write(f"no tree {args.runtime_id!r} in {args.state}\n")
            return 2
        orphaned = {handle_id for handle_id, _ in orphans(SqlOwners(state, args.runtime_id), _LEASE_S)}
        states = {record.id: shown_state(record, orphaned) for record in listing.records}
        lines = tree_lines([view_of(record) for record in listing.records], states=states)
        out.write("\n".join(lines) + "\n")
        if listing.closed_left_out:
            more = listing.closed_left_out
            out.write(f"({more} older closed run{'s' if more != 1 else ''} not shown: --all lists every run)\n")
        requests = SqlRequests(state, args.runtime_id).open_requests()
        out.write(f"\nopen requests: {len(requests)}\n")
        for request in requests:
            path = "/".join((request.data or {}).get("path", []))
            out.write(f"  {request.id}  {request.kind}  {request.prompt}  (at {path})\n")
        out.flush()
        return 0
    finally:
        state.close()


def shown_state(record: HandleRecord, orphaned: set[str]) -> str:
    """The word ``show`` prints for a handle: its state, except that an idle handle whose
    last turn was interrupted or failed says so, and a running turn whose owner is gone is
    ``orphaned`` (``toolnexus retry`` continues either)."""
    result = record.result
    if record.state == "idle" and result is not None and result.status in ("interrupted", "error"):
        return result.status
    if record.state == "running" and record.id in orphaned:
        return "orphaned"
    return record.state


def prune(args: argparse.Namespace) -> int:
    from .._stores.sql.runs import prune_runs

    state = existing_state(args.state)
    try:
        trees = [args.runtime_id] if args.runtime_id else [row[0] for row in state.execute(_TREES)]
        before = time.time() - args.older_than
        removed = sum(len(prune_runs(state, runtime_id, before)) for runtime_id in trees)
        sys.stdout.write(f"pruned {removed} closed handle(s) from {args.state}\n")
        return 0
    finally:
        state.close()


_TREES = "SELECT DISTINCT runtime_id FROM tn_handles"


def backup(args: argparse.Namespace) -> int:
    if args.state.startswith(("postgresql://", "postgres://")):
        raise ToolnexusError(
            "backup copies a SQLite file; for PostgreSQL use pg_dump (the tables are in the toolnexus schema)"
        )
    if os.path.exists(args.destination):
        raise ToolnexusError(f"{args.destination} exists already: give a new file")
    state = existing_state(args.state)
    try:
        assert isinstance(state, SQLiteState)
        copy_sqlite(state.path, args.destination)
    finally:
        state.close()
    sys.stdout.write(f"copied {args.state} to {args.destination}\n")
    return 0


def copy_sqlite(source: str, destination: str) -> None:
    """SQLite's online backup: a consistent copy, the write-ahead log included."""
    try:
        with sqlite3.connect(source) as live, sqlite3.connect(destination) as copy:
            live.backup(copy)
    except sqlite3.Error as exc:
        raise StateError(f"cannot copy {source} to {destination}: {exc}") from exc


# --- what to run next ---------------------------------------------------------------------------


def connection_flags(args: argparse.Namespace) -> list[str]:
    """The connection options this command was given, to repeat on the command it prints."""
    flags: list[str] = []
    for name in ("base_url", "model", "style"):
        value = getattr(args, name, None)
        if value:
            flags += [f"--{name.replace('_', '-')}", value]
    return flags


def answer_hint(request: Request, team: str, state: str, flags: list[str], out: IO[str]) -> None:
    out.write(
        f"\nwaiting for an answer:\n  id:     {request.id}\n  kind:   {request.kind}\n  prompt: {request.prompt}\n"
    )
    fields = form_fields((request.data or {}).get("schema"))
    if fields:
        out.write(f"  fields: {fields}\n")
    command = ["toolnexus", "answer", team, request.id, "--state", state, *flags]
    data = "   with --data '{...}' for the fields" if fields else ""
    out.write(f"answer it with:\n  {shlex.join(command)} --yes   (or --no){data}\n")
    out.flush()


def form_fields(schema: Any) -> str:
    """A form's fields in one line (``approve: boolean (required), note: string``), or ""."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return ""
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    shown = []
    for name, field in properties.items():
        kind = field.get("type", "value") if isinstance(field, dict) else "value"
        shown.append(f"{name}: {kind}{' (required)' if name in required else ''}")
    return ", ".join(shown)


def retry_hint(handle_id: str, team: str, state: str, flags: list[str], out: IO[str], *, stopped: bool = False) -> None:
    command = ["toolnexus", "retry", team, handle_id, "--state", state, *flags]
    why = "was interrupted; continue it" if stopped else "stopped on an error and can be tried again"
    out.write(f"\nthe run {why} (what it did is kept):\n  {shlex.join(command)}\n")
    out.flush()
