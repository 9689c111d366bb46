"""One JSON-RPC 2.0 session with an MCP server, whatever carries its messages.

Any number of threads call ``request`` at once: each call gets the next integer id and
its own ``Pending`` slot, and whoever receives a message (the reader thread of a stdio
server, the thread reading an HTTP reply) hands it to ``deliver``, which routes a reply to
the slot of its id, answers a request of the server (``ping`` with ``{}``, anything else
with error -32601) and passes notifications on. A caller waits on its slot's event, which
the reply, the session's failure, or an interrupt of the run sets; on a timeout or an
interrupt the server is sent ``notifications/cancelled`` for that id.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import time
from typing import Any, Callable, Iterator, Optional, Protocol

log = logging.getLogger("toolnexus")

METHOD_NOT_FOUND = -32601
#: How often a wait looks at a cancel event that cannot wake it (a plain ``threading.Event``).
_PLAIN_EVENT_SLICE_S = 0.02
#: A run's ``ctx.cancelled`` (which can wake a waiter), a plain event, or nothing.
Cancel = Optional[threading.Event]


class Failed(Exception):
    """A request got no result: the message says why, for an error result or an ``MCPError``."""


class TimedOut(Failed):
    pass


class Interrupted(Failed):
    pass


class RemoteError(Failed):
    """The server answered with a JSON-RPC error."""

    def __init__(self, message: str, code: Any) -> None:
        super().__init__(message)
        self.code = code


class Gone(Failed):
    """The connection ended (the server exited, the HTTP endpoint failed, a close)."""


class Expired(Gone):
    """An HTTP session the server no longer knows (404): a new one may be started."""


class TooLarge(Failed):
    """A message from the server was longer than ``max_message_bytes``; no more of it was read."""

    def __init__(self, server: str, what: str, limit: int) -> None:
        super().__init__(
            f"mcp server {server}: {what} is longer than max_message_bytes ({limit} bytes); not read further"
        )


class Refused(Failed):
    """An exchange this client will not go on with (a redirect to another origin)."""


def decode(text: bytes | bytearray | str) -> Any:
    """A message's JSON text as a value.

    Raises:
        ValueError: it is not JSON, or nests too deeply for the decoder (which would
            otherwise raise ``RecursionError``).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None


class Pending:
    """One request in flight: set ``done`` once ``reply`` or ``failure`` is in."""

    __slots__ = ("id", "done", "reply", "failure")

    def __init__(self, request_id: int) -> None:
        self.id = request_id
        self.done = threading.Event()
        self.reply: dict[str, Any] | None = None
        self.failure: Failed | None = None


class Wire(Protocol):
    """What carries messages: a stdio pipe or Streamable HTTP."""

    def send(self, message: dict[str, Any], pending: Pending | None, deadline: float, cancelled: Cancel) -> bool:
        """Send one message, giving up at ``deadline`` or when ``cancelled`` is set. For a
        request (``pending`` given), an HTTP wire also reads the reply stream, handing each
        message to the session, until the reply is in. Returns False when the message was
        given up before any of it went out. Raises ``Failed`` when the exchange failed
        (``Gone`` when nothing can be sent any more)."""

    def close(self) -> None: ...


class Session:
    """Ids, the pending calls and the routing of one connection (see the module docs)."""

    def __init__(self, server: str, on_notification: Callable[[str, Any], None]) -> None:
        self.server = server
        self.wire: Wire | None = None  # set once the connection is made
        self._on_notification = on_notification
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards: _pending, _failure
        self._pending: dict[int, Pending] = {}
        self._failure: Gone | None = None

    @property
    def failure(self) -> Gone | None:
        with self._lock:
            return self._failure

    def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        cancelled: Cancel = None,
        what: str | None = None,
    ) -> Any:
        """The result of ``method``; raises ``Failed`` (``TimedOut``, ``Interrupted``,
        ``RemoteError``, ``TooLarge``, ``Gone``...) when there is none. ``what`` names the
        call in messages."""
        what = what or method
        deadline = time.monotonic() + timeout
        pending = self._register()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": pending.id, "method": method}
        if params is not None:
            message["params"] = params
        sent = True
        try:
            assert self.wire is not None
            sent = self.wire.send(message, pending, deadline, cancelled)
            if sent:
                _wait(pending, deadline, cancelled)
        except Failed as exc:
            pending.failure = pending.failure or exc
        finally:
            with self._lock:
                self._pending.pop(pending.id, None)
        if pending.reply is not None:
            return _result(self.server, what, pending.reply)
        if pending.failure is not None:
            raise pending.failure
        why = "interrupted" if cancelled is not None and cancelled.is_set() else f"timed out after {timeout:g} s"
        if sent and method != "initialize":  # the one request a client must not cancel
            self.notify("notifications/cancelled", {"requestId": pending.id, "reason": why})
        if why == "interrupted":
            raise Interrupted(f"mcp server {self.server}: {what} interrupted")
        raise TimedOut(f"mcp server {self.server}: {what} timed out after {timeout:g} s (timeout)")

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification; a connection that has gone is not an error here."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        try:
            assert self.wire is not None
            self.wire.send(message, None, time.monotonic() + _NOTIFY_TIMEOUT_S, None)
        except Failed as exc:
            log.debug("mcp server %s: %s not sent: %s", self.server, method, exc)

    def _register(self) -> Pending:
        with self._lock:
            pending = Pending(next(self._ids))
            if self._failure is not None:
                pending.failure = self._failure
                pending.done.set()
            else:
                self._pending[pending.id] = pending
        if pending.failure is not None:
            raise pending.failure
        return pending

    def fail_all(self, failure: Gone) -> None:
        """The connection has ended: every call in flight, and every later one, fails."""
        with self._lock:
            if self._failure is None:
                self._failure = failure
            waiting, self._pending = list(self._pending.values()), {}
        for pending in waiting:
            pending.failure = failure
            pending.done.set()

    # --- what the server sends --------------------------------------------------------------

    def deliver(self, message: Any) -> None:
        """Route one decoded message (or a batch of them) from the server."""
        for each in message if isinstance(message, list) else (message,):
            self._route(each)

    def _route(self, message: Any) -> None:
        if not isinstance(message, dict):
            log.warning("mcp server %s sent a message that is not a JSON object; ignored", self.server)
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                self._answer(message["id"], method)
            else:
                self._notified(method, message.get("params"))
            return
        if "result" in message or "error" in message:
            self._replied(message)
            return
        log.warning(
            "mcp server %s sent a message that is neither a request, a notification nor a reply; ignored", self.server
        )

    def _replied(self, message: dict[str, Any]) -> None:
        reply_id = message.get("id")
        with self._lock:
            pending = self._pending.pop(reply_id, None) if isinstance(reply_id, int) else None
        if pending is None:
            log.debug("mcp server %s: a reply to no call in flight (id %r), ignored", self.server, message.get("id"))
            return
        pending.reply = message
        pending.done.set()

    def _answer(self, request_id: Any, method: str) -> None:
        """The server's own requests: ``ping`` is answered, anything else refused."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "ping":
            reply["result"] = {}
        else:
            refusal = f"method not found: this client does not offer {method}"
            reply["error"] = {"code": METHOD_NOT_FOUND, "message": refusal}
        try:
            assert self.wire is not None
            self.wire.send(reply, None, time.monotonic() + _NOTIFY_TIMEOUT_S, None)
        except Failed as exc:
            log.debug("mcp server %s: the answer to its %s request was not sent: %s", self.server, method, exc)

    def _notified(self, method: str, params: Any) -> None:
        if method == "notifications/message" and isinstance(params, dict):
            log.info("mcp server %s [%s]: %s", self.server, params.get("level", "info"), params.get("data"))
        try:
            self._on_notification(method, params)
        except Exception:
            log.debug("mcp server %s: handling %s failed", self.server, method, exc_info=True)


_NOTIFY_TIMEOUT_S = 5.0


def _wait(pending: Pending, deadline: float, cancelled: Cancel) -> None:
    """Until the reply, a failure, the deadline or the cancel event, whichever is first."""
    with woken_by(cancelled, pending.done.set):
        while not pending.done.is_set():
            remaining = time_left(deadline, cancelled)
            if remaining <= 0:
                return
            pending.done.wait(remaining)


def time_left(deadline: float, cancelled: Cancel) -> float:
    """How long a wait may block before it looks again: 0 once the deadline has passed
    or ``cancelled`` is set; a short slice for a cancel event that cannot wake the waiter
    (a plain ``threading.Event``)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0 or (cancelled is not None and cancelled.is_set()):
        return 0.0
    if cancelled is not None and not hasattr(cancelled, "waking"):
        return min(remaining, _PLAIN_EVENT_SLICE_S)
    return remaining


@contextlib.contextmanager
def woken_by(cancelled: Cancel, wake: Callable[[], None]) -> Iterator[None]:
    """Call ``wake`` when ``cancelled`` is set during the block, if it is an event that can
    say so (``ctx.cancelled`` in a run); a plain ``threading.Event`` cannot."""
    waking = getattr(cancelled, "waking", None)
    if waking is None:
        yield
        return
    with waking(wake):
        yield


def _result(server: str, what: str, reply: dict[str, Any]) -> Any:
    if "error" in reply:
        error = reply["error"] if isinstance(reply["error"], dict) else {"message": str(reply["error"])}
        code, text = error.get("code"), error.get("message") or "no message"
        raise RemoteError(f"mcp server {server}: {what} failed: error {code}: {text}", code)
    return reply.get("result")
