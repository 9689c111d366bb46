"""State stores: the SQL databases a durable tree lives in (``state=`` on a ``Runtime``).

``StateStore`` is the few calls a stored tree (``stored.StoredTree``) makes of a database:
transactions, statements, cross-process wake-ups, the schema. ``SQLiteState`` keeps one
writer connection per process behind a leaf lock (WAL mode, ``busy_timeout`` for other
processes); ``toolnexus.postgres.PostgresState`` shares the same SQL through ``SqlState``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sqlite3
import threading
import time
from typing import Any, ContextManager, Iterator, Protocol, Sequence, runtime_checkable


from .errors import ConfigError, StateError

log = logging.getLogger("toolnexus")

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


class SQLiteState(SqlState):
    """A SQLite file shared by the threads and processes of one host (WAL mode).

    Network filesystems are not supported (WAL needs shared memory); use PostgreSQL to
    share a tree between hosts.
    """

    #: Waits for another process's write lock before retrying with backoff.
    BUSY_TIMEOUT_MS = 5000
    _BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._conn = self._connect()
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._watch = self._connect()
        except sqlite3.Error as exc:
            raise StateError(f"cannot open the state file {self.path}: {exc}") from exc
        # guards: _conn and _depth. A leaf: held under handle locks, never calls back.
        self._lock = threading.RLock()
        self._depth = 0
        self._watch_lock = threading.Lock()  # guards: _watch
        self._closed = False
        self.migrate()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=self.BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout={self.BUSY_TIMEOUT_MS}")
        return conn

    def __repr__(self) -> str:
        return f"SQLiteState({self.path!r})"

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self._begin()
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                self._rollback()
                raise
            self._depth = 0
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise StateError(f"commit to {self.path} failed: {exc}") from exc

    def _begin(self) -> None:
        for delay in (*self._BACKOFF, None):
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise StateError(f"cannot write to {self.path}: {exc}") from exc
                if delay is None:
                    raise StateError(f"{self.path} stayed locked by another process: {exc}") from exc
                time.sleep(delay)  # retry backoff: another process holds the write lock past busy_timeout

    def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._closed:
                raise StateError(f"the state file {self.path} is closed")
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.OperationalError as exc:
                raise StateError(f"{self.path}: {exc}") from exc

    def foreign_commits(self) -> int:
        """Changes whenever another connection (another process, or another store object)
        commits to the file; this connection's own commits leave it alone."""
        with self._lock:
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def wait_change(self, timeout: float) -> None:
        """Return when another connection committed, or after ``timeout``: polls
        ``PRAGMA data_version`` (SQLite has no notifications), 20 ms backing off to 250 ms."""
        deadline = time.monotonic() + timeout
        with self._watch_lock:
            before = self._watch.execute("PRAGMA data_version").fetchone()[0]
        delay = 0.02
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(delay, remaining))  # polling backoff: SQLite has no cross-process notifications
            with self._watch_lock:
                if self._watch.execute("PRAGMA data_version").fetchone()[0] != before:
                    return
            delay = min(delay * 2, 0.25)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
        with self._watch_lock:
            self._watch.close()


def open_state(state: Any) -> StateStore:
    """A ``state=`` option as a store: a path, a ``postgresql://`` URL, or a store object."""
    if isinstance(state, StateStore):
        return state
    if isinstance(state, str) and state.startswith(("postgresql://", "postgres://")):
        try:
            postgres = importlib.import_module(".postgres", __package__)
        except ImportError as exc:  # depends on the extra
            raise ConfigError("a postgresql:// state needs the toolnexus[postgres] extra (psycopg 3 and psycopg-pool)") from exc
        store: SqlState = postgres.PostgresState(state)
        return store
    if isinstance(state, (str, os.PathLike)):
        return SQLiteState(state)
    raise ConfigError(f"state must be a path, a postgresql:// URL or a StateStore, not {type(state).__name__}")


def joins_host_transaction(store: StateStore) -> bool:
    """Whether the change just made only joined a transaction the host opened (a store
    with ``in_host_transaction()``), which commits or rolls back later, outside the store."""
    joined = getattr(store, "in_host_transaction", None)
    return bool(joined()) if callable(joined) else False


__all__ = ["StateStore", "SQLiteState", "SqlState", "StateError", "SCHEMA_VERSION", "open_state"]
