"""The SQL every state store shares: the ``StateStore`` protocol, the schema and its
version, and ``SqlState``, the base of the SQLite, PostgreSQL and Django stores."""

from __future__ import annotations

from typing import Any, ContextManager, Protocol, Sequence, runtime_checkable

from .errors import ConfigError

#: The schema this code writes. A store stamped with a higher number is refused.
SCHEMA_VERSION = 2


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
    """CREATE INDEX IF NOT EXISTS tn_handles_pending ON tn_handles (runtime_id, pending_id)""",
    """CREATE TABLE IF NOT EXISTS tn_requests (
        runtime_id TEXT NOT NULL, request_id TEXT NOT NULL, handle_id TEXT NOT NULL,
        status TEXT NOT NULL, request TEXT NOT NULL, answer TEXT,
        created_at DOUBLE PRECISION NOT NULL, closed_at DOUBLE PRECISION,
        PRIMARY KEY (runtime_id, request_id))""",
    """CREATE TABLE IF NOT EXISTS tn_events (
        seq {serial}, runtime_id TEXT NOT NULL, handle_id TEXT NOT NULL,
        body TEXT NOT NULL, at DOUBLE PRECISION NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS tn_events_rt ON tn_events (runtime_id, seq)""",
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
]


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

    def _prepare_migration(self) -> None:
        """Store-specific set-up inside the migration transaction."""

    def migrate(self) -> None:
        """Create the tables, or refuse a store written by a newer version."""
        with self.transaction():
            self._prepare_migration()
            for statement in _SCHEMA:
                self.execute(statement.format(serial=self.serial_column))
            rows = self.execute("SELECT value FROM tn_meta WHERE key = 'schema_version'")
            if not rows:
                self.execute("INSERT INTO tn_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                return
        found = int(rows[0][0])
        if found > SCHEMA_VERSION:
            raise ConfigError(
                f"the state store was written by a newer toolnexus (schema {found}; this one reads up to {SCHEMA_VERSION}): upgrade toolnexus"
            )


def joins_host_transaction(store: StateStore) -> bool:
    """Whether the change just made only joined a transaction the host opened (a store
    with ``in_host_transaction()``), which commits or rolls back later, outside the store."""
    joined = getattr(store, "in_host_transaction", None)
    return bool(joined()) if callable(joined) else False
