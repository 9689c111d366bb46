"""What a SQL database can do and how it spells the SQL of a state: its dialect.

The SQL of the parts is written once; where databases differ, the code asks the state's
dialect (``state.dialect``), never its name, as SQLAlchemy's dialects declare their
differences as attributes (``supports_*``) and spelling methods. ``Dialect`` holds what
every database a state runs on agrees on; ``sqlite.SQLiteDialect`` and
``postgres.PostgresDialect`` say where they part.

Statements use ``?`` placeholders; a state whose driver takes another style rewrites them
(``SqlState.placeholder``).
"""

from __future__ import annotations

import functools


class Dialect:
    """The SQL both databases share; subclasses declare their differences."""

    #: For people reading a repr or a log: never compared by the code.
    name = "sql"

    #: The column type of an auto-numbered key (``tn_events.seq``).
    serial_column = "INTEGER PRIMARY KEY AUTOINCREMENT"

    #: What follows ``CREATE TABLE (...)`` for a table kept in its primary key's order.
    clustered = ""

    #: Writing transactions run side by side, each locking the rows it reads to change
    #: (``FOR UPDATE``), and may commit in another order than they wrote. Without it, a
    #: writing transaction holds the database's one write lock until it commits.
    supports_concurrent_writers = False

    #: The statement a migration takes its lock with, inside its transaction (``None``:
    #: the transaction's own write lock keeps a concurrent migration out).
    migration_lock: str | None = None

    #: The statement that sends a notice on commit (``pg_notify(channel, message)``), or
    #: ``None`` for a database without notices.
    notify_statement: str | None = None

    def __repr__(self) -> str:
        return f"<{self.name} dialect>"

    def ddl(self, statement: str) -> str:
        """A schema statement with this database's words for ``{serial}`` and ``{clustered}``."""
        return statement.format(serial=self.serial_column, clustered=self.clustered)

    def locking(self, select: str) -> str:
        """``select`` reading rows the transaction will change: with concurrent writers it
        locks them until the commit; with one writer the write lock serves already."""
        return f"{select} FOR UPDATE" if self.supports_concurrent_writers else select

    @functools.lru_cache(maxsize=None)  # noqa: B019 - dialects are module constants
    def insert_ignoring(self, into: str) -> str:
        """``INSERT INTO {into}`` that does nothing when a row with the same key exists."""
        return f"INSERT INTO {into} ON CONFLICT DO NOTHING"

    @functools.lru_cache(maxsize=None)  # noqa: B019 - dialects are module constants
    def upsert(self, table: str, columns: tuple[str, ...], key: tuple[str, ...], updated: tuple[str, ...]) -> str:
        """Insert one row of ``columns``, or update ``updated`` of the row with that ``key``."""
        marks = ", ".join("?" for _ in columns)
        sets = ", ".join(f"{column} = excluded.{column}" for column in updated)
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
            f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sets}"
        )

    @functools.lru_cache(maxsize=None)  # noqa: B019 - dialects are module constants
    def insert_rows(self, table: str, columns: tuple[str, ...], rows: int) -> str:
        """Insert ``rows`` rows of ``columns`` in one statement."""
        row = f"({', '.join('?' for _ in columns)})"
        return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * rows)}"

    def catalog(self, schema: str | None) -> tuple[str, tuple[str, ...]]:
        """The query (and its parameters) that lists the names of the tables and indexes
        the state has, read from the catalog, which takes no lock on them."""
        raise NotImplementedError

    def numbered_events(self, rows: int, *, notify: bool) -> str:
        """With concurrent writers: one statement that numbers ``rows`` events through the
        tree's counter row (whose lock, taken last, orders the commits), inserts them and,
        with ``notify``, sends the commit's notice; it returns the last serial."""
        raise NotImplementedError
