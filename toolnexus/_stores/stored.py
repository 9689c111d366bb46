"""A stored tree: the rows of one ``runtime_id`` in a state store, so a team outlives its
process.

The store is the truth and a runtime's memory is a cache of it. Every change a ``Handle``
method makes runs inside one unit of work (``change``) that first re-reads the rows
another process changed and commits before the handle's lock is released: what a waiter
can observe is already durable. Claims (answering a request, taking over a turn) are
single conditional statements or compare-and-set under the row lock, never read-then-write.

A handle's row body is its record through ``wire``'s converter, small and rewritten on
each change; what is large and written once per turn (its input, its resume, the
checkpoint it suspended at) goes to the journal beside it, with each model reply and tool
result of the turn.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator

import attrs

from .._team.dispatching import Dispatcher, Dispatching
from .._run import journal
from . import storedruns
from ..data import HandleView, Request
from ..errors import ConfigError
from .eventrows import StoredEvents
from .._events.log import LOG
from .._team.handle import Handle, Turn
from .handlerows import LISTED_COLUMNS, ROOT, body_of, json_value, record_of, spawn_no, views_of_rows
from .._team.ownership import Ownership
from .._team.record import HandleRecord, Resume
from .sql.base import StateStore
from .conversations import ConversationStore
from ..wire import from_wire, to_wire

if TYPE_CHECKING:
    from .._team.tree import HandleTree

#: How long a wait on a turn owned by another process goes without re-reading the state.
REMOTE_POLL_S = 0.25

#: What a nested unit of work enters: the outermost one does the work.
_JOINED: ContextManager[None] = contextlib.nullcontext()


class StoredTree:
    """The rows of one ``runtime_id`` in a store, as the runtime and its handles use them
    (the ``tree.TreeStore`` seam). ``sole_user``: the only tree on this store object in
    the process, which lets it skip re-reading rows nobody else committed to."""

    def __init__(self, store: StateStore, runtime_id: str, *, sole_user: bool = False, owns_store: bool = False) -> None:
        self.store = self.state = store  # ``state``: what the served layer reads (``TreeStore.state``)
        self.runtime_id = runtime_id
        self._sole_user = sole_user
        self._owns_store = owns_store
        self._local = threading.local()  # the handles the current unit of work touched
        self.conversations: ConversationStore = StateConversations(self)
        self.stream_events = StoredEvents(store, runtime_id)
        self._let_go = False

    #: A stored tree outlives its runtime: another runtime may continue it.
    lasting = True

    # --- units of work around handle changes ---------------------------------------------------

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[None]:
        touched: dict[str, Handle] | None = getattr(self._local, "touched", None)
        if touched is None:
            return self._unit(handles, dirty)
        # Nested: it joins the outermost unit, which commits (no transaction of its own).
        fresh = [handle for handle in handles if handle.id not in touched]
        if fresh:
            self._refresh(fresh, self._local.seen, locking=True)
            for handle in fresh:
                touched[handle.id] = handle
        if dirty:
            self._local.dirty.update((handle.id, handle) for handle in handles)
        return _JOINED

    @contextlib.contextmanager
    def _unit(self, handles: tuple[Handle, ...], dirty: bool) -> Iterator[None]:
        """The outermost unit of work: one transaction, written and committed at its end."""
        touched: dict[str, Handle] = {}
        changed: dict[str, Handle] = {}
        self._local.touched, self._local.dirty, self._local.events = touched, changed, []
        logged = None
        try:
            with self.store.transaction():
                self._local.seen = self._foreign_commits()
                self._refresh(list(handles), self._local.seen, locking=True)
                touched.update((handle.id, handle) for handle in handles)
                if dirty:
                    changed.update(touched)
                yield
                for handle in changed.values():
                    self._write(handle)
                notice = f"{self.runtime_id}|{','.join(changed)}"  # one wake-up per commit
                logged = self.stream_events.insert_unit(touched, self._local.events, self._local.seen, notice)  # last: see there
                if changed and not logged:
                    self.store.notify(notice)
            joined = self.store.in_host_transaction()
            if joined:
                for handle in touched.values():
                    handle.record.version = -1  # the host's transaction may still roll back: re-read next time
            if logged:
                self.stream_events.committed(logged, kept=not joined)
        except BaseException:
            for handle in touched.values():
                handle.record.version = -1  # memory ran ahead of the store: re-read next time
            self.stream_events.rolled_back()
            raise
        finally:
            self._local.touched = self._local.dirty = self._local.events = None

    def emit(self, handle: str | None, kind: str, data: dict[str, Any], result: Any = None, now: bool = False) -> None:
        events = getattr(self._local, "events", None)
        if events is not None:
            events.append((handle, kind, data, result))
        elif now:
            with self.change():
                self._local.events.append((handle, kind, data, result))
        else:
            self.stream_events.hold(handle, (handle, kind, data, result))

    def sync(self, handle: Handle, *, exact: bool = False) -> None:
        touched = getattr(self._local, "touched", None)
        if touched is None:
            lagging = exact and not self.store.exclusive_transactions
            self._refresh([handle], None if lagging else self._foreign_commits(), locking=False)
        elif handle.id not in touched:
            self._refresh([handle], self._local.seen, locking=False)  # else the unit read it when it began

    def _refresh(self, handles: list[Handle], seen: int | None, *, locking: bool) -> None:
        """Re-read the records another connection may have changed, in one statement.

        ``seen`` is the store's count of the others' commits (``foreign_commits``): a
        record verified at that count needs no read, where the count is exact (a store
        whose transactions exclude every other writer), or outside a transaction. Inside
        one on a store where it may lag (PostgreSQL), ``locking`` reads, and locks, every
        row the unit changes.
        """
        exact = seen is not None and (not locking or self.store.exclusive_transactions)
        stale = [
            handle
            for handle in handles
            if handle.record.version != 0  # made here and not written yet: nothing to read
            and not (exact and handle.verified == seen and handle.record.version >= 0)
        ]
        if not stale:
            return
        marks = ", ".join("?" for _ in stale)
        # ORDER BY: every transaction locks rows in one order (ids sort ancestors first), or
        # two of them could each hold a row the other waits for.
        select = f"SELECT id, version, body FROM tn_handles WHERE runtime_id = ? AND id IN ({marks}) ORDER BY id"
        rows = self.store.execute(self.store.dialect.locking(select) if locking else select, (self.runtime_id, *(h.id for h in stale)))
        found = {row[0]: row for row in rows}
        for handle in stale:
            handle.verified = seen
            row = found.get(handle.id)
            if row is None or row[1] == handle.record.version:
                continue
            fresh = self._record(handle.id, row[1], row[2])
            for field in attrs.fields(HandleRecord):
                setattr(handle.record, field.name, getattr(fresh, field.name))

    def _foreign_commits(self) -> int | None:
        """A counter of commits by other connections, when the store has one and this tree
        is its only user in the process (else every read goes to the store)."""
        return self.store.foreign_commits() if self._sole_user else None

    def _write(self, handle: Handle) -> None:
        record = handle.record
        record.version = max(record.version, 0) + 1
        handle.verified = self._local.seen  # as fresh as the unit's read of the others' commits
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
                spawn_no(record.id),
                record.state,
                record.version,
                record.settled,
                pending.id if pending is not None else None,
                body_of(record),
                time.time(),
            ),
        )

    # --- reading the tree -----------------------------------------------------------------------

    def _record(self, handle_id: str, version: int, body: Any) -> HandleRecord:
        return record_of(handle_id, version, body, self._children(handle_id))

    def load(self, handle_id: str) -> HandleRecord | None:
        rows = self.store.execute("SELECT version, body FROM tn_handles WHERE runtime_id = ? AND id = ?", (self.runtime_id, handle_id))
        return self._record(handle_id, rows[0][0], rows[0][1]) if rows else None

    def open_root(self, fresh: HandleRecord, agents: set[str], make: Callable[[HandleRecord], Handle]) -> Handle:
        try:
            for handle_id, name in self.live():
                if handle_id != ROOT and name not in agents:
                    raise ConfigError(f"the stored tree {self.runtime_id!r} has a live handle {handle_id} of agent {name!r}, which the registry lacks")
            stored = self.load(ROOT)
            root = make(stored or fresh)
            if stored is None:
                with self.change(root):
                    pass
            return root
        except BaseException:
            self.let_go(0)
            raise

    def children(self, handle: Handle) -> list[str]:
        return self._children(handle.id)

    def _children(self, handle_id: str) -> list[str]:
        rows = self.store.execute(
            "SELECT id FROM tn_handles WHERE runtime_id = ? AND parent_id = ? ORDER BY spawn_no", (self.runtime_id, handle_id)
        )
        return [row[0] for row in rows]

    def live(self) -> list[tuple[str, str]]:
        """``(id, agent name)`` of every handle that is not closed, in id order."""
        rows = self.store.execute(
            "SELECT id, body FROM tn_handles WHERE runtime_id = ? AND state <> 'closed' ORDER BY id", (self.runtime_id,)
        )
        return [(row[0], json_value(row[1])["name"]) for row in rows]

    # --- a turn's documents and its journal (the rules are journal.py's) -------------------

    def keep_turn(self, handle: Handle, turn: Turn) -> None:
        journal.keep_turn(self, handle, turn)

    def keep_resume(self, handle_id: str, serial: int, resume: Resume) -> None:
        journal.keep_resume(self, handle_id, serial, resume)

    def turn_documents(self, handle_id: str, serial: int) -> tuple[str, Resume | None]:
        return journal.turn_documents(self, handle_id, serial)

    def forget_turn(self, handle_id: str, serial: int) -> None:
        self.store.execute("DELETE FROM tn_journal WHERE runtime_id = ? AND handle_id = ? AND serial = ?", (self.runtime_id, handle_id, serial))

    def journal(self, handle: Handle, turn: Turn, lineage: Callable[[Handle], Iterator[Handle]], owner: str, counted: Callable[[], None], *, defer_final: bool = False) -> journal.TurnJournal:
        return journal.TurnJournal(handle, turn, self, lineage, owner, counted, defer_final=defer_final)

    @contextlib.contextmanager
    def saving_transcript(self, handle_id: str, messages: list[dict[str, Any]]) -> Iterator[Callable[[], None]]:
        yield functools.partial(self.save_messages, handle_id, messages)

    # --- the journal rows --------------------------------------------------------------------------

    def journal_get(self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str) -> tuple[str, Any] | None:
        rows = self.store.execute(
            "SELECT status, payload FROM tn_journal WHERE runtime_id = ? AND handle_id = ? AND serial = ? AND segment = ?"
            " AND kind = ? AND step = ? AND call_id = ?",
            (self.runtime_id, handle_id, serial, segment, kind, step, call_id),
        )
        return (rows[0][0], json_value(rows[0][1]) if rows[0][1] is not None else None) if rows else None

    def journal_put(self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str, status: str, payload: Any) -> None:
        self.store.execute(
            "INSERT INTO tn_journal (runtime_id, handle_id, serial, segment, kind, step, call_id, status, payload, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (runtime_id, handle_id, serial, segment, kind, step, call_id)"
            " DO UPDATE SET status = excluded.status, payload = excluded.payload, at = excluded.at",
            (self.runtime_id, handle_id, serial, segment, kind, step, call_id, status, json.dumps(payload) if payload is not None else None, time.time()),
        )

    # --- requests: the park index and the answer claim -----------------------------------------

    def park(self, request: Request, handle_id: str) -> None:
        """Park ``request`` on the deepest handle whose tool asked (children settle first)."""
        self.store.execute(
            self.store.dialect.insert_ignoring("tn_requests (runtime_id, request_id, handle_id, status, request, created_at) VALUES (?, ?, ?, 'open', ?, ?)"),
            (self.runtime_id, request.id, handle_id, json.dumps(to_wire(request)), time.time()),
        )

    def parked(self, request_id: str) -> str | None:
        rows = self.store.execute(
            "SELECT handle_id FROM tn_requests WHERE runtime_id = ? AND request_id = ? AND status = 'open'", (self.runtime_id, request_id)
        )
        return rows[0][0] if rows else None

    def unpark(self, request_id: str, outcome: str, answer: Any = None) -> str | None:
        rows = self.store.execute(
            "UPDATE tn_requests SET status = ?, answer = ?, closed_at = ? WHERE runtime_id = ? AND request_id = ? AND status = 'open'"
            " RETURNING handle_id",
            (outcome, json.dumps(answer) if answer is not None else None, time.time(), self.runtime_id, request_id),
        )
        return rows[0][0] if rows else None

    def suspended_on(self, request_id: str, table: Callable[[], list[Handle]]) -> list[str]:
        rows = self.store.execute("SELECT id FROM tn_handles WHERE runtime_id = ? AND pending_id = ?", (self.runtime_id, request_id))
        return [row[0] for row in rows]

    def open_requests(self) -> list[Request]:
        rows = self.store.execute(
            "SELECT request FROM tn_requests WHERE runtime_id = ? AND status = 'open' ORDER BY created_at", (self.runtime_id,)
        )
        return [from_wire(Request, json_value(row[0])) for row in rows]

    # --- events and transcripts ------------------------------------------------------------------

    def event(self, event: dict[str, Any]) -> None:
        """The runtime's log shares the stream events' rows (a ``log`` row, which no
        stream yields): inside a unit it goes in the unit's one insert."""
        self.emit(event["handle"], LOG, event, now=True)

    def events(self) -> list[dict[str, Any]]:
        return self.stream_events.runtime_log()

    def get_messages(self, conversation_id: str) -> list[dict[str, Any]] | None:
        rows = self.store.execute(
            "SELECT body FROM tn_messages WHERE runtime_id = ? AND conversation_id = ?", (self.runtime_id, conversation_id)
        )
        return json_value(rows[0][0]) if rows else None

    def save_messages(self, conversation_id: str, messages: list[dict[str, Any]]) -> None:
        with self.store.transaction():
            self.store.execute(
                "INSERT INTO tn_messages (runtime_id, conversation_id, body) VALUES (?, ?, ?)"
                " ON CONFLICT (runtime_id, conversation_id) DO UPDATE SET body = excluded.body",
                (self.runtime_id, conversation_id, json.dumps(messages)),
            )

    # --- waiting, owners, letting go --------------------------------------------------------------

    def wait(self, handle: Handle, timeout: float | None, *, here: bool) -> None:
        poll = REMOTE_POLL_S if timeout is None else min(timeout, REMOTE_POLL_S)
        if here:
            handle.changed.wait(poll)  # runs here and notifies; another process may interrupt it
            return
        # Another process has the turn (or will wake it): watch the state for commits.
        handle.lock.release()
        try:
            self.store.wait_change(poll)
        finally:
            handle.lock.acquire()

    def forget_handle(self, handle_id: str) -> None:
        self.stream_events.take(iter((handle_id,)))  # the state keeps the handle, readable by id; events held for it go

    def listing(self, tree: HandleTree, keep_closed: int) -> list[HandleView]:
        rows = self.store.execute(
            f"SELECT {LISTED_COLUMNS} FROM tn_handles WHERE runtime_id = ? AND state <> 'closed'"
            f" UNION ALL SELECT * FROM (SELECT {LISTED_COLUMNS} FROM tn_handles"
            " WHERE runtime_id = ? AND state = 'closed' ORDER BY updated_at DESC LIMIT ?) recent",
            (self.runtime_id, self.runtime_id, keep_closed),
        )
        return views_of_rows(rows)

    def prune(self, tree: HandleTree | None, before: float) -> list[str]:
        ids = storedruns.prune_runs(self.store, self.runtime_id, before)
        if tree is not None:
            tree.forget(ids)
        return ids

    def ownership(self, owner: str, *, lease_s: float, recover: str, take_over: Any, on_beat: Callable[[], None] | None) -> Ownership:
        return Ownership(self, owner, lease_s=lease_s, recover=recover, take_over=take_over, on_beat=on_beat)

    def dispatching(
        self, dispatcher: Dispatcher, tree: HandleTree, owner: str, clock: Callable[[], float]
    ) -> Dispatching:
        return Dispatching(dispatcher, self, tree, owner, clock)

    def let_go(self, join_timeout: float) -> None:
        self.stream_events.stop(join_timeout)
        if self._owns_store and not self._let_go:
            self._let_go = True
            self.store.close()

    def now(self) -> float:
        """The store's clock: leases, heartbeats and queue times are compared on it."""
        return self.store.now()

    def register_owner(self, owner: str, host: str, pid: int) -> None:
        now = self.now()
        with self.store.transaction():
            self.store.execute(
                "INSERT INTO tn_owners (runtime_id, owner, host, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (runtime_id, owner) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
                (self.runtime_id, owner, host, pid, now, now),
            )

    def heartbeat(self, owner: str) -> None:
        with self.store.transaction():
            self.store.execute("UPDATE tn_owners SET heartbeat_at = ? WHERE runtime_id = ? AND owner = ?", (self.now(), self.runtime_id, owner))

    def drop_owner(self, owner: str) -> None:
        with self.store.transaction():
            self.store.execute("DELETE FROM tn_owners WHERE runtime_id = ? AND owner = ?", (self.runtime_id, owner))

    def running_turns(self, parent_id: str | None = None) -> list[tuple[str, str | None, float | None]]:
        """``(handle id, owner, queued at)`` of every running turn (of ``parent_id``'s
        children only, when given), deepest first."""
        sql = "SELECT id, body FROM tn_handles WHERE runtime_id = ? AND state <> 'closed' AND state = 'running'"  # the first term lets the live index serve it
        params: tuple[str, ...] = (self.runtime_id,)
        if parent_id is not None:
            sql, params = sql + " AND parent_id = ?", (self.runtime_id, parent_id)
        found = []
        for handle_id, body in self.store.execute(sql, params):
            running = json_value(body).get("running") or {}
            found.append((handle_id, running.get("owner"), running.get("queued_at")))
        found.sort(key=lambda item: -item[0].count("/"))
        return found

    def orphans(self, lease_s: float, host: str, alive: Callable[[int], bool]) -> list[tuple[str, str | None]]:
        """``(handle id, dead owner)`` of every running turn whose owner is gone: no heartbeat
        for ``lease_s``, or a process of this host that no longer exists. Deepest first."""
        owners = {
            row[0]: (row[1], int(row[2]), float(row[3]))
            for row in self.store.execute("SELECT owner, host, pid, heartbeat_at FROM tn_owners WHERE runtime_id = ?", (self.runtime_id,))
        }
        now = self.now()
        found = []
        for handle_id, owner, queued_at in self.running_turns():
            if owner is None and queued_at is not None:
                continue  # queued for a dispatcher: nobody owns it yet, nobody died
            known = owners.get(owner) if owner is not None else None
            if known is None or now - known[2] > lease_s or (known[0] == host and not alive(known[1])):
                found.append((handle_id, owner))
        return found


class StateConversations:
    """``rt.conversation_store`` on a stored tree: transcripts live next to the tree."""

    def __init__(self, tree: StoredTree) -> None:
        self._tree = tree

    def get(self, id: str) -> list[dict[str, Any]] | None:
        return self._tree.get_messages(id)

    def save(self, id: str, messages: list[dict[str, Any]]) -> None:
        self._tree.save_messages(id, list(messages))
