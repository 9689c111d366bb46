"""The SQL every state store shares: the ``StateStore`` protocol, the schema and its
version, and ``SqlState``, the base of the SQLite, PostgreSQL and Django stores."""

from __future__ import annotations

import json
import re
import time
from typing import Any, ContextManager, Protocol, Sequence, runtime_checkable

from ..errors import ConfigError

#: The schema this code writes. A store stamped with a higher number is refused.
SCHEMA_VERSION = 3


@runtime_checkable
class StateStore(Protocol):
    """Where runtimes keep their trees: a SQL database the runtime speaks to through these
    few calls (``SQLiteState`` and ``PostgresState`` implement it; ``SqlState`` is a base
    for others). Implementations are safe to share between threads.

    ``transaction()`` is re-entrant on one thread: nested calls join the outer one, and
    only the outermost commits; ``execute`` runs one statement (``?`` placeholders) in the
    thread's open transaction, or on its own; ``wait_change`` returns when another
    connection may have committed, or after ``timeout``; ``notify`` tells other processes,
    on commit, that a handle changed; ``migrate`` creates the tables or refuses a newer
    schema with ``ConfigError``.
    """

    dialect: str

    def transaction(self) -> ContextManager[Any]: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def wait_change(self, timeout: float) -> None: ...

    def notify(self, payload: str) -> None: ...

    def migrate(self) -> None: ...

    def close(self) -> None: ...


_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS tn_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS tn_handles (
        runtime_id TEXT NOT NULL, id TEXT NOT NULL, parent_id TEXT, spawn_no INTEGER NOT NULL,
        state TEXT NOT NULL, version INTEGER NOT NULL, settled INTEGER NOT NULL,
        pending_id TEXT, body TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (runtime_id, id))""",
    """CREATE INDEX IF NOT EXISTS tn_handles_children ON tn_handles (runtime_id, parent_id, spawn_no)""",
    # Partial indexes: a handle's entry changes when it starts or stops waiting on a request,
    # opens or closes, not on every write of its row.
    """CREATE INDEX IF NOT EXISTS tn_handles_pending ON tn_handles (runtime_id, pending_id) WHERE pending_id IS NOT NULL""",
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
    # Stream events (``eventrows.py``), numbered by one serial per tree; the counter row
    # orders PostgreSQL's commits. Added tables only: a store written without them reads on.
    """CREATE TABLE IF NOT EXISTS tn_stream (
        runtime_id TEXT NOT NULL, serial BIGINT NOT NULL, handle_id TEXT, kind TEXT NOT NULL,
        body TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (runtime_id, serial)){without_rowid}""",
    """CREATE TABLE IF NOT EXISTS tn_stream_serials (runtime_id TEXT PRIMARY KEY, last BIGINT NOT NULL)""",
    # Schema 3: what a served surface bound to whom (``toolnexus._serve.bindings``): a public
    # id a client sees, the principal it belongs to, the handle behind it, the surface's data.
    """CREATE TABLE IF NOT EXISTS tn_bindings (
        runtime_id TEXT NOT NULL, surface TEXT NOT NULL, principal TEXT NOT NULL, public_id TEXT NOT NULL,
        handle_id TEXT NOT NULL, data TEXT NOT NULL, version INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (runtime_id, surface, principal, public_id))""",
    """CREATE INDEX IF NOT EXISTS tn_bindings_handle ON tn_bindings (runtime_id, handle_id)""",
]


#: Every table and index of the schema, by name.
SCHEMA_OBJECTS = tuple(re.findall(r"(?:TABLE|INDEX) IF NOT EXISTS (tn_\w+)", " ".join(_SCHEMA)))


class SqlState:
    """The SQL both stores share; subclasses provide connections and the dialect."""

    placeholder = "?"
    dialect = "sqlite"
    serial_column = "INTEGER PRIMARY KEY AUTOINCREMENT"

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def transaction(self) -> ContextManager[Any]:
        raise NotImplementedError

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def wait_change(self, timeout: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def in_host_transaction(self) -> bool:
        """Whether this thread's changes only joined a transaction the host opened, which
        commits (or rolls back) later, outside the store."""
        return False

    def notify(self, payload: str) -> None:
        """Tell other processes that the current transaction changed ``payload``'s handle."""

    def now(self) -> float:
        """The store's clock (seconds since the epoch), which every process of the tree
        compares leases and heartbeats on: here the host's, as one host shares the store."""
        return time.time()

    def _prepare_migration(self) -> None:
        """Store-specific set-up inside the migration transaction."""

    def _catalog(self) -> set[str]:
        """The names of the tables and indexes the store has (read from its catalog,
        which takes no lock on them)."""
        if self.dialect == "postgresql":
            rows = self.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema()")
        else:
            rows = self.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")
        return {str(row[0]) for row in rows}

    def _missing(self) -> list[str]:
        """The schema's tables and indexes that the store lacks."""
        present = self._catalog()
        return [name for name in SCHEMA_OBJECTS if name not in present]

    def migrate(self) -> None:
        """Create the tables, or refuse a store written by a newer version before anything
        is written to it; a store of schema 1 is upgraded when it has no run in flight, one of
        schema 2 gains the bindings table."""
        with self.transaction():
            self._prepare_migration()
            self.execute(_SCHEMA[0])  # tn_meta: where the version is
            rows = self.execute("SELECT value FROM tn_meta WHERE key = 'schema_version'")
            found = int(rows[0][0]) if rows else None
            if found is not None and found > SCHEMA_VERSION:
                raise ConfigError(
                    f"the state store was written by a newer toolnexus (schema {found}; this one reads up to {SCHEMA_VERSION}): upgrade toolnexus"
                )
            if found == SCHEMA_VERSION and not self._missing():
                return  # nothing to create: no DDL, whose table locks would wait on running units
            for statement in _SCHEMA[1:]:
                # SQLite keeps a table without a rowid in one b-tree: one write per event row.
                self.execute(statement.format(serial=self.serial_column, without_rowid=" WITHOUT ROWID" if self.dialect == "sqlite" else ""))
            if found is None:
                self.execute("INSERT INTO tn_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif found < SCHEMA_VERSION:
                if found < 2:
                    upgrade_from_1(self)
                self.execute("UPDATE tn_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def upgrade_from_1(store: SqlState) -> None:
    """Schema 1 to 2: handle bodies take the record's new shape (the running turn as one
    value, a queued wake as one). A turn in flight cannot be carried over (its journal is
    kept differently): such a store is refused, naming the handles to finish first."""
    busy = store.execute("SELECT runtime_id, id FROM tn_handles WHERE state IN ('running', 'suspended')")
    if busy:
        names = ", ".join(f"{runtime_id}:{handle_id}" for runtime_id, handle_id in busy[:5])
        raise ConfigError(
            f"the state store has runs in flight from toolnexus 0.1.0 (schema 1: {names}{'...' if len(busy) > 5 else ''}):"
            " finish or close them with that version, then open the store with this one"
        )
    for runtime_id, handle_id, body in store.execute("SELECT runtime_id, id, body FROM tn_handles"):
        store.execute("UPDATE tn_handles SET body = ? WHERE runtime_id = ? AND id = ?", (json.dumps(_body_2(json.loads(body))), runtime_id, handle_id))
    store.execute("DELETE FROM tn_journal")


def _body_2(old: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 handle body (idle or closed) in the schema-2 shape."""
    keep = ("name", "parent", "depth", "budget", "state", "spawned", "transitions", "turns", "tokens", "tool_calls", "pool_tool_calls",
            "turn_serial", "result", "settled", "closing", "running_children", "wake_queue", "nonce")
    body = {key: old[key] for key in keep if key in old}
    body["inbox"] = [dict(zip(("sender", "channel", "text"), item)) for item in old.get("inbox", [])]
    body["taken"] = [dict(zip(("sender", "channel", "text"), item)) for item in old.get("taken", [])]
    body["task_keys"] = [[*entry, ""][:5] for entry in old.get("task_keys", [])]
    body.update(suspension=None, wake=None, running=None, failed=None)
    return body


def joins_host_transaction(store: StateStore) -> bool:
    """Whether the change just made only joined a transaction the host opened (a store
    with ``in_host_transaction()``), which commits or rolls back later, outside the store."""
    joined = getattr(store, "in_host_transaction", None)
    return bool(joined()) if callable(joined) else False
