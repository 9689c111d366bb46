"""The schema every state shares, its version, and the migrations to it.

Statements are written once; ``{serial}`` and ``{clustered}`` are the words a dialect
spells differently (``Dialect.ddl``). Migrations only add (``SqlState.migrate``): a table or
index that is missing is created, an older stamp is brought up to ``SCHEMA_VERSION`` (from
schema 1 by ``upgrade_from_1``), and a state stamped with a newer one is refused before
anything is written to it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol, Sequence

from ...errors import ConfigError

#: The schema this code writes. A state stamped with a higher number is refused.
SCHEMA_VERSION = 3

META = "CREATE TABLE IF NOT EXISTS tn_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"

SCHEMA = [
    META,
    """CREATE TABLE IF NOT EXISTS tn_handles (
        runtime_id TEXT NOT NULL, id TEXT NOT NULL, parent_id TEXT, spawn_no INTEGER NOT NULL,
        state TEXT NOT NULL, version INTEGER NOT NULL, settled INTEGER NOT NULL,
        pending_id TEXT, body TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (runtime_id, id))""",
    """CREATE INDEX IF NOT EXISTS tn_handles_children ON tn_handles (runtime_id, parent_id, spawn_no)""",
    # Partial indexes: a handle's entry changes when it starts or stops waiting on a request,
    # opens or closes, not on every write of its row.
    """CREATE INDEX IF NOT EXISTS tn_handles_pending ON tn_handles (runtime_id, pending_id)
        WHERE pending_id IS NOT NULL""",
    """CREATE TABLE IF NOT EXISTS tn_requests (
        runtime_id TEXT NOT NULL, request_id TEXT NOT NULL, handle_id TEXT NOT NULL,
        status TEXT NOT NULL, request TEXT NOT NULL, answer TEXT,
        created_at DOUBLE PRECISION NOT NULL, closed_at DOUBLE PRECISION,
        PRIMARY KEY (runtime_id, request_id))""",
    """CREATE TABLE IF NOT EXISTS tn_events (
        seq {serial}, runtime_id TEXT NOT NULL, handle_id TEXT NOT NULL,
        body TEXT NOT NULL, at DOUBLE PRECISION NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS tn_events_rt ON tn_events (runtime_id, seq)""",
    """CREATE INDEX IF NOT EXISTS tn_events_handle ON tn_events (runtime_id, handle_id)""",
    """CREATE INDEX IF NOT EXISTS tn_handles_live ON tn_handles (runtime_id, id) WHERE state <> 'closed'""",
    """CREATE INDEX IF NOT EXISTS tn_handles_closed ON tn_handles (runtime_id, updated_at) WHERE state = 'closed'""",
    """CREATE INDEX IF NOT EXISTS tn_requests_open ON tn_requests (runtime_id, status, created_at)""",
    """CREATE TABLE IF NOT EXISTS tn_journal (
        runtime_id TEXT NOT NULL, handle_id TEXT NOT NULL, serial INTEGER NOT NULL, segment INTEGER NOT NULL,
        kind TEXT NOT NULL, step INTEGER NOT NULL, call_id TEXT NOT NULL, status TEXT NOT NULL,
        payload TEXT, at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (runtime_id, handle_id, serial, segment, kind, step, call_id))""",
    """CREATE TABLE IF NOT EXISTS tn_owners (
        runtime_id TEXT NOT NULL, owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
        started_at DOUBLE PRECISION NOT NULL, heartbeat_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (runtime_id, owner))""",
    """CREATE TABLE IF NOT EXISTS tn_messages (
        runtime_id TEXT NOT NULL, conversation_id TEXT NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (runtime_id, conversation_id))""",
    # Stream events (``events.py``), numbered by one serial per tree; the counter row
    # orders the commits of concurrent writers. Added tables only: a state written without
    # them reads on.
    """CREATE TABLE IF NOT EXISTS tn_stream (
        runtime_id TEXT NOT NULL, serial BIGINT NOT NULL, handle_id TEXT, kind TEXT NOT NULL,
        body TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (runtime_id, serial)){clustered}""",
    """CREATE TABLE IF NOT EXISTS tn_stream_serials (runtime_id TEXT PRIMARY KEY, last BIGINT NOT NULL)""",
    # Schema 3: what a served surface bound to whom (``toolnexus._serve.bindings``): a public
    # id a client sees, the principal it belongs to, the handle behind it, the surface's data.
    """CREATE TABLE IF NOT EXISTS tn_bindings (
        runtime_id TEXT NOT NULL, surface TEXT NOT NULL, principal TEXT NOT NULL, public_id TEXT NOT NULL,
        handle_id TEXT NOT NULL, data TEXT NOT NULL, version INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (runtime_id, surface, principal, public_id))""",
    """CREATE INDEX IF NOT EXISTS tn_bindings_handle ON tn_bindings (runtime_id, handle_id)""",
]

#: Every table and index of the schema, by name.
SCHEMA_OBJECTS = tuple(re.findall(r"(?:TABLE|INDEX) IF NOT EXISTS (tn_\w+)", " ".join(SCHEMA)))


class Executes(Protocol):
    """What a migration step needs of a state: statements in its open transaction."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...


def upgrade_from_1(state: Executes) -> None:
    """Schema 1 to 2: handle bodies take the record's new shape (the running turn as one
    value, a queued wake as one). A turn in flight cannot be carried over (its journal is
    kept differently): such a state is refused, naming the handles to finish first."""
    busy = state.execute("SELECT runtime_id, id FROM tn_handles WHERE state IN ('running', 'suspended')")
    if busy:
        names = ", ".join(f"{runtime_id}:{handle_id}" for runtime_id, handle_id in busy[:5])
        raise ConfigError(
            f"the state store has runs in flight from toolnexus 0.1.0"
            f" (schema 1: {names}{'...' if len(busy) > 5 else ''}):"
            " finish or close them with that version, then open the store with this one"
        )
    for runtime_id, handle_id, body in state.execute("SELECT runtime_id, id, body FROM tn_handles"):
        state.execute(
            "UPDATE tn_handles SET body = ? WHERE runtime_id = ? AND id = ?",
            (json.dumps(_body_2(json.loads(body))), runtime_id, handle_id),
        )
    state.execute("DELETE FROM tn_journal")


_KEPT_IN_2 = (
    "name",
    "parent",
    "depth",
    "budget",
    "state",
    "spawned",
    "transitions",
    "turns",
    "tokens",
    "tool_calls",
    "pool_tool_calls",
    "turn_serial",
    "result",
    "settled",
    "closing",
    "running_children",
    "wake_queue",
    "nonce",
)


def _body_2(old: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 handle body (idle or closed) in the schema-2 shape."""
    body = {key: old[key] for key in _KEPT_IN_2 if key in old}
    body["inbox"] = [dict(zip(("sender", "channel", "text"), item)) for item in old.get("inbox", [])]
    body["taken"] = [dict(zip(("sender", "channel", "text"), item)) for item in old.get("taken", [])]
    body["task_keys"] = [[*entry, ""][:5] for entry in old.get("task_keys", [])]
    body.update(suspension=None, wake=None, running=None, failed=None)
    return body
