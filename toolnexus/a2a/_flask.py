"""The A2A endpoint as a Flask blueprint (``blueprint``): the same endpoint as the WSGI
app, under ``url_prefix``; ``authorize`` is called inside the request."""

from __future__ import annotations

import flask

from .._serve import Refused, for_flask
from .._serve.bodies import read_limited
from ._service import CARD_PATH, Reply, Service
from ._wsgi import version_of


def build(service: Service, *, url_prefix: str | None, name: str) -> flask.Blueprint:
    """The blueprint of ``service``: ``POST <url_prefix>/`` (also without the slash) and
    ``GET <url_prefix>/.well-known/agent-card.json``."""
    routes = flask.Blueprint(name, __name__, url_prefix=url_prefix or None)

    def rpc() -> flask.Response:
        try:
            principal = for_flask.principal(service.access)
        except Refused as refused:
            return response(service.refusal(refused))
        request = flask.request
        reply = service.call(
            principal,
            content_type=request.headers.get("Content-Type"),
            body=lambda limit: read_limited(request.stream.read, request.content_length, limit),
            version=version_of(request.headers.get("A2A-Version"), request.query_string.decode("latin-1")),
        )
        return response(reply)

    def card() -> flask.Response:
        try:
            for_flask.principal(service.access)
        except Refused as refused:
            return response(service.refusal(refused))
        return response(service.card(flask.url_for(f"{routes.name}.rpc", _external=True)))

    routes.add_url_rule("/", "rpc", rpc, methods=["POST"], strict_slashes=False)
    routes.add_url_rule(CARD_PATH, "card", card, methods=["GET"])
    return routes


def response(reply: Reply) -> flask.Response:
    """``reply`` as Flask's answer (a stream's frames as they come)."""
    made = flask.Response(reply.body, status=reply.status)
    for header, value in reply.headers:
        made.headers[header] = value
    return made
