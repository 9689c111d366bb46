"""The ``requests`` route: through ``Session.send`` (a host's session, with its hooks,
cookies and adapters) or ``HTTPAdapter.send`` (the library's own session when a proxy
applies).

The body is read inside the exchange, each read waiting only for the time left; the
status line and headers are read inside urllib3, where no single read can be bounded that
way, so with a deadline a timer shuts the exchange's connection down when it passes.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import requests

from ..cancel import CancelScope
from .base import READ_SIZE, Waiting, remaining
from .failures import check_framing
from .sessions import Prepared


class _Deadline:
    """Shuts the scope's connections down when ``deadline`` passes, unless stopped first."""

    __slots__ = ("_timer",)

    def __init__(self, deadline: float, scope: CancelScope) -> None:
        self._timer: threading.Timer | None = threading.Timer(max(0.0, deadline - time.monotonic()), scope.sever)
        self._timer.name = "toolnexus-deadline"
        self._timer.daemon = True
        self._timer.start()

    def stop(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            timer.join()


class RequestsReply:
    """A reply read from a urllib3 response."""

    __slots__ = ("status", "headers", "_raw", "_sock", "_deadline", "_watch")

    def __init__(self, raw: Any, deadline: float | None, watch: _Deadline | None) -> None:
        self.status: int = raw.status
        self.headers = raw.headers
        self._raw = raw
        self._sock: socket.socket | None = getattr(getattr(raw, "_connection", None), "sock", None)
        self._deadline = deadline
        self._watch = watch

    def read_all(self) -> bytes:
        raw = self._raw
        if self._deadline is None:
            return bytes(raw.read(decode_content=True))
        parts: list[bytes] = []
        while True:
            chunk = self.read_some(self._deadline)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)

    def read_some(self, until: float | None) -> bytes:
        if until is not None:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError("the reply body did not complete before the deadline")
            if self._sock is not None:
                self._sock.settimeout(left)
        return bytes(self._raw.read1(READ_SIZE, decode_content=True))

    def done(self) -> None:
        self._stop()
        self._raw.release_conn()

    def abort(self, whole: bool = False) -> None:
        self._stop()
        self._raw.close()
        self._raw.release_conn()

    def _stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()


class RequestsRoute:
    """Requests through ``target.send``: a host's ``Session`` or the library's adapter."""

    name = "requests"

    def __init__(self, target: Any, prepared: Prepared) -> None:
        self._target = target
        self._prepared = prepared

    def open(
        self, payload: bytes, deadline: float | None, scope: CancelScope, waiting: Waiting, stream: bool
    ) -> RequestsReply:
        request = self._prepared.template.copy()
        request.body = payload
        request.headers["Content-Length"] = str(len(payload))
        watch = _Deadline(deadline, scope) if deadline is not None else None
        response: requests.Response | None = None
        try:
            send_kwargs = self._prepared.send_kwargs
            sent: requests.Response = self._target.send(request, timeout=remaining(deadline), **send_kwargs)
            response = sent
            check_framing(response.raw.headers)
            return RequestsReply(response.raw, deadline, watch)
        except BaseException:
            if watch is not None:
                watch.stop()
            if response is not None:
                response.raw.close()
                response.raw.release_conn()
            raise
