"""``PostgresState``: a durable tree shared by processes on many hosts (extra ``toolnexus[postgres]``).

Tables live in one schema (default ``toolnexus``), created on first use under an advisory
lock so that concurrent first starts cannot race. Connections come from a
``psycopg_pool.ConnectionPool``; each transaction of the state holds one connection and locks the
rows it changes (``SELECT ... FOR UPDATE``), so threads and processes change different
handles in parallel. Commits that touch a handle send ``NOTIFY toolnexus``; one listener
thread per state wakes waiters, and a waiter re-reads the state at least every 250 ms in
case a notification was lost (a dropped connection, or a pooler without LISTEN).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from typing import Any, Iterator, Sequence

import psycopg
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from .errors import StateError
from ._stores.sql.base import SqlState
from ._stores.sql.dialect import Dialect
from ._stores.sql.postgres import POSTGRES

log = logging.getLogger("toolnexus")

CHANNEL = "toolnexus"
_TABLE = re.compile(r"(TABLE IF NOT EXISTS|FROM|INTO|UPDATE|ON)\s+tn_")
_CONNECT_TIMEOUT_S = 5.0
#: Every connection the state opens. Text is exchanged as UTF-8 whatever the database's own
#: encoding: on a database created as SQL_ASCII (initdb without a locale) psycopg would
#: otherwise return text columns as bytes.
_CONNECT_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "connect_timeout": int(_CONNECT_TIMEOUT_S),
    "client_encoding": "UTF8",
}


class PostgresState(SqlState):
    """The tree in PostgreSQL: give a ``postgresql://`` URL (a pool is made and owned
    here) or a ``psycopg_pool.ConnectionPool`` the host already has."""

    placeholder = "%s"
    dialect: Dialect = POSTGRES
    schema: str

    def __init__(
        self,
        conninfo_or_pool: str | ConnectionPool,
        *,
        schema: str = "toolnexus",
        listen: bool = True,
        max_size: int = 10,
    ) -> None:
        # Always a name here: the base's None is SQLite's "no schema"
        self.schema = schema  # pyright: ignore[reportIncompatibleVariableOverride]
        self._local = threading.local()  # the connection of this thread's open transaction
        self._closed = threading.Event()
        self._generation = 0
        self._foreign = 0  # notifications from other states, as ``foreign_commits`` counts them
        self._changed = threading.Condition()  # guards: _generation, _foreign; notified by the listener
        #: Marks this state's own notifications, so that they do not count as foreign.
        self._sender = os.urandom(8).hex()
        if isinstance(conninfo_or_pool, ConnectionPool):
            self._pool, self._owns_pool = conninfo_or_pool, False
            conninfo = conninfo_or_pool.conninfo
            self._conninfo = conninfo() if callable(conninfo) else conninfo
        else:
            self._conninfo = conninfo_or_pool
            self._owns_pool = True
            self._pool = ConnectionPool(
                conninfo_or_pool,
                min_size=1,
                max_size=max_size,
                kwargs=_CONNECT_KWARGS,
                configure=self._configure,
                max_idle=300,
                max_lifetime=1800,
                open=False,
                name="toolnexus",
            )
            try:
                # One connection first: a server that refuses or rejects it is named at once,
                # with its reason (the pool would retry it for the whole timeout, then only
                # say that it timed out).
                psycopg.connect(conninfo_or_pool, **_CONNECT_KWARGS).close()
                self._pool.open(wait=True, timeout=_CONNECT_TIMEOUT_S)
            except (PoolTimeout, psycopg.Error) as exc:
                self._pool.close()
                raise StateError(f"cannot reach PostgreSQL at {_safe(self._conninfo)}: {exc}") from exc
        self._listener: threading.Thread | None = None
        self.migrate()
        if listen:
            self._listener = threading.Thread(target=self._listen, name="toolnexus-listen", daemon=True)
            self._listener.start()

    def __repr__(self) -> str:
        return f"PostgresState({_safe(self._conninfo)!r}, schema={self.schema!r})"

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SET statement_timeout = 5000")
        conn.execute("SET lock_timeout = 5000")

    def _qualified(self, sql: str) -> str:
        return _TABLE.sub(lambda m: f'{m.group(1)} "{self.schema}".tn_', sql)

    def _prepare_migration(self) -> None:
        """Concurrent first starts queue on the migration lock, then the schema is made."""
        super()._prepare_migration()
        self._local.conn.execute(pgsql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(pgsql.Identifier(self.schema)))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        if getattr(self._local, "conn", None) is not None:
            yield  # joins this thread's open transaction
            return
        if self._closed.is_set():
            raise StateError("the PostgreSQL state is closed")
        try:
            with self._pool.connection(timeout=_CONNECT_TIMEOUT_S) as conn:
                self._local.conn = conn
                try:
                    with conn.transaction():
                        yield
                finally:
                    self._local.conn = None
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise StateError(f"PostgreSQL at {_safe(self._conninfo)}: {exc}") from exc

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        statement = self._qualified(self._sql(sql))
        conn = getattr(self._local, "conn", None)
        try:
            if conn is not None:
                return _rows(conn.execute(statement, tuple(params)))
            if self._closed.is_set():
                raise StateError("the PostgreSQL state is closed")
            with self._pool.connection(timeout=_CONNECT_TIMEOUT_S) as own:
                # pyright wants a LiteralString: the statement is this package's own SQL, schema-qualified
                return _rows(own.execute(statement, tuple(params)))  # pyright: ignore[reportArgumentType]
        except (PoolTimeout, psycopg.Error) as exc:
            raise StateError(f"PostgreSQL at {_safe(self._conninfo)}: {exc}") from exc

    def notice(self, payload: str) -> tuple[str, str]:
        """``pg_notify``'s arguments for ``payload``: waiters in every process wake once
        the transaction that sends it commits."""
        return CHANNEL, f"{self._sender}|{payload}"[:7000]

    def now(self) -> float:
        """PostgreSQL's clock: hosts whose own clocks disagree still agree on a lease."""
        rows = self.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())")
        return float(rows[0][0])

    def foreign_commits(self) -> int | None:
        """A count of the commits other states announced, or ``None`` without a listener.
        It may lag a commit by the time its notification takes to arrive, so it serves
        reads outside a transaction only (inside one, rows are read and locked)."""
        if self._listener is None:
            return None
        with self._changed:
            return self._foreign

    # --- cross-process wake-ups -------------------------------------------------------------

    def _listen(self) -> None:
        while not self._closed.is_set():
            try:
                with psycopg.connect(self._conninfo, **_CONNECT_KWARGS) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._bump(foreign=True)  # (re)connected: anything missed meanwhile is re-read
                    mine = f"{self._sender}|"
                    while not self._closed.is_set():
                        for notice in conn.notifies(timeout=0.5, stop_after=64):
                            self._bump(foreign=not notice.payload.startswith(mine))
            except psycopg.Error:
                log.debug("toolnexus: LISTEN connection lost; waiters poll until it is back", exc_info=True)
                self._closed.wait(1.0)

    def _bump(self, *, foreign: bool = True) -> None:
        with self._changed:
            self._generation += 1
            self._foreign += foreign
            self._changed.notify_all()

    def wait_change(self, timeout: float) -> None:
        """Return on the next notification, or after ``timeout`` (the polling fallback)."""
        with self._changed:
            seen = self._generation
            self._changed.wait_for(lambda: self._generation != seen or self._closed.is_set(), timeout=timeout)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._bump()
        if self._listener is not None:
            self._listener.join(timeout=2.0)
        if self._owns_pool:
            self._pool.close()


def _rows(cursor: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    return list(cursor.fetchall()) if cursor.description is not None else []


def _safe(conninfo: str) -> str:
    """The conninfo without a password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<conninfo>"
    params.pop("password", None)
    return make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
