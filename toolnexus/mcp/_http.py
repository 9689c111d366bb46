"""The Streamable HTTP transport, over a ``requests`` session of the library's own.

Every message is a POST with ``Accept: application/json, text/event-stream``. A request's
reply is a JSON body or an event stream that carries it, maybe after requests and
notifications of the server's own, each handed to the JSON-RPC session as it arrives.

Two eras. Modern (2026-07-28, and the probe that asks for it): every POST names
``MCP-Protocol-Version``, ``Mcp-Method`` and (a tool call) ``Mcp-Name``; there is no
session, and no notification is posted (a request is cancelled by cutting its reply).
Legacy (after an ``initialize`` handshake): the ``Mcp-Session-Id`` the server gives with a
successful reply is sent back on every later message, as is the agreed
``MCP-Protocol-Version``; a 404 while holding a session id means the server forgot the
session (``Expired``). Closing DELETEs the session (a 405 means the server does not allow
that, which is fine). ``listen`` keeps one request open on a thread of its own, reading
the stream of notifications it answers with until it ends or the wire closes.

Bounds: each exchange runs on the calling thread in a ``CancelScope`` that an interrupt,
``close`` or the exchange's deadline shuts (``_body``), and its reply is read within
``max_message_bytes``. An answer to the server's own request, sent while a reply is read,
stays within that reply's deadline and scope. Redirects: a 307 or 308 to the same origin
(scheme, host and port) is followed with the same POST, up to ``MAX_REDIRECTS`` times;
any other redirect fails the exchange with ``Refused``, and nothing is sent to its target.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import SplitResult, urljoin, urlsplit

from .._model.cancel import CancelScope, set_current_scope
from .._model.transport import cancellable_session, describe_failure, public_url
from ._body import Body, severed_at
from . import _protocol as protocol
from ._rpc import Cancel, Expired, Failed, Gone, HttpStatus, Pending, Refused, Session, StreamEnd, decode, woken_by

if TYPE_CHECKING:
    import requests

log = logging.getLogger("toolnexus")

_ACCEPT = "application/json, text/event-stream"
_CONNECT_TIMEOUT_S = 10.0
_CLOSE_TIMEOUT_S = 5.0
#: How long a listen stream may stay silent before it is taken for dead (the SDK's server
#: sends a keep-alive every 15 s); the list is then listed afresh and the listen opened again.
LISTEN_SILENCE_S = 60.0
_EXCERPT = 300
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
#: Same-origin 307/308 redirects followed for one message.
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_DEFAULT_PORTS = {"http": 80, "https": 443}


class HttpWire:
    """One Streamable HTTP session with a server (see the module docs)."""

    def __init__(self, session: Session, url: str, headers: dict[str, str] | None, max_message_bytes: int) -> None:
        self._rpc = session
        self._name = session.server
        self._url = url
        self._where = public_url(url)
        self._limit = max_message_bytes
        self._headers = {"Content-Type": "application/json", "Accept": _ACCEPT, **(headers or {})}
        self._http: requests.Session = cancellable_session()
        self._lock = threading.Lock()  # guards: session_id, protocol_version, _live, _closed
        self.session_id: str | None = None
        #: The protocol version sent on every message: ``MODERN`` from the probe on, else
        #: the version agreed by the handshake (None during it).
        self.protocol_version: str | None = None
        self._live: set[CancelScope] = set()
        self._listening: list[threading.Thread] = []
        self._closed = False
        self._reading = threading.local()  # .bounds: (scope, deadline) of the reply this thread reads

    @property
    def modern(self) -> bool:
        with self._lock:
            return self.protocol_version == protocol.MODERN

    def send(self, message: dict[str, Any], pending: Pending | None, deadline: float, cancelled: Cancel) -> bool:
        if pending is None and "id" not in message and self.modern:
            return True  # no notification goes over modern HTTP: cutting a reply cancels its request
        outer = getattr(self._reading, "bounds", None)
        if outer is not None:  # sent while this thread reads a reply: within that reply's bounds
            scope, outer_deadline = outer
            self._guarded(message, pending, min(deadline, outer_deadline), scope)
            return True
        scope = CancelScope()
        with self._registered(scope), woken_by(cancelled, scope.cancel), severed_at(deadline, scope):
            set_current_scope(scope)
            self._reading.bounds = (scope, deadline)
            try:
                self._guarded(message, pending, deadline, scope)
            finally:
                self._reading.bounds = None
                set_current_scope(None)
                scope.detach_all()
        return True

    def _guarded(self, message: dict[str, Any], pending: Pending | None, deadline: float, scope: CancelScope) -> None:
        """One exchange, its failures translated: past the deadline or cancelled, none is
        raised (the waiting request reports the timeout or the interrupt)."""
        try:
            self._exchange(message, pending, deadline)
        except Exception as exc:
            if scope.cancelled or time.monotonic() >= deadline:
                return
            if isinstance(exc, Failed):
                raise
            raise Gone(f"mcp server {self._name}: POST {self._where} failed: {describe_failure(exc)}") from None

    def _message_headers(self, message: dict[str, Any]) -> tuple[dict[str, str], str | None]:
        """The headers of one POST, and the session id among them (legacy only)."""
        headers = dict(self._headers)
        with self._lock:
            version, sent_session = self.protocol_version, self.session_id
        if version == protocol.MODERN:
            method = message.get("method")
            headers[protocol.HEADER_VERSION] = version
            if isinstance(method, str):
                headers[protocol.HEADER_METHOD] = protocol.header_value(method)
                name = protocol.named(method, message.get("params"))
                if name is not None:
                    headers[protocol.HEADER_NAME] = protocol.header_value(name)
            return headers, None
        if sent_session is not None:
            headers["Mcp-Session-Id"] = sent_session
        if version is not None:
            headers[protocol.HEADER_VERSION] = version
        return headers, sent_session

    def _exchange(self, message: dict[str, Any], pending: Pending | None, deadline: float) -> None:
        headers, sent_session = self._message_headers(message)
        data = _ENCODE(message).encode("utf-8")
        what = f"the reply to {message.get('method') or 'a message'} (POST {self._where})"
        url = self._url
        for _ in range(MAX_REDIRECTS + 1):
            remaining = max(0.001, deadline - time.monotonic())
            timeouts = (min(_CONNECT_TIMEOUT_S, remaining), remaining)
            response = self._http.post(
                url, data=data, headers=headers, stream=True, timeout=timeouts, allow_redirects=False
            )
            with contextlib.closing(response):
                target = self._redirect(response, url)
                if target is None:
                    self._take(response, sent_session, pending, Body(response, deadline, self._limit, self._name, what))
                    return
            url = target
        raise Refused(f"mcp server {self._name}: POST {self._where} was redirected more than {MAX_REDIRECTS} times")

    def _redirect(self, response: requests.Response, url: str) -> str | None:
        """Where a 307/308 to the same origin points, None when the reply is no redirect.

        Raises:
            Refused: any other redirect (nothing is sent to its target).
        """
        status = response.status_code
        location = response.headers.get("Location")
        if status not in _REDIRECTS or not location:
            return None
        target = urljoin(url, location)
        if status in (307, 308) and same_origin(target, url):
            log.debug("mcp server %s: POST %s redirected (HTTP %d) to %s", self._name, self._where, status, target)
            return target
        why = (
            "a POST is re-sent only on a 307 or 308"
            if same_origin(target, url)
            else "another origin: nothing is sent there, give the URL itself if it is meant"
        )
        raise Refused(
            f"mcp server {self._name}: POST {self._where} answered HTTP {status}, a redirect to "
            f"{public_url(target)}; not followed ({why})"
        )

    def _take(self, response: requests.Response, sent_session: str | None, pending: Pending | None, body: Body) -> None:
        given = response.headers.get("Mcp-Session-Id")
        status = response.status_code
        if given and status < 300:  # a failed reply's session (a legacy server's answer to the probe) is no one's
            with self._lock:
                if self.protocol_version != protocol.MODERN:
                    self.session_id = self.session_id or given
        if status == 404 and sent_session is not None:
            raise Expired(f"mcp server {self._name}: the server no longer knows session {sent_session} (HTTP 404)")
        kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind == "text/event-stream" and status < 300:
            self._read_stream(body, pending)
        else:
            self._read_body(body, status, kind, pending)

    def _read_body(self, body: Body, status: int, kind: str, pending: Pending | None) -> None:
        content = body.whole()
        delivered = False
        if kind == "application/json" and content.strip():
            try:
                self._rpc.deliver(decode(content), pending)
                delivered = True
            except ValueError:
                pass
        if pending is None or pending.done.is_set():
            if status >= 400 and pending is None:
                log.debug("mcp server %s: a message was refused with HTTP %d", self._name, status)
            return
        if status >= 300:
            failed = f"POST {self._where} failed: HTTP {status}{_excerpt(content)}"
            raise HttpStatus(f"mcp server {self._name}: {failed}", status)
        if status == 202 or not delivered:
            unanswered = f"HTTP {status} from {self._where} without a reply to the request"
            raise HttpStatus(f"mcp server {self._name}: {unanswered}", status)

    def _read_stream(self, body: Body, pending: Pending | None) -> None:
        for event in body.events():
            if event.event != "message" or not event.data.strip():
                continue
            try:
                message = decode(event.data)
            except ValueError:
                log.warning("mcp server %s sent an event that is not JSON; ignored: %.200r", self._name, event.data)
                continue
            self._rpc.deliver(message, pending)
            if pending is None or pending.done.is_set():
                return  # the reply is in: the rest of the stream is not waited for
        if pending is not None and not pending.done.is_set():
            raise Gone(
                f"mcp server {self._name}: the reply stream from {self._where} ended without a reply to the request"
            )

    @contextlib.contextmanager
    def _registered(self, scope: CancelScope) -> Iterator[None]:
        with self._lock:
            closed = self._closed
            if not closed:
                self._live.add(scope)
        if closed:
            raise Gone(f"mcp server {self._name} is closed")
        try:
            yield
        finally:
            with self._lock:
                self._live.discard(scope)

    # --- a request that stays open ---------------------------------------------------------

    def listen(self, message: dict[str, Any], on_end: StreamEnd) -> Callable[[], None]:
        """Keep ``message`` (a modern ``subscriptions/listen``) open on a thread of its own,
        handing each message of its stream to the session; ``on_end(None)`` once the stream
        ends without the server's closing reply (cut, silent for ``LISTEN_SILENCE_S``,
        refused). Returns what stops it (``close`` stops it too)."""
        scope = CancelScope()

        def run() -> None:
            try:
                with self._registered(scope):
                    set_current_scope(scope)
                    self._listen(message, scope)
            except Exception as exc:
                if not scope.cancelled:
                    log.debug("mcp server %s: the listen stream ended: %s", self._name, describe_failure(exc))
            finally:
                set_current_scope(None)
                scope.detach_all()
                on_end(None)

        thread = threading.Thread(target=run, name="toolnexus-mcp-listen", daemon=True)
        with self._lock:
            self._listening = [each for each in self._listening if each.is_alive()] + [thread]
        thread.start()
        return scope.cancel

    def _listen(self, message: dict[str, Any], scope: CancelScope) -> None:
        headers, _ = self._message_headers(message)
        data = _ENCODE(message).encode("utf-8")
        timeouts = (_CONNECT_TIMEOUT_S, LISTEN_SILENCE_S)
        response = self._http.post(
            self._url, data=data, headers=headers, stream=True, timeout=timeouts, allow_redirects=False
        )
        with contextlib.closing(response):
            body = Body(response, None, self._limit, self._name, f"the listen stream (POST {self._where})")
            kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if response.status_code >= 300 or kind != "text/event-stream":
                self._read_body(body, response.status_code, kind, None)  # an error reply ends the stream
                return
            for event in body.events():
                if scope.cancelled:
                    return
                if event.event == "message" and event.data.strip():
                    try:
                        self._rpc.deliver(decode(event.data))
                    except ValueError:
                        log.warning("mcp server %s sent a listen event that is not JSON; ignored", self._name)

    def close(self) -> None:
        """Cut the exchanges in flight and the listen stream, DELETE the session, close the connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live, session_id, listening = list(self._live), self.session_id, list(self._listening)
        for scope in live:
            scope.cancel()
        for thread in listening:
            if thread is not threading.current_thread():
                thread.join(_CLOSE_TIMEOUT_S)
        if session_id is not None:
            self._delete(session_id)
        self._http.close()

    def _delete(self, session_id: str) -> None:
        """DELETE the session, within ``_CLOSE_TIMEOUT_S`` whatever the server does; its
        reply (a 405 means it does not allow that: fine) is not read."""
        headers = {**self._headers, "Mcp-Session-Id": session_id}
        if self.protocol_version is not None:
            headers["MCP-Protocol-Version"] = self.protocol_version
        scope = CancelScope()
        with severed_at(time.monotonic() + _CLOSE_TIMEOUT_S, scope):
            set_current_scope(scope)
            try:
                self._http.delete(
                    self._url, headers=headers, timeout=_CLOSE_TIMEOUT_S, stream=True, allow_redirects=False
                ).close()
            except Exception as exc:
                log.debug("mcp server %s: DELETE of the session failed: %s", self._name, describe_failure(exc))
            finally:
                set_current_scope(None)
                scope.detach_all()


def same_origin(url: str, other: str) -> bool:
    """Whether two URLs share scheme, host and port (a port left out is the scheme's)."""
    def origin(parts: SplitResult) -> tuple[str, str | None, int | None]:
        scheme = parts.scheme.lower()
        return scheme, parts.hostname, parts.port or _DEFAULT_PORTS.get(scheme)

    try:
        return origin(urlsplit(url)) == origin(urlsplit(other))
    except ValueError:  # a port that is not a number
        return False


def _excerpt(content: bytes | bytearray) -> str:
    text = " ".join(bytes(content[: _EXCERPT * 4]).decode("utf-8", "replace").split())[:_EXCERPT]
    return f": {text}" if text else ""
