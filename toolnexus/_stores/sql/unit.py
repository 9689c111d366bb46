"""The unit of work of a stored tree: every change a handle method makes runs inside one
(``change``), which first re-reads the rows another process changed and commits before
the handle's lock is released, so what a waiter can observe is already durable.

A unit is one transaction of the state: the parts write into it (a handle's row, a
journal row, a parked request, a transcript), and it ends with the changed rows, then
the events the unit made, then the wake-up notice for other processes. Nested units join
the outermost, which commits. All that one thread's unit has touched is kept in a
thread-local, so units of different threads never share a list.

Every statement of a unit goes through ``state.execute`` in this one transaction, each a
text the part built once (a dialect's ``upsert`` or ``insert_rows``) with its parameters:
batching them (one multi-row write per table, a driver's pipeline) changes the parts'
``write``/``put`` and the end of ``Unit._unit``, and nothing above them.
"""

from __future__ import annotations

import contextlib
import threading
from typing import ContextManager, Iterator

from ..._team.handle import Handle
from .base import StateStore
from .events import Pending, StoredEvents
from .records import SqlRecords

#: What a nested unit of work enters: the outermost one does the work.
_JOINED: ContextManager[None] = contextlib.nullcontext()


class Unit:
    """Units of work over one tree's rows. ``sole_user``: the only tree on this state
    object in the process, which lets it skip re-reading rows nobody else committed to."""

    def __init__(
        self, state: StateStore, runtime_id: str, records: SqlRecords, events: StoredEvents, *, sole_user: bool
    ) -> None:
        self._state = state
        self._runtime_id = runtime_id
        self._records = records
        self._events = events
        self._sole_user = sole_user
        self._local = threading.local()  # the handles the current unit of work touched

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[None]:
        touched: dict[str, Handle] | None = getattr(self._local, "touched", None)
        if touched is None:
            return self._unit(handles, dirty)
        # Nested: it joins the outermost unit, which commits (no transaction of its own).
        fresh = [handle for handle in handles if handle.id not in touched]
        if fresh:
            self._records.refresh(fresh, self._local.seen, locking=True)
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
            with self._state.transaction():
                seen = self._local.seen = self._foreign_commits()
                self._records.refresh(list(handles), seen, locking=True)
                touched.update((handle.id, handle) for handle in handles)
                if dirty:
                    changed.update(touched)
                yield
                for handle in changed.values():
                    self._records.write(handle, seen)
                notice = f"{self._runtime_id}|{','.join(changed)}"  # one wake-up per commit
                logged = self._events.insert_unit(touched, self._local.events, seen, notice)  # last: see there
                if changed and not logged:
                    self._state.notify(notice)
            joined = self._state.in_host_transaction()
            if joined:
                for handle in touched.values():
                    handle.record.version = -1  # the host's transaction may still roll back: re-read next time
            if logged:
                self._events.committed(logged, kept=not joined)
        except BaseException:
            for handle in touched.values():
                handle.record.version = -1  # memory ran ahead of the state: re-read next time
            self._events.rolled_back()
            raise
        finally:
            self._local.touched = self._local.dirty = self._local.events = None

    def made(self) -> list[Pending] | None:
        """The events this thread's open unit has made so far (``None``: no unit is open)."""
        events: list[Pending] | None = getattr(self._local, "events", None)
        return events

    def sync(self, handle: Handle, *, exact: bool = False) -> None:
        touched = getattr(self._local, "touched", None)
        if touched is None:
            lagging = exact and not self._state.exclusive_transactions
            self._records.refresh([handle], None if lagging else self._foreign_commits(), locking=False)
        elif handle.id not in touched:
            self._records.refresh([handle], self._local.seen, locking=False)  # else the unit read it when it began

    def _foreign_commits(self) -> int | None:
        """A counter of commits by other connections, when the state has one and this tree
        is its only user in the process (else every read goes to the state)."""
        return self._state.foreign_commits() if self._sole_user else None
