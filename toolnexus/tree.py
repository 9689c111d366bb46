"""The handle tree: every handle by id, the index of parked requests, and the event log.

One leaf lock guards all three: nothing else is acquired while it is held (not even the
state store's lock), so any code may take it, even while holding a handle's lock. Handles
are never removed (a closed handle stays queryable), so a handle looked up once stays
valid. With a durable state the table is a cache: a handle another process made is
loaded on first use, and requests and events live in the state.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .errors import UnknownHandle
from .data import Request
from .handle import Handle

if TYPE_CHECKING:
    from .state import DurableTree


#: Events kept in memory (a state keeps them all).
MAX_EVENTS = 10_000


class HandleTree:
    """The runtime's table of handles, rooted at ``root``."""

    def __init__(
        self,
        root: Handle,
        durable: DurableTree | None = None,
        load: Callable[[str], Handle | None] | None = None,
        keep_closed: int = 1000,
    ) -> None:
        self.root = root
        self._durable = durable
        self._load = load
        self._keep_closed = keep_closed
        self._lock = threading.Lock()  # guards: _handles, _parked, _events, _closed (a leaf lock)
        self._handles: dict[str, Handle] = {root.id: root}
        self._parked: dict[str, str] = {}  # request id -> the handle whose own tool asked
        self._events: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_EVENTS)
        self._closed: collections.deque[str] = collections.deque()  # retired handles, oldest first

    def __len__(self) -> int:
        with self._lock:
            return len(self._handles)

    def get(self, h: Handle | str) -> Handle:
        handle_id = h.id if isinstance(h, Handle) else h
        with self._lock:
            handle = self._handles.get(handle_id)
        if handle is None and self._load is not None:
            loaded = self._load(handle_id)
            if loaded is not None:
                with self._lock:
                    handle = self._handles.setdefault(handle_id, loaded)
        if handle is None:
            raise UnknownHandle(f"no handle {handle_id!r}")
        return handle

    def add(self, handle: Handle) -> None:
        with self._lock:
            self._handles[handle.id] = handle

    def all(self) -> list[Handle]:
        with self._lock:
            return list(self._handles.values())

    def parent(self, handle: Handle) -> Handle | None:
        parent_id = handle.record.parent
        return self.get(parent_id) if parent_id is not None else None

    def lineage(self, handle: Handle) -> Iterator[Handle]:
        """The handle, then each ancestor up to the root."""
        current: Handle | None = handle
        while current is not None:
            yield current
            current = self.parent(current)

    def walk(self, handle: Handle) -> Iterator[Handle]:
        """``handle`` and its subtree in pre-order, children in spawn order."""
        yield handle
        for child_id in self.children(handle):
            yield from self.walk(self.get(child_id))

    def children(self, handle: Handle) -> list[str]:
        """Child ids in spawn order: from the state when there is one (it keeps them all)."""
        if self._durable is not None:
            return self._durable.children(handle.id)
        with handle.lock:
            return list(handle.record.children)

    # --- bounded memory: closed handles leave the table, oldest first ----------------------

    def retire(self, handle: Handle) -> list[Handle]:
        """Count ``handle`` and its (closed) subtree as closed; the oldest closed handles
        beyond ``keep_closed`` leave the table, and are returned."""
        with handle.lock:
            ids = [handle.id, *self._closed_below(handle)]
            handle.retired = True
        with self._lock:
            self._closed.extend(ids)
            gone = []
            while len(self._closed) > self._keep_closed:
                dropped = self._handles.pop(self._closed.popleft(), None)
                if dropped is not None:
                    gone.append(dropped)
        return gone

    def _closed_below(self, handle: Handle) -> list[str]:
        """Ids under ``handle`` that were closed while their parent still ran (task children)."""
        found: list[str] = []
        for child_id in handle.record.children:
            with self._lock:
                child = self._handles.get(child_id)
            if child is not None and not child.retired:
                child.retired = True
                found.append(child_id)
                found.extend(self._closed_below(child))
        return found

    # --- parked requests: which handle's own tool asked, by request id ------------------

    def park(self, request: Request, handle_id: str) -> None:
        """Remember the deepest handle waiting on ``request`` (children settle first)."""
        if self._durable is not None:
            self._durable.open_request(request, handle_id)
            return
        with self._lock:
            self._parked.setdefault(request.id, handle_id)

    def parked(self, request_id: str) -> str | None:
        """The deepest handle waiting on ``request_id``, if it is still open."""
        if self._durable is not None:
            return self._durable.parked(request_id)
        with self._lock:
            return self._parked.get(request_id)

    def unpark(self, request_id: str, outcome: str = "answered", answer: Any = None) -> str | None:
        """Close ``request_id`` (at most once, across processes too); the handle that was
        waiting on it, or ``None`` when it was not open."""
        if self._durable is not None:
            return self._durable.claim(request_id, outcome, answer)
        with self._lock:
            return self._parked.pop(request_id, None)

    def suspended_on(self, request_id: str) -> list[Handle]:
        """Every handle whose pending request is ``request_id``."""
        if self._durable is not None:
            return [self.get(handle_id) for handle_id in self._durable.suspended_on(request_id)]
        return [handle for handle in self.all() if handle.record.pending is not None and handle.record.pending.id == request_id]

    # --- the event log --------------------------------------------------------------------

    def event(self, kind: str, handle_id: str, **fields: Any) -> None:
        event = {"event": kind, "handle": handle_id, **fields}
        if self._durable is not None:
            self._durable.event(event)
            return
        with self._lock:
            self._events.append(event)

    def events(self) -> list[dict[str, Any]]:
        if self._durable is not None:
            return self._durable.events()
        with self._lock:
            return [dict(event) for event in self._events]
