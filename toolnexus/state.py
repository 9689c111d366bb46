"""Durable state: the handle tree in a database, so a team outlives its process.

The store is the truth and a runtime's memory is a cache of it. Every state change a
``Handle`` method makes runs inside one store transaction that first re-reads the row
when another process changed it, and commits before the handle's lock is released: what
a waiter can observe is already durable. Claims (answering a request) are single
conditional statements, never read-then-write.

``SQLiteState`` keeps one writer connection per process behind a leaf lock (WAL mode,
``busy_timeout`` for other processes); ``toolnexus.postgres.PostgresState`` shares the
same SQL through ``SqlState``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Protocol, Sequence, runtime_checkable

import attrs

from .data import AgentResult, Answer, Budget, HandleView, Request
from .errors import ConfigError, StateError
from .wire import from_wire, to_wire

if TYPE_CHECKING:
    from .handle import Handle, HandleRecord

log = logging.getLogger("toolnexus")

#: The schema this code writes. A store stamped with a higher number is refused.
SCHEMA_VERSION = 1


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


# --- one runtime's tree inside a store ------------------------------------------------------


class DurableTree:
    """The rows of one ``runtime_id`` in a store, as the runtime and its handles use them."""

    def __init__(self, store: StateStore, runtime_id: str, *, sole_user: bool = False) -> None:
        self.store = store
        self.runtime_id = runtime_id
        self._sole_user = sole_user  # the only tree on this store object in the process
        self._local = threading.local()  # the handles the current transaction touched

    # --- transactions around handle changes ---------------------------------------------------

    @contextlib.contextmanager
    def change(self, *handles: Handle, dirty: bool = True) -> Iterator[None]:
        """One transaction around a change to ``handles`` (their locks held): re-read rows
        another process changed, run the block, write every row a ``Handle`` method
        changed (``dirty``), commit. ``dirty=False`` only joins and refreshes."""
        touched: dict[str, Handle] | None = getattr(self._local, "touched", None)
        outer = touched is None
        if outer:
            touched = self._local.touched = {}
            self._local.dirty = {}
        assert touched is not None
        changed: dict[str, Handle] = self._local.dirty
        try:
            with self.store.transaction():
                for handle in handles:
                    if handle.id not in touched:
                        self._refresh(handle)
                        touched[handle.id] = handle
                    if dirty:
                        changed[handle.id] = handle
                yield
                if outer and changed:
                    for handle in changed.values():
                        self._write(handle)
                    self.store.notify(f"{self.runtime_id}|{','.join(changed)}")  # one wake-up per commit
            if outer and _joins_host_transaction(self.store):
                for handle in touched.values():
                    handle.record.version = -1  # the host's transaction may still roll back: re-read next time
        except BaseException:
            if outer:
                for handle in touched.values():
                    handle.record.version = -1  # memory ran ahead of the store: re-read next time
            raise
        finally:
            if outer:
                self._local.touched = self._local.dirty = None

    def sync(self, handle: Handle) -> None:
        """Re-read ``handle`` (its lock held) when another process changed it."""
        self._refresh(handle)

    def _refresh(self, handle: Handle) -> None:
        seen = self._foreign_commits()
        if seen is not None and handle.verified == seen and handle.record.version >= 0:
            return  # nobody else committed since this record was last read or written
        rows = self.store.execute(
            "SELECT version, body FROM tn_handles WHERE runtime_id = ? AND id = ?"
            + (" FOR UPDATE" if self.store.dialect == "postgresql" and self._in_change() else ""),
            (self.runtime_id, handle.id),
        )
        handle.verified = seen
        if not rows or rows[0][0] == handle.record.version:
            return
        fresh = record_from_body(handle.id, rows[0][0], _json(rows[0][1]), self.children(handle.id))
        for field in attrs.fields(type(fresh)):
            setattr(handle.record, field.name, getattr(fresh, field.name))

    def _foreign_commits(self) -> int | None:
        """A counter of commits by other connections, when the store has one and this tree
        is its only user in the process (else every read goes to the store)."""
        if not self._sole_user:
            return None
        counter = getattr(self.store, "foreign_commits", None)
        return counter() if callable(counter) else None

    def _in_change(self) -> bool:
        return getattr(self._local, "touched", None) is not None

    def _write(self, handle: Handle) -> None:
        record = handle.record
        record.version = max(record.version, 0) + 1
        pending = record.pending
        self.store.execute(
            "INSERT INTO tn_handles (runtime_id, id, parent_id, spawn_no, state, version, settled, pending_id, body, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (runtime_id, id) DO UPDATE SET"
            " state = excluded.state, version = excluded.version, settled = excluded.settled,"
            " pending_id = excluded.pending_id, body = excluded.body, updated_at = excluded.updated_at",
            (
                self.runtime_id,
                record.id,
                record.parent,
                _spawn_no(record.id),
                record.state,
                record.version,
                record.settled,
                pending.id if pending is not None else None,
                json.dumps(body_of(record), separators=(",", ":")),
                time.time(),
            ),
        )

    # --- reading the tree ---------------------------------------------------------------------

    def load(self, handle_id: str) -> HandleRecord | None:
        rows = self.store.execute("SELECT version, body FROM tn_handles WHERE runtime_id = ? AND id = ?", (self.runtime_id, handle_id))
        if not rows:
            return None
        return record_from_body(handle_id, rows[0][0], _json(rows[0][1]), self.children(handle_id))

    def children(self, handle_id: str) -> list[str]:
        rows = self.store.execute(
            "SELECT id FROM tn_handles WHERE runtime_id = ? AND parent_id = ? ORDER BY spawn_no", (self.runtime_id, handle_id)
        )
        return [row[0] for row in rows]

    def live(self) -> list[tuple[str, str]]:
        """``(id, agent name)`` of every handle that is not closed, in id order."""
        rows = self.store.execute(
            "SELECT id, body FROM tn_handles WHERE runtime_id = ? AND state <> 'closed' ORDER BY id", (self.runtime_id,)
        )
        return [(row[0], _json(row[1])["name"]) for row in rows]

    def suspended_on(self, request_id: str) -> list[str]:
        rows = self.store.execute("SELECT id FROM tn_handles WHERE runtime_id = ? AND pending_id = ?", (self.runtime_id, request_id))
        return [row[0] for row in rows]

    # --- requests: the park index and the answer claim -----------------------------------------

    def open_request(self, request: Request, handle_id: str) -> None:
        """Park ``request`` on the deepest handle whose tool asked (children settle first)."""
        if self.store.dialect == "postgresql":
            suffix = " ON CONFLICT DO NOTHING"
            verb = "INSERT"
        else:
            suffix = ""
            verb = "INSERT OR IGNORE"
        self.store.execute(
            f"{verb} INTO tn_requests (runtime_id, request_id, handle_id, status, request, created_at) VALUES (?, ?, ?, 'open', ?, ?){suffix}",
            (self.runtime_id, request.id, handle_id, json.dumps(to_wire(request)), time.time()),
        )

    def parked(self, request_id: str) -> str | None:
        rows = self.store.execute(
            "SELECT handle_id FROM tn_requests WHERE runtime_id = ? AND request_id = ? AND status = 'open'", (self.runtime_id, request_id)
        )
        return rows[0][0] if rows else None

    def claim(self, request_id: str, outcome: str, answer: Any = None) -> str | None:
        """Close an open request as ``outcome``; the handle it was parked on, or ``None``
        when it was not open (another process answered or cancelled it first)."""
        rows = self.store.execute(
            "UPDATE tn_requests SET status = ?, answer = ?, closed_at = ? WHERE runtime_id = ? AND request_id = ? AND status = 'open'"
            " RETURNING handle_id",
            (outcome, json.dumps(answer) if answer is not None else None, time.time(), self.runtime_id, request_id),
        )
        return rows[0][0] if rows else None

    def open_requests(self) -> list[Request]:
        rows = self.store.execute(
            "SELECT request FROM tn_requests WHERE runtime_id = ? AND status = 'open' ORDER BY created_at", (self.runtime_id,)
        )
        return [from_wire(Request, _json(row[0])) for row in rows]

    # --- the turn journal: each model reply and tool result, committed as it happens -------------

    def journal_get(self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str) -> tuple[str, Any] | None:
        rows = self.store.execute(
            "SELECT status, payload FROM tn_journal WHERE runtime_id = ? AND handle_id = ? AND serial = ? AND segment = ?"
            " AND kind = ? AND step = ? AND call_id = ?",
            (self.runtime_id, handle_id, serial, segment, kind, step, call_id),
        )
        return (rows[0][0], _json(rows[0][1]) if rows[0][1] is not None else None) if rows else None

    def journal_put(self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str, status: str, payload: Any) -> None:
        self.store.execute(
            "INSERT INTO tn_journal (runtime_id, handle_id, serial, segment, kind, step, call_id, status, payload, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (runtime_id, handle_id, serial, segment, kind, step, call_id)"
            " DO UPDATE SET status = excluded.status, payload = excluded.payload, at = excluded.at",
            (self.runtime_id, handle_id, serial, segment, kind, step, call_id, status, json.dumps(payload) if payload is not None else None, time.time()),
        )

    def journal_drop(self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str) -> None:
        self.store.execute(
            "DELETE FROM tn_journal WHERE runtime_id = ? AND handle_id = ? AND serial = ? AND segment = ? AND kind = ? AND step = ? AND call_id = ?",
            (self.runtime_id, handle_id, serial, segment, kind, step, call_id),
        )

    def forget_turn(self, handle_id: str, serial: int) -> None:
        """A settled turn needs no journal: nothing will replay it."""
        self.store.execute("DELETE FROM tn_journal WHERE runtime_id = ? AND handle_id = ? AND serial = ?", (self.runtime_id, handle_id, serial))

    # --- owners: who runs which turn, and whether they are still alive ---------------------------

    def register_owner(self, owner: str, host: str, pid: int) -> None:
        now = time.time()
        with self.store.transaction():
            self.store.execute(
                "INSERT INTO tn_owners (runtime_id, owner, host, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (runtime_id, owner) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
                (self.runtime_id, owner, host, pid, now, now),
            )

    def heartbeat(self, owner: str) -> None:
        with self.store.transaction():
            self.store.execute("UPDATE tn_owners SET heartbeat_at = ? WHERE runtime_id = ? AND owner = ?", (time.time(), self.runtime_id, owner))

    def drop_owner(self, owner: str) -> None:
        with self.store.transaction():
            self.store.execute("DELETE FROM tn_owners WHERE runtime_id = ? AND owner = ?", (self.runtime_id, owner))

    def running_turns(self, parent_id: str | None = None) -> list[tuple[str, str | None, float | None]]:
        """``(handle id, owner, queued at)`` of every running turn (of ``parent_id``'s
        children only, when given), deepest first."""
        found = []
        sql = "SELECT id, body FROM tn_handles WHERE runtime_id = ? AND state = 'running'"
        params: tuple[str, ...] = (self.runtime_id,)
        if parent_id is not None:
            sql, params = sql + " AND parent_id = ?", (self.runtime_id, parent_id)
        for handle_id, body in self.store.execute(sql, params):
            data = _json(body)
            found.append((handle_id, data.get("turn_owner"), data.get("turn_queued_at")))
        found.sort(key=lambda item: -item[0].count("/"))
        return found

    def orphans(self, lease_s: float, host: str, alive: Callable[[int], bool]) -> list[tuple[str, str | None]]:
        """``(handle id, dead owner)`` of every running turn whose owner is gone: no heartbeat
        for ``lease_s``, or a process of this host that no longer exists. Deepest first."""
        owners = {
            row[0]: (row[1], int(row[2]), float(row[3]))
            for row in self.store.execute("SELECT owner, host, pid, heartbeat_at FROM tn_owners WHERE runtime_id = ?", (self.runtime_id,))
        }
        now = time.time()
        found = []
        for handle_id, body in self.store.execute("SELECT id, body FROM tn_handles WHERE runtime_id = ? AND state = 'running'", (self.runtime_id,)):
            data = _json(body)
            owner = data.get("turn_owner")
            if owner is None and data.get("turn_queued_at") is not None:
                continue  # queued for a dispatcher: nobody owns it yet, nobody died
            known = owners.get(owner) if owner is not None else None
            dead = known is None or now - known[2] > lease_s or (known[0] == host and not alive(known[1]))
            if dead:
                found.append((handle_id, owner))
        found.sort(key=lambda item: -item[0].count("/"))
        return found

    # --- events and transcripts ------------------------------------------------------------------

    def event(self, event: dict[str, Any]) -> None:
        self.store.execute(
            "INSERT INTO tn_events (runtime_id, handle_id, body, at) VALUES (?, ?, ?, ?)",
            (self.runtime_id, event["handle"], json.dumps(event), time.time()),
        )

    def events(self) -> list[dict[str, Any]]:
        rows = self.store.execute("SELECT body FROM tn_events WHERE runtime_id = ? ORDER BY seq", (self.runtime_id,))
        return [_json(row[0]) for row in rows]

    def get_messages(self, conversation_id: str) -> list[dict[str, Any]] | None:
        rows = self.store.execute(
            "SELECT body FROM tn_messages WHERE runtime_id = ? AND conversation_id = ?", (self.runtime_id, conversation_id)
        )
        return _json(rows[0][0]) if rows else None

    def save_messages(self, conversation_id: str, messages: list[dict[str, Any]]) -> None:
        with self.store.transaction():
            self.store.execute(
                "INSERT INTO tn_messages (runtime_id, conversation_id, body) VALUES (?, ?, ?)"
                " ON CONFLICT (runtime_id, conversation_id) DO UPDATE SET body = excluded.body",
                (self.runtime_id, conversation_id, json.dumps(messages)),
            )

    def conversations(self) -> StateConversations:
        """This tree's transcripts as a ``ConversationStore``."""
        return StateConversations(self)


def stored_views(tree: DurableTree) -> list[HandleView]:
    """Every stored handle of ``tree`` as ``handles()`` lists them (no registry needed)."""
    from .handle import Handle

    views: list[HandleView] = []

    def visit(handle_id: str) -> None:
        record = tree.load(handle_id)
        if record is None:
            return
        views.append(Handle(record).view())
        for child in record.children:
            visit(child)

    visit("root")
    return views


class StateConversations:
    """``rt.conversation_store`` on a durable state: transcripts live next to the tree."""

    def __init__(self, tree: DurableTree) -> None:
        self._tree = tree

    def get(self, id: str) -> list[dict[str, Any]] | None:
        return self._tree.get_messages(id)

    def save(self, id: str, messages: list[dict[str, Any]]) -> None:
        self._tree.save_messages(id, list(messages))


# --- a handle record as a row body -----------------------------------------------------------


def body_of(record: HandleRecord) -> dict[str, Any]:
    """Everything of a record but its id and children (those are columns and rows)."""
    suspension = record.suspension
    return {
        "name": record.name,
        "parent": record.parent,
        "depth": record.depth,
        "budget": attrs.asdict(record.budget),
        "state": record.state,
        "spawned": record.spawned,
        "transitions": record.transitions,
        "inbox": [[item.sender, item.channel, item.text] for item in record.inbox],
        "taken": [[item.sender, item.channel, item.text] for item in record.taken],
        "turns": record.turns,
        "tokens": record.tokens,
        "tool_calls": record.tool_calls,
        "pool_tool_calls": record.pool_tool_calls,
        "suspension": None
        if suspension is None
        else {
            "request": to_wire(suspension.request),
            "input": suspension.input,
            "checkpoint": suspension.checkpoint,
            "tokens_before": suspension.tokens_before,
            "turns": suspension.turns,
            "trace": suspension.trace,
        },
        "turn_serial": record.turn_serial,
        "task_keys": [[agent, prompt, *entry] for (agent, prompt), entry in record.task_keys.items()],
        "result": to_wire(record.result) if record.result is not None else None,
        "settled": record.settled,
        "closing": record.closing,
        "queued_prompt": record.queued_prompt,
        "queued_trace": record.queued_trace,
        "queued": record.queued,
        "running_children": record.running_children,
        "wake_queue": record.wake_queue,
        "turn_owner": record.turn_owner,
        "turn_input": record.turn_input,
        "turn_tokens_before": record.turn_tokens_before,
        "turn_prior_turns": record.turn_prior_turns,
        "turn_segment": record.turn_segment,
        "turn_resume": None
        if record.turn_resume is None
        else {"checkpoint": record.turn_resume[0], "pending": to_wire(record.turn_resume[1]), "answer": to_wire(record.turn_resume[2])},
        "turn_queued_at": record.turn_queued_at,
        "nonce": record.nonce,
    }


def record_from_body(handle_id: str, version: int, body: dict[str, Any], children: list[str]) -> HandleRecord:
    from .handle import HandleRecord, InboxItem, Suspension

    suspension = body["suspension"]
    resume = body["turn_resume"]
    return HandleRecord(
        id=handle_id,
        name=body["name"],
        parent=body["parent"],
        depth=body["depth"],
        budget=Budget(**body["budget"]),
        state=body["state"],
        children=children,
        spawned=body["spawned"],
        transitions=list(body["transitions"]),
        inbox=[InboxItem(*item) for item in body["inbox"]],
        taken=[InboxItem(*item) for item in body["taken"]],
        turns=body["turns"],
        tokens=body["tokens"],
        tool_calls=body["tool_calls"],
        pool_tool_calls=body["pool_tool_calls"],
        suspension=None
        if suspension is None
        else Suspension(
            request=from_wire(Request, suspension["request"]),
            input=suspension["input"],
            checkpoint=suspension["checkpoint"],
            tokens_before=suspension["tokens_before"],
            turns=suspension["turns"],
            trace=suspension.get("trace"),
        ),
        turn_serial=body["turn_serial"],
        task_keys={(agent, prompt): (serial, child, call[0] if call else "") for agent, prompt, serial, child, *call in body["task_keys"]},
        result=from_wire(AgentResult, body["result"]) if body["result"] is not None else None,
        settled=body["settled"],
        closing=body["closing"],
        queued_prompt=body["queued_prompt"],
        queued_trace=body.get("queued_trace"),
        queued=body["queued"],
        running_children=body["running_children"],
        wake_queue=list(body["wake_queue"]),
        version=version,
        turn_owner=body["turn_owner"],
        turn_input=body["turn_input"],
        turn_tokens_before=body["turn_tokens_before"],
        turn_prior_turns=body["turn_prior_turns"],
        turn_segment=body["turn_segment"],
        turn_resume=None
        if resume is None
        else (resume["checkpoint"], from_wire(Request, resume["pending"]), from_wire(Answer, resume["answer"])),
        nonce=body["nonce"],
        turn_queued_at=body.get("turn_queued_at"),
    )


def _joins_host_transaction(store: StateStore) -> bool:
    """Whether the change just made only joined a transaction the host opened (a store
    with ``in_host_transaction()``), which commits or rolls back later, outside the store."""
    joined = getattr(store, "in_host_transaction", None)
    return bool(joined()) if callable(joined) else False


def _spawn_no(handle_id: str) -> int:
    last = handle_id.rsplit("/", 1)[-1]
    number = last.rsplit(".", 1)[-1]
    return int(number) if number.isdigit() else 0


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


__all__ = ["StateStore", "SQLiteState", "SqlState", "StateError", "SCHEMA_VERSION", "open_state"]
