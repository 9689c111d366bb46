"""Cancellation of a run, including the sockets of its in-flight model calls.

Kept apart from the transport so that code which only needs to cancel (the loop, the
handles) does not import the HTTP stack.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

_local = threading.local()


def current_scope() -> CancelScope | None:
    """The scope of the model call running on this thread, if any."""
    return getattr(_local, "scope", None)


def set_current_scope(scope: CancelScope | None) -> None:
    _local.scope = scope


class CancelScope:
    """A cancellable run: an event plus the sockets of its in-flight model calls.

    ``cancel()`` sets the event and shuts those sockets down, so a thread blocked reading
    a stalled reply wakes at once instead of finishing in the background.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()  # guards: _connections; never held across I/O waits
        self._connections: list[Any] = []

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()

    def cancel(self) -> None:
        with self._lock:
            self.event.set()
            connections = list(self._connections)
        for conn in connections:
            _shutdown(conn)

    def attach(self, conn: Any) -> None:
        with self._lock:
            self._connections.append(conn)
            cancelled = self.event.is_set()
        if cancelled:
            _shutdown(conn)

    def detach_all(self) -> None:
        with self._lock:
            self._connections.clear()


def _shutdown(conn: Any) -> None:
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
