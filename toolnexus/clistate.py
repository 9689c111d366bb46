"""The commands that work on a stored tree: ``show``, ``retry``, ``prune`` and ``backup``,
and the hints that tell a person the command that continues a run.

A state named on these commands must exist already: a mistyped path is an error, never a
new empty file.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sqlite3
import sys
import time
from typing import IO, Any

from .console import tree_lines
from .data import Request
from .errors import StateError, ToolnexusError
from .state import SQLiteState, StateStore, open_state

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
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 7d, 12h, 30m or 90s")
    return float(found.group(1)) * _UNITS[found.group(2)]


def add_commands(commands: Any) -> None:
    """The stored-tree subcommands, on the ``toolnexus`` parser's subparsers."""
    show = commands.add_parser("show", help="print a stored tree and its open requests", description="Print the handles of a stored tree (id, state, turns, tokens) and the requests waiting for an answer.")
    show.add_argument("--state", metavar="FILE", required=True, help="the SQLite file (or postgresql:// URL) to read")
    show.add_argument("--runtime-id", default="default", help="which tree of the state (default: default)")

    prune = commands.add_parser("prune", help="delete old closed runs from a state", description="Delete the closed handles of a state that closed more than --older-than ago, with their events, transcripts and journals (never one a live handle may still need).")
    prune.add_argument("--state", metavar="FILE", required=True, help="the SQLite file (or postgresql:// URL)")
    prune.add_argument("--older-than", type=duration, required=True, metavar="AGE", help="e.g. 7d, 12h, 30m, 90s")
    prune.add_argument("--runtime-id", help="only this tree of the state (default: every tree)")

    backup = commands.add_parser("backup", help="copy a SQLite state safely, while it is in use", description="Copy a SQLite state file with SQLite's online backup, which is consistent even while runs write to it (a plain copy of the .db without its -wal file may lose the latest commits).")
    backup.add_argument("--state", metavar="FILE", required=True, help="the SQLite file to copy")
    backup.add_argument("destination", metavar="DEST", help="the new file (must not exist)")


def show(args: argparse.Namespace) -> int:
    from .stored import StoredTree, stored_views

    store = existing_state(args.state)
    try:
        tree = StoredTree(store, args.runtime_id)
        views = stored_views(tree)
        out = sys.stdout
        if not views:
            out.write(f"no tree {args.runtime_id!r} in {args.state}\n")
            return 2
        out.write("\n".join(tree_lines(views)) + "\n")
        requests = tree.open_requests()
        out.write(f"\nopen requests: {len(requests)}\n")
        for request in requests:
            out.write(f"  {request.id}  {request.kind}  {request.prompt}  (at {'/'.join((request.data or {}).get('path', []))})\n")
        out.flush()
        return 0
    finally:
        store.close()


def prune(args: argparse.Namespace) -> int:
    from .stored import StoredTree

    store = existing_state(args.state)
    try:
        trees = [args.runtime_id] if args.runtime_id else [row[0] for row in store.execute("SELECT DISTINCT runtime_id FROM tn_handles")]
        before = time.time() - args.older_than
        removed = sum(len(StoredTree(store, runtime_id).prune(None, before)) for runtime_id in trees)
        sys.stdout.write(f"pruned {removed} closed handle(s) from {args.state}\n")
        return 0
    finally:
        store.close()


def backup(args: argparse.Namespace) -> int:
    if args.state.startswith(("postgresql://", "postgres://")):
        raise ToolnexusError("backup copies a SQLite file; for PostgreSQL use pg_dump (the tables are in the toolnexus schema)")
    if os.path.exists(args.destination):
        raise ToolnexusError(f"{args.destination} exists already: give a new file")
    store = existing_state(args.state)
    try:
        assert isinstance(store, SQLiteState)
        copy_sqlite(store.path, args.destination)
    finally:
        store.close()
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
    out.write(f"\nwaiting for an answer:\n  id:     {request.id}\n  kind:   {request.kind}\n  prompt: {request.prompt}\n")
    command = ["toolnexus", "answer", team, request.id, "--state", state, *flags]
    out.write(f"answer it with:\n  {shlex.join(command)} --yes   (or --no)\n")
    out.flush()


def retry_hint(handle_id: str, team: str, state: str, flags: list[str], out: IO[str]) -> None:
    command = ["toolnexus", "retry", team, handle_id, "--state", state, *flags]
    out.write(f"\nthe run stopped on an error and can be tried again (what it did is kept):\n  {shlex.join(command)}\n")
    out.flush()
