"""``wsgi_app``: tools, agents or a team served as an MCP server from the WSGI app (or Django
project) a user already runs, over stateless Streamable HTTP (CONTRACT §18b "Server", §20).

A served surface like every other: the served layer (``toolnexus._serve``) decides who asks
(``authorize=`` or ``public=True``; before anything else, on every request) and how much of a
body is read (``max_body``; JSON only). The protocol itself is the ``Responder``'s: it holds
no connection state, so any worker process, and any thread of it, answers any request, the
retry of a question included.
"""

from __future__ import annotations

import io
import json
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from .._serve import Access, Refused, wsgi
from .._serve.bodies import check_limit, check_type
from ..errors import WireError
from ..wire import parse_json
from . import _protocol as protocol
from ._exposed import ExposedLike
from ._serving import MAX_BODY, Served, build

if TYPE_CHECKING:
    from .. import Runtime

log = logging.getLogger("toolnexus")

StartResponse = Callable[..., Any]
#: The request headers the protocol reads, by their WSGI names.
_HEADERS = {
    "HTTP_MCP_PROTOCOL_VERSION": "mcp-protocol-version",
    "HTTP_MCP_METHOD": "mcp-method",
    "HTTP_MCP_NAME": "mcp-name",
}
_STREAM_HEADERS = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")]
#: The JSON-RPC error code of a request refused before it was read (who asks, its body).
REFUSED = -32000


class MCPApp:
    """The WSGI callable ``wsgi_app`` returns (see the module docs); ``close()`` closes the
    private runtime it built, if it built one."""

    def __init__(self, served: Served, access: Access, *, max_body: int, sse: bool) -> None:
        self.served = served
        self.access = access
        self.max_body = max_body
        self.sse = sse

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            principal = wsgi.principal(self.access, environ)
        except Refused as refused:
            return self.refusal(start_response, refused)
        return self.answer(environ, start_response, principal)

    def close(self) -> None:
        self.served.close()

    def answer(self, environ: Mapping[str, Any], start_response: StartResponse, principal: str) -> Iterable[bytes]:
        """Answer one request of the caller ``principal`` (who asks was decided already)."""
        if environ.get("REQUEST_METHOD") != "POST":  # no session to open a stream on or to end
            start_response("405 Method Not Allowed", [("Allow", "POST"), ("Content-Length", "0")])
            return [b""]
        try:
            check_type(environ.get("CONTENT_TYPE"))
            body = wsgi.read_body(environ, limit=self.max_body)
        except Refused as refused:
            return self.refusal(start_response, refused)
        try:
            message = parse_json(body, what="an MCP message")
        except WireError:
            unreadable = protocol.error_reply(None, protocol.PARSE_ERROR, "Parse error")
            return self._send(environ, start_response, 400, unreadable)
        headers = {name: environ[key] for key, name in _HEADERS.items() if key in environ}
        reply = self.served.responder.respond(message, principal, headers)
        if reply.message is None:
            start_response("202 Accepted", [("Content-Length", "0")])
            return [b""]
        return self._send(environ, start_response, reply.status, reply.message)

    def refusal(self, start_response: StartResponse, refused: Refused) -> list[bytes]:
        """A request the served layer turned away, as a JSON-RPC error of its status."""
        body = protocol.error_reply(None, REFUSED, refused.reason)
        return wsgi.respond(start_response, refused.status, body, refused.headers)

    def _send(
        self, environ: Mapping[str, Any], start_response: StartResponse, status: int, message: dict[str, Any]
    ) -> list[bytes]:
        try:
            data = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError):
            log.warning("mcp server: a reply could not be sent as JSON", exc_info=True)
            failed = protocol.error_reply(message.get("id"), protocol.INTERNAL_ERROR, "The result is not JSON")
            data, status = json.dumps(failed).encode("utf-8"), 200
        accept = str(environ.get("HTTP_ACCEPT", "")).lower()
        if "text/event-stream" in accept and (self.sse or "application/json" not in accept):
            event = b"event: message\ndata: " + data + b"\n\n"
            start_response(wsgi.status_line(status), [*_STREAM_HEADERS, ("Content-Length", str(len(event)))])
            return [event]
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        start_response(wsgi.status_line(status), headers)
        return [data]


def wsgi_app(
    exposed: Iterable[ExposedLike] | ExposedLike,
    *,
    runtime: Runtime | Callable[[], Runtime] | None = None,
    secret: str | bytes | None = None,
    authorize: Callable[[dict[str, Any]], Any] | str | None = None,
    public: bool = False,
    name: str = "toolnexus",
    version: str | None = None,
    ttl_ms: int = 300000,
    max_body: int = MAX_BODY,
    state_ttl_s: float = 3600,
    sse: bool = False,
    **runtime_options: Any,
) -> MCPApp:
    """An MCP server of ``exposed`` as a WSGI app that answers on every path it is mounted on.

    ``exposed``: ``Tool``s, level-1 agents (``toolnexus.agent(...)``) or names of agents of
    ``runtime``'s registry; an agent (a team is exposed by its lead) is one MCP tool named
    after it, its ``does`` the description, ``{"prompt": string}`` its input, run with
    ``run_agent`` on ``runtime`` (or on what a callable ``runtime`` returns, asked on first
    use in each process, as ``toolnexus.django.runtime``; without one, on a private runtime
    built from ``runtime_options``: ``base_url``, ``model``, ``state``...). Both eras: MCP 2026-07-28
    and the ``initialize`` handshake (2025-11-25 and older), no session either way.

    A tool or agent that suspends answers ``input_required`` with its ``Request`` as a form
    and a ``requestState`` sealed with ``secret`` (HMAC-SHA256; bound to the tool, its
    arguments and the caller's principal; good for ``state_ttl_s`` seconds); the client's
    retry continues it on whichever worker process gets it when the runtime has a state
    and every worker has the same ``secret`` (without one, a random secret per process).

    ``authorize``: a bearer token (requests must carry ``Authorization: Bearer <it>``) or
    ``authorize(environ) -> principal | None``, asked before anything else on every request
    (refused: ``401``, a JSON-RPC error body, nothing run). ``public=True`` opens the server
    to anyone who can reach the app, who can then start and answer every run. A body over
    ``max_body`` bytes (default 4 MiB) is ``413``, read no further. ``ttl_ms`` is how long a
    client may keep the list of tools. ``sse=True`` answers a client that accepts an event
    stream with one (a single ``message`` event), else JSON.

    Raises:
        ConfigError: neither ``authorize`` nor ``public=True``, nothing to expose, an
            agent name without a runtime, or an option out of range.
    """
    access = Access.build(authorize, public, what="toolnexus.mcp.wsgi_app", tokens=True)
    limit = check_limit(max_body, "max_body")
    served = build(
        exposed,
        runtime=runtime,
        secret=secret,
        name=name,
        version=version,
        ttl_ms=ttl_ms,
        state_ttl_s=state_ttl_s,
        runtime_options=runtime_options,
    )
    return MCPApp(served, access, max_body=limit, sse=sse)


def django_view(app: MCPApp) -> Callable[[Any], Any]:
    """``app`` as a Django view (``path("mcp", django_view(app))``): ``authorize`` is given
    the ``HttpRequest`` (``request.user`` is the login's), and the body is read as the app
    reads it. Exempt from CSRF: the body must be ``application/json``, which no page of
    another site can post without a CORS preflight."""
    from django.http import HttpResponse
    from django.views.decorators.csrf import csrf_exempt

    from .._serve import for_django

    def view(request: Any) -> Any:
        captured: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            captured.update(status=int(status.split(" ", 1)[0]), headers=headers)

        try:
            principal = for_django.principal(app.access, request)
            chunks = app.answer(_environ_of(request), start_response, principal)
        except Refused as refused:
            chunks = app.refusal(start_response, refused)
        response = HttpResponse(b"".join(chunks), status=captured["status"])
        for header, value in captured["headers"]:
            if header.lower() != "content-length":
                response[header] = value
        return response

    exempt: Callable[[Any], Any] = csrf_exempt(view)
    return exempt


def _environ_of(request: Any) -> dict[str, Any]:
    """The WSGI environ of a Django request, its body read through the request."""
    environ = dict(request.META)
    environ["REQUEST_METHOD"] = request.method
    body = getattr(request, "_body", None)  # read already (by a middleware): from memory
    environ["wsgi.input"] = io.BytesIO(body) if body is not None else request
    environ["wsgi.input_terminated"] = False
    return environ
