"""Sessions, adapters and connection pools: what the routes send through.

The library's own sessions are shared by every transport to one endpoint (leased, and
closed with their connections when the last lease goes), so a fresh client or runtime per
request reuses kept-alive connections. Their adapters, and a host session's adapter once
it is tracked, hand every connection a request uses to the calling thread's
``CancelScope``, so that ``interrupt`` can close it mid-reply. What does not change
between calls to one URL (the prepared request, proxy and CA settings, the request head)
is worked out once.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Iterator
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ..cancel import current_scope

_PREPARED_KEPT = 64  # endpoints whose prepared request is remembered
_URLLIB3_2 = int(getattr(urllib3, "__version__", "1").split(".")[0]) >= 2  # the direct route needs its pools


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


class Prepared:
    """What every POST to one URL shares: the prepared template (session headers and auth
    merged), the environment's proxy / CA / cert settings, and for a direct exchange (the
    library's own session, no proxy) its request line and headers as bytes."""

    __slots__ = ("url", "template", "send_kwargs", "direct_head")

    def __init__(
        self, url: str, template: requests.PreparedRequest, send_kwargs: dict[str, Any], direct_head: bytes | None
    ) -> None:
        self.url = url
        self.template = template
        self.send_kwargs = send_kwargs
        self.direct_head = direct_head


def prepare(session: requests.Session, url: str, headers: dict[str, str], *, owned: bool) -> Prepared:
    """The per-URL work that does not change between calls (see ``Prepared``)."""
    template = session.prepare_request(
        requests.Request("POST", url, headers={"Content-Type": "application/json", **headers})
    )
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
        return Prepared(url, template, send_kwargs, None)
    direct = _URLLIB3_2 and not requests.utils.select_proxy(url, send_kwargs["proxies"])
    return Prepared(url, template, send_kwargs, _request_head(url, template) if direct else None)


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


LeaseKey = tuple[str, int]


class SharedSessions:
    """The library's own sessions, one per endpoint origin and pool size, leased by
    transports (and by whoever keeps connections between runs, such as a level-1 agent).
    When the last lease goes, the session and its connections close.
    """

    def __init__(self) -> None:
        # guards: _sessions, _leases, _pools, _pool_of, _prepared, _inside, _deferred.
        # Re-entrant: a dropped client's finaliser may run (on a garbage collection) while
        # this thread is inside one of these methods; its release is then deferred to the
        # end of that method (``_critical``), never run on half-changed tables.
        self._lock = threading.RLock()
        self._inside = False
        self._deferred: list[LeaseKey] = []
        self._sessions: dict[LeaseKey, requests.Session] = {}
        self._leases: dict[LeaseKey, int] = {}
        self._pools: dict[LeaseKey, list[Any]] = {}  # connection pools used directly
        self._pool_of: dict[tuple[LeaseKey, str], Any] = {}  # (lease key, URL) -> its pool
        self._prepared: dict[tuple[Any, ...], Prepared] = {}

    def lease(self, url: str, pool_size: int) -> tuple[LeaseKey, requests.Session]:
        key = (_origin(url), max(32, pool_size))
        with self._critical():
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = requests.Session()
                adapter = CancellableAdapter(pool_connections=4, pool_maxsize=key[1])
                session.mount("http://", adapter)
                session.mount("https://", adapter)
            self._leases[key] = self._leases.get(key, 0) + 1
            return key, session

    def direct_pool(self, key: LeaseKey, adapter: HTTPAdapter, prepared: Prepared) -> Any:
        """The adapter's connection pool for the prepared URL, found once for every
        transport of the endpoint and remembered so that the last release closes its
        connections (urllib3 leaves that to garbage collection)."""
        with self._critical():
            pool = self._pool_of.get((key, prepared.url))
        if pool is not None and pool.pool is not None:  # not closed (released, or evicted by the adapter)
            return pool
        send_kwargs = prepared.send_kwargs
        pool = adapter.get_connection_with_tls_context(
            prepared.template, send_kwargs["verify"], send_kwargs["proxies"], send_kwargs["cert"]
        )
        with self._critical():
            self._pool_of[(key, prepared.url)] = pool
            known = self._pools.setdefault(key, [])
            if not any(each is pool for each in known):
                known.append(pool)
        return pool

    def lease_again(self, key: LeaseKey) -> None:
        with self._critical():
            self._leases[key] += 1

    def prepared(self, key: LeaseKey, session: requests.Session, url: str, headers: dict[str, str]) -> Prepared:
        """The request template and send options for ``url``, worked out once per process
        (they hold no connection, so they outlive the session)."""
        memo = (key, url, tuple(headers.items()))
        with self._critical():
            found = self._prepared.get(memo)
        if found is None:
            found = prepare(session, url, headers, owned=True)
            with self._critical():
                if len(self._prepared) >= _PREPARED_KEPT:
                    self._prepared.clear()
                self._prepared[memo] = found
        return found

    @contextlib.contextmanager
    def _critical(self) -> Iterator[None]:
        deferred: list[LeaseKey] = []
        with self._lock:
            outer = not self._inside
            self._inside = True
            try:
                yield
            finally:
                if outer:
                    self._inside = False
                    deferred, self._deferred = self._deferred, []
        if outer:
            for key in deferred:
                self.release(key)

    def release(self, key: LeaseKey) -> None:
        with self._lock:
            if self._inside:  # a finaliser that interrupted this thread inside another call
                self._deferred.append(key)
                return
        with self._critical():
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


SHARED = SharedSessions()


@functools.lru_cache(maxsize=_PREPARED_KEPT)
def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{parts.port or ''}"
