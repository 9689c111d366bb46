"""PostgreSQL's dialect: concurrent writers that lock rows, notices, identity columns."""

from __future__ import annotations

import functools

from .dialect import Dialect


class PostgresDialect(Dialect):
    """PostgreSQL: writing transactions run side by side and lock the rows they change;
    a counter row per tree orders the event serials; ``pg_notify`` wakes other processes
    when a transaction commits."""

    name = "postgresql"
    serial_column = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    supports_concurrent_writers = True
    #: Concurrent first starts queue here instead of racing on ``CREATE TABLE``.
    migration_lock = "SELECT pg_advisory_xact_lock(hashtext('toolnexus.migrate'))"
    notify_statement = "SELECT pg_notify(?, ?)"

    def catalog(self, schema: str | None) -> tuple[str, tuple[str, ...]]:
        query = "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = "
        return (query + "current_schema()", ()) if schema is None else (query + "?", (schema,))

    def numbered_events(self, rows: int, *, notify: bool) -> str:
        return _numbered_events(rows, notify)


#: The one PostgreSQL dialect.
POSTGRES = PostgresDialect()


@functools.lru_cache(maxsize=None)
def _numbered_events(rows: int, notify: bool) -> str:
    """``PostgresDialect.numbered_events``, made once per shape."""
    values = ", ".join(["(CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT))"] * rows)
    return (
        "WITH counted AS (INSERT INTO tn_stream_serials AS c (runtime_id, last) VALUES (?, ?)"
        " ON CONFLICT (runtime_id) DO UPDATE SET last = c.last + excluded.last RETURNING last),"
        " added AS (INSERT INTO tn_stream (runtime_id, serial, handle_id, kind, body, at)"
        " SELECT CAST(? AS TEXT), counted.last - ? + v.k, v.handle_id, v.kind, v.body, CAST(? AS DOUBLE PRECISION)"
        f" FROM counted, (VALUES {values}) AS v (k, handle_id, kind, body))"
        f" SELECT last{', pg_notify(?, ?)' if notify else ''} FROM counted"
    )
