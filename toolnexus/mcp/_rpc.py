"""One JSON-RPC 2.0 session with an MCP server, whatever carries its messages.

Any number of threads call ``request`` at once: each call gets the next integer id and
its own ``Pending`` slot, and whoever receives a message (the reader thread of a stdio
server, the thread reading an HTTP reply) hands it to ``deliver``, which routes a reply to
the slot of its id, answers a request of the server (``ping`` with ``{}``, an
``elicitation/create`` through the ``asker``, anything else with error -32601) and passes
notifications on. A caller waits on its slot's event, which the reply, the session's
failure, or an interrupt of the run sets; on a timeout or an interrupt the server is sent
``notifications/cancelled`` for that id.

A server's question (a legacy ``elicitation/create`` during a call) may wait for a person,
so the reader thread never answers it: it is handed to the oldest ``tools/call`` waiting,
whose calling thread answers it; read on a calling thread (an HTTP reply), it is answered
there. A long-lived request (``subscriptions/listen``) is a *stream*: its id is kept apart
and its end, if the server sends one, goes to the callback it was opened with.
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
_ELICIT = "elicitation/create"
#: Questions of the server held for one call at most; more are declined at once.
MAX_ASKS = 8
_DECLINE = {"action": "decline"}
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
    """The server answered with a JSON-RPC error (its ``data`` kept)."""

    def __init__(self, message: str, code: Any, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class Gone(Failed):
    """The connection ended (the server exited, the HTTP endpoint failed, a close)."""


class HttpStatus(Gone):
    """An HTTP reply that was no JSON-RPC answer to the request (a 4xx or 5xx status, or a
    success without a reply): the endpoint was reached, so the server may speak another era."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


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
    """One request in flight: set ``done`` once ``reply`` or ``failure`` is in, or a
    question of the server is in ``asks`` for its caller to answer."""

    __slots__ = ("id", "method", "params", "done", "reply", "failure", "asks")

    def __init__(self, request_id: int, method: str, params: Any) -> None:
        self.id = request_id
        self.method = method
        self.params = params
        self.done = threading.Event()
        self.reply: dict[str, Any] | None = None
        self.failure: Failed | None = None
        self.asks: list[tuple[Any, Any]] = []  # (the server's request id, its params)


#: Answers a server's ``elicitation/create`` (its params, the call it came during) with the
#: result to send; may block (a person deciding).
Asker = Callable[[Any, Optional[Pending]], dict[str, Any]]
#: Told how a stream ended: the server's closing reply, or None when it was cut.
StreamEnd = Callable[[Optional[dict[str, Any]]], None]


class Wire(Protocol):
    """What carries messages: a stdio pipe or Streamable HTTP."""

    def send(self, message: dict[str, Any], pending: Pending | None, deadline: float, cancelled: Cancel) -> bool:
        """Send one message, giving up at ``deadline`` or when ``cancelled`` is set. For a
        request (``pending`` given), an HTTP wire also reads the reply stream, handing each
        message to the session, until the reply is in. Returns False when the message was
        given up before any of it went out. Raises ``Failed`` when the exchange failed
        (``Gone`` when nothing can be sent any more)."""
        ...

    def listen(self, message: dict[str, Any], on_end: StreamEnd) -> Callable[[], None]:
        """Send a request that stays open (its id from ``Session.open_stream``); returns what
        stops it."""
        ...

    def close(self) -> None: ...


class Session:
    """Ids, the pending calls and the routing of one connection (see the module docs)."""

    def __init__(self, server: str, on_notification: Callable[[str, Any], None], asker: Asker | None = None) -> None:
        self.server = server
        self.wire: Wire | None = None  # set once the connection is made
        self._on_notification = on_notification
        self._asker = asker
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards: _pending, _failure, _streams, every Pending's reply/asks/done
        self._pending: dict[int, Pending] = {}
        self._streams: dict[int, StreamEnd] = {}
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
        cancels: bool = True,
    ) -> Any:
        """The result of ``method``; raises ``Failed`` (``TimedOut``, ``Interrupted``,
        ``RemoteError``, ``TooLarge``, ``Gone``...) when there is none. ``what`` names the
        call in messages; ``cancels=False`` sends the server no ``notifications/cancelled``
        when the request is given up (a probe, a handshake)."""
        what = what or method
        deadline = time.monotonic() + timeout
        pending = self._register(method, params)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": pending.id, "method": method}
        if params is not None:
            message["params"] = params
        sent = True
        try:
            assert self.wire is not None
            sent = self.wire.send(message, pending, deadline, cancelled)
            while sent and self._answer_asks(pending, deadline, cancelled):
                pass
        except Failed as exc:
            pending.failure = pending.failure or exc
        finally:
            with self._lock:
                self._pending.pop(pending.id, None)
                unasked, pending.asks = pending.asks, []
            for request_id, _ in unasked:
                self._send_answer(request_id, {"result": _DECLINE}, _ELICIT)
        if pending.reply is not None:
            return _result(self.server, what, pending.reply)
        if pending.failure is not None:
            raise pending.failure
        why = "interrupted" if cancelled is not None and cancelled.is_set() else f"timed out after {timeout:g} s"
        if sent and cancels:
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

    def _answer_asks(self, pending: Pending, deadline: float, cancelled: Cancel) -> bool:
        """Wait for the reply; True when the wait ended on questions of the server, which
        are answered here (the call then waits again)."""
        _wait(pending, deadline, cancelled)
        with self._lock:
            asks, pending.asks = pending.asks, []
            if not asks or time_left(deadline, cancelled) <= 0:
                pending.asks = asks  # declined once the call is given up
                return False
            if pending.reply is None and pending.failure is None:
                pending.done.clear()
        assert self._asker is not None
        for request_id, params in asks:
            self._send_answer(request_id, {"result": self._asked(params, pending)}, _ELICIT)
        return True

    def _asked(self, params: Any, pending: Pending | None) -> dict[str, Any]:
        assert self._asker is not None
        try:
            return self._asker(params, pending)
        except Exception:
            log.warning("mcp server %s: answering its question failed; it is declined", self.server, exc_info=True)
            return dict(_DECLINE)

    def open_stream(self, method: str, params: dict[str, Any], on_end: StreamEnd) -> dict[str, Any]:
        """A request that stays open (``subscriptions/listen``): the message to send, its id
        kept so that the server's closing reply goes to ``on_end``, not to a caller."""
        with self._lock:
            stream_id = next(self._ids)
            self._streams[stream_id] = on_end
        return {"jsonrpc": "2.0", "id": stream_id, "method": method, "params": params}

    def close_stream(self, stream_id: int) -> None:
        """Forget a stream (its end is no longer reported)."""
        with self._lock:
            self._streams.pop(stream_id, None)

    def _register(self, method: str, params: Any) -> Pending:
        with self._lock:
            pending = Pending(next(self._ids), method, params)
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
            streams, self._streams = list(self._streams.values()), {}
            for pending in waiting:
                pending.failure = failure
                pending.done.set()
        for on_end in streams:
            on_end(None)

    # --- what the server sends --------------------------------------------------------------

    def deliver(self, message: Any, via: Pending | None = None) -> None:
        """Route one decoded message (or a batch of them) from the server; ``via`` is the
        call whose reply carried it, read on that call's thread (HTTP)."""
        for each in message if isinstance(message, list) else (message,):
            self._route(each, via)

    def _route(self, message: Any, via: Pending | None) -> None:
        if not isinstance(message, dict):
            log.warning("mcp server %s sent a message that is not a JSON object; ignored", self.server)
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                self._answer(message["id"], method, message.get("params"), via)
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
        given = message.get("id")
        reply_id = given if isinstance(given, int) and not isinstance(given, bool) else None
        with self._lock:
            pending = self._pending.pop(reply_id, None) if reply_id is not None else None
            if pending is not None:
                pending.reply = message
                pending.done.set()
            on_end = self._streams.pop(reply_id, None) if reply_id is not None and pending is None else None
        if on_end is not None:
            on_end(message)
        elif pending is None:
            log.debug("mcp server %s: a reply to no call in flight (id %r), ignored", self.server, message.get("id"))

    def _answer(self, request_id: Any, method: str, params: Any, via: Pending | None) -> None:
        """The server's own requests: ``ping`` is answered, a question goes to the asker
        (see the module docs), anything else is refused."""
        if method == "ping":
            self._send_answer(request_id, {"result": {}}, method)
        elif method != _ELICIT:
            refusal = f"method not found: this client does not offer {method}"
            self._send_answer(request_id, {"error": {"code": METHOD_NOT_FOUND, "message": refusal}}, method)
        elif self._asker is None:
            self._send_answer(request_id, {"result": _DECLINE}, method)
        elif via is not None:  # read on the calling thread: it may wait for the answer
            self._send_answer(request_id, {"result": self._asked(params, via)}, method)
        elif not self._hand_over(request_id, params):
            self._send_answer(request_id, {"result": _DECLINE}, method)

    def _hand_over(self, request_id: Any, params: Any) -> bool:
        """Give a question to the oldest ``tools/call`` waiting; False when there is none
        (or it holds ``MAX_ASKS`` already)."""
        with self._lock:
            calls = [each for each in self._pending.values() if each.method == "tools/call"]
            if not calls or len(calls[0].asks) >= MAX_ASKS:
                return False
            calls[0].asks.append((request_id, params))
            calls[0].done.set()
            return True

    def _send_answer(self, request_id: Any, outcome: dict[str, Any], method: str) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, **outcome}
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
        raise RemoteError(f"mcp server {server}: {what} failed: error {code}: {text}", code, error.get("data"))
    return reply.get("result")
