"""HTTP to the model endpoint: one owner of a whole exchange, from connect to last byte.

An exchange (connect, send, read the entire body) runs inside the run's cancellation
scope, the turn gate and a total deadline; every failure of the HTTP stack leaves this
module as an ``LLMError`` naming the endpoint and the cause, with credentials shown as
``***``. This is the only module that imports ``requests``. Work that does not change
between calls (the URL, headers, proxy and CA settings) is resolved once, and the
connections of the library's own sessions are shared by every transport to the same
endpoint, so a fresh client or runtime per request reuses kept-alive connections.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import json
import logging
import queue
import random
import socket
import ssl
import threading
import time
import types
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import requests
import urllib3.exceptions
import urllib3.response
import urllib3.util.connection
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ._cancel import CancelScope, TurnGate, current_scope, set_current_scope
from ._http1 import MalformedReply, Reply, ReplyReader
from .errors import Cancelled, LLMError, LLMTimeout

log = logging.getLogger("toolnexus")

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
EXCERPT_CHARS = 1000  # enough for a provider's whole error object, cause included
_MESSAGE_EXCERPT = 300
_READ_CHUNK = 65536
_PREPARED_KEPT = 64  # endpoints whose prepared request is remembered
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # one encoder for every body
# Shorter than the idle timeout of common servers (gunicorn 2 s; uvicorn, Node, Apache 5 s).
_PROBE_IDLE_S = 1.0


class _TrackedConnections:
    """Pool mixin: hand every connection a request uses to the calling thread's scope."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        scope = current_scope()
        if scope is not None:
            scope.attach(conn)
        return conn


class _TrackedHTTPPool(_TrackedConnections, HTTPConnectionPool):
    pass


class _TrackedHTTPSPool(_TrackedConnections, HTTPSConnectionPool):
    pass


_TRACKED_POOLS = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}
_stock_send: list[Any] = []  # requests' own HTTPAdapter.send, once seen unpatched


def _adapter_send_is_stock() -> bool:
    """Whether ``HTTPAdapter.send`` is requests' own, not replaced by a mocking or
    instrumentation library. This module may first be imported while one is active (a
    test's ``responses`` mock), so the original is recognised by what it is, not by the
    value seen at import."""
    send = HTTPAdapter.send
    if not _stock_send:
        if type(send) is not types.FunctionType or send.__module__ != "requests.adapters" or send.__qualname__ != "HTTPAdapter.send":
            return False
        _stock_send.append(send)
    return send is _stock_send[0]


_URLLIB3_2 = int(getattr(urllib3, "__version__", "1").split(".")[0]) >= 2  # its connections take response options


class CancellableAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` whose connections a ``CancelScope`` can close mid-request."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _TRACKED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _TRACKED_POOLS
        return manager

    def build_response(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
        """The plain response: this adapter belongs to a session that keeps no cookies, so
        the per-reply cookie-jar work of the base class is skipped."""
        response = requests.Response()
        response.status_code = resp.status
        response.headers = CaseInsensitiveDict(resp.headers)
        response.raw = resp
        response.reason = resp.reason
        response.url = req.url  # type: ignore[assignment]
        response.request = req
        response.connection = self
        return response


def cancellable_session(pool_maxsize: int = 10) -> requests.Session:
    """A session of the library's own whose connections the calling thread's
    ``CancelScope`` can close mid-request (used for the HTTP of MCP servers)."""
    session = requests.Session()
    adapter = CancellableAdapter(pool_connections=2, pool_maxsize=pool_maxsize)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def track_host_adapter(adapter: HTTPAdapter) -> None:
    """Make a host session's adapter hand its connections to the calling thread's scope.

    Only the pool classes change, each to a subclass of the one the adapter had (a
    tracked pool behaves exactly like it when no toolnexus call runs on the thread); idle
    pools created before are dropped so that every later connection is tracked.
    """
    if getattr(adapter, "_toolnexus_tracked", False):
        return
    _track_manager(adapter.poolmanager)
    for proxy_manager in adapter.proxy_manager.values():
        _track_manager(proxy_manager)
    plain = adapter.proxy_manager_for

    def proxy_manager_for(proxy: str, **proxy_kwargs: Any) -> Any:
        manager = plain(proxy, **proxy_kwargs)
        _track_manager(manager)
        return manager

    adapter.proxy_manager_for = proxy_manager_for  # type: ignore[method-assign]
    adapter._toolnexus_tracked = True  # type: ignore[attr-defined]


def _track_manager(manager: Any) -> None:
    classes = manager.pool_classes_by_scheme
    if all(issubclass(cls, _TrackedConnections) for cls in classes.values()):
        return
    manager.pool_classes_by_scheme = {scheme: _tracked(cls) for scheme, cls in classes.items()}
    manager.clear()


_TRACKED_SUBCLASSES: dict[type, type] = {HTTPConnectionPool: _TrackedHTTPPool, HTTPSConnectionPool: _TrackedHTTPSPool}
_TRACKED_LOCK = threading.Lock()  # guards: _TRACKED_SUBCLASSES


def _tracked(cls: type) -> type:
    if issubclass(cls, _TrackedConnections):
        return cls
    with _TRACKED_LOCK:
        found = _TRACKED_SUBCLASSES.get(cls)
        if found is None:
            found = _TRACKED_SUBCLASSES[cls] = type(f"Tracked{cls.__name__}", (_TrackedConnections, cls), {})
        return found


class _SharedSessions:
    """The library's own sessions, one per endpoint origin and pool size, leased by
    transports (and by whoever keeps connections between runs, such as a level-1 agent).
    When the last lease goes, the session and its connections close.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _sessions, _leases, _prepared
        self._sessions: dict[tuple[str, int], requests.Session] = {}
        self._leases: dict[tuple[str, int], int] = {}
        self._pools: dict[tuple[str, int], list[Any]] = {}  # connection pools used directly
        self._pool_of: dict[tuple[tuple[str, int], str], Any] = {}  # (lease key, URL) -> its pool
        self._prepared: dict[tuple[Any, ...], _Prepared] = {}

    def lease(self, url: str, pool_size: int) -> tuple[tuple[str, int], requests.Session]:
        key = (_origin(url), max(32, pool_size))
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = requests.Session()
                adapter = CancellableAdapter(pool_connections=4, pool_maxsize=key[1])
                session.mount("http://", adapter)
                session.mount("https://", adapter)
            self._leases[key] = self._leases.get(key, 0) + 1
            return key, session

    def direct_pool(self, key: tuple[str, int], adapter: HTTPAdapter, prepared: _Prepared) -> Any:
        """The adapter's connection pool for the prepared URL, found once for every
        transport of the endpoint and remembered so that the last release closes its
        connections (urllib3 leaves that to garbage collection)."""
        with self._lock:
            pool = self._pool_of.get((key, prepared.url))
        if pool is not None and pool.pool is not None:  # not closed (released, or evicted by the adapter)
            return pool
        send_kwargs = prepared.send_kwargs
        pool = adapter.get_connection_with_tls_context(prepared.template, send_kwargs["verify"], send_kwargs["proxies"], send_kwargs["cert"])
        with self._lock:
            self._pool_of[(key, prepared.url)] = pool
            known = self._pools.setdefault(key, [])
            if not any(each is pool for each in known):
                known.append(pool)
        return pool

    def lease_again(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._leases[key] += 1

    def prepared(self, key: tuple[str, int], session: requests.Session, url: str, headers: dict[str, str]) -> _Prepared:
        """The request template and send options for ``url``, worked out once per process
        (they hold no connection, so they outlive the session)."""
        memo = (key, url, tuple(headers.items()))
        with self._lock:
            found = self._prepared.get(memo)
        if found is None:
            found = _prepare(session, url, headers, owned=True)
            with self._lock:
                if len(self._prepared) >= _PREPARED_KEPT:
                    self._prepared.clear()
                self._prepared[memo] = found
        return found

    def release(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._leases[key] -= 1
            if self._leases[key] > 0:
                return
            del self._leases[key]
            session = self._sessions.pop(key)
            pools = self._pools.pop(key, [])
            for each in [each for each in self._pool_of if each[0] == key]:
                del self._pool_of[each]
        for pool in pools:
            pool.close()
        session.close()


class _Prepared:
    """What every POST to one URL shares: the prepared template (session headers and auth
    merged), the environment's proxy / CA / cert settings, and for a direct exchange (the
    library's own session, no proxy) its request line and headers as bytes."""

    __slots__ = ("url", "template", "send_kwargs", "direct_head")

    def __init__(self, url: str, template: requests.PreparedRequest, send_kwargs: dict[str, Any], direct_head: bytes | None) -> None:
        self.url = url
        self.template = template
        self.send_kwargs = send_kwargs
        self.direct_head = direct_head


def _prepare(session: requests.Session, url: str, headers: dict[str, str], *, owned: bool) -> _Prepared:
    """The per-URL work that does not change between calls (see ``_Prepared``)."""
    template = session.prepare_request(requests.Request("POST", url, headers={"Content-Type": "application/json", **headers}))
    settings = session.merge_environment_settings(url, {}, None, None, None)
    send_kwargs: dict[str, Any] = {
        "proxies": settings["proxies"],
        # A CA bundle only matters for https; for http it would cost a stat per call.
        "verify": settings["verify"] if url.lower().startswith("https:") else True,
        "cert": settings["cert"],
        "stream": True,  # the body is read by the transport, inside the scope, gate and deadline
    }
    if not owned:
        send_kwargs["allow_redirects"] = False
        return _Prepared(url, template, send_kwargs, None)
    direct = _URLLIB3_2 and not requests.utils.select_proxy(url, send_kwargs["proxies"])
    return _Prepared(url, template, send_kwargs, _request_head(url, template) if direct else None)


_SHARED = _SharedSessions()


@functools.lru_cache(maxsize=_PREPARED_KEPT)
def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{parts.port or ''}"


@functools.lru_cache(maxsize=_PREPARED_KEPT)
def public_url(url: str) -> str:
    """``url`` without credentials, query or fragment: safe to put in a message."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as whole delay-seconds (ASCII digits only); anything else is ignored."""
    if value is None:
        return None
    value = value.strip()
    if value and value.isascii() and value.isdigit():
        return float(int(value))
    return None


class Transport:
    """POSTs JSON bodies to one endpoint, with retries; shared by every thread of a client.

    ``secrets`` are the credential values (the key, credential-like headers) that no
    message, excerpt or log line may show.
    """

    def __init__(
        self,
        *,
        url: str,
        headers: dict[str, str],
        secrets: tuple[str, ...] = (),
        session: requests.Session | None = None,
        retries: int = 2,
        retry_base_ms: int = 500,
        timeout_ms: int | None = None,
        max_retry_after_s: float = 60,
        on_error: Callable[[dict[str, Any]], str] | None = None,
        pool_size: int = 10,
    ) -> None:
        self.url = url
        self.public_url = public_url(url)
        self._secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        self._retries = max(0, retries)
        self._retry_base_ms = retry_base_ms
        self._timeout = timeout_ms / 1000 if timeout_ms else None
        self._max_retry_after = max_retry_after_s
        self._on_error = on_error
        self._lease: tuple[str, int] | None = None
        if session is None:
            self._lease, session = _SHARED.lease(url, pool_size)
            self._prepared = _SHARED.prepared(self._lease, session, url, headers)
            # Our own session has no hooks, cookies or redirects to honour: its adapter is
            # called directly.
            self._adapter: HTTPAdapter | None = session.get_adapter(url)  # type: ignore[assignment]
        else:
            # A host's session goes through Session.send and keeps its hooks and cookies;
            # its settings are the host's to change, so they are read for each transport.
            adapter = session.get_adapter(url)
            if isinstance(adapter, HTTPAdapter):
                track_host_adapter(adapter)
            self._prepared = _prepare(session, url, headers, owned=False)
            self._adapter = None
        self._pool: Any = None
        self._session = session
        self._lock = threading.Lock()  # guards: _live, _closed
        self._live: set[CancelScope] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"Transport(url={self.public_url!r})"

    def close(self) -> None:
        """Cancel every exchange and backoff in flight; later calls fail at once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live = list(self._live)
        for scope in live:
            scope.cancel()
        if self._lease is not None:
            _SHARED.release(self._lease)

    def keep_connections(self) -> tuple[tuple[str, int], Callable[[], None]] | None:
        """A hold on this endpoint's pooled connections that outlives ``close``, so that
        the next client or runtime of the endpoint reuses them: ``(endpoint, release)``.
        None for a host's session (the host keeps its connections itself)."""
        with self._lock:
            key = self._lease if not self._closed else None
            if key is not None:
                _SHARED.lease_again(key)  # while this transport's own lease still holds
        if key is None:
            return None
        return key, functools.partial(_SHARED.release, key)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def post_json(
        self, body: dict[str, Any], *, scope: CancelScope | None = None, gate: TurnGate | None = None, while_waiting: Callable[[], None] | None = None
    ) -> Any:
        """POST ``body`` and return the decoded JSON reply, retrying what may be retried.
        ``while_waiting`` is called once, when a request is out and its reply awaited.

        Raises:
            LLMError: the endpoint failed past the retries (``LLMTimeout`` past the deadline).
            Cancelled: the scope was cancelled (interrupt, close) during any part of it.
        """
        payload = _ENCODE(body).encode("utf-8")
        scope = scope if scope is not None else CancelScope()
        waiting = [while_waiting] if while_waiting is not None else []
        with self._registered(scope):
            attempt = 0
            while True:
                try:
                    status, reply, error = self._attempt(payload, scope, gate, waiting)
                except LLMTimeout as timeout:
                    if self._on_error is not None:  # observed, but a timeout is never retried
                        self._ask_on_error(timeout, None, attempt, False)
                    raise
                if error is None:
                    return reply
                retryable = status is None or status in RETRYABLE_STATUSES
                if self._on_error is not None:
                    retryable = self._ask_on_error(error, status, attempt, retryable)
                if not retryable or attempt >= self._retries:
                    raise error
                delay = self._retry_delay(reply, attempt, error)
                log.info("model call to %s failed (%s); retry %d of %d in %.2fs", self.public_url, error.cause, attempt + 1, self._retries, delay)
                if scope.event.wait(delay):
                    raise Cancelled("interrupted while waiting to retry the model call")
                attempt += 1

    def _retry_delay(self, reply: Any, attempt: int, error: LLMError) -> float:
        """The wait before the next attempt; a ``Retry-After`` past ``max_retry_after_s``
        fails the call at once instead of sleeping."""
        headers = getattr(reply, "headers", None)
        asked = retry_after_seconds(headers.get("Retry-After")) if headers is not None else None
        if asked is not None and asked > self._max_retry_after:
            cause = f"{error.cause}, Retry-After {asked:.0f}s exceeds max_retry_after_s={self._max_retry_after:g}"
            raise self._error(cause, status=error.status, excerpt=error.body_excerpt)
        return _retry_delay(reply, attempt, self._retry_base_ms)

    @contextlib.contextmanager
    def _registered(self, scope: CancelScope) -> Iterator[None]:
        """Make the scope of one ``post_json`` call known, so that ``close`` reaches it."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._live.add(scope)
        if closed:
            raise LLMError(self._message("the client is closed"), status=None, url=self.public_url, cause="the client is closed")
        try:
            yield
        finally:
            with self._lock:
                self._live.discard(scope)

    def _ask_on_error(self, error: LLMError, status: int | None, attempt: int, retryable: bool) -> bool:
        info = {"error": str(error), "status": status, "attempt": attempt, "retryable": retryable}
        try:
            decision = self._on_error(info)  # type: ignore[misc]
        except Exception:
            log.debug("on_error raised; keeping the default decision", exc_info=True)
            return retryable
        if decision == "retry":
            return True
        if decision == "fail":
            return False
        return retryable

    def _attempt(self, payload: bytes, scope: CancelScope, gate: TurnGate | None, waiting: list[Callable[[], None]]) -> tuple[int | None, Any, LLMError | None]:
        """One exchange under the gate. Returns (status, reply-or-response, error); raises
        what is never retried (a timeout, a cancellation)."""
        if scope.cancelled:
            raise Cancelled("interrupted before the model call")
        if gate is None:
            return self._exchange(payload, scope, waiting)
        with gate.held(scope):
            return self._exchange(payload, scope, waiting)

    def _exchange(self, payload: bytes, scope: CancelScope, waiting: list[Callable[[], None]]) -> tuple[int | None, Any, LLMError | None]:
        deadline = time.monotonic() + self._timeout if self._timeout is not None else None
        direct = self._direct_pool()
        set_current_scope(scope)
        got: list[Any] = []  # the response, once its headers are in
        try:
            if direct is not None:
                content = self._exchange_direct(direct, payload, deadline, got, scope, waiting)
            else:
                got.append(self._send(payload, deadline).raw)
                content = _read_body(got[0], deadline, getattr(getattr(got[0], "_connection", None), "sock", None))
                got[0].release_conn()
        except Cancelled:
            raise
        except Exception as exc:  # the HTTP stack's failures all become LLMError here
            if scope.cancelled:
                raise Cancelled("interrupted during the model call") from exc
            cause = describe_failure(exc)
            if got and cause == "reply body cut short" and "chunked" in got[0].headers.get("Transfer-Encoding", "").lower():
                cause = "chunked reply body malformed or cut short"
            excerpt = self.scrub(f"{type(exc).__name__}: {exc}")[:EXCERPT_CHARS]
            if cause == "timed out" and self._timeout is not None:
                cause = f"timed out (timeout_ms={self._timeout * 1000:g}: no complete reply in time)"
                raise LLMTimeout(self._message(cause), status=None, body_excerpt=excerpt, url=self.public_url, cause=cause) from exc
            return None, None, self._error(cause, status=None, excerpt=excerpt)
        finally:
            set_current_scope(None)
            scope.detach_all()
        if scope.cancelled:
            raise Cancelled("interrupted during the model call")  # the reply came too late
        return self._decode(got[0], content)

    def _direct_pool(self) -> Any:
        """The connection pool to talk to directly, below ``HTTPAdapter.send``: for the
        library's own session with no proxy, unless ``HTTPAdapter.send`` has been replaced
        (by a mocking or instrumentation library), which is then honoured."""
        if self._prepared.direct_head is None or not _adapter_send_is_stock():
            return None
        pool = self._pool
        if pool is None or pool.pool is None:  # first use, or closed with its session
            assert self._adapter is not None and self._lease is not None
            pool = self._pool = _SHARED.direct_pool(self._lease, self._adapter, self._prepared)
        return pool

    def _exchange_direct(
        self, pool: Any, payload: bytes, deadline: float | None, got: list[Any], scope: CancelScope, waiting: list[Callable[[], None]]
    ) -> bytes:
        """One request on a pooled connection: what ``HTTPAdapter.send`` does, without the
        per-call work that never changes for this endpoint. The request line and headers
        are worked out once; each request goes out in one write, and the reply is read
        with the deadline bounding the whole of it.

        A kept-alive connection that turns out closed by the server (the request fails
        before a single byte of reply) is replaced by a new one, once, at once.
        """
        conn = _checkout(pool, fresh=False)
        while True:
            reused = conn.sock is not None
            reader: ReplyReader | None = None
            try:
                conn.timeout = _remaining(deadline)
                if conn.sock is None:
                    conn.connect()
                sock = conn.sock
                sock.settimeout(_remaining(deadline))
                sock.sendall(b"%sContent-Length: %d\r\n\r\n%s" % (self._prepared.direct_head, len(payload), payload))
                if waiting:
                    waiting.pop()()  # overlaps the model's work on the reply
                reader = ReplyReader(sock, deadline)
                reply = reader.head()
                got.append(reply)
                content = reader.body(reply)
                coding = reply.headers.get("Content-Encoding")
                if coding is not None and coding.lower() != "identity":
                    content = _decoded(reply, content)
            except (ConnectionResetError, BrokenPipeError):  # RemoteDisconnected is one
                conn.close()
                pool._put_conn(None)
                if reused and not got and not (reader is not None and reader.received) and not scope.cancelled:
                    conn = _checkout(pool, fresh=True)  # it was closed while it sat idle
                    continue
                raise
            except BaseException:
                conn.close()
                pool._put_conn(None)
                raise
            break
        if reply.will_close or reader.leftover:
            conn.close()
        conn.toolnexus_idle_since = time.monotonic()
        pool._put_conn(conn)
        return content

    def _send(self, payload: bytes, deadline: float | None) -> requests.Response:
        request = self._prepared.template.copy()
        request.body = payload
        request.headers["Content-Length"] = str(len(payload))
        timeout = _remaining(deadline)
        if self._adapter is not None:
            return self._adapter.send(request, timeout=timeout, **self._prepared.send_kwargs)
        return self._session.send(request, timeout=timeout, **self._prepared.send_kwargs)

    def _decode(self, raw: Any, content: bytes) -> tuple[int | None, Any, LLMError | None]:
        status: int = raw.status
        if 200 <= status < 300:
            try:
                return status, json.loads(content), None
            except ValueError:
                # 2xx is not in RETRYABLE_STATUSES: final unless on_error says otherwise.
                return status, None, self._error(f"HTTP {status} with a reply that is not JSON", status=status, excerpt=self.excerpt(content))
        return status, raw, self._error(f"HTTP {status}", status=status, excerpt=self.excerpt(content))

    def excerpt(self, content: bytes | str | None) -> str:
        text = content.decode("utf-8", "replace") if isinstance(content, bytes) else (content or "")
        return self.scrub(text[: EXCERPT_CHARS * 2])[:EXCERPT_CHARS]

    def _message(self, cause: str) -> str:
        return f"model call to {self.public_url} failed: {cause}"

    def _error(self, cause: str, *, status: int | None, excerpt: str) -> LLMError:
        message = self._message(cause)
        if excerpt and status is not None:
            message = f"{message}: {' '.join(excerpt.split())[:_MESSAGE_EXCERPT]}"
        return LLMError(message, status=status, body_excerpt=excerpt, url=self.public_url, cause=cause)


def _request_head(url: str, template: requests.PreparedRequest) -> bytes:
    """The request line and the fixed headers of every POST to ``url`` (the headers were
    checked when the template was prepared); ``Content-Length`` follows per request."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    default_port = 443 if parts.scheme.lower() == "https" else 80
    if parts.port and parts.port != default_port:
        host = f"{host}:{parts.port}"
    lines = [f"POST {template.path_url} HTTP/1.1", f"Host: {host}"]
    for name, value in template.headers.items():
        if name.lower() not in ("host", "content-length"):
            lines.append(f"{name}: {value.decode('latin-1') if isinstance(value, bytes) else value}")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


def _checkout(pool: Any, *, fresh: bool) -> Any:
    """A connection from ``pool`` for a direct exchange (a new one if ``fresh``), handed to
    the calling thread's scope. A kept-alive connection idle for ``_PROBE_IDLE_S`` or more
    is first checked for a close by the server, as ``HTTPConnectionPool._get_conn`` checks
    every one; one used moments ago is not, which spares a system call (and a hand-over of
    the interpreter lock) on every exchange of a busy client."""
    idle = pool.pool
    if idle is None:
        raise urllib3.exceptions.ClosedPoolError(pool, "Pool is closed.")
    conn = None
    if not fresh:
        try:
            conn = idle.get(block=False)
        except queue.Empty:
            pass
    if conn is not None and time.monotonic() - getattr(conn, "toolnexus_idle_since", 0.0) >= _PROBE_IDLE_S:
        if urllib3.util.connection.is_connection_dropped(conn):
            conn.close()
    if conn is None:
        conn = pool._new_conn()
    scope = current_scope()
    if scope is not None:
        scope.attach(conn)
    return conn


def _decoded(reply: Reply, content: bytes) -> bytes:
    """The body of a reply with a ``Content-Encoding`` (gzip, deflate...), decoded."""
    encoded = urllib3.response.HTTPResponse(
        body=io.BytesIO(content),
        headers=urllib3.HTTPHeaderDict(reply.headers.items()),
        status=reply.status,
        preload_content=False,
        decode_content=True,
        enforce_content_length=False,  # the framing was checked as the body was read
    )
    return bytes(encoded.read(decode_content=True))


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.001, deadline - time.monotonic())


def _read_body(raw: Any, deadline: float | None, sock: socket.socket | None) -> bytes:
    """The whole body of a urllib3 response, read decoded; with a deadline each read waits
    only for the time that is left, so a reply dripping one byte at a time cannot outlast it."""
    try:
        if deadline is None:
            return bytes(raw.read(decode_content=True))
        parts: list[bytes] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the reply body did not complete before the deadline")
            if sock is not None:
                sock.settimeout(remaining)
            chunk = raw.read1(_READ_CHUNK, decode_content=True)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
    except BaseException:
        raw.close()
        raw.release_conn()
        raise


_CAUSES: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    # Most specific first: urllib3's NewConnectionError is also a ConnectTimeoutError, and
    # InvalidChunkLength is also an IncompleteRead.
    ((ConnectionRefusedError,), "connection refused"),
    ((socket.gaierror,), "host name not resolved"),
    ((ssl.SSLError, requests.exceptions.SSLError, urllib3.exceptions.SSLError), "TLS handshake failed"),
    ((ConnectionResetError,), "connection reset by the server"),
    ((urllib3.exceptions.InvalidChunkLength, requests.exceptions.ChunkedEncodingError), "malformed chunked reply body"),
    ((http.client.IncompleteRead, urllib3.exceptions.IncompleteRead), "reply body cut short"),
    ((http.client.RemoteDisconnected,), "server closed the connection without a reply"),
    ((MalformedReply,), "malformed reply"),
    ((TimeoutError, requests.Timeout, urllib3.exceptions.TimeoutError), "timed out"),
)


def describe_failure(exc: BaseException) -> str:
    """A short cause for a failed exchange: ``connection refused``, ``timed out``..."""
    chain = list(_causes(exc))
    for kinds, cause in _CAUSES:
        if any(isinstance(each, kinds) for each in chain):
            return cause
    if isinstance(exc, (requests.ConnectionError, urllib3.exceptions.ProtocolError, OSError)):
        return "connection failed"
    return type(exc).__name__


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack = [exc]
    while stack:
        each = stack.pop(0)
        if id(each) in seen:
            continue
        seen.add(id(each))
        yield each
        linked = [each.__cause__, each.__context__, getattr(each, "reason", None), *each.args]
        stack.extend(item for item in linked if isinstance(item, BaseException))


def _retry_delay(reply: Any, attempt: int, base_ms: int) -> float:
    """``reply`` is the failed response (anything with ``headers``), or None."""
    headers = getattr(reply, "headers", None)
    if headers is not None:
        seconds = retry_after_seconds(headers.get("Retry-After"))
        if seconds is not None:
            return seconds
    backoff: float = base_ms * (2**attempt) / 1000
    return backoff + random.uniform(0, base_ms / 1000)
