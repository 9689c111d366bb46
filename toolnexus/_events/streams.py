"""Streams: watch a run, or a whole team, while it works.

A ``RunStream`` is an iterator of ``Event`` over one ``Watch``: the events of one handle
and its subtree (every event, for a ``Client`` run) after a cursor, read from the tree's
log (``events.py``) and, with a state, from its rows (``_stores/sql/events.py``), merged in id
order. While a watch exists, the model calls of the handle it watches and of every
descendant use the provider's streaming mode, so ``text`` events arrive as the model
writes.

Iterating blocks on the log's condition (never on a sleep); ``close`` from any thread
wakes it. With an inline runtime (or from inside a tool) the iterating thread runs the
watched handle's turn itself when nobody has started it, and yields what it produced
once that returns. ``Streams`` is the runtime's side: ``watch`` (``Runtime.stream``) and
``run_agent`` (``Runtime.stream_agent``: spawn, wake, stream, close).
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import Any, Callable, Protocol

from .._team import jobs as _jobs
from ..data import AgentResult, Event
from .cursor import parse_after
from .log import LOG, EventLog, Logged, MemoryEvents, Text, TreeEvents
from .._team.handle import CLOSED, IDLE, RUNNING, SUSPENDED, Handle, closed_result
from .._tools.output import typed_result
from .._team.waiting import Waiter, runnable

#: Events one read takes at most.
LIMIT = 256
#: A cursor ``(serial, _AFTER_TEXT)`` skips every text piece that came after ``serial``.
_AFTER_TEXT = 1 << 62
#: How often a stream that ends at rest (``rests=True``) checks again while nothing comes.
RECHECK_S = 1.0


#: ``rests()``: whether the watched handle rests (is not running and will not run unless
#: woken or answered), and then its latest result.
Rests = Callable[[], "tuple[bool, Any]"]


class Watch:
    """One stream's reading of a tree's events: those of ``handle`` and its subtree (all
    of them when ``handle`` is None) after ``cursor``, until ``until``'s first result (any
    result when ``until`` is None and ``any_result``). With ``rests``, the watch also ends
    once the handle is found resting and every event after the cursor is read: it never
    waits for a turn nobody has started."""

    def __init__(
        self,
        events: TreeEvents,
        handle: str | None,
        cursor: tuple[int, int],
        *,
        until: str | None,
        any_result: bool = False,
        here: bool = False,
        rests: Rests | None = None,
    ) -> None:
        self.events = events
        #: The iterating thread itself waits for other processes' commits (inline: no
        #: thread of the library's does).
        self.here = here
        self.log: EventLog = events.log
        self._handle = handle
        self._prefix = f"{handle}/" if handle is not None else None
        self._serial, self._k = cursor
        self._until = until
        self._any_result = any_result
        self._rests = rests
        self._next_check = 0.0  # the first dry moment checks at once
        self._version = -1
        self._foreign = -1  # the first fill reads the store: ``after`` may be from another process
        self._queue: collections.deque[Event] = collections.deque()
        self._lock = threading.Lock()  # guards: _error
        self._error: BaseException | None = None
        self.ended = False
        #: What ended the watch: the result the last event announced.
        self.result: Any = None

    def fail(self, exc: BaseException) -> None:
        """The run behind this watch raised: the stream raises it after its last events."""
        with self._lock:
            self._error = exc
        self.log.poke()

    def failure(self) -> BaseException | None:
        with self._lock:
            return self._error

    def take(self) -> Event | None:
        """The next event that is there now, or None."""
        while not self._queue and not self.ended and self._fill():
            pass  # a whole batch of other handles' events: read on
        return self._queue.popleft() if self._queue else None

    def wait(self, timeout: float | None) -> None:
        if self._rests is not None:  # wake for the next check of whether the handle rests
            until_check = max(0.0, self._next_check - time.monotonic())
            timeout = until_check if timeout is None else min(timeout, until_check)
        self.events.wait(self._version, timeout, here=self.here)

    def end_if_resting(self) -> bool:
        """When the queue runs dry (at once, then at most every ``RECHECK_S``): if the handle
        rests, read everything after the cursor (from the state too, whatever this process
        has heard of) and end when nothing is left. The state is read first: every event
        committed up to the change that made it rest is then in the read. Its result usually
        ends the watch first; the checks end it also when no result can (a cursor past the
        tree's last event). Returns whether there is more to yield now."""
        if self._rests is None or self.ended or time.monotonic() < self._next_check:
            return False
        self._next_check = time.monotonic() + RECHECK_S
        resting, result = self._rests()
        if not resting:
            return False  # its result (or its closing) is still to come, and ends the watch
        while not self._queue and not self.ended:
            self._foreign = -1  # read the state, not only this process's log
            if not self._fill():
                self.ended, self.result = True, result
        return True

    def _fill(self) -> bool:
        """Read what is there after the cursor; whether the cursor moved."""
        snap = self.log.snapshot(self._serial, self._k, LIMIT)
        self._version = snap.version
        durable, texts = snap.durable, snap.texts
        last = durable[-1].serial if durable else self._serial
        known = max(snap.serial, texts[-1].base if texts else 0)
        if len(durable) < LIMIT and (last < known or snap.foreign != self._foreign):
            self._foreign = snap.foreign
            more = self.events.read(last, LIMIT - len(durable))  # the log knows of them now
            if more:
                durable = durable + more
                last = more[-1].serial
                # Text written meanwhile was numbered before the log knew of these events:
                # take it again, or it would sort behind the cursor and be lost.
                texts = self.log.snapshot(self._serial, self._k, 0).texts
        items: list[tuple[tuple[int, int], Logged | Text]] = [((event.serial, 0), event) for event in durable]
        items += [((piece.base, piece.k), piece) for piece in texts if piece.base <= last]
        items.sort(key=lambda item: item[0])
        for key, item in items:
            self._serial, self._k = key
            if item.kind != LOG and self._mine(item.handle):
                self._queue.append(item.event())
            if isinstance(item, Logged) and self._ends(item):
                self.ended = True
                break
        return bool(items)

    def _mine(self, handle: str | None) -> bool:
        if self._prefix is None or handle is None:
            return self._prefix is None
        return handle == self._handle or handle.startswith(self._prefix)

    def _ends(self, event: Logged) -> bool:
        if event.kind == "result" and (self._any_result or (self._until is not None and event.handle == self._until)):
            data = event.data
            self.result = event.result if event.result is not None else AgentResult(
                text=data.get("text", ""),
                status=data.get("status", ""),
                total_tokens=data.get("total_tokens", 0),
                handle_id=event.handle or "",
            )
            return True
        until = self._until
        if event.kind == "state" and until is not None and event.handle == until and event.data.get("to") == CLOSED:
            self.result = AgentResult(text="closed", status="closed", handle_id=until)
            return True
        return False


#: ``finish(result)``: what the stream's maker does once it ends, with what ended it
#: (``None`` when it was closed early); returns the result the stream keeps.
Finish = Callable[[Any], Any]
#: ``drive(timeout)``: run work this stream is waiting for on the iterating thread, if
#: there is any (returns whether it ran something).
Drive = Callable[[float | None], bool]


class RunStream:
    """An iterator of ``Event`` and a context manager. ``result`` is ``None`` until the
    stream ends, then the ``RunResult`` (``Client``) or ``AgentResult`` (runtime) the
    last event announced. ``close()`` (any thread, idempotent) ends it early: a stream
    that started its run interrupts it; ``Runtime.stream`` only stops watching."""

    def __init__(
        self,
        watch: Watch,
        *,
        timeout: float | None = None,
        timed_out: Callable[[], Any] | None = None,
        drive: Drive | None = None,
        finish: Finish | None = None,
        after_close: Callable[[], None] | None = None,
    ) -> None:
        self._watch = watch
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._timed_out = timed_out
        self._drive = drive
        self._finish = finish
        self._after_close = after_close
        self._lock = threading.Lock()  # guards: _closed, _finished
        self._closed = False
        self._finished = False
        self._held = contextlib.ExitStack()
        if not watch.here:
            self._held.enter_context(watch.events.watching())  # other processes' events wake it
        self.result: Any = None

    def __repr__(self) -> str:
        return f"RunStream(ended={self._watch.ended}, result={self.result!r})"

    def __iter__(self) -> RunStream:
        return self

    def __next__(self) -> Event:
        event = self.next_event(None)
        assert event is not None
        return event

    def __enter__(self) -> RunStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_event(self, timeout: float | None) -> Event | None:
        """The next event, waiting at most ``timeout`` seconds: iteration with a bound, for a
        host that must do something else now and then (a heartbeat, a check for a cancel).

        Args:
            timeout: Seconds to wait at most; ``None`` waits as long as it takes.

        Returns:
            The next ``Event``, or ``None`` when nothing came within ``timeout``.

        Raises:
            StopIteration: the stream ended (or was closed); ``result`` is set.
            LLMError: a ``Client`` run failed, raised after its last events.
        """
        watch = self._watch
        until = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                closed = self._closed
            if closed:
                raise StopIteration
            event = watch.take()
            if event is not None:
                return event
            if watch.ended:
                self._end(watch.result)
                raise StopIteration
            failure = watch.failure()
            if failure is not None:
                self._end(None, failed=True)
                raise failure
            if watch.end_if_resting():
                continue
            now = time.monotonic()
            if self._deadline is not None and now >= self._deadline and self._timed_out is not None:
                return self._timeout()
            bounds = [t for t in (until, self._deadline) if t is not None]
            limit = min(bounds) - now if bounds else None
            if limit is not None and limit <= 0:
                return None
            if self._drive is not None and self._drive(limit):
                continue
            watch.wait(limit)

    def _timeout(self) -> Event:
        watch = self._watch
        assert self._timed_out is not None
        result = self._timed_out()
        watch.ended, watch.result = True, result
        data = {"status": "timeout", "text": "", "total_tokens": getattr(result, "total_tokens", 0)}
        handle = getattr(result, "handle_id", None) or None
        return Event(kind="result", handle=handle, id=watch.log.ephemeral_id(), data=data)

    def _end(self, result: Any, *, failed: bool = False) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
        try:
            if self._finish is not None and not failed:
                result = self._finish(result)
            self.result = result
        finally:
            self._held.close()

    def close(self) -> None:
        """Stop the stream; one that started its run and has not seen it end interrupts it.
        Idempotent, from any thread: an iteration waiting on another thread ends."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ended = self._watch.ended
        self._watch.log.poke()  # wake an iterating thread
        self._end(self._watch.result if ended else None)
        if self._after_close is not None:
            self._after_close()


def ended_stream(events: TreeEvents, result: Any) -> RunStream:
    """A stream with nothing to yield: it ends at once with ``result``."""
    watch = Watch(events, None, events.log.now(), until=None)
    watch.ended, watch.result = True, result
    return RunStream(watch)


class StreamTeam(Protocol):
    """The runtime calls ``Streams`` makes (``Runtime`` has them)."""

    root: Handle

    def spawn(self, parent: Handle | str, name: str) -> Handle: ...

    def wake(self, h: Handle | str, prompt: str | None = None) -> None: ...

    def interrupt(self, h: Handle | str) -> None: ...

    def close(self, h: Handle | str, force: bool = False) -> None: ...


class Streams:
    """The runtime's streams over its tree (``Runtime.stream`` and ``stream_agent``)."""

    def __init__(self, team: StreamTeam, events: TreeEvents, waiter: Waiter, *, inline: bool) -> None:
        self._team = team
        self._events = events
        self._waiter = waiter
        self._inline = inline

    def latest(self) -> str:
        """The id of the tree's latest durable event (read from the state, with one)."""
        return str(self._events.last())

    def watch(
        self,
        handle: Handle,
        after: str | None,
        timeout: float | None,
        finish: Finish | None = None,
        *,
        rests: bool = False,
    ) -> RunStream:
        """``Runtime.stream``: watch ``handle`` and its subtree, their events after the event
        id ``after`` (or from the start of its current turn, or of its next one when it is
        idle) until its first result after that point; ``timeout`` (seconds) ends the
        stream with a ``result`` of status ``timeout``. Closing the stream only stops
        watching; while it watches, the model calls of the subtree stream their text.

        ``rests=True`` (``toolnexus.sse``): the stream also ends as soon as the handle rests
        (suspended, idle with no turn to come, closed) and every event after ``after`` has
        come; without ``after``, an idle handle replays its last turn, as a closed one does.

        Raises:
            ToolnexusError: ``after`` is not an event id.
        """
        events = self._events
        cursor = parse_after(after)
        if cursor is None:
            cursor = self._start(handle, events, rests)
            if cursor is None:  # resting, and nothing of its turns is kept: nothing to come
                return ended_stream(events, _resting(handle)()[1])
        resting = _resting(handle) if rests else None
        watch = Watch(events, handle.id, cursor, until=handle.id, here=self._inline, rests=resting)
        log = events.log
        log.watch(handle.id)
        watched = [handle.id]

        def stop_watching() -> None:
            try:
                log.unwatch(watched.pop())  # once, whichever thread gets here first
            except IndexError:
                pass

        def finished(result: Any) -> Any:
            stop_watching()
            if result is not None and result.status == "closed":
                with handle.lock:
                    handle.sync()
                    result = closed_result(handle.record)
            elif result is not None:
                result = typed_result(handle.definition, result)  # a typed value read from a state: as its type
            return finish(result) if finish is not None else result

        return RunStream(
            watch,
            timeout=timeout,
            timed_out=lambda: self._timeout_result(handle),
            drive=self._driver(handle),
            finish=finished,
            after_close=stop_watching,
        )

    def run_agent(self, name: str, prompt: str, timeout: float | None, finish: Finish | None = None) -> RunStream:
        """``Runtime.stream_agent``: spawn ``name`` under the root, wake it on ``prompt`` and
        yield its subtree's events until its result; a result other than ``pending`` closes
        it (a pending one leaves it open for ``resume``); closing the stream early, or
        running out of time, interrupts it first."""
        team = self._team
        handle = team.spawn(team.root, name)

        def finished(result: Any) -> Any:
            if result is None or result.status == "timeout":
                team.interrupt(handle)  # it does not go on in the background
            if result is None or result.status != "pending":
                team.close(handle)
            return finish(result) if finish is not None else result

        try:
            stream = self.watch(handle, None, timeout, finished)
            team.wake(handle, prompt)
        except BaseException:
            team.close(handle, force=True)
            raise
        return stream

    def _start(self, handle: Handle, events: TreeEvents, rests: bool = False) -> tuple[int, int] | None:
        """Where ``after=None`` starts: at the current (or kept last) turn of a busy,
        suspended or closed handle; now for an idle one (its next turn), or with ``rests``
        at its last turn unless a turn is queued for it."""
        with handle.lock:
            handle.sync()
            state = handle.record.state
            settled = state == CLOSED or (rests and state == IDLE and not handle.record.queued)
        if state in (RUNNING, SUSPENDED) or settled:
            start = events.turn_start(handle.id)
            if start is not None:
                return start - 1, _AFTER_TEXT
            if settled:
                return None
        last = events.last()
        serial, k = events.log.now()
        return (serial, k) if serial >= last else (last, 0)

    def _timeout_result(self, handle: Handle) -> AgentResult:
        with handle.lock:
            return AgentResult(text="", status="timeout", usage=handle.record.spent, handle_id=handle.id)

    def _driver(self, handle: Handle) -> Drive | None:
        """Inline (or on a thread that runs a job): the iterating thread runs the watched
        handle's turn when nobody has started it, as ``wait`` would."""

        def drive(timeout: float | None) -> bool:
            if not (self._inline or _jobs.inside_job()):
                return False
            with handle.lock:
                due = runnable(handle)
            if due:
                self._waiter.next_result(handle, timeout, run_here=True, stop_at_deadline=timeout is not None)
            return due

        return drive


def _resting(handle: Handle) -> Rests:
    """Whether ``handle`` rests, read from the state itself (not this process's cache)."""

    def rests() -> tuple[bool, Any]:
        with handle.lock:
            handle.sync(exact=True)
            record = handle.record
            if record.state == RUNNING or (record.state == IDLE and record.queued):
                return False, None
            return True, closed_result(record) if record.state == CLOSED else record.result

    return rests


class ClientRun:
    """A ``Client`` run behind a stream: on a thread of its own (or, inline, on the
    iterating thread), its events in a log of its own; the stream ends at its result."""

    def __init__(self, run: Callable[[], Any], log: EventLog, cancel: Callable[[], None], *, inline: bool) -> None:
        self._run = run
        self._log = log
        self._cancel = cancel
        self._inline = inline
        self._lock = threading.Lock()  # guards: _started
        self._started = False
        self._thread: threading.Thread | None = None
        self.watch = Watch(MemoryEvents(log), None, (0, 0), until=None, any_result=True)

    def start(self) -> RunStream:
        if not self._inline:
            self._started = True
            self._thread = threading.Thread(target=self._body, name="toolnexus-stream", daemon=True)
            self._thread.start()
        return RunStream(self.watch, drive=self._drive if self._inline else None, finish=self._finish)

    def _drive(self, timeout: float | None) -> bool:
        with self._lock:
            if self._started:
                return False
            self._started = True
        self._body()
        return True

    def _body(self) -> None:
        from ..wire import to_wire

        try:
            result = self._run()
        except BaseException as exc:  # the stream raises it to whoever iterates
            self.watch.fail(exc)
            return
        if result.pending is not None:
            self._log.append(None, "pending", {"request": to_wire(result.pending)})
        data = {"status": result.status, "text": result.text, "total_tokens": result.usage.total_tokens}
        self._log.append(None, "result", data, result)

    def _finish(self, result: Any) -> Any:
        if result is None:  # closed early: the run stops
            self._cancel()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_CLIENT_JOIN_S)
        return result


#: How long closing a ``Client`` stream waits for its run's thread to end.
_CLIENT_JOIN_S = 5.0
