"""The handle tree: every handle by id, the index of parked requests, and the event log.

One leaf lock guards all three: nothing else is acquired while it is held, so any code
may take it, even while holding a handle's lock. Handles are never removed (a closed
handle stays queryable), so a handle looked up once stays valid.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

from .errors import UnknownHandle
from .handle import Handle


class HandleTree:
    """The runtime's table of handles, rooted at ``root``."""

    def __init__(self, root: Handle) -> None:
        self.root = root
        self._lock = threading.Lock()  # guards: _handles, _parked, _events (a leaf lock)
        self._handles: dict[str, Handle] = {root.id: root}
        self._parked: dict[str, str] = {}  # request id -> the handle whose own tool asked
        self._events: list[dict[str, Any]] = []

    def __len__(self) -> int:
        with self._lock:
            return len(self._handles)

    def get(self, h: Handle | str) -> Handle:
        handle_id = h.id if isinstance(h, Handle) else h
        with self._lock:
            handle = self._handles.get(handle_id)
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
        with handle.lock:
            children = list(handle.record.children)
        for child_id in children:
            yield from self.walk(self.get(child_id))

    # --- parked requests: which handle's own tool asked, by request id ------------------

    def park(self, request_id: str, handle_id: str) -> None:
        """Remember the deepest handle waiting on ``request_id`` (children settle first)."""
        with self._lock:
            self._parked.setdefault(request_id, handle_id)

    def unpark(self, request_id: str) -> str | None:
        """Forget ``request_id``; the handle that was waiting on it, if any."""
        with self._lock:
            return self._parked.pop(request_id, None)

    # --- the event log --------------------------------------------------------------------

    def event(self, kind: str, handle_id: str, **fields: Any) -> None:
        with self._lock:
            self._events.append({"event": kind, "handle": handle_id, **fields})

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(event) for event in self._events]
