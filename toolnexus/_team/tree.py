"""The handle tree: the runtime's table of handles over one tree store.

The tree store (``_stores.parts.TreeStore``) is the one seam between "in memory" and "in
a state": where the records, the parked requests, the journal, the events, the
transcripts, the runs and the turns' owners live (one part each), and what one unit of
work (``change``) commits. ``_stores.memory.MemoryTree`` keeps them in this process;
``_stores.sql.tree.StoredTree`` keeps them as rows of one ``runtime_id`` in a state. The
runtime picks one when it is built and never asks which it has.

``HandleTree`` caches the handles by id over either: a handle another process made is
loaded on first use; closed handles leave the cache, oldest first, past ``keep_closed``.
Its table lock is a leaf: nothing else is acquired while it is held (not even a store's
lock), so any code may take it, even while holding a handle's lock.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Iterator

from ..data import HandleView
from ..errors import UnknownHandle
from .handle import Handle
from .record import HandleRecord
from .._stores.parts import TreeStore

#: Longer ids than this are not ids (every verb answers "unknown" without looking).
MAX_ID_CHARS = 4096


def valid_id(value: object) -> bool:
    """Whether ``value`` can be a handle or request id: a string of at most
    ``MAX_ID_CHARS`` with no NUL that encodes as UTF-8 (no lone surrogates)."""
    if not isinstance(value, str) or len(value) > MAX_ID_CHARS or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_id(value: object) -> str:
    """An id as an error message may show it: short, and printable."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class HandleTree:
    """The runtime's table of handles, rooted at ``root``, over one tree store."""

    def __init__(
        self, store: TreeStore, root: Handle, load: Callable[[HandleRecord], Handle], keep_closed: int = 1000
    ) -> None:
        self.store = store
        self.root = root
        self._load = load
        self._keep_closed = keep_closed
        self._lock = threading.Lock()  # guards: _handles, _closed (a leaf lock)
        self._handles: dict[str, Handle] = {root.id: root}
        #: Retired handles and when (``time.time()``), oldest first.
        self._closed: collections.deque[tuple[str, float]] = collections.deque()

    def __len__(self) -> int:
        with self._lock:
            return len(self._handles)

    def get(self, h: Handle | str) -> Handle:
        handle_id = h if type(h) is str else h.id if isinstance(h, Handle) else h
        with self._lock:
            handle = self._handles.get(handle_id) if type(handle_id) is str else None
        if handle is None:
            if not valid_id(handle_id):  # checked before anything reaches the store
                raise UnknownHandle(f"no handle {shown_id(handle_id)}")
            record = self.store.records.load(handle_id)
            if record is not None:
                with self._lock:
                    handle = self._handles.setdefault(handle_id, self._load(record))
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
        for child_id in self.store.records.children(handle):
            yield from self.walk(self.get(child_id))

    def suspended_on(self, request_id: str) -> list[Handle]:
        """Every handle whose pending request is ``request_id``."""
        return [self.get(handle_id) for handle_id in self.store.requests.suspended_on(request_id, self.all)]

    def event(self, kind: str, handle_id: str, **fields: Any) -> None:
        self.store.events.add_log({"event": kind, "handle": handle_id, **fields})

    # --- bounded memory: closed handles leave the table, oldest first ----------------------

    def retire(self, handle: Handle) -> list[Handle]:
        """Count ``handle`` and its (closed) subtree as closed; the oldest closed handles
        beyond ``keep_closed`` leave the table, and are returned."""
        with handle.lock:
            ids = [handle.id, *self._closed_below(handle)]
            handle.retired = True
        now = time.time()
        with self._lock:
            self._closed.extend((handle_id, now) for handle_id in ids)
            gone = []
            while len(self._closed) > self._keep_closed:
                dropped = self._handles.pop(self._closed.popleft()[0], None)
                if dropped is not None:
                    gone.append(dropped)
        return gone

    def drop_runs(self, before: float) -> list[Handle]:
        """Whole runs (a child of the root with its subtree) whose top handle closed before
        ``before`` leave the table and their parents' lists of children; they are
        returned. A closed handle of a run still open stays, whatever its age: a resumed
        or retried turn reattaches to it."""
        with self._lock:
            finished = {handle_id for handle_id, at in self._closed if _top_of(handle_id) == handle_id and at < before}
            kept: collections.deque[tuple[str, float]] = collections.deque()
            gone = []
            for handle_id, at in self._closed:
                top = _top_of(handle_id)
                # A top handle that left memory already (past keep_closed) closed its run.
                if top in finished or top not in self._handles:
                    dropped = self._handles.pop(handle_id, None)
                    if dropped is not None:
                        gone.append(dropped)
                else:
                    kept.append((handle_id, at))
            self._closed = kept
        self.detach(gone)
        return gone

    def detach(self, gone: list[Handle]) -> None:
        """Handles that left the table leave their parents' lists of children (in memory
        the list is the tree; a store keeps its own) and the store's memory."""
        for handle in gone:
            with self._lock:
                above = self._handles.get(handle.record.parent) if handle.record.parent is not None else None
            if above is not None:
                with above.lock:
                    if handle.id in above.record.children:
                        above.record.children.remove(handle.id)
            self.store.forget_handle(handle.id)

    def forget(self, ids: list[str]) -> None:
        """Handles the store deleted leave the table too."""
        with self._lock:
            for handle_id in ids:
                self._handles.pop(handle_id, None)

    def listing(self) -> list[HandleView]:
        return self.store.runs.listing(self, self._keep_closed)

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


def _top_of(handle_id: str) -> str:
    """The top handle of the run ``handle_id`` belongs to (``root/a.1/b.2`` -> ``root/a.1``)."""
    return "/".join(handle_id.split("/", 2)[:2])
