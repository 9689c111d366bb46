"""Cancellation of a run, including the sockets of its in-flight model calls.

Kept apart from the transport so that code which only needs to cancel (the loop, the
handles) does not import the HTTP stack.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any, Callable, Iterator

_local = threading.local()


def current_scope() -> CancelScope | None:
    """The scope of the model call running on this thread, if any."""
    return getattr(_local, "scope", None)


def set_current_scope(scope: CancelScope | None) -> None:
    _local.scope = scope


class CancelEvent(threading.Event):
    """A ``threading.Event`` that also calls back whoever registered a waker on it.

    ``ctx.cancelled`` is one of these inside a run, so a tool blocked on something other
    than this event (a reply from another process) can be woken the moment the run is
    interrupted instead of looking at the event now and then.
    """

    def __init__(self) -> None:
        super().__init__()
        self._wakers_lock = threading.Lock()  # guards: _wakers; never held while a waker runs
        self._wakers: list[Callable[[], None]] = []

    def set(self) -> None:
        super().set()
        with self._wakers_lock:
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    @contextlib.contextmanager
    def waking(self, wake: Callable[[], None]) -> Iterator[None]:
        """Call ``wake`` when the event is set while the block runs (at once if it is set)."""
        with self._wakers_lock:
            self._wakers.append(wake)
        try:
            if self.is_set():
                wake()
            yield
        finally:
            with self._wakers_lock:
                self._wakers.remove(wake)


class CancelScope:
    """A cancellable run: an event plus the sockets of its in-flight model calls.

    ``cancel()`` sets the event, shuts those sockets down and wakes whatever registered a
    waker (a turn waiting for a gate slot), so a thread blocked on a stalled reply or a
    queue wakes at once instead of finishing in the background.
    """

    def __init__(self) -> None:
        self.event = CancelEvent()
        self._lock = threading.Lock()  # guards: _connections, _wakers; never held across I/O waits
        self._connections: list[Any] = []
        self._wakers: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()

    def cancel(self) -> None:
        with self._lock:
            self.event.set()
            connections = list(self._connections)
            wakers = list(self._wakers)
        for conn in connections:
            _shutdown(conn)
        for wake in wakers:
            wake()

    def attach(self, conn: Any) -> None:
        with self._lock:
            self._connections.append(conn)
            cancelled = self.event.is_set()
        if cancelled:
            _shutdown(conn)

    def sever(self) -> None:
        """Shut the sockets of the calls in flight down without cancelling the scope (their
        deadline passed: the call fails as timed out, the run goes on)."""
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            _shutdown(conn)

    def detach_all(self) -> None:
        with self._lock:
            self._connections.clear()

    @contextlib.contextmanager
    def waking(self, wake: Callable[[], None]) -> Iterator[None]:
        """Call ``wake`` if the scope is cancelled while the block runs."""
        with self._lock:
            self._wakers.append(wake)
        try:
            yield
        finally:
            with self._lock:
                self._wakers.remove(wake)


class TurnGate:
    """``max_concurrent_turns`` slots; a slot is held for a whole exchange, body included.

    Unlike a semaphore, a turn waiting here is released at once by its scope's
    ``cancel()``; it then raises ``Cancelled`` without having taken a slot.
    """

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._changed = threading.Condition(threading.Lock())  # guards: _free

    @contextlib.contextmanager
    def held(self, scope: CancelScope | None) -> Iterator[None]:
        from ..errors import Cancelled

        with self._changed:
            if self._free <= 0:
                with scope.waking(self._wake_all) if scope is not None else contextlib.nullcontext():
                    self._changed.wait_for(lambda: self._free > 0 or (scope is not None and scope.cancelled))
            if scope is not None and scope.cancelled:
                raise Cancelled("interrupted while waiting for a turn slot")
            self._free -= 1
        try:
            yield
        finally:
            with self._changed:
                self._free += 1
                self._changed.notify_all()

    def _wake_all(self) -> None:
        with self._changed:
            self._changed.notify_all()


def _shutdown(conn: Any) -> None:
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
