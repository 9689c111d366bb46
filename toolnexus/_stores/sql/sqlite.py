"""SQLite's dialect: one write lock per database, no notices, ``INSERT OR IGNORE``."""

from __future__ import annotations

import functools

from .dialect import Dialect


class SQLiteDialect(Dialect):
    """SQLite: a writing transaction holds the file's one write lock (``BEGIN IMMEDIATE``),
    so it needs no row locks, and serials follow the highest one written."""

    name = "sqlite"
    serial_column = "INTEGER PRIMARY KEY AUTOINCREMENT"
    #: A table without a rowid keeps its rows in one b-tree: one write per row.
    clustered = " WITHOUT ROWID"
    supports_concurrent_writers = False

    @functools.lru_cache(maxsize=None)  # noqa: B019 - dialects are module constants
    def insert_ignoring(self, into: str) -> str:
        return f"INSERT OR IGNORE INTO {into}"

    def catalog(self, schema: str | None) -> tuple[str, tuple[str, ...]]:
        return "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')", ()


#: The one SQLite dialect.
SQLITE = SQLiteDialect()
