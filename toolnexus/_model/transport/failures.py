"""What a failed exchange is called, and how long to wait before the next attempt.

Every failure of the HTTP stack gets one short cause here (``connection refused``, ``timed
out``, ``reply body cut short``...), whichever route raised it; ``Retry-After`` is read
as whole delay-seconds only; the backoff is exponential with jitter.
"""

from __future__ import annotations

import functools
import http.client
import random
import socket
import ssl
from typing import Any, Iterator
from urllib.parse import urlsplit

import requests
import urllib3.exceptions

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
EXCERPT_CHARS = 1000  # enough for a provider's whole error object, cause included
_URLS_KEPT = 64

#: Said after ``connection refused``: what a user who meets it first usually needs.
REFUSED_HINT = (
    "is a model server listening there? pass base_url=... to reach another, or generate= for an in-process model"
)

#: The cause of a streamed reply that ended before its end marker.
CUT_SHORT = "stream cut short"
#: The cause of an event a wire style could not read (not JSON, or not its shape).
MALFORMED_EVENT = "malformed stream event"
#: The cause of an error the server sent inside a stream.
ERROR_EVENT = "error event in the stream"


class MalformedReply(http.client.HTTPException):
    """The reply does not parse as HTTP/1.x (a ``Content-Length`` that is not one number...)."""


@functools.lru_cache(maxsize=_URLS_KEPT)
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


def _retry_delay(reply: Any, attempt: int, base: float) -> float:
    """``reply`` is the failed response (anything with ``headers``), or None."""
    headers = getattr(reply, "headers", None)
    if headers is not None:
        seconds = retry_after_seconds(headers.get("Retry-After"))
        if seconds is not None:
            return seconds
    backoff: float = base * (2**attempt)
    return backoff + random.uniform(0, base)


def check_framing(headers: Any) -> None:
    """Refuse a reply whose body length cannot be known: a ``Content-Length`` that is not
    one number (``http.client`` and urllib3 would read such a body to the end of the
    connection, which a kept-alive server never sends)."""
    declared = headers.get("content-length")
    if declared is None or "chunked" in headers.get("transfer-encoding", "").lower():
        return
    values = {each.strip() for each in declared.split(",")}
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise MalformedReply(f"Content-Length {declared[:40]!r} is not one number")


_CAUSES: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    # Most specific first: urllib3's NewConnectionError is also a ConnectTimeoutError,
    # InvalidChunkLength is also an IncompleteRead, and IncompleteRead and
    # RemoteDisconnected are also HTTPExceptions.
    ((ConnectionRefusedError,), "connection refused"),
    ((socket.gaierror,), "host name not resolved"),
    ((ssl.SSLError, requests.exceptions.SSLError, urllib3.exceptions.SSLError), "TLS handshake failed"),
    ((ConnectionResetError,), "connection reset by the server"),
    ((urllib3.exceptions.InvalidChunkLength, requests.exceptions.ChunkedEncodingError), "malformed chunked reply body"),
    ((http.client.IncompleteRead, urllib3.exceptions.IncompleteRead), "reply body cut short"),
    ((http.client.RemoteDisconnected,), "server closed the connection without a reply"),
    ((http.client.HTTPException, urllib3.exceptions.InvalidHeader), "malformed reply"),
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
