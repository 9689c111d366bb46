"""Small WSGI helpers for the surfaces that are WSGI apps (the MCP and A2A endpoints):
the served layer's rules read from ``environ``, and JSON answers.

    def app(environ, start_response):
        try:
            principal = wsgi.principal(access, environ)
            body = wsgi.read_json(environ, limit=max_body)
        except Refused as refused:
            return wsgi.refusal(start_response, refused)   # or the protocol's own error body
        ...
        return wsgi.respond(start_response, 200, {"ok": True})

A surface whose protocol has its own error shape (a JSON-RPC error) catches ``Refused``
and answers ``refused.status`` and ``refused.headers`` with its own body.
"""

from __future__ import annotations

import http
import json
from typing import Any, Callable, Iterable, Mapping

from .access import Access
from .bodies import MAX_BODY, content_length, json_body, read_limited
from .refused import Refused

StartResponse = Callable[..., Any]


def principal(access: Access, environ: Mapping[str, Any]) -> str:
    """The caller's principal: ``access``'s hook is given ``environ``.

    Raises:
        Refused: ``401`` (or the ``401``/``403`` a hook aborted with, werkzeug style).
    """
    try:
        return access.principal(environ, authorization=environ.get("HTTP_AUTHORIZATION"))
    except Refused:
        raise
    except Exception as exc:
        code = getattr(exc, "code", None)  # ``werkzeug.exceptions.Unauthorized`` and kin, raised by a hook
        if code in (401, 403):
            raise Refused(int(code), "authentication required" if code == 401 else "forbidden") from exc
        raise


def read_body(environ: Mapping[str, Any], *, limit: int = MAX_BODY) -> bytes:
    """The request body, at most ``limit`` bytes (``413`` past it, nothing more read). A
    body without ``Content-Length`` is read only when the server says the input ends by
    itself (``wsgi.input_terminated``, as for chunked requests); else it is empty.

    Raises:
        Refused: ``413``, or ``400`` for a ``Content-Length`` that is not a number.
    """
    length, read = _input(environ)
    return read_limited(read, length, limit)


def read_json(environ: Mapping[str, Any], *, limit: int = MAX_BODY, what: str = "the body") -> Any:
    """The request body as strict JSON, after the served layer's checks (``bodies``).

    Raises:
        Refused: ``415`` not JSON, ``413`` too large, ``400`` malformed.
    """
    length, read = _input(environ)
    return json_body(environ.get("CONTENT_TYPE"), length, read, limit=limit, what=what)


def _input(environ: Mapping[str, Any]) -> tuple[int | None, Callable[[int], bytes]]:
    """The body's declared length and the read of it (nothing to read without a length,
    unless the server terminates the input itself)."""
    length = content_length(environ.get("CONTENT_LENGTH"))
    stream = environ.get("wsgi.input")
    if stream is None or (length is None and not environ.get("wsgi.input_terminated")):
        return 0, _nothing
    return length, stream.read


def _nothing(_: int) -> bytes:
    return b""


def status_line(status: int) -> str:
    """``"404 Not Found"`` for 404."""
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def respond(
    start_response: StartResponse, status: int, body: Any, headers: Mapping[str, str] | Iterable[tuple[str, str]] = ()
) -> list[bytes]:
    """Answer ``body`` as JSON with ``status``; the list to return from the app."""
    data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    start_response(
        status_line(status), [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *pairs]
    )
    return [data]


def refusal(start_response: StartResponse, refused: Refused) -> list[bytes]:
    """Answer a refusal as ``{"error": reason}`` with its status and headers."""
    return respond(start_response, refused.status, {"error": refused.reason}, refused.headers)
