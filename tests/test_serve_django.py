"""The served layer inside a Django view (``toolnexus._serve.for_django``), the helpers the
AG-UI and A2A views build on: who asks first, JSON bodies only, refusals as JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

django = pytest.importorskip("django")

import _django_site  # noqa: E402,F401  (configures the in-process site)
from django.core.exceptions import PermissionDenied  # noqa: E402
from django.test import RequestFactory  # noqa: E402

from toolnexus._serve import SHARED, Access, Refused
from toolnexus._serve import for_django

ACCESS = Access.build(lambda request: request.headers.get("X-User"), what="a Django view")
ran: list[Any] = []


def view(request: Any) -> Any:
    """A view as a surface writes one on the helpers."""
    try:
        principal = for_django.principal(ACCESS, request)
        body = for_django.read_json(request, limit=100)
    except Refused as refused:
        return for_django.refusal(refused)
    ran.append((principal, body))
    return for_django.refusal(Refused(200, "ok"))


def call(**options: Any) -> tuple[int, dict[str, Any]]:
    body = options.pop("data", b'{"a": 1}')
    request = RequestFactory().post(
        "/", data=body, content_type=options.pop("content_type", "application/json"), **options
    )
    response = view(request)
    return response.status_code, json.loads(response.content)


def test_who_asks_comes_first_and_a_refusal_runs_nothing() -> None:
    ran.clear()
    assert call() == (401, {"error": "authentication required"})
    assert call(HTTP_X_USER="alice", content_type="text/plain")[0] == 415
    assert call(HTTP_X_USER="alice", data=b"x" * 200)[0] == 413
    assert call(HTTP_X_USER="alice", data=b'{"a": NaN}')[0] == 400
    assert ran == []
    assert call(HTTP_X_USER="alice", content_type="application/json; charset=utf-8")[0] == 200
    assert ran == [("alice", {"a": 1})]


def test_a_hook_may_raise_permission_denied_itself() -> None:
    def hook(request: Any) -> str:
        raise PermissionDenied

    with pytest.raises(PermissionDenied):
        for_django.principal(Access.build(hook, what="t"), RequestFactory().get("/"))


def test_a_bearer_token_is_read_from_the_request_headers() -> None:
    access = Access.build("tok", what="mcp", tokens=True)
    assert for_django.principal(access, RequestFactory().get("/", HTTP_AUTHORIZATION="Bearer tok")) == SHARED
    with pytest.raises(Refused):
        for_django.principal(access, RequestFactory().get("/", HTTP_AUTHORIZATION="Bearer nope"))
