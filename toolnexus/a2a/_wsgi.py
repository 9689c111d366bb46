"""The A2A endpoint as a plain WSGI app (``wsgi_app``): it answers relative to where it is
mounted (``SCRIPT_NAME``): ``GET /.well-known/agent-card.json`` and ``POST /``."""

from __future__ import annotations

import urllib.parse
import wsgiref.util
from typing import Any, Iterable, Mapping

from .._serve import Refused, wsgi
from ._service import CARD_PATH, Reply, Service, json_reply


def version_of(header: str | None, query: str | None) -> str | None:
    """The caller's ``A2A-Version``: the header, else the query parameter the
    specification also allows."""
    if header:
        return header
    found = urllib.parse.parse_qs(query or "").get("A2A-Version")
    return found[0] if found else None


def not_here(status: int, allow: str | None = None) -> Reply:
    """``404`` for a path the endpoint does not have, ``405`` for a method it does not take."""
    reason = "no such path on this A2A endpoint" if status == 404 else f"use {allow} here"
    return json_reply({"error": reason}, status, [("Allow", allow)] if allow else [])


class A2AApp:
    """The endpoint of one served agent as a WSGI callable (made by ``wsgi_app``)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        #: Who may call it (the served layer's rule).
        self.access = service.access

    def __repr__(self) -> str:
        return f"A2AApp(agent={self.service.agent!r})"

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or ""
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        if path in ("", "/"):
            reply = self._rpc(environ) if method == "POST" else not_here(405, "POST")
        elif path == CARD_PATH:
            reply = self._card(environ) if method in ("GET", "HEAD") else not_here(405, "GET")
        else:
            reply = not_here(404)
        return send(start_response, reply)

    def _rpc(self, environ: Mapping[str, Any]) -> Reply:
        service = self.service
        try:
            principal = wsgi.principal(self.access, environ)
        except Refused as refused:
            return service.refusal(refused)
        return service.call(
            principal,
            content_type=environ.get("CONTENT_TYPE"),
            body=lambda limit: wsgi.read_body(environ, limit=limit),
            version=version_of(environ.get("HTTP_A2A_VERSION"), environ.get("QUERY_STRING")),
        )

    def _card(self, environ: dict[str, Any]) -> Reply:
        try:
            wsgi.principal(self.access, environ)
        except Refused as refused:
            return self.service.refusal(refused)
        return self.service.card(wsgiref.util.application_uri(environ))


def send(start_response: Any, reply: Reply) -> Iterable[bytes]:
    """``reply`` to a WSGI server (a stream's frames as they come; it closes them)."""
    headers = list(reply.headers)
    if isinstance(reply.body, bytes):
        headers.append(("Content-Length", str(len(reply.body))))
        start_response(wsgi.status_line(reply.status), headers)
        return [reply.body]
    start_response(wsgi.status_line(reply.status), headers)
    return reply.body
