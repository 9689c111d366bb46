"""The durable tree in the project's own database (``"state": "django"``).

``open_django_state(using)`` picks the state for ``DATABASES[using]``; the SQL is always the
one every state shares (``toolnexus.state.SqlState``).

- **SQLite** (``DjangoState``): a change goes through the connection of the thread that
  makes it. SQLite has one write lock per database, and a view's transaction may hold it,
  so a run inside an ``atomic()`` block (a view running a team inline, a ``TestCase``)
  joins that transaction in a savepoint: its state commits with the view's own writes or
  rolls back with them, and a rolled-back change is re-read from the database next time.
  Outside a transaction each change commits at once. Django has no cross-process
  notifications, so ``wait_change`` is the documented polling fallback (every 100 ms).
  The library's own threads close the connection a state change opened.
- **PostgreSQL** (``toolnexus.postgres.PostgresState``): the state has a small pool of its
  own connections to the same database (``application_name`` ends in ``toolnexus``) and
  commits every change at once, whatever the view's transaction does. Joining the view's
  transaction there would hold the tree's row locks until the view commits, and two
  views of one process would wait on each other's locks forever. Wake-ups across
  processes use LISTEN/NOTIFY.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence

from django.db import DatabaseError, connections, transaction

from ..errors import ConfigError, StateError
from .._stores.sql.base import SqlState
from .._stores.sql.dialect import Dialect
from .._stores.sql.postgres import POSTGRES
from .._stores.sql.schema import SCHEMA_VERSION
from .._stores.sql.sqlite import SQLITE

#: Connections the PostgreSQL state keeps per process (besides one for LISTEN).
POSTGRES_POOL_SIZE = 4

#: How often a wait for another process's commit re-reads the state.
POLL_S = 0.1

#: The tables a migration creates (``SqlState.migrate``) and a reverse migration drops.
TABLES = (
    "tn_meta", "tn_handles", "tn_requests", "tn_events", "tn_journal", "tn_owners", "tn_messages",
    "tn_stream", "tn_stream_serials", "tn_bindings",
)

#: The dialect of each Django database vendor the state runs on.
_DIALECTS: dict[str, Dialect] = {"sqlite": SQLITE, "postgresql": POSTGRES}


def open_django_state(using: str = "default") -> SqlState:
    """The state for ``"state": "django"``: ``DjangoState`` on SQLite, a ``PostgresState``
    on the same database on PostgreSQL (see the module's docstring for why)."""
    if dialect_of(using).supports_concurrent_writers:
        return _postgres_state(using)  # row locks held until the view commits would deadlock its views
    return DjangoState(using)


def dialect_of(using: str) -> Dialect:
    """The dialect of ``DATABASES[using]``.

    Raises:
        ConfigError: no such database, or a backend the state does not run on.
    """
    if using not in connections:
        raise ConfigError(f"toolnexus state: no database {using!r} in DATABASES")
    vendor = connections[using].vendor
    if vendor not in _DIALECTS:
        raise ConfigError(
            f"toolnexus state: the {vendor} backend of database {using!r} is not supported (SQLite or PostgreSQL)"
        )
    return _DIALECTS[vendor]


def _postgres_state(using: str) -> SqlState:
    try:
        from psycopg.conninfo import make_conninfo

        from ..postgres import PostgresState
    except ImportError as exc:  # depends on the extra
        raise ConfigError(
            '"state": "django" on PostgreSQL needs the toolnexus[postgres] extra (psycopg 3 and psycopg-pool)'
        ) from exc

    conn = connections[using]
    params = dict(conn.get_connection_params())
    params["application_name"] = f"{params.get('application_name') or 'django'} toolnexus"[:63]
    plain = {
        key: str(value)
        for key, value in params.items()
        if isinstance(value, (str, int)) and not isinstance(value, bool) and value != ""
    }
    plain.pop("prepare_threshold", None)
    with conn.cursor() as cursor:  # the tables sit beside Django's own (the migration made them there)
        cursor.execute("SELECT current_schema()")
        schema = cursor.fetchone()[0] or "public"

    DjangoState(using)  # the migration's tables are there, at this toolnexus's schema

    class MigratedPostgresState(PostgresState):
        """Opening checks the tables (above) and runs no DDL, so a role without CREATE
        rights on the database will do."""

        def migrate(self) -> None:
            pass

        def __repr__(self) -> str:
            return f"PostgresState(django database {using!r}, schema={self.schema!r})"

    conninfo = make_conninfo("", **plain)
    return MigratedPostgresState(conninfo, schema=schema, max_size=POSTGRES_POOL_SIZE)


def _check_version(rows: list[tuple[Any, ...]], using: str) -> None:
    found = int(rows[0][0]) if rows else 0
    if found != SCHEMA_VERSION:
        raise ConfigError(
            f"the toolnexus tables in database {using!r} have schema {found}, this toolnexus uses {SCHEMA_VERSION}:"
            " run manage.py migrate (or upgrade toolnexus)"
        )


class DjangoState(SqlState):
    """The state in ``DATABASES[using]``, in the tables the ``toolnexus`` app's migration
    creates, through Django's own connections (the SQLite state; the migration uses it on
    PostgreSQL too)."""

    placeholder = "%s"  # Django's cursors take %s on every backend

    def __init__(self, using: str = "default", *, check: bool = True) -> None:
        self.dialect = dialect_of(using)
        self.using = using
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
                # Django ships no types: pyright's guess at atomic()'s result is no context manager
                with transaction.atomic(using=self.using, savepoint=joined):  # pyright: ignore[reportGeneralTypeIssues]
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
        does), so that a read-then-write waits for another writer instead of failing. A
        database whose writers lock rows one by one needs nothing here."""
        if self.dialect.supports_concurrent_writers:
            return
        mode = (connections[self.using].settings_dict.get("OPTIONS") or {}).get("transaction_mode")
        if str(mode).upper() not in ("IMMEDIATE", "EXCLUSIVE"):
            self.execute("UPDATE tn_meta SET value = value WHERE key = 'schema_version'")

    def _check_schema(self) -> None:
        """The tables are the migration's: missing ones, or a newer schema, are a ``ConfigError``."""
        conn = connections[self.using]
        with self._session(conn, conn.in_atomic_block), conn.cursor() as cursor:
            present = set(conn.introspection.table_names(cursor))
        missing = [table for table in TABLES if table not in present]
        if missing:
            raise ConfigError(
                f"the toolnexus tables are missing from database {self.using!r} ({', '.join(missing)}):"
                " run manage.py migrate"
            )
        _check_version(self.execute("SELECT value FROM tn_meta WHERE key = 'schema_version'"), self.using)

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
