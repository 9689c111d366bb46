"""One model exchange, from connect to last byte, with its retries.

An exchange (connect, send, read the entire body, or the entire event stream) runs inside
the run's cancellation scope, the turn gate and a total deadline; every failure of the
HTTP stack leaves here as an ``LLMError`` naming the endpoint and the cause, with
credentials shown as ``***``. Retries follow CONTRACT §8: 429/5xx and connection errors
(a stream cut short is one), backoff with jitter, ``Retry-After`` in whole seconds up to
``max_retry_after`` seconds, ``on_error`` overriding the decision; a timeout or a cancellation
is never retried.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from typing import Any, Callable, Iterator

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from ..cancel import CancelScope, TurnGate, set_current_scope
from ..sse_reader import SSEDecoder, SSEEvent
from ...errors import Cancelled, LLMError, LLMTimeout, StreamEventError, WireError
from . import overrides
from .base import OpenReply, Route, Waiting
from .direct import DirectRoute
from .failures import CUT_SHORT, ERROR_EVENT, EXCERPT_CHARS, MALFORMED_EVENT, REFUSED_HINT, RETRYABLE_STATUSES
from .failures import _retry_delay, describe_failure, public_url, retry_after_seconds
from .overrides import PassedThrough
from .sessions import SHARED, LeaseKey, Prepared, prepare, track_host_adapter
from .via_requests import RequestsRoute

log = logging.getLogger("toolnexus")

_MESSAGE_EXCERPT = 300
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # one encoder for every body
#: After a stream's end marker the body should end at once; a server that keeps it open
#: longer has its connection closed instead of holding the turn.
_AFTER_END_S = 1.0

#: Feeds one decoded event to whoever reads the stream; True once the stream's end
#: marker came. Raises ``WireError`` for an event it cannot read.
EventFeed = Callable[[SSEEvent], bool]
#: What an attempt gives back: ``(retryable, value, error)``. Without an error, ``value``
#: is what ``_post`` returns, ``(streamed, data)``; with one, whether it may be retried and
#: the failed reply, if any (for its ``Retry-After``).
Outcome = tuple[bool, Any, "LLMError | None"]


class Transport:
    """POSTs JSON bodies to one endpoint, with retries; shared by every thread of a client.

    ``secrets`` are the credential values (the key, credential-like headers) that no
    message, excerpt or log line may show. The route is chosen here, once: a host's
    ``session`` goes through ``Session.send``; the library's own session goes straight to
    its connection pool, unless a proxy applies, when it goes through the adapter. An
    override installed for a while (``overrides``) sees each exchange first, whatever the
    route.
    """

    def __init__(
        self,
        *,
        url: str,
        headers: dict[str, str],
        secrets: tuple[str, ...] = (),
        session: requests.Session | None = None,
        retries: int = 2,
        retry_base: float = 0.5,
        timeout: float | None = None,
        max_retry_after: float = 60.0,
        on_error: Callable[[dict[str, Any]], str] | None = None,
        pool_size: int = 10,
    ) -> None:
        self.url = url
        self.public_url = public_url(url)
        self._secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        self._retries = max(0, retries)
        self._retry_base = retry_base
        self._timeout = timeout or None
        self._max_retry_after = max_retry_after
        self._on_error = on_error
        self._lease: LeaseKey | None = None
        self._prepared: Prepared
        self._route = self._choose_route(url, headers, session, pool_size)
        #: The route every exchange of this transport takes: ``"direct"`` or ``"requests"``.
        self.route = self._route.name
        self._lock = threading.Lock()  # guards: _live, _closed
        self._live: set[CancelScope] = set()
        self._closed = False

    def _choose_route(
        self, url: str, headers: dict[str, str], session: requests.Session | None, pool_size: int
    ) -> Route:
        if session is not None:
            # A host's session keeps its hooks and cookies; its settings are the host's to
            # change, so they are read for each transport.
            adapter = session.get_adapter(url)
            if isinstance(adapter, HTTPAdapter):
                track_host_adapter(adapter)
            self._prepared = prepare(session, url, headers, owned=False)
            return RequestsRoute(session, self._prepared)
        self._lease, session = SHARED.lease(url, pool_size)
        prepared = self._prepared = SHARED.prepared(self._lease, session, url, headers)
        own: Any = session.get_adapter(url)  # our own session: no hooks, cookies or redirects
        if prepared.direct_head is not None and hasattr(own, "get_connection_with_tls_context"):
            find_pool = functools.partial(SHARED.direct_pool, self._lease, own, prepared)
            return DirectRoute(find_pool, prepared.direct_head)
        return RequestsRoute(own, prepared)

    def _overridden(self, installed: tuple[overrides.RouteOverride, ...], payload: bytes, stream: bool) -> Route:
        """The installed overrides in front of this transport's route, for one exchange."""
        sent = self._prepared.template.headers.items()
        headers = CaseInsensitiveDict({k: v if isinstance(v, str) else v.decode("latin-1") for k, v in sent})
        headers["Content-Length"] = str(len(payload))
        request = overrides.Outgoing(self.url, self.public_url, headers, payload, stream, self.scrub)
        return overrides.Onward(installed, self._route, request)

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
            SHARED.release(self._lease)

    def keep_connections(self) -> tuple[LeaseKey, Callable[[], None]] | None:
        """A hold on this endpoint's pooled connections that outlives ``close``, so that
        the next client or runtime of the endpoint reuses them: ``(endpoint, release)``.
        None for a host's session (the host keeps its connections itself)."""
        with self._lock:
            key = self._lease if not self._closed else None
            if key is not None:
                SHARED.lease_again(key)  # while this transport's own lease still holds
        if key is None:
            return None
        return key, functools.partial(SHARED.release, key)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def post_json(
        self,
        body: dict[str, Any],
        *,
        scope: CancelScope | None = None,
        gate: TurnGate | None = None,
        while_waiting: Callable[[], None] | None = None,
        on_retry: Callable[[int, str], None] | None = None,
    ) -> Any:
        """POST ``body`` and return the decoded JSON reply, retrying what may be retried.
        ``while_waiting`` is called once, when a request is out and its reply awaited;
        ``on_retry(attempt, cause)`` before each retry (``attempt`` 1 for the first).

        Raises:
            LLMError: the endpoint failed past the retries (``LLMTimeout`` past the deadline).
            Cancelled: the scope was cancelled (interrupt, close) during any part of it.
        """
        return self._post(body, None, scope, gate, while_waiting, on_retry)[1]

    def post_stream(
        self,
        body: dict[str, Any],
        *,
        begin: Callable[[], EventFeed],
        scope: CancelScope | None = None,
        gate: TurnGate | None = None,
        while_waiting: Callable[[], None] | None = None,
        on_retry: Callable[[int, str], None] | None = None,
    ) -> tuple[bool, Any]:
        """POST ``body`` (a request for a streamed reply) and feed the reply's events, as
        each is decoded, to the feed ``begin()`` makes for each attempt. Returns ``(True,
        None)`` once a stream was read to its end marker, or ``(False, data)`` when the
        server sent a plain JSON reply instead. The same rules as ``post_json`` apply; a
        stream that ends before its end marker is a connection error (``stream cut
        short``), an event the feed refuses is ``malformed stream event`` (final, as a 2xx
        reply that is not JSON is, unless ``on_error`` says to retry).

        Raises:
            LLMError, Cancelled: as ``post_json``; what the feed raises (other than
            ``WireError``) passes through unchanged.
        """
        return self._post(body, begin, scope, gate, while_waiting, on_retry)

    def _post(
        self,
        body: dict[str, Any],
        begin: Callable[[], EventFeed] | None,
        scope: CancelScope | None,
        gate: TurnGate | None,
        while_waiting: Callable[[], None] | None,
        on_retry: Callable[[int, str], None] | None,
    ) -> tuple[bool, Any]:
        payload = _ENCODE(body).encode("utf-8")
        scope = scope if scope is not None else CancelScope()
        waiting = [while_waiting] if while_waiting is not None else []
        with self._registered(scope):
            attempt = 0
            while True:
                try:
                    retryable, reply, error = self._attempt(payload, scope, gate, waiting, begin)
                except LLMTimeout as timeout:
                    if self._on_error is not None:  # observed, but a timeout is never retried
                        self._ask_on_error(timeout, None, attempt, False)
                    raise
                if error is None:
                    done: tuple[bool, Any] = reply
                    return done
                if self._on_error is not None:
                    retryable = self._ask_on_error(error, error.status, attempt, retryable)
                if not retryable or attempt >= self._retries:
                    raise error
                delay = self._retry_delay(reply, attempt, error)
                log.info(
                    "model call to %s failed (%s); retry %d of %d in %.2fs",
                    self.public_url,
                    error.cause,
                    attempt + 1,
                    self._retries,
                    delay,
                )
                if on_retry is not None:
                    on_retry(attempt + 1, error.cause)
                if scope.event.wait(delay):
                    raise Cancelled("interrupted while waiting to retry the model call")
                attempt += 1

    def _retry_delay(self, reply: Any, attempt: int, error: LLMError) -> float:
        """The wait before the next attempt; a ``Retry-After`` past ``max_retry_after``
        fails the call at once instead of sleeping."""
        headers = getattr(reply, "headers", None)
        asked = retry_after_seconds(headers.get("Retry-After")) if headers is not None else None
        if asked is not None and asked > self._max_retry_after:
            cause = f"{error.cause}, Retry-After {asked:.0f}s exceeds max_retry_after={self._max_retry_after:g}"
            raise self._error(cause, status=error.status, excerpt=error.body_excerpt)
        return _retry_delay(reply, attempt, self._retry_base)

    @contextlib.contextmanager
    def _registered(self, scope: CancelScope) -> Iterator[None]:
        """Make the scope of one call known, so that ``close`` reaches it."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._live.add(scope)
        if closed:
            raise LLMError(
                self._message("the client is closed"), status=None, url=self.public_url, cause="the client is closed"
            )
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

    def _attempt(
        self,
        payload: bytes,
        scope: CancelScope,
        gate: TurnGate | None,
        waiting: Waiting,
        begin: Callable[[], EventFeed] | None,
    ) -> Outcome:
        """One exchange under the gate; raises what is never retried (a timeout, a
        cancellation)."""
        if scope.cancelled:
            raise Cancelled("interrupted before the model call")
        if gate is None:
            return self._exchange(payload, scope, waiting, begin)
        with gate.held(scope):
            return self._exchange(payload, scope, waiting, begin)

    def _exchange(
        self, payload: bytes, scope: CancelScope, waiting: Waiting, begin: Callable[[], EventFeed] | None
    ) -> Outcome:
        deadline = time.monotonic() + self._timeout if self._timeout is not None else None
        set_current_scope(scope)
        reply: OpenReply | None = None
        streamed = False
        outcome: Outcome | Exception  # a consumer's error, raised as it was raised: never retried
        try:
            try:
                route = self._route
                installed = overrides.ACTIVE
                if installed:
                    route = self._overridden(installed, payload, begin is not None)
                reply = route.open(payload, deadline, scope, waiting, begin is not None)
                content_type = (reply.headers.get("Content-Type") or "").lower()
                streamed = begin is not None and 200 <= reply.status < 300 and "json" not in content_type
                if streamed:
                    assert begin is not None
                    outcome = self._read_stream(reply, begin(), deadline)
                else:
                    content = reply.read_all()
                    reply.done()
                    outcome = self._decode(reply, content)
            except BaseException:
                if reply is not None:
                    reply.abort()
                raise
        except Cancelled:
            raise
        except PassedThrough as passed:
            outcome = passed.error
        except Exception as exc:  # the HTTP stack's failures all become LLMError here
            if scope.cancelled:
                raise Cancelled("interrupted during the model call") from exc
            return self._failed(exc, reply, deadline, streamed)
        finally:
            set_current_scope(None)
            scope.detach_all()
        if isinstance(outcome, Exception):
            raise outcome  # as it was raised: not an HTTP failure (never retried)
        if scope.cancelled:
            raise Cancelled("interrupted during the model call")  # the reply came too late
        return outcome

    def _read_stream(self, reply: OpenReply, feed: EventFeed, deadline: float | None) -> Outcome:
        """Feed every event of the body as it arrives, up to the end marker; then the body
        should end (it is given ``_AFTER_END_S`` at most)."""
        decoder = SSEDecoder()
        finished = False
        until = deadline
        event: SSEEvent | None = None
        while True:
            try:
                chunk = reply.read_some(until)
            except Exception:
                if not finished:
                    raise
                reply.abort(whole=True)  # the reply is whole: only its connection is lost
                return True, (True, None), None
            if not chunk:
                break
            try:
                for event in decoder.feed(chunk):
                    if not finished and feed(event):
                        finished = True
                        until = (
                            time.monotonic() + _AFTER_END_S
                            if deadline is None
                            else min(deadline, time.monotonic() + _AFTER_END_S)
                        )
            except WireError as exc:
                reply.abort()
                return self._refused(exc, event)
            except Exception as exc:
                raise PassedThrough(exc) from exc
            if finished and until is not None and time.monotonic() >= until:
                reply.abort(whole=True)
                return True, (True, None), None
        decoder.close()
        reply.done()
        if not finished:
            return (
                True,
                None,
                self._error(CUT_SHORT, status=None, excerpt="the reply ended before the stream's end marker"),
            )
        return True, (True, None), None

    def _refused(self, exc: WireError, event: SSEEvent | None) -> Outcome:
        """An event the feed refused: malformed (final, as a 2xx reply that is not JSON
        is), or an error the server sent in the stream (retried when its kind says so)."""
        excerpt = self.excerpt(event.data if event is not None else "")
        detail = self.scrub(str(exc))
        if isinstance(exc, StreamEventError):
            return exc.retryable, None, self._error(ERROR_EVENT, status=200, excerpt=excerpt, detail=detail)
        return False, None, self._error(MALFORMED_EVENT, status=200, excerpt=excerpt, detail=detail)

    def _failed(self, exc: Exception, reply: OpenReply | None, deadline: float | None, streamed: bool) -> Outcome:
        """The outcome of an exchange the HTTP stack failed; raises ``LLMTimeout`` for a
        timeout (never retried), whatever raised it."""
        cause = describe_failure(exc)
        if deadline is not None and time.monotonic() >= deadline:
            cause = "timed out"  # the deadline passed (and may have closed the connection)
        elif streamed and cause != "timed out":
            cause = CUT_SHORT
        elif (
            reply is not None
            and cause == "reply body cut short"
            and "chunked" in (reply.headers.get("Transfer-Encoding") or "").lower()
        ):
            cause = "chunked reply body malformed or cut short"
        excerpt = self.scrub(f"{type(exc).__name__}: {exc}")[:EXCERPT_CHARS]
        if cause == "timed out":
            if self._timeout is not None:
                cause = f"timed out (timeout={self._timeout:g} s: no complete reply in time)"
            raise LLMTimeout(
                self._message(cause), status=None, body_excerpt=excerpt, url=self.public_url, cause=cause
            ) from exc
        return True, None, self._error(cause, status=None, excerpt=excerpt)

    def _decode(self, reply: OpenReply, content: bytes) -> Outcome:
        status = reply.status
        if 200 <= status < 300:
            try:
                return False, (False, json.loads(content)), None
            except (ValueError, RecursionError):  # nested too deep to read is not JSON we can use
                # 2xx is not in RETRYABLE_STATUSES: final unless on_error says otherwise.
                return (
                    False,
                    None,
                    self._error(
                        f"HTTP {status} with a reply that is not JSON", status=status, excerpt=self.excerpt(content)
                    ),
                )
        return (
            status in RETRYABLE_STATUSES,
            reply,
            self._error(f"HTTP {status}", status=status, excerpt=self.excerpt(content)),
        )

    def excerpt(self, content: bytes | str | None) -> str:
        text = content.decode("utf-8", "replace") if isinstance(content, bytes) else (content or "")
        return self.scrub(text[: EXCERPT_CHARS * 2])[:EXCERPT_CHARS]

    def _message(self, cause: str) -> str:
        if cause == "connection refused":
            return f"model call to {self.public_url} failed: {cause} ({REFUSED_HINT})"
        return f"model call to {self.public_url} failed: {cause}"

    def _error(self, cause: str, *, status: int | None, excerpt: str, detail: str = "") -> LLMError:
        message = self._message(cause)
        if detail:
            message = f"{message} ({detail})"
        if excerpt and status is not None:
            message = f"{message}: {' '.join(excerpt.split())[:_MESSAGE_EXCERPT]}"
        return LLMError(message, status=status, body_excerpt=excerpt, url=self.public_url, cause=cause)
