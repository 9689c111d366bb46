"""State stores: the SQL databases a durable tree lives in (``state=`` on a ``Runtime``).

``StateStore`` is the few calls a stored tree (``_stores.sql.tree.StoredTree``) makes of a database:
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
from typing import Any, Iterator, Sequence

from .errors import ConfigError, StateError
from ._stores.sql.base import SqlState, StateStore
from ._stores.sql.dialect import Dialect
from ._stores.sql.schema import SCHEMA_VERSION
from ._stores.sql.sqlite import SQLITE

log = logging.getLogger("toolnexus")


#: Pages in the WAL before a commit checkpoints it, and the bytes of WAL file kept after.
WAL_CHECKPOINT_PAGES = 10_000
WAL_KEPT_BYTES = 64 * 2**20


class SQLiteState(SqlState):
    """A SQLite file shared by the threads and processes of one host (WAL mode).

    Network filesystems are not supported (WAL needs shared memory); use PostgreSQL to
    share a tree between hosts.
    """

    dialect: Dialect = SQLITE
    #: A transaction holds the file's one write lock: nobody else commits meanwhile.
    exclusive_transactions = True

    #: Waits for another process's write lock before retrying with backoff.
    BUSY_TIMEOUT_MS = 5000
    _BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            self._conn = self._connect()
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            # A checkpoint (the WAL's pages copied into the file, then synced) runs in the
            # commit that crosses its threshold: at 10,000 pages instead of SQLite's 1,000,
            # a busy tree's commits pay for one a tenth as often, and a page many commits
            # wrote is copied once. The WAL file is cut back to 64 MB after each.
            self._conn.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
            self._conn.execute(f"PRAGMA journal_size_limit={WAL_KEPT_BYTES}")
            self._watch = self._connect()
            self._identity = _identity(self.path)
        except (sqlite3.Error, OSError) as exc:
            raise StateError(f"cannot open the state file {self.path}: {exc}") from exc
        # guards: _conn and _depth. A leaf: held under handle locks, never calls back.
        self._lock = threading.RLock()
        self._depth = 0
        self._watch_lock = threading.Lock()  # guards: _watch
        self._closed = False
        self.migrate()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=self.BUSY_TIMEOUT_MS / 1000
        )
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
                self._check_identity()
                self._conn.execute("COMMIT")
            except StateError:
                self._rollback()
                raise
            except sqlite3.Error as exc:
                self._rollback()
                raise StateError(f"commit to {self.path} failed: {exc}") from exc

    def _check_identity(self) -> None:
        """The file this state opened is still the one at its path: a state file deleted or
        replaced while open would otherwise go on as a second, silent tree."""
        try:
            found = _identity(self.path)
        except OSError:
            found = None
        if found != self._identity:
            what = "deleted" if found is None else "replaced by another file"
            raise StateError(
                f"the state file {self.path} was {what} while this runtime held it; nothing more is written to it"
            )

    def _begin(self) -> None:
        for delay in (*self._BACKOFF, None):
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as exc:
                if not isinstance(exc, sqlite3.OperationalError) or (
                    "locked" not in str(exc) and "busy" not in str(exc)
                ):
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
            except (sqlite3.Error, ValueError) as exc:  # ValueError: text sqlite3 cannot take (a lone surrogate)
                raise StateError(f"{self.path}: {exc}") from exc

    def foreign_commits(self) -> int:
        """Changes whenever another connection (another process, or another state object)
        commits to the file; this connection's own commits leave it alone."""
        with self._lock:
            try:
                return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise StateError(f"{self.path}: {exc}") from exc

    def wait_change(self, timeout: float) -> None:
        """Return when another connection committed, or after ``timeout``: polls
        ``PRAGMA data_version`` (SQLite has no notifications), 20 ms backing off to 250 ms."""
        deadline = time.monotonic() + timeout
        before = self._watched()
        delay = 0.02
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(delay, remaining))  # polling backoff: SQLite has no cross-process notifications
            if self._watched() != before:
                return
            delay = min(delay * 2, 0.25)

    def _watched(self) -> int | None:
        """The watch connection's ``data_version``; ``None`` when the file cannot be read
        (then a waiter only waits out its poll, and the next commit names the fault)."""
        with self._watch_lock:
            try:
                return int(self._watch.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
        with self._watch_lock:
            self._watch.close()


def _identity(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_dev, status.st_ino


def open_state(state: Any) -> StateStore:
    """A ``state=`` option as a state: a path, a ``postgresql://`` URL, or a state object."""
    if isinstance(state, StateStore):
        return state
    if isinstance(state, str) and state.startswith(("postgresql://", "postgres://")):
        try:
            postgres = importlib.import_module(".postgres", __package__)
        except ImportError as exc:  # depends on the extra
            raise ConfigError(
                "a postgresql:// state needs the toolnexus[postgres] extra (psycopg 3 and psycopg-pool)"
            ) from exc
        opened: SqlState = postgres.PostgresState(state)
        return opened
    if isinstance(state, (str, os.PathLike)):
        return SQLiteState(state)
    raise ConfigError(f"state must be a path, a postgresql:// URL or a StateStore, not {type(state).__name__}")


__all__ = ["StateStore", "SQLiteState", "SqlState", "StateError", "SCHEMA_VERSION", "open_state"]
