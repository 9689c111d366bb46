"""The Streamable HTTP transport, over a ``requests`` session of the library's own.

Every message is a POST with ``Accept: application/json, text/event-stream``. A request's
reply is a JSON body or an event stream that carries it, maybe after requests and
notifications of the server's own, each handed to the JSON-RPC session as it arrives. The
``Mcp-Session-Id`` the server gives is sent back on every later message, as is the agreed
``MCP-Protocol-Version``; a 404 while holding a session id means the server forgot the
session (``Expired``). Closing DELETEs the session (a 405 means the server does not allow
that, which is fine). Each exchange runs on the calling thread in a ``CancelScope``, so an
interrupt or ``close`` shuts its connection at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

from .._cancel import CancelScope, set_current_scope
from .._sse import SSEDecoder
from ..transport import cancellable_session, describe_failure, public_url
from ._rpc import Expired, Gone, Pending, Session, woken_by

if TYPE_CHECKING:
    import requests

log = logging.getLogger("toolnexus")

_ACCEPT = "application/json, text/event-stream"
_CONNECT_TIMEOUT_S = 10.0
_CLOSE_TIMEOUT_S = 5.0
_CHUNK = 65536
_EXCERPT = 300
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class HttpWire:
    """One Streamable HTTP session with a server (see the module docs)."""

    def __init__(self, session: Session, url: str, headers: dict[str, str] | None) -> None:
        self._rpc = session
        self._name = session.server
        self._url = url
        self._where = public_url(url)
        self._headers = {"Content-Type": "application/json", "Accept": _ACCEPT, **(headers or {})}
        self._http: requests.Session = cancellable_session()
        self._lock = threading.Lock()  # guards: session_id, protocol_version, _live, _closed
        self.session_id: str | None = None
        #: The agreed protocol version, sent on every message once the handshake is done.
        self.protocol_version: str | None = None
        self._live: set[CancelScope] = set()
        self._closed = False

    def send(self, message: dict[str, Any], pending: Pending | None, deadline: float, cancelled: threading.Event | None) -> None:
        scope = CancelScope()
        with self._registered(scope), woken_by(cancelled, scope.cancel):
            set_current_scope(scope)
            try:
                self._exchange(message, pending, deadline)
            except Gone:
                raise
            except Exception as exc:  # the HTTP stack's failures, translated here
                if scope.cancelled or time.monotonic() >= deadline:
                    return  # the waiting request reports the interrupt or the timeout
                raise Gone(f"mcp server {self._name}: POST {self._where} failed: {describe_failure(exc)}") from None
            finally:
                set_current_scope(None)
                scope.detach_all()

    def _exchange(self, message: dict[str, Any], pending: Pending | None, deadline: float) -> None:
        headers = dict(self._headers)
        with self._lock:
            sent_session = self.session_id
            if sent_session is not None:
                headers["Mcp-Session-Id"] = sent_session
            if self.protocol_version is not None:
                headers["MCP-Protocol-Version"] = self.protocol_version
        remaining = max(0.001, deadline - time.monotonic())
        response = self._http.post(
            self._url, data=_ENCODE(message).encode("utf-8"), headers=headers, stream=True, timeout=(min(_CONNECT_TIMEOUT_S, remaining), remaining)
        )
        with contextlib.closing(response):
            given = response.headers.get("Mcp-Session-Id")
            if given:
                with self._lock:
                    self.session_id = self.session_id or given
            status = response.status_code
            if status == 404 and sent_session is not None:
                raise Expired(f"mcp server {self._name}: the server no longer knows session {sent_session} (HTTP 404)")
            kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if kind == "text/event-stream" and status < 300:
                self._read_stream(response, pending, deadline)
            else:
                self._read_body(response, status, kind, pending, deadline)

    def _read_body(self, response: requests.Response, status: int, kind: str, pending: Pending | None, deadline: float) -> None:
        content = b"".join(_chunks(response, deadline))
        delivered = False
        if kind == "application/json" and content.strip():
            try:
                self._rpc.deliver(json.loads(content))
                delivered = True
            except ValueError:
                pass
        if pending is None or pending.done.is_set():
            if status >= 400 and pending is None:
                log.debug("mcp server %s: a message was refused with HTTP %d", self._name, status)
            return
        if status >= 300:
            raise Gone(f"mcp server {self._name}: POST {self._where} failed: HTTP {status}{_excerpt(content)}")
        if status == 202 or not delivered:
            raise Gone(f"mcp server {self._name}: HTTP {status} from {self._where} without a reply to the request")

    def _read_stream(self, response: requests.Response, pending: Pending | None, deadline: float) -> None:
        decoder = SSEDecoder()
        for chunk in _chunks(response, deadline):
            for event in decoder.feed(chunk):
                if event.event != "message" or not event.data.strip():
                    continue
                try:
                    message = json.loads(event.data)
                except ValueError:
                    log.warning("mcp server %s sent an event that is not JSON; ignored: %.200r", self._name, event.data)
                    continue
                self._rpc.deliver(message)
            if pending is None or pending.done.is_set():
                return  # the reply is in: the rest of the stream is not waited for
        if time.monotonic() < deadline:
            raise Gone(f"mcp server {self._name}: the reply stream from {self._where} ended without a reply to the request")

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

    def close(self) -> None:
        """Cut the exchanges in flight, DELETE the session, close the connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live, session_id = list(self._live), self.session_id
        for scope in live:
            scope.cancel()
        if session_id is not None:
            headers = {**self._headers, "Mcp-Session-Id": session_id}
            if self.protocol_version is not None:
                headers["MCP-Protocol-Version"] = self.protocol_version
            try:
                self._http.delete(self._url, headers=headers, timeout=_CLOSE_TIMEOUT_S).close()  # 405: not allowed, fine
            except Exception as exc:
                log.debug("mcp server %s: DELETE of the session failed: %s", self._name, describe_failure(exc))
        self._http.close()


def _chunks(response: requests.Response, deadline: float) -> Iterator[bytes]:
    """The body as it arrives; each read waits no longer than the time that is left."""
    raw = response.raw
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        sock = getattr(getattr(raw, "_connection", None), "sock", None)
        if sock is not None:
            sock.settimeout(remaining)
        chunk = raw.read1(_CHUNK, decode_content=True) if hasattr(raw, "read1") else raw.read(_CHUNK, decode_content=True)
        if not chunk:
            return
        yield chunk


def _excerpt(content: bytes) -> str:
    text = " ".join(content.decode("utf-8", "replace").split())[:_EXCERPT]
    return f": {text}" if text else ""

