"""Routes put in front of every transport of the process for a while: the seam for tests.

An override (what ``toolnexus.testing.ScriptedRoute`` and a ``cassette`` install) is a
function, installed for a block of code. While it is, every exchange of every transport of the process (built before or
during the block, on any thread, whatever route it was built with) is offered to the
newest override first; it answers the request itself (a scripted or recorded reply, as a
``CannedReply``) or sends it onward, to the next override and finally to the transport's
own route. With none installed an exchange costs one look at a tuple. A transport never
asks why an override is there: it only knows that requests may be routed elsewhere.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlsplit

from requests.structures import CaseInsensitiveDict

from ..cancel import CancelScope
from .base import OpenReply, Route, Waiting


class PassedThrough(Exception):
    """Carries an error past the exchange's HTTP error handling, unchanged: what a stream's
    consumer raised, or what an override raises on purpose (``CassetteMismatch``)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


class Outgoing:
    """One request as an override sees it. ``headers`` are the ones sent, credentials
    included: an override keeps them to itself. ``scrub(text)`` shows the transport's
    credentials in ``text`` as ``***``."""

    __slots__ = ("method", "url", "public_url", "path", "headers", "payload", "stream", "scrub")

    def __init__(
        self,
        url: str,
        public_url: str,
        headers: Mapping[str, str],
        payload: bytes,
        stream: bool,
        scrub: Callable[[str], str],
    ) -> None:
        self.method = "POST"
        self.url = url
        self.public_url = public_url
        self.path = urlsplit(url).path
        self.headers: Mapping[str, str] = headers
        self.payload = payload
        #: The request asks for an event stream (``"stream": true``).
        self.stream = stream
        self.scrub = scrub


#: An override: ``override(request, onward, deadline, scope, waiting)`` answers ``request``
#: itself (an ``OpenReply`` such as a ``CannedReply``) or returns ``onward.open(...)``.
RouteOverride = Callable[[Outgoing, Route, float | None, CancelScope, Waiting], OpenReply]

#: The installed overrides, oldest first; replaced whole (never changed in place), so an
#: exchange reads it without a lock.
ACTIVE: tuple[RouteOverride, ...] = ()
_CHANGING = threading.Lock()  # guards: ACTIVE (its replacement)


def install(override: RouteOverride) -> None:
    """Put ``override`` in front of every exchange (in front of those installed before)."""
    global ACTIVE
    with _CHANGING:
        ACTIVE = (*ACTIVE, override)


def remove(override: RouteOverride) -> None:
    """Take ``override`` away; exchanges already given to it finish with it."""
    global ACTIVE
    with _CHANGING:
        ACTIVE = tuple(each for each in ACTIVE if each != override)  # a bound method is made anew


class Onward:
    """The overrides below one (then the transport's own route), as a route."""

    name = "override"
    __slots__ = ("_overrides", "_route", "_request")

    def __init__(self, overrides: tuple[RouteOverride, ...], route: Route, request: Outgoing) -> None:
        self._overrides = overrides
        self._route = route
        self._request = request

    def open(
        self, payload: bytes, deadline: float | None, scope: CancelScope, waiting: Waiting, stream: bool
    ) -> OpenReply:
        if not self._overrides:
            return self._route.open(payload, deadline, scope, waiting, stream)
        newest, below = self._overrides[-1], self._overrides[:-1]
        return newest(self._request, Onward(below, self._route, self._request), deadline, scope, waiting)


class CannedReply:
    """A reply whole in memory (scripted or recorded), handed over in the pieces given:
    a streamed one piece by piece, as a server's would arrive. Like a socket's, a read
    fails once the scope is cancelled or the deadline has passed."""

    __slots__ = ("status", "headers", "_pieces", "_scope", "_deadline")

    def __init__(
        self,
        status: int,
        headers: Mapping[str, str],
        pieces: Sequence[bytes],
        scope: CancelScope,
        deadline: float | None,
    ) -> None:
        self.status = status
        self.headers: Any = CaseInsensitiveDict(headers)
        self._pieces = list(reversed(pieces))
        self._scope = scope
        self._deadline = deadline

    def read_all(self) -> bytes:
        self._check(self._deadline)
        pieces, self._pieces = self._pieces, []
        return b"".join(reversed(pieces))

    def read_some(self, until: float | None) -> bytes:
        self._check(until)
        return self._pieces.pop() if self._pieces else b""

    def _check(self, until: float | None) -> None:
        if self._scope.cancelled:
            raise ConnectionAbortedError("the exchange was cancelled")
        if until is not None and time.monotonic() >= until:
            raise TimeoutError("the reply did not complete before the deadline")

    def done(self) -> None:
        pass

    def abort(self, whole: bool = False) -> None:
        self._pieces = []
