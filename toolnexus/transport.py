"""HTTP to the model endpoint: the session, retries, backoff, and prompt cancellation.

This is the only module that imports ``requests``; every ``requests`` failure is turned
into an ``LLMError`` here. Work that does not change between calls (the URL, headers, the
environment's proxy and CA settings) is resolved once, when the transport is built.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from typing import Any, Callable, ContextManager

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ._cancel import CancelScope, current_scope, set_current_scope
from .errors import Cancelled, LLMError, LLMTimeout

log = logging.getLogger("toolnexus")

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
_EXCERPT = 300


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


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as whole delay-seconds (ASCII digits only); anything else is ignored."""
    if value is None:
        return None
    value = value.strip()
    if value and value.isascii() and value.isdigit():
        return float(int(value))
    return None


class Transport:
    """POSTs JSON bodies to one endpoint, with retries; shared by every thread of a client."""

    def __init__(
        self,
        *,
        url: str,
        headers: dict[str, str],
        secret: str | None = None,
        session: requests.Session | None = None,
        retries: int = 2,
        retry_base_ms: int = 500,
        timeout_ms: int | None = None,
        on_error: Callable[[dict[str, Any]], str] | None = None,
        pool_size: int = 10,
    ) -> None:
        self.url = url
        self._secret = secret
        self._retries = max(0, retries)
        self._retry_base_ms = retry_base_ms
        self._timeout = timeout_ms / 1000 if timeout_ms else None
        self._on_error = on_error
        self._owns_session = session is None
        if session is None:
            session = requests.Session()
            adapter = CancellableAdapter(pool_connections=4, pool_maxsize=max(10, pool_size))
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        self._session = session
        # Our own session has no hooks, cookies or redirects to honour, so its adapter is
        # called directly; a host's session goes through Session.send and keeps all three.
        self._adapter = session.get_adapter(url) if self._owns_session else None
        all_headers = {"Content-Type": "application/json", **headers}
        # Resolved once: the prepared template (session headers and auth merged) and the
        # environment's proxy / CA / cert settings for this URL.
        self._template = session.prepare_request(requests.Request("POST", url, headers=all_headers))
        settings = session.merge_environment_settings(url, {}, None, None, None)
        self._send_kwargs: dict[str, Any] = {
            "proxies": settings["proxies"],
            # A CA bundle only matters for https; for http it would cost a stat per call.
            "verify": settings["verify"] if url.lower().startswith("https:") else True,
            "cert": settings["cert"],
            "stream": False,
            "timeout": self._timeout,
        }
        if not self._owns_session:
            self._send_kwargs["allow_redirects"] = False

    def __repr__(self) -> str:
        return f"Transport(url={self.url!r})"

    def close(self) -> None:
        if self._owns_session:
            self._session.close()

    def post_json(
        self,
        body: dict[str, Any],
        *,
        scope: CancelScope | None = None,
        gate: ContextManager[Any] | None = None,
    ) -> Any:
        """POST ``body`` and return the decoded JSON reply, retrying what may be retried."""
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        attempt = 0
        while True:
            try:
                status, reply, error = self._attempt(payload, scope, gate)
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
            delay = _retry_delay(reply, attempt, self._retry_base_ms)
            log.debug("model call failed (status %s), retry %d in %.3fs", status, attempt + 1, delay)
            if scope is not None:
                if scope.event.wait(delay):
                    raise Cancelled("interrupted while waiting to retry the model call")
            else:
                threading.Event().wait(delay)  # backoff delay, not a wait for state
            attempt += 1

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

    def _attempt(
        self, payload: bytes, scope: CancelScope | None, gate: ContextManager[Any] | None
    ) -> tuple[int | None, Any, LLMError | None]:
        """One POST. Returns (status, reply-or-response, error); raises what is never retried."""
        prepared = self._template.copy()
        prepared.body = payload
        prepared.headers["Content-Length"] = str(len(payload))
        if scope is not None and scope.cancelled:
            raise Cancelled("interrupted before the model call")
        set_current_scope(scope)
        try:
            if gate is not None:
                with gate:
                    response = self._send(prepared)
            else:
                response = self._send(prepared)
        except requests.Timeout as exc:
            limit = f" after {self._timeout}s" if self._timeout else ""
            raise LLMTimeout(f"model call timed out{limit}", status=None) from exc
        except requests.RequestException as exc:
            if scope is not None and scope.cancelled:
                raise Cancelled("interrupted during the model call") from exc
            message = self._scrub(f"connection to the model endpoint failed: {type(exc).__name__}")
            return None, None, LLMError(message, status=None, body_excerpt=self._scrub(str(exc))[:_EXCERPT])
        finally:
            set_current_scope(None)
            if scope is not None:
                scope.detach_all()
        if scope is not None and scope.cancelled:
            raise Cancelled("interrupted during the model call")
        return self._decode(response)

    def _send(self, prepared: requests.PreparedRequest) -> requests.Response:
        if self._adapter is not None:
            return self._adapter.send(prepared, **self._send_kwargs)
        return self._session.send(prepared, **self._send_kwargs)

    def _decode(self, response: requests.Response) -> tuple[int | None, Any, LLMError | None]:
        status = response.status_code
        content = response.content
        if 200 <= status < 300:
            try:
                return status, json.loads(content), None
            except ValueError:
                # 2xx is not in RETRYABLE_STATUSES: final unless on_error says otherwise.
                excerpt = self._excerpt(content)
                error = LLMError(f"model endpoint answered non-JSON (HTTP {status}): {excerpt}", status=status, body_excerpt=excerpt)
                return status, None, error
        excerpt = self._excerpt(content)
        error = LLMError(f"model endpoint answered HTTP {status}: {excerpt}", status=status, body_excerpt=excerpt)
        return status, response, error

    def _excerpt(self, content: bytes | None) -> str:
        return self._scrub((content or b"")[: _EXCERPT * 4].decode("utf-8", "replace"))[:_EXCERPT]

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


def _retry_delay(reply: Any, attempt: int, base_ms: int) -> float:
    if isinstance(reply, requests.Response):
        seconds = retry_after_seconds(reply.headers.get("Retry-After"))
        if seconds is not None:
            return seconds
    backoff: float = base_ms * (2**attempt) / 1000
    return backoff + random.uniform(0, base_ms / 1000)
