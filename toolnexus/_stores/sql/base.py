"""What a state is to the code above it: the ``StateStore`` protocol, and ``SqlState``, the
base of the SQLite, PostgreSQL and Django states, which declares what a state can do.

A state says what it can (a transaction that excludes every other writer, a count of
other connections' commits, joining a transaction its host opened, notices to other
processes, a clock every process agrees on) through the members below, and how its
database spells SQL through its ``dialect``. The code asks it these; never its name.
"""

from __future__ import annotations

import time
from typing import Any, ContextManager, Protocol, Sequence, runtime_checkable

from .dialect import Dialect
from .schema import META, SCHEMA, SCHEMA_OBJECTS, SCHEMA_VERSION, upgrade_from_1
from .sqlite import SQLITE
from ...errors import ConfigError


@runtime_checkable
class StateStore(Protocol):
    """Where runtimes keep their trees: a SQL database the runtime speaks to through these
    few calls (``SQLiteState`` and ``PostgresState`` implement it; ``SqlState`` is the
    base for others, and declares what a state cannot do unless it says so). A state is
    safe to share between threads.

    ``transaction()`` is re-entrant on one thread: nested calls join the outer one, and
    only the outermost commits; ``execute`` runs one statement (``?`` placeholders) in the
    thread's open transaction, or on its own; ``wait_change`` returns when another
    connection may have committed, or after ``timeout``; ``notify`` tells other processes,
    on commit, that a handle changed (``notice`` is the same message for a statement that
    sends it itself); ``migrate`` creates the tables or refuses a newer schema with
    ``ConfigError``.

    What a state can do is declared, never guessed from its name: ``dialect`` (how its
    database spells SQL, and whether its writers run side by side), ``exclusive_transactions``,
    ``foreign_commits()`` (a count of other connections' commits, or ``None``),
    ``in_host_transaction()`` (a change that only joined a transaction its host opened),
    ``notice()`` (``None``: no notices, other processes poll) and ``now()`` (the clock every
    process of a tree compares leases on). ``SqlState`` answers each for a state that can
    do the least.
    """

    #: How the database spells SQL, and what it can do (``Dialect``).
    dialect: Dialect
    #: A transaction excludes every other writer until it commits, so a count of the
    #: others' commits read inside it is exact.
    exclusive_transactions: bool

    def transaction(self) -> ContextManager[Any]: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def wait_change(self, timeout: float) -> None: ...

    def notify(self, payload: str) -> None: ...

    def notice(self, payload: str) -> tuple[str, str] | None: ...

    def foreign_commits(self) -> int | None: ...

    def in_host_transaction(self) -> bool: ...

    def now(self) -> float: ...

    def migrate(self) -> None: ...

    def close(self) -> None: ...


class SqlState:
    """The SQL every state shares; subclasses provide connections and declare what they
    can do beyond this base (which can do the least)."""

    #: The driver's placeholder for a parameter (statements are written with ``?``).
    placeholder = "?"
    #: How the database spells SQL: SQLite's unless a subclass says otherwise.
    dialect: Dialect = SQLITE
    #: The schema the tables live in (``None``: the connection's current one).
    schema: str | None = None
    exclusive_transactions = False

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

    def foreign_commits(self) -> int | None:
        """A count that changes whenever another connection commits and never for this
        state's own commits, or ``None`` when the state keeps none (then every read goes
        to the database)."""
        return None

    def in_host_transaction(self) -> bool:
        """Whether this thread's changes only joined a transaction the host opened, which
        commits (or rolls back) later, outside the state."""
        return False

    def notice(self, payload: str) -> tuple[str, str] | None:
        """The notice (channel, message) that tells other processes, on commit, that
        ``payload``'s handle changed; ``None`` for a state that sends none."""
        return None

    def notify(self, payload: str) -> None:
        """Tell other processes, when the current transaction commits, that ``payload``'s
        handle changed (nothing, for a state that sends no notices)."""
        notice = self.notice(payload)
        if notice is not None and self.dialect.notify_statement is not None:
            self.execute(self.dialect.notify_statement, notice)

    def now(self) -> float:
        """The state's clock (seconds since the epoch), which every process of the tree
        compares leases and heartbeats on: here the host's, as one host shares the state."""
        return time.time()

    def _prepare_migration(self) -> None:
        """Set-up inside the migration transaction: the dialect's migration lock."""
        if self.dialect.migration_lock is not None:
            self.execute(self.dialect.migration_lock)

    def _missing(self) -> list[str]:
        """The schema's tables and indexes that the state lacks (read from its catalog,
        which takes no lock on them)."""
        query, params = self.dialect.catalog(self.schema)
        present = {str(row[0]) for row in self.execute(query, params)}
        return [name for name in SCHEMA_OBJECTS if name not in present]

    def migrate(self) -> None:
        """Create the tables, or refuse a state written by a newer version before anything
        is written to it; a state of schema 1 is upgraded when it has no run in flight, one
        of schema 2 gains the bindings table."""
        with self.transaction():
            self._prepare_migration()
            self.execute(META)  # where the version is
            rows = self.execute("SELECT value FROM tn_meta WHERE key = 'schema_version'")
            found = int(rows[0][0]) if rows else None
            if found is not None and found > SCHEMA_VERSION:
                raise ConfigError(
                    f"the state store was written by a newer toolnexus (schema {found};"
                    f" this one reads up to {SCHEMA_VERSION}): upgrade toolnexus"
                )
            if found == SCHEMA_VERSION and not self._missing():
                return  # nothing to create: no DDL, whose table locks would wait on running units
            for statement in SCHEMA[1:]:
                self.execute(self.dialect.ddl(statement))
            if found is None:
                self.execute("INSERT INTO tn_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif found < SCHEMA_VERSION:
                if found < 2:
                    upgrade_from_1(self)
                self.execute("UPDATE tn_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
