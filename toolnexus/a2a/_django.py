"""The A2A endpoint as Django URL patterns (``django_urls``): include them under a prefix
(``path("a2a/", include(a2a.django_urls(...)))``). The views are exempt from CSRF: a body
must be ``application/json``, which no page of another site can post without a CORS
preflight; ``authorize`` is given the ``HttpRequest`` (``request.user`` is the login's)."""

from __future__ import annotations

from typing import Any, Callable

from django.http import HttpResponse, StreamingHttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from .._serve import Refused, for_django
from .._serve.bodies import content_length, read_limited
from ._service import CARD_PATH, Reply, Service
from ._wsgi import not_here, version_of


def build(service: Service, *, name: str) -> list[Any]:
    """The URL patterns of ``service``: ``""`` (the JSON-RPC endpoint, named ``name``) and
    ``.well-known/agent-card.json`` (named ``<name>-card``)."""

    def rpc(request: Any) -> Any:
        if request.method != "POST":
            return response(not_here(405, "POST"))
        try:
            principal = for_django.principal(service.access, request)
        except Refused as refused:
            return response(service.refusal(refused))
        length = request.META.get("CONTENT_LENGTH")
        reply = service.call(
            principal,
            content_type=request.META.get("CONTENT_TYPE"),
            body=lambda limit: read_limited(request.read, content_length(length) or 0, limit),
            version=version_of(request.headers.get("A2A-Version"), request.META.get("QUERY_STRING")),
        )
        return response(reply)

    def card(request: Any) -> Any:
        if request.method not in ("GET", "HEAD"):
            return response(not_here(405, "GET"))
        try:
            for_django.principal(service.access, request)
        except Refused as refused:
            return response(service.refusal(refused))
        here = request.build_absolute_uri(request.path)
        return response(service.card(here[: len(here) - len(CARD_PATH)] + "/"))

    exempt: Callable[[Any], Any] = csrf_exempt(rpc)
    return [path("", exempt, name=name), path(CARD_PATH.lstrip("/"), card, name=f"{name}-card")]


def response(reply: Reply) -> Any:
    """``reply`` as Django's answer (a stream's frames as they come; Django closes them)."""
    if isinstance(reply.body, bytes):
        made: Any = HttpResponse(reply.body, status=reply.status)
    else:
        made = StreamingHttpResponse(reply.body, status=reply.status)
    for header, value in reply.headers:
        made[header] = value
    return made
