"""``DjangoState``: the durable tree in the project's own database, through Django's connections.

The SQL is the one every store shares (``toolnexus.state.SqlState``); this class only says
how to reach the database. A change goes through the connection of the thread that makes
it, so:

- inside an ``atomic()`` block (a view running a team inline, a ``TestCase``) the run's
  state joins that transaction, in a savepoint: it commits with the view's own writes or
  rolls back with them, and a rolled-back change is re-read from the database next time;
- outside one, each change is its own transaction, committed at once.

Django has no cross-process notifications, so ``wait_change`` is the documented polling
fallback: a wait for a turn another process runs re-reads the state every 100 ms. The
library's own threads (heartbeats, worker threads) close the connection a state change
opened, so none of them keeps a database session.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence

from django.db import DatabaseError, connections, transaction

from ..errors import ConfigError, StateError
from ..state import SCHEMA_VERSION, SqlState

#: How often a wait for another process's commit re-reads the state.
POLL_S = 0.1

#: The tables a migration creates (``SqlState.migrate``) and a reverse migration drops.
TABLES = ("tn_meta", "tn_handles", "tn_requests", "tn_events", "tn_journal", "tn_owners", "tn_messages")

_SERIAL = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgresql": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"}


class DjangoState(SqlState):
    """The state in ``DATABASES[using]`` (SQLite or PostgreSQL), in the tables the
    ``toolnexus`` app's migration creates."""

    placeholder = "%s"  # Django's cursors take %s on every backend

    def __init__(self, using: str = "default", *, check: bool = True) -> None:
        if using not in connections:
            raise ConfigError(f"toolnexus state: no database {using!r} in DATABASES")
        vendor = connections[using].vendor
        if vendor not in _SERIAL:
            raise ConfigError(f"toolnexus state: the {vendor} backend of database {using!r} is not supported (SQLite or PostgreSQL)")
        self.using = using
        self.dialect = vendor
        self.serial_column = _SERIAL[vendor]
        self._local = threading.local()  # depth: this thread's nesting of transaction()
        self._closing = threading.Event()
        if check:
            self._check_schema()

    def __repr__(self) -> str:
        return f"DjangoState(using={self.using!r})"

    # --- transactions on the calling thread's connection --------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        depth = getattr(self._local, "depth", 0)
        if depth:
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth = depth
            return
        conn = connections[self.using]
        joined = conn.in_atomic_block
        with self._session(conn, joined):
            self._local.depth = 1
            try:
                with transaction.atomic(using=self.using, savepoint=joined):
                    if not joined:
                        self._lock_for_writing()
                    yield
            except DatabaseError as exc:
                raise StateError(f"the toolnexus state in database {self.using!r}: {exc}") from exc
            finally:
                self._local.depth = 0

    def in_host_transaction(self) -> bool:
        return bool(connections[self.using].in_atomic_block)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        conn = connections[self.using]
        try:
            with self._session(conn, conn.in_atomic_block), conn.cursor() as cursor:
                cursor.execute(self._sql(sql), tuple(params))
                return list(cursor.fetchall()) if cursor.description is not None else []
        except DatabaseError as exc:
            raise StateError(f"the toolnexus state in database {self.using!r}: {exc}") from exc

    @contextlib.contextmanager
    def _session(self, conn: Any, joined: bool) -> Iterator[None]:
        """Outside a transaction: drop a connection the server closed or that outlived
        ``CONN_MAX_AGE``; on one of the library's threads, close the connection opened here."""
        if joined or int(getattr(self._local, "depth", 0)):
            yield
            return
        conn.close_if_unusable_or_obsolete()
        opened = conn.connection is None
        try:
            yield
        finally:
            if opened and _library_thread() and not conn.in_atomic_block:
                conn.close()

    def _lock_for_writing(self) -> None:
        """SQLite: take the write lock as the transaction begins (as ``BEGIN IMMEDIATE``
        does), so that a read-then-write waits for another writer instead of failing."""
        if self.dialect != "sqlite":
            return
        mode = (connections[self.using].settings_dict.get("OPTIONS") or {}).get("transaction_mode")
        if str(mode).upper() not in ("IMMEDIATE", "EXCLUSIVE"):
            self.execute("UPDATE tn_meta SET value = value WHERE key = 'schema_version'")

    def _prepare_migration(self) -> None:
        if self.dialect == "postgresql":
            self.execute("SELECT pg_advisory_xact_lock(hashtext('toolnexus.migrate'))")

    def _check_schema(self) -> None:
        """The tables are the migration's: missing ones, or a newer schema, are a ``ConfigError``."""
        conn = connections[self.using]
        with self._session(conn, conn.in_atomic_block), conn.cursor() as cursor:
            present = set(conn.introspection.table_names(cursor))
        missing = [table for table in TABLES if table not in present]
        if missing:
            raise ConfigError(f"the toolnexus tables are missing from database {self.using!r} ({', '.join(missing)}): run manage.py migrate")
        rows = self.execute("SELECT value FROM tn_meta WHERE key = 'schema_version'")
        found = int(rows[0][0]) if rows else 0
        if found != SCHEMA_VERSION:
            raise ConfigError(
                f"the toolnexus tables in database {self.using!r} have schema {found}, this toolnexus uses {SCHEMA_VERSION}:"
                " run manage.py migrate (or upgrade toolnexus)"
            )

    # --- waiting and closing --------------------------------------------------------------------

    def wait_change(self, timeout: float) -> None:
        """The polling fallback: return after ``POLL_S`` (or ``timeout``), or at ``close``."""
        self._closing.wait(max(0.0, min(timeout, POLL_S)))

    def close(self) -> None:
        """Nothing to release (Django owns the connections); wakes any waiter."""
        self._closing.set()


def _library_thread() -> bool:
    """The library names every thread it starts ``toolnexus…``; Django manages the others."""
    return threading.current_thread().name.startswith("toolnexus")
