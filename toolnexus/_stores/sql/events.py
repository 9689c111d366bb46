"""A stored tree's stream events: rows of ``tn_stream``, numbered by one serial per tree.

Events are committed inside the unit of work that made them (``unit.Unit``): a
state change with its row, a model reply's ``message`` with the reply's journal row, a
call's ``tool_result`` with its result. One unit inserts its events in one statement.
An event made outside any unit (the loop announces a reply just before the journal
commits it) waits, with its handle, for the next unit that touches that handle; only a
``retry`` (whose text must not be mixed up with the new attempt's) commits at once.

Serials follow commit order, so a stream that has read up to serial ``n`` has missed
nothing below it: SQLite has one writer at a time (and this process remembers the last
serial while nobody else commits); PostgreSQL numbers through a counter row per tree,
updated as the unit's last statement, whose lock orders the commits.

A stream of this process reads what this process committed from the log, and the
state's rows for what it has not seen (other processes' commits, announced by the
state's wake-ups: ``StateStore.wait_change``, watched by one thread while any stream
waits).
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from typing import Any, ContextManager, Iterable, Iterator, Protocol

import attrs

from ..._events.log import LOG, EventLog, Logged, TreeEvents
from ..._team.handle import Handle
from ...data import AgentResult
from ...wire import from_wire, to_wire
from .base import StateStore

#: Rows one statement inserts at most.
_BATCH = 100
_COLUMNS = ("runtime_id", "serial", "handle_id", "kind", "body", "at")
#: How long the watching thread waits for a change before it wakes the streams anyway.
WATCH_S = 0.25

_DUMPS = json.JSONEncoder(separators=(",", ":")).encode

Pending = tuple[str | None, str, dict[str, Any], Any]


class OpenUnits(Protocol):
    """What the events part asks of a stored tree's units of work (``unit.Unit``)."""

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[None]: ...

    def made(self) -> list[Pending] | None: ...


class SqlLog:
    """A stored tree's events (``parts.TreeLog``): a stream event joins the open unit of
    work; the runtime's own log shares the stream's rows (a ``log`` row, which no stream
    yields)."""

    def __init__(self, stream: StoredEvents, units: OpenUnits) -> None:
        self.stream: TreeEvents = stream
        self._stream = stream
        self._units = units

    def emit(self, handle: str | None, kind: str, data: dict[str, Any], result: Any = None, now: bool = False) -> None:
        made = self._units.made()
        if made is not None:
            made.append((handle, kind, data, result))
        elif now:
            with self._units.change():
                self._add((handle, kind, data, result))
        else:
            self._stream.hold(handle, (handle, kind, data, result))

    def _add(self, event: Pending) -> None:
        made = self._units.made()
        assert made is not None  # inside the unit just opened
        made.append(event)

    def add_log(self, entry: dict[str, Any]) -> None:
        self.emit(entry["handle"], LOG, entry, now=True)

    def runtime_log(self) -> list[dict[str, Any]]:
        return self._stream.runtime_log()


class StoredEvents:
    """The ``tn_stream`` rows of one tree, and this process's log of them."""

    def __init__(self, state: StateStore, runtime_id: str) -> None:
        self.log = EventLog()
        self._state = state
        self._runtime_id = runtime_id
        self._counted = state.dialect.supports_concurrent_writers  # a counter row orders their commits
        self._lock = threading.Lock()  # guards: _held, _last, _watchers, _thread (a leaf)
        self._held: dict[str | None, list[Pending]] = {}
        #: ``(foreign commit count, serial)`` after this process's last insert (SQLite).
        self._last: tuple[int, int] | None = None
        self._watchers = 0
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    # --- recording, inside a stored tree's units ---------------------------------------------

    def hold(self, handle: str | None, event: Pending) -> None:
        """Keep an event made outside a unit for the next unit that touches ``handle``."""
        with self._lock:
            self._held.setdefault(handle, []).append(event)

    def take(self, handles: Iterator[str]) -> list[Pending]:
        """The held events of ``handles``, for the unit that touched them to commit."""
        with self._lock:
            if not self._held:
                return []
            found: list[Pending] = []
            for handle_id in handles:
                found.extend(self._held.pop(handle_id, ()))
            return found

    def insert_unit(
        self, touched: Iterable[str], made: list[Pending], seen: int | None, notice: str
    ) -> list[Logged] | None:
        """A unit of work's events (first those its ``touched`` handles held, then those it
        ``made``), numbered and inserted with the commit's wake-up ``notice``; ``None`` when
        it has none (the caller sends the wake-up). The unit's last statement: on
        PostgreSQL the counter row's lock, which orders the commits, is its last lock."""
        events = self.take(iter(touched)) + made
        return self.insert(events, seen, notice) if events else None

    def insert(self, events: list[Pending], seen: int | None, notice: str) -> list[Logged]:
        """Number and insert ``events`` (inside the unit's transaction) and send the
        commit's wake-up ``notice`` (``StateStore.notify``); ``seen`` is the unit's count of
        other connections' commits, when the state keeps one."""
        if self._counted:
            return self._insert_counted(events, self._state.notice(notice))
        self._state.notify(notice)
        base = self._base(len(events), seen)
        now = time.time()
        logged = []
        params: list[Any] = []
        for index, (handle, kind, data, result) in enumerate(events, 1):
            logged.append(Logged(base + index, handle, kind, data, result))
            params += (self._runtime_id, base + index, handle, kind, _body(kind, data, result), now)
        step = _BATCH * len(_COLUMNS)
        for start in range(0, len(params), step):
            chunk = params[start : start + step]
            self._state.execute(
                self._state.dialect.insert_rows("tn_stream", _COLUMNS, len(chunk) // len(_COLUMNS)), chunk
            )
        with self._lock:  # still inside the transaction: the next unit of any thread numbers after it
            self._last = (seen, logged[-1].serial) if seen is not None else None
        return logged

    def _insert_counted(self, events: list[Pending], notice: tuple[str, str] | None) -> list[Logged]:
        """PostgreSQL: count, insert and notify in one statement (one round trip); the
        counter row's lock, taken last, orders the commits of this tree."""
        logged: list[Logged] = []
        now = time.time()
        for start in range(0, len(events), _BATCH):
            chunk = events[start : start + _BATCH]
            params: list[Any] = [self._runtime_id, len(chunk), self._runtime_id, len(chunk), now]
            for index, (handle, kind, data, result) in enumerate(chunk, 1):
                params += (index, handle, kind, _body(kind, data, result))
            sql = self._state.dialect.numbered_events(len(chunk), notify=notice is not None)
            rows = self._state.execute(sql, [*params, *(notice or ())])
            last = int(rows[0][0])
            base = last - len(chunk)
            logged += [
                Logged(base + index, handle, kind, data, result)
                for index, (handle, kind, data, result) in enumerate(chunk, 1)
            ]
        return logged

    def _base(self, count: int, seen: int | None) -> int:
        """The serial before the ``count`` new ones (SQLite: one writer at a time)."""
        with self._lock:
            last = self._last
        if last is not None and seen is not None and last[0] == seen:
            return last[1]  # nobody else committed since this process's last insert
        return int(
            self._state.execute(
                "SELECT COALESCE(MAX(serial), 0) FROM tn_stream WHERE runtime_id = ?", (self._runtime_id,)
            )[0][0]
        )

    def committed(self, logged: list[Logged], *, kept: bool) -> None:
        """After the commit: the log learns the events (``kept``: this commit is final,
        not one a host's transaction may still roll back) and the streams wake."""
        if kept:
            self.log.add(logged)
        else:
            with self._lock:
                self._last = None
            self.log.poke(foreign=True)  # read it from the state once it is there

    def rolled_back(self) -> None:
        with self._lock:
            self._last = None

    # --- reading -----------------------------------------------------------------------------------

    def read(self, after: int, limit: int) -> list[Logged]:
        rows = self._state.execute(
            "SELECT serial, handle_id, kind, body FROM tn_stream"
            " WHERE runtime_id = ? AND serial > ? ORDER BY serial LIMIT ?",
            (self._runtime_id, after, limit),
        )
        found = [_logged(row) for row in rows]
        if found and not self._state.in_host_transaction():
            self.log.add(found)
        elif found:
            self.log.seen(found[-1].serial)
        return found

    def turn_start(self, handle_id: str) -> int | None:
        """The serial of ``handle_id``'s latest turn start: the log's, unless the state has a
        later one (a turn that ran in another process, which this log never heard of)."""
        found = self.log.turn_start(handle_id)
        rows = self._state.execute(
            "SELECT serial, body FROM tn_stream"
            " WHERE runtime_id = ? AND handle_id = ? AND kind = 'state' AND serial > ?"
            " ORDER BY serial DESC LIMIT 64",
            (self._runtime_id, handle_id, found or 0),
        )
        for serial, body in rows:
            if _json(body).get("to") == "running":
                return int(serial)
        return found

    def runtime_log(self) -> list[dict[str, Any]]:
        """The runtime's own log (``Runtime.events``): its rows among the stream events,
        after those of the table a state written before kept them in."""
        older = self._state.execute("SELECT body FROM tn_events WHERE runtime_id = ? ORDER BY seq", (self._runtime_id,))
        rows = self._state.execute(
            f"SELECT body FROM tn_stream WHERE runtime_id = ? AND kind = '{LOG}' ORDER BY serial", (self._runtime_id,)
        )
        return [_json(row[0]) for row in older + rows]

    def last(self) -> int:
        rows = self._state.execute(
            "SELECT COALESCE(MAX(serial), 0) FROM tn_stream WHERE runtime_id = ?", (self._runtime_id,)
        )
        last = int(rows[0][0])
        self.log.seen(last)
        return last

    # --- other processes' commits --------------------------------------------------------------

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """While a stream waits, one thread waits for the state's wake-ups and wakes it."""
        with self._lock:
            self._watchers += 1
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(target=self._watch, name="toolnexus-stream-watch", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._watchers -= 1

    def wait(self, version: int, timeout: float | None, *, here: bool = False) -> None:
        if not here:
            self.log.wait(version, timeout)  # the watching thread wakes it
            return
        self._state.wait_change(WATCH_S if timeout is None else max(0.0, min(timeout, WATCH_S)))
        self.log.poke(foreign=True)

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._watchers <= 0 or self._stopped.is_set():
                    self._thread = None
                    return
            try:
                self._state.wait_change(WATCH_S)
            except Exception:  # a state that fails to wait: the streams' own reads name the fault
                self._stopped.wait(WATCH_S)  # nothing to wait on: pace the streams' reads
            self.log.poke(foreign=True)

    def stop(self, join_timeout: float) -> None:
        """The tree is let go of: the watching thread ends."""
        self._stopped.set()
        with self._lock:
            thread = self._thread
        self.log.poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(join_timeout)


@functools.lru_cache(maxsize=64)
def _state_body(old: str, new: str) -> str:
    return _DUMPS({"from": old, "to": new})


def _body(kind: str, data: dict[str, Any], result: Any) -> str:
    """An event's row body: its data; for a ``result``, the whole result (the data is
    part of it)."""
    if kind == "state":
        return _state_body(data["from"], data["to"])
    if kind == "result" and result is not None:
        return _DUMPS(_result_body(result))
    return _DUMPS(data)


def _result_body(result: AgentResult) -> dict[str, Any]:
    """The result a ``result`` event announces, as its row keeps it (by hand: this runs
    for every settled turn, and the converter's general path costs more)."""
    body: dict[str, Any] = {}
    for name in _RESULT_FIELDS:
        value = getattr(result, name)
        if value is not None:
            body[name] = value if isinstance(value, (str, int, float, bool)) else to_wire(value)
    return body


_RESULT_FIELDS = tuple(field.name for field in attrs.fields(AgentResult) if field.name != "runtime")


def _logged(row: tuple[Any, ...]) -> Logged:
    serial, handle, kind, body = row
    data = _json(body)
    if kind != "result" or "is_error" not in data:
        return Logged(int(serial), handle, kind, data)
    return Logged(
        int(serial),
        handle,
        kind,
        {key: data.get(key) for key in ("status", "text", "total_tokens")},
        from_wire(AgentResult, data),
    )


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value
