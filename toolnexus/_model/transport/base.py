"""The shape of a route: how one request reaches the endpoint and its reply comes back.

A transport picks its route once, when it is built (``Transport.route`` names it; an
override of ``overrides`` may stand in front of it for a while). The exchange drives
every route the same way: ``open`` sends the request and returns once the reply's status
line and headers are in, the body is read whole (``read_all``) or piece by piece as it
arrives (``read_some``), and the reply ends with ``done`` (read to its end: the
connection goes back to its pool when it can be reused) or ``abort`` (anything else: the
connection is closed). Every read is bounded by the deadline it is given; a cancelled
scope shuts the connection down under any of them.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol

from ..cancel import CancelScope


#: At most one callable, run (and removed) by the route once the request is out.
Waiting = list[Callable[[], None]]


class OpenReply(Protocol):
    """A reply whose head is in; its body is still to be read."""

    #: The HTTP status.
    status: int
    #: The reply's headers (``get(name)`` ignores case).
    headers: Any

    def read_all(self) -> bytes:
        """The whole body, its content coding removed, by the exchange's deadline."""
        ...

    def read_some(self, until: float | None) -> bytes:
        """The next piece of the body as soon as any of it arrives (``b""`` at its end),
        waiting no later than ``until`` (a ``time.monotonic()`` value)."""
        ...

    def done(self) -> None:
        """The body was read to its end: keep the connection if it can be reused."""
        ...

    def abort(self, whole: bool = False) -> None:
        """Give the connection up (a failure, or a reply left unread). Idempotent.
        ``whole``: the reply was read to its end marker, though not to the end of its
        body (a server that keeps a finished stream open)."""
        ...


class Route(Protocol):
    """One way of sending a request: ``"direct"`` or ``"requests"``."""

    name: str

    def open(
        self, payload: bytes, deadline: float | None, scope: CancelScope, waiting: Waiting, stream: bool
    ) -> OpenReply:
        """Send ``payload`` and return once the reply's head is in. ``waiting`` holds at
        most one callable, run (and removed) once the request is out, if the route can;
        ``stream`` says the reply is asked for as an event stream (read with
        ``read_some``)."""
        ...


def remaining(deadline: float | None) -> float | None:
    """The time left before ``deadline``, for a socket timeout (never 0: that would mean
    non-blocking)."""
    return None if deadline is None else max(0.001, deadline - time.monotonic())


READ_SIZE = 65536
