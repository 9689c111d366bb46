"""Stream events as one process knows them: the log every stream of a tree reads.

A tree's events are numbered by one serial per tree: without a state this log numbers
them as they happen (and keeps the last ``MAX_EVENTS``); with a state they are numbered
and committed inside the unit of work that made them (``_stores/sql/events.py``), and the log
keeps the ones this process committed or read, so that a stream here rarely has to read
the state. ``text`` events are not durable: they exist only in the process whose model
call wrote them, and their id is ``"<the last durable serial>.<k>"``, so they sort
between the durable events around them.

The log also knows which handles are watched: a model call of a watched handle (or of a
descendant of one) asks the provider for its streaming mode; nobody else's does.

``RunEvents`` is what one run hands its events to (``RunSpec.events``): the loop calls it
as each model reply, tool call and result happens.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from ..data import Event

if TYPE_CHECKING:
    from ..data import ModelReply, ToolCall, ToolResult

#: Durable events (and, apart, text pieces) a log keeps in memory.
MAX_EVENTS = 10_000

#: The kind of a state's rows that hold the runtime's own log (``Runtime.events``): they
#: are numbered among the stream events, and no stream yields them.
LOG = "log"

#: ``emit(handle, kind, data, result=None, now=False)``: record one durable event.
Emit = Callable[..., None]


class Logged(tuple[int, "str | None", str, "dict[str, Any]", Any]):
    """One durable event with its serial (and, for a ``result``, the whole result).

    A tuple, so that the log makes one without running any Python code: every event of
    every run is one (``EventLog.append``)."""

    __slots__ = ()

    def __new__(cls, serial: int, handle: str | None, kind: str, data: dict[str, Any], result: Any = None) -> Logged:
        return _TUPLE(cls, (serial, handle, kind, data, result))

    @property
    def serial(self) -> int:
        return self[0]

    @property
    def handle(self) -> str | None:
        return self[1]

    @property
    def kind(self) -> str:
        return self[2]

    @property
    def data(self) -> dict[str, Any]:
        return self[3]

    @property
    def result(self) -> Any:
        return self[4]

    def event(self) -> Event:
        return Event(kind=self[2], handle=self[1], id=str(self[0]), data=self[3])


_TUPLE = tuple.__new__


class Text:
    """One text piece: it comes after durable event ``base``, as the ``k``-th since."""

    __slots__ = ("base", "k", "handle", "delta")
    kind = "text"

    def __init__(self, base: int, k: int, handle: str | None, delta: str) -> None:
        self.base = base
        self.k = k
        self.handle = handle
        self.delta = delta

    def event(self) -> Event:
        return Event(kind="text", handle=self.handle, id=f"{self.base}.{self.k}", data={"delta": self.delta})


class Snapshot:
    """What a stream reads from the log at once (see ``EventLog.snapshot``)."""

    __slots__ = ("version", "foreign", "serial", "durable", "texts")

    def __init__(self, version: int, foreign: int, serial: int, durable: list[Logged], texts: list[Text]) -> None:
        self.version = version
        self.foreign = foreign
        self.serial = serial
        self.durable = durable
        self.texts = texts


class EventLog:
    """The events of one tree (or one ``Client`` run) as this process knows them.

    ``serial`` is the last durable serial known here (numbered here, committed here or
    read from the state). Every change bumps a version and wakes the streams waiting
    for one. A log either numbers its events itself (``append``: a tree without a state,
    a ``Client`` run) or learns them with their serials (``add``: a state's), never both.
    """

    def __init__(self, keep: int = MAX_EVENTS) -> None:
        # guards: every field below. A leaf lock: taken under handle locks, calls nothing.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.serial = 0
        self._k = 0  # text pieces (and other ephemeral ids) since ``serial``
        self._keep = keep
        self._durable: dict[int, Logged] = {}
        self._order: collections.deque[int] = collections.deque()  # the serials ``add`` kept, oldest first
        self._text: collections.deque[Text] = collections.deque(maxlen=keep)
        self._version = 0
        self._foreign = 0  # wake-ups that may stand for another process's commits
        self._waiting = 0
        self._watched: dict[str, int] = {}

    # --- what happens -----------------------------------------------------------------------

    def append(
        self, handle: str | None, kind: str, data: dict[str, Any], result: Any = None, now: bool = False
    ) -> None:
        """A durable event of a tree only this process holds: numbered here (the signature
        of ``TreeLog.emit``: every run's events pass here, so it is kept short)."""
        with self._lock:
            serial = self.serial = self.serial + 1
            self._k = 0
            durable = self._durable
            durable[serial] = _TUPLE(Logged, (serial, handle, kind, data, result))
            if serial > self._keep:  # numbered here one by one: the oldest kept is this far back
                durable.pop(serial - self._keep, None)
            self._version += 1
            if self._waiting:
                self._changed.notify_all()

    def add(self, events: Iterable[Logged]) -> None:
        """Durable events with their serials, committed (or read) by this process."""
        with self._lock:
            for event in events:
                if event.serial not in self._durable:
                    self._keep_durable(event)
                if event.serial > self.serial:
                    self.serial, self._k = event.serial, 0
            self._bump()

    def seen(self, serial: int) -> None:
        """Durable events up to ``serial`` exist (read from the state, not kept here)."""
        with self._lock:
            if serial > self.serial:
                self.serial, self._k = serial, 0

    def text(self, handle: str | None, delta: str) -> None:
        with self._lock:
            self._k += 1
            self._text.append(Text(self.serial, self._k, handle, delta))
            self._bump()

    def ephemeral_id(self) -> str:
        """A fresh id for an event that is not durable (a stream's own ``timeout`` result)."""
        with self._lock:
            self._k += 1
            return f"{self.serial}.{self._k}"

    def poke(self, *, foreign: bool = False) -> None:
        """Wake every stream: something may have changed (in another process, if ``foreign``)."""
        with self._lock:
            if foreign:
                self._foreign += 1
            self._bump()

    def _keep_durable(self, event: Logged) -> None:
        self._durable[event.serial] = event
        self._order.append(event.serial)
        if len(self._order) > self._keep:
            self._durable.pop(self._order.popleft(), None)  # the first kept goes first

    def _bump(self) -> None:
        self._version += 1
        if self._waiting:
            self._changed.notify_all()

    # --- what streams read ---------------------------------------------------------------------

    def now(self) -> tuple[int, int]:
        """The id of the latest event here, as ``(serial, k)``."""
        with self._lock:
            return self.serial, self._k

    def snapshot(self, serial: int, k: int, limit: int) -> Snapshot:
        """The durable events kept here right after ``serial`` (contiguous, at most
        ``limit``) and the text pieces after ``(serial, k)``."""
        with self._lock:
            durable: list[Logged] = []
            following = serial + 1
            while len(durable) < limit:
                event = self._durable.get(following)
                if event is None:
                    break
                durable.append(event)
                following += 1
            texts = []
            for piece in reversed(self._text):
                if (piece.base, piece.k) <= (serial, k):
                    break
                texts.append(piece)
            texts.reverse()
            return Snapshot(self._version, self._foreign, self.serial, durable, texts)

    def kept_after(self, serial: int, limit: int) -> list[Logged]:
        """Kept durable events after ``serial``, over any gap the memory bound left."""
        with self._lock:
            after = [event for s, event in self._durable.items() if s > serial]
        return sorted(after, key=lambda event: event.serial)[:limit]

    def turn_start(self, handle_id: str) -> int | None:
        """The serial of the event that began ``handle_id``'s latest turn, if kept here."""
        with self._lock:  # kept mostly in serial order; events read from a state may come later
            starts = [serial for serial, event in self._durable.items() if starts_turn(event, handle_id)]
        return max(starts, default=None)

    def wait(self, version: int, timeout: float | None) -> None:
        """Return once the log changed after ``version`` (or after ``timeout`` seconds)."""
        with self._lock:
            if self._version != version:
                return
            self._waiting += 1
            try:
                self._changed.wait(timeout)
            finally:
                self._waiting -= 1

    # --- who watches ----------------------------------------------------------------------------

    def watch(self, handle_id: str) -> None:
        with self._lock:
            self._watched[handle_id] = self._watched.get(handle_id, 0) + 1

    def unwatch(self, handle_id: str) -> None:
        with self._lock:
            left = self._watched.get(handle_id, 0) - 1
            if left > 0:
                self._watched[handle_id] = left
            else:
                self._watched.pop(handle_id, None)

    def live(self, handle_id: str | None) -> bool:
        """Whether a stream watches ``handle_id`` or one of its ancestors."""
        if not self._watched or handle_id is None:  # the common case, read without the lock
            return False
        with self._lock:
            current = handle_id
            while current not in self._watched:
                cut = current.rfind("/")
                if cut < 0:
                    return False
                current = current[:cut]
            return True


def starts_turn(event: Logged, handle_id: str) -> bool:
    """Whether ``event`` is ``handle_id`` starting (or going on with) a turn."""
    return event.kind == "state" and event.handle == handle_id and event.data.get("to") == "running"


class TreeEvents(Protocol):
    """A tree store's events: where they are recorded and read (the memory side below;
    a state's in ``_stores/sql/events.py``)."""

    log: EventLog

    def read(self, after: int, limit: int) -> list[Logged]:
        """Durable events after serial ``after`` that the log may not keep."""
        ...

    def turn_start(self, handle_id: str) -> int | None: ...

    def last(self) -> int:
        """The serial of the tree's latest durable event."""
        ...

    def watching(self) -> Any:
        """A context kept while a stream waits: events of other processes reach the log."""
        ...

    def wait(self, version: int, timeout: float | None, *, here: bool = False) -> None:
        """Wait for the log to change after ``version`` (``here``: this thread also waits
        for other processes' commits, as no watching thread does)."""
        ...


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class MemoryEvents:
    """The events of a tree only this process holds (or of one ``Client`` run)."""

    def __init__(self, log: EventLog | None = None) -> None:
        self.log = log if log is not None else EventLog()
        #: Record one event (``TreeLog.emit``): numbered in the log at once.
        self.emit: Emit = self.log.append

    def read(self, after: int, limit: int) -> list[Logged]:
        return self.log.kept_after(after, limit)

    def turn_start(self, handle_id: str) -> int | None:
        return self.log.turn_start(handle_id)

    def last(self) -> int:
        return self.log.serial

    def watching(self) -> Any:
        return _Nothing()

    def wait(self, version: int, timeout: float | None, *, here: bool = False) -> None:
        self.log.wait(version, timeout)


class RunEvents:
    """Where one run's loop hands its events (``RunSpec.events``), for one handle."""

    __slots__ = ("handle", "_emit", "_log", "_always")

    def __init__(self, handle: str | None, emit: Emit, log: EventLog, *, always_live: bool = False) -> None:
        self.handle = handle
        self._emit = emit
        self._log = log
        self._always = always_live

    def live_call(self) -> dict[str, Any]:
        """The ``ModelCall`` options for the next model call: streaming mode (``on_text``)
        only while a stream watches; the retry announcement always (it changes nothing
        in the request)."""
        if self._always or self._log.live(self.handle):
            return {"on_text": self.text, "on_retry": self.retry}
        return {"on_retry": self.retry}  # (not kept: a bound method kept here would be a cycle)

    def text(self, delta: str) -> None:
        self._log.text(self.handle, delta)

    def retry(self, attempt: int, cause: str) -> None:
        # Committed at once: the text that follows belongs to the new attempt.
        self._emit(self.handle, "retry", {"attempt": attempt, "cause": cause}, now=True)

    def message(self, reply: ModelReply) -> None:
        usage = reply.usage
        calls = [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in reply.tool_calls]
        counts: dict[str, Any] = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        }
        if usage.unmeasured_calls:
            counts["unmeasured"] = True  # the server reported none: 0 tokens, not a count
        self._emit(self.handle, "message", {"text": reply.text, "tool_calls": calls, "usage": counts})

    def calls(self, calls: list[ToolCall]) -> None:
        for call in calls:
            self._emit(self.handle, "tool_call", {"id": call.id, "name": call.name, "arguments": call.arguments})

    def result(self, call: ToolCall, result: ToolResult) -> None:
        if result.pending is None:  # a suspension is not a result: the handle announces it
            data = {"id": call.id, "name": call.name, "output": result.output, "is_error": result.is_error}
            self._emit(self.handle, "tool_result", data)
