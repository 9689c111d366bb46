"""A tree that lives and ends with its runtime: the memory side of every part
(``parts.py``), and ``MemoryTree``, their sum.

Nothing here outlives the process, so a unit of work is nothing more than the handles'
locks, and a handle's record is its own memory. Each part's lock is a leaf.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator

from .._events.log import MemoryEvents, TreeEvents
from .._team.handle import Handle
from .._team.record import HandleRecord
from ..data import HandleView, Request
from ..errors import ConfigError
from .conversations import ConversationStore, InMemoryStore
from .journaling import JournalRows
from .parts import HandleTable, Journals, Ownership, Owners, ParkedRequests, Records, Runs, Transcripts, TreeLog

if TYPE_CHECKING:
    from .sql.base import StateStore

#: Entries of the runtime's own log kept in memory (a state keeps them all).
MAX_EVENTS = 10_000

_NOTHING: ContextManager[Any] = contextlib.nullcontext()


class MemoryRecords:
    """The records are the handles' own: nothing else to read."""

    def load(self, handle_id: str) -> HandleRecord | None:
        return None

    def children(self, handle: Handle) -> list[str]:
        with handle.lock:
            return list(handle.record.children)


class MemoryRequests:
    """Requests waiting for an answer, by id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _parked (a leaf lock)
        self._parked: dict[str, tuple[str, Request]] = {}  # request id -> the asking handle, its request

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
        return [
            handle.id
            for handle in table()
            if handle.record.pending is not None and handle.record.pending.id == request_id
        ]

    def open_requests(self) -> list[Request]:
        with self._lock:
            return [request for _, request in self._parked.values()]


class MemoryJournal(JournalRows):
    """Journal rows in a dict, by handle then turn: a handle leaving memory drops its own
    rows without a walk over every other handle's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _rows (a leaf lock)
        #: handle id -> serial -> (segment, kind, step, call id) -> (status, payload)
        self._rows: dict[str, dict[int, dict[tuple[int, str, int, str], tuple[str, Any]]]] = {}

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]:
        return _NOTHING

    def get(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str
    ) -> tuple[str, Any] | None:
        with self._lock:
            rows = self._rows.get(handle_id, {}).get(serial)
            return rows.get((segment, kind, step, call_id)) if rows is not None else None

    def put(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str, status: str, payload: Any
    ) -> None:
        with self._lock:
            turns = self._rows.setdefault(handle_id, {})
            turns.setdefault(serial, {})[(segment, kind, step, call_id)] = (status, payload)

    def rows(self, handle_id: str) -> list[tuple[int, int, str, int, str, str, Any]]:
        with self._lock:
            turns = self._rows.get(handle_id, {})
            return [(serial, *key, *value) for serial, rows in turns.items() for key, value in rows.items()]

    def forget_handle(self, handle_id: str) -> None:
        """``handle_id`` left memory: its journal goes with it."""
        with self._lock:
            self._rows.pop(handle_id, None)


class MemoryLog:
    """Stream events in the process's log (``_events.log``), the runtime's own log in a
    bounded deque."""

    def __init__(self) -> None:
        events = MemoryEvents()
        self.stream: TreeEvents = events
        self.emit = events.emit  # every event of every run goes through here: no frame in between
        self._lock = threading.Lock()  # guards: _entries (a leaf lock)
        self._entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_EVENTS)

    def add_log(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    def runtime_log(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(entry) for entry in self._entries]


class MemoryTranscripts:
    """The host's conversation store, or one the tree owns (and prunes as handles leave)."""

    def __init__(self, conversations: ConversationStore | None) -> None:
        self._own: InMemoryStore | None = None
        if conversations is None:
            conversations = self._own = InMemoryStore()
        self.conversations: ConversationStore = conversations

    @contextlib.contextmanager
    def saving(self, handle_id: str, messages: list[dict[str, Any]]) -> Iterator[Callable[[], None]]:
        self.conversations.save(handle_id, messages)
        yield _saved

    def forget(self, handle_id: str) -> None:
        """``handle_id`` left memory: its transcript goes too, when the tree owns it."""
        if self._own is not None:
            self._own.discard(handle_id)


def _saved() -> None:
    """Nothing left to save inside the unit: the transcript is saved already."""


class MemoryRuns:
    """Runs are subtrees of the table of handles, which holds at most ``keep_closed``
    closed handles."""

    def listing(self, table: HandleTable, keep_closed: int) -> list[HandleView]:
        views = []
        for handle in table.walk(table.root):
            with handle.lock:
                views.append(handle.view())
        return views

    def prune(self, table: HandleTable | None, before: float) -> list[str]:
        return [handle.id for handle in table.drop_runs(before)] if table is not None else []


class _Solo:
    """The ownership of a tree only this runtime can see: nothing to register or recover."""

    letting_go = False

    def start(self) -> None:
        pass

    def recover(self, handle_id: str) -> bool:
        return False

    def let_go(self, join_timeout: float) -> bool:
        return True


class MemoryOwners:
    """This runtime is the only one: it owns every turn."""

    def ownership(
        self, owner: str, *, lease_s: float, recover: str, take_over: Any, on_beat: Callable[[], None] | None
    ) -> Ownership:
        return _Solo()

    def dispatching(self, dispatcher: Any, tree: Any, owner: str, clock: Callable[[], float]) -> Any:
        raise ConfigError("a dispatcher runs turns in other processes: it needs a state= they share")


class MemoryTree:
    """A tree that lives and ends with its runtime (``parts.TreeStore``). ``conversations``
    is the host's conversation store, or an in-memory one the tree owns."""

    runtime_id: str = "memory"
    lasting: bool = False
    state: StateStore | None = None

    def __init__(self, conversations: ConversationStore | None = None) -> None:
        self.records: Records = MemoryRecords()
        self.requests: ParkedRequests = MemoryRequests()
        self._journal = MemoryJournal()
        self.journal: Journals = self._journal
        self.events: TreeLog = MemoryLog()
        self._transcripts = MemoryTranscripts(conversations)
        self.transcripts: Transcripts = self._transcripts
        self.runs: Runs = MemoryRuns()
        self.owners: Owners = MemoryOwners()

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]:
        return _NOTHING

    def sync(self, handle: Handle, *, exact: bool = False) -> None:
        pass

    def open_root(self, fresh: HandleRecord, agents: set[str], make: Callable[[HandleRecord], Handle]) -> Handle:
        return make(fresh)

    def wait(self, handle: Handle, timeout: float | None, *, here: bool) -> None:
        handle.changed.wait(timeout)  # every change happens in this process, and notifies

    def forget_handle(self, handle_id: str) -> None:
        self._transcripts.forget(handle_id)
        self._journal.forget_handle(handle_id)  # kept while the handle is (CONTRACT §23)

    def let_go(self, join_timeout: float) -> None:
        pass
