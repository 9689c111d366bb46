"""The handle tree: the runtime's table of handles over one tree store.

``TreeStore`` is the one seam between "in memory" and "in a state": where the records,
the parked requests, the event log, the transcripts and a turn's kept documents live,
and what one unit of work (``change``) commits. ``MemoryTree`` keeps them in this process;
``stored.StoredTree`` keeps them as rows of one ``runtime_id`` in a state store. The
runtime picks one when it is built and never asks which it has.

``HandleTree`` caches the handles by id over either: a handle another process made is
loaded on first use; closed handles leave the cache, oldest first, past ``keep_closed``.
Its table lock is a leaf: nothing else is acquired while it is held (not even a store's
lock), so any code may take it, even while holding a handle's lock.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Protocol

from .._run import journal
from ..data import HandleView, Request
from ..errors import ConfigError, UnknownHandle
from .._events.log import MemoryEvents, TreeEvents
from .handle import Handle, Turn
from .record import HandleRecord, Resume
from .._stores.conversations import ConversationStore, InMemoryStore

if TYPE_CHECKING:
    from .._stores.sql.base import StateStore

#: Events kept in memory (a state keeps them all).
MAX_EVENTS = 10_000


class Ownership(Protocol):
    """A runtime's claim on the turns it runs (see ``ownership.py`` for a stored tree's)."""

    @property
    def letting_go(self) -> bool: ...

    def start(self) -> None: ...

    def recover(self, handle_id: str) -> bool: ...

    def let_go(self, join_timeout: float) -> bool: ...


class TreeStore(Protocol):
    """Where one tree lives. Every method is safe from any thread; those named "(lock
    held)" are called with the handle's lock held, and take only leaf locks."""

    runtime_id: str
    #: The handles' transcripts (conversation id = handle id).
    conversations: ConversationStore
    #: Whether the tree outlives its runtime (leaving a ``with`` block then releases it
    #: for another runtime, instead of closing it).
    lasting: bool
    #: The state store the rows live in (``None`` in memory): the served layer keeps its
    #: bindings beside them (``toolnexus._serve.bindings``).
    state: StateStore | None

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]:
        """One unit of work around a change to ``handles`` (their locks held): nested
        units join the outermost, which commits. ``dirty=False`` only joins (and, in a
        stored tree, re-reads rows another process changed)."""

    def sync(self, handle: Handle, *, exact: bool = False) -> None:
        """Re-read ``handle``'s record if another process changed it (lock held); ``exact``
        sees every commit made before the call (see ``Handle.sync``)."""

    def open_root(self, fresh: HandleRecord, agents: set[str], make: Callable[[HandleRecord], Handle]) -> Handle:
        """The root: the kept one when the store holds this tree already, else ``fresh``."""

    def load(self, handle_id: str) -> HandleRecord | None:
        """A record this process does not have in memory (made elsewhere, or dropped)."""

    def children(self, handle: Handle) -> list[str]:
        """Child ids in spawn order (all of them, also those that left memory)."""

    # --- a turn's documents (its input, its resume) and its journal: see journal.py ----

    def keep_turn(self, handle: Handle, turn: Turn) -> None:
        """Keep the input a replay of ``turn`` starts from (lock held, in its unit)."""

    def keep_resume(self, handle_id: str, serial: int, resume: Resume) -> None:
        """Keep the answer a resumed turn continues with (lock held, in its unit)."""

    def turn_documents(self, handle_id: str, serial: int) -> tuple[str, Resume | None]:
        """The kept input and resume of a turn."""

    def forget_turn(self, handle_id: str, serial: int) -> None:
        """The turn settled or was dropped: nothing will replay it."""

    def journal(self, handle: Handle, turn: Turn, lineage: Callable[[Handle], Iterator[Handle]], owner: str, counted: Callable[[], None], *, defer_final: bool = False) -> Any:
        """The turn's journal (``loop.Journal``), or ``None`` when nothing outlives the process."""

    def saving_transcript(self, handle_id: str, messages: list[dict[str, Any]]) -> ContextManager[Callable[[], None]]:
        """Save a settling turn's transcript: around the outcome's commit, the block
        calls what it yields inside that unit (a stored tree commits the transcript with
        the outcome; in memory it is saved before the block, outside every lock, as the
        host's conversation store may be any code)."""

    # --- parked requests, the event log ----------------------------------------------------

    def park(self, request: Request, handle_id: str) -> None: ...

    def parked(self, request_id: str) -> str | None: ...

    def unpark(self, request_id: str, outcome: str, answer: Any = None) -> str | None:
        """Close ``request_id`` at most once (across processes too); the handle that was
        waiting on it, or ``None`` when it was not open."""

    def suspended_on(self, request_id: str, table: Callable[[], list[Handle]]) -> list[str]:
        """The ids of every handle whose pending request is ``request_id``."""

    def open_requests(self) -> list[Request]: ...

    def event(self, event: dict[str, Any]) -> None: ...

    def events(self) -> list[dict[str, Any]]: ...

    # --- stream events (``events.py``): numbered per tree, durable with a state ------------

    @property
    def stream_events(self) -> TreeEvents:
        """Where streams read the tree's events."""

    def emit(self, handle: str | None, kind: str, data: dict[str, Any], result: Any = None, now: bool = False) -> None:
        """Record a stream event: inside a unit of work it commits with the unit; outside
        one it waits for the next unit that touches ``handle`` (``now``: its own unit)."""

    # --- waiting, letting go -----------------------------------------------------------------

    def wait(self, handle: Handle, timeout: float | None, *, here: bool) -> None:
        """Wait for a change to ``handle`` (lock held, released while waiting): ``here``
        when this process runs its turn and will notify."""

    def forget_handle(self, handle_id: str) -> None:
        """``handle_id`` left the runtime's memory."""

    def listing(self, tree: HandleTree, keep_closed: int) -> list[HandleView]:
        """``handles()``: the live handles and at most ``keep_closed`` most recently closed
        ones, root first, then pre-order; the cost follows what it lists, not the history."""

    def prune(self, tree: HandleTree | None, before: float) -> list[str]:
        """Delete the runs (a child of the root with all its descendants) whose top handle
        closed before ``before`` (``time.time()``), each whole, with its events,
        transcripts, journal and requests; nothing of a run whose top handle is not
        closed. The ids of the handles deleted."""

    def ownership(self, owner: str, *, lease_s: float, recover: str, take_over: Any, on_beat: Callable[[], None] | None) -> Ownership: ...

    def dispatching(self, dispatcher: Any, tree: HandleTree, owner: str, clock: Callable[[], float]) -> Any:
        """The runtime's side of a dispatcher (``dispatch.Dispatching``): turns that any
        process of the tree may run."""

    def let_go(self, join_timeout: float) -> None:
        """The runtime is done with the tree (closed or released)."""


_NOTHING: ContextManager[Any] = contextlib.nullcontext()

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


class _Solo:
    """The ownership of a tree only this runtime can see: nothing to register or recover."""

    letting_go = False

    def start(self) -> None:
        pass

    def recover(self, handle_id: str) -> bool:
        return False

    def let_go(self, join_timeout: float) -> bool:
        return True


class MemoryTree:
    """A tree that lives and ends with its runtime. ``conversations`` is the host's
    store, or an in-memory one the tree owns (and prunes as handles leave memory)."""

    runtime_id = "memory"
    lasting = False
    state = None

    def __init__(self, conversations: ConversationStore | None = None) -> None:
        self._own_transcripts = conversations is None
        self.conversations: ConversationStore = conversations if conversations is not None else InMemoryStore()
        self._lock = threading.Lock()  # guards: _parked, _events, _journal (a leaf lock)
        self._parked: dict[str, tuple[str, Request]] = {}  # request id -> the asking handle, its request
        self._events: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_EVENTS)
        #: (handle id, serial) -> (segment, kind, step, call id) -> (status, payload)
        self._journal: dict[tuple[str, int], dict[tuple[int, str, int, str], tuple[str, Any]]] = {}
        self.stream_events = MemoryEvents()
        self.emit = self.stream_events.emit  # every event of every run goes through here: no frame in between

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]:
        return _NOTHING

    def sync(self, handle: Handle, *, exact: bool = False) -> None:
        pass

    def open_root(self, fresh: HandleRecord, agents: set[str], make: Callable[[HandleRecord], Handle]) -> Handle:
        return make(fresh)

    def load(self, handle_id: str) -> HandleRecord | None:
        return None

    def children(self, handle: Handle) -> list[str]:
        with handle.lock:
            return list(handle.record.children)

    def keep_turn(self, handle: Handle, turn: Turn) -> None:
        journal.keep_turn(self, handle, turn)

    def keep_resume(self, handle_id: str, serial: int, resume: Resume) -> None:
        journal.keep_resume(self, handle_id, serial, resume)

    def turn_documents(self, handle_id: str, serial: int) -> tuple[str, Resume | None]:
        return journal.turn_documents(self, handle_id, serial)

    def forget_turn(self, handle_id: str, serial: int) -> None:
        with self._lock:
            self._journal.pop((handle_id, serial), None)

    def journal(self, handle: Handle, turn: Turn, lineage: Callable[[Handle], Iterator[Handle]], owner: str, counted: Callable[[], None], *, defer_final: bool = False) -> Any:
        return journal.TurnJournal(handle, turn, self, lineage, owner, counted, defer_final=defer_final)

    def journal_get(self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str) -> tuple[str, Any] | None:
        with self._lock:
            rows = self._journal.get((handle_id, serial))
            return rows.get((segment, kind, step, call_id)) if rows is not None else None

    def journal_put(self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str, status: str, payload: Any) -> None:
        with self._lock:
            self._journal.setdefault((handle_id, serial), {})[(segment, kind, step, call_id)] = (status, payload)

    @contextlib.contextmanager
    def saving_transcript(self, handle_id: str, messages: list[dict[str, Any]]) -> Iterator[Callable[[], None]]:
        self.conversations.save(handle_id, messages)
        yield _saved

    def park(self, request: Request, handle_id: str) -> None:
        with self._lock:
            self._parked.setdefault(request.id, (handle_id, request))

    def parked(self, request_id: str) -> str | None:
        with self._lock:
            found = self._parked.get(request_id)
        return found[0] if found is not None else None

    def unpark(self, request_id: str, outcome: str, answer: Any = None) -> str | None:
        with self._lock:
            found = self._parked.pop(request_id, None)
        return found[0] if found is not None else None

    def suspended_on(self, request_id: str, table: Callable[[], list[Handle]]) -> list[str]:
        return [handle.id for handle in table() if handle.record.pending is not None and handle.record.pending.id == request_id]

    def open_requests(self) -> list[Request]:
        with self._lock:
            return [request for _, request in self._parked.values()]

    def event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append(event)

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(event) for event in self._events]

    def wait(self, handle: Handle, timeout: float | None, *, here: bool) -> None:
        handle.changed.wait(timeout)  # every change happens in this process, and notifies

    def forget_handle(self, handle_id: str) -> None:
        if self._own_transcripts:
            assert isinstance(self.conversations, InMemoryStore)
            self.conversations.discard(handle_id)

    def listing(self, tree: HandleTree, keep_closed: int) -> list[HandleView]:
        views = []
        for handle in tree.walk(tree.root):  # memory holds at most keep_closed closed ones
            with handle.lock:
                views.append(handle.view())
        return views

    def prune(self, tree: HandleTree | None, before: float) -> list[str]:
        return [handle.id for handle in tree.drop_runs(before)] if tree is not None else []

    def ownership(self, owner: str, *, lease_s: float, recover: str, take_over: Any, on_beat: Callable[[], None] | None) -> Ownership:
        return _Solo()

    def dispatching(self, dispatcher: Any, tree: HandleTree, owner: str, clock: Callable[[], float]) -> Any:
        raise ConfigError("a dispatcher runs turns in other processes: it needs a state= they share")

    def let_go(self, join_timeout: float) -> None:
        pass


def _saved() -> None:
    """Nothing left to save inside the unit: the transcript is saved already."""


class HandleTree:
    """The runtime's table of handles, rooted at ``root``, over one tree store."""

    def __init__(self, store: TreeStore, root: Handle, load: Callable[[HandleRecord], Handle], keep_closed: int = 1000) -> None:
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
            record = self.store.load(handle_id)
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
        for child_id in self.store.children(handle):
            yield from self.walk(self.get(child_id))

    def suspended_on(self, request_id: str) -> list[Handle]:
        """Every handle whose pending request is ``request_id``."""
        return [self.get(handle_id) for handle_id in self.store.suspended_on(request_id, self.all)]

    def event(self, kind: str, handle_id: str, **fields: Any) -> None:
        self.store.event({"event": kind, "handle": handle_id, **fields})

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
        return self.store.listing(self, self._keep_closed)

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
