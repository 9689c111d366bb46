"""``toolnexus.agui.django_view`` (CONTRACT §20, §21): the AG-UI endpoint as a Django view.
Who asks first, JSON bodies only, the input's refusals as their status with a reason, a
thread another principal started not found, the stream cap, and a run's events as SSE
frames from a ``StreamingHttpResponse``."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("django")
pytest.importorskip("ag_ui.core")

import _django_site  # noqa: E402,F401  (configures the in-process site)
from django.core.exceptions import PermissionDenied  # noqa: E402
from django.test import RequestFactory  # noqa: E402

import _agui_team as team  # noqa: E402
from _agui_team import body, check_run, sse_events, user  # noqa: E402
from toolnexus import ConfigError, agui  # noqa: E402


@pytest.fixture
def rt(cleanup: Any, tmp_path: Any) -> Any:
    return cleanup.runtime(team.registry(), generate=team.model(), state=str(tmp_path / "threads.db"))


def call(view: Any, given: Any, who: str | None = "alice", content_type: str = "application/json") -> Any:
    data = given if isinstance(given, bytes) else json.dumps(given)
    extra = {"HTTP_X_USER": who} if who else {}
    response = view(RequestFactory().post("/agui", data=data, content_type=content_type, **extra))
    return response


def streamed(response: Any) -> list[dict[str, Any]]:
    try:
        return sse_events(b"".join(response.streaming_content))
    finally:
        response.close()


def by_header(request: Any) -> str | None:
    return request.headers.get("X-User")


def test_a_conversation_through_the_view(rt: Any) -> None:
    view = agui.django_view(rt, agent="assistant", authorize=by_header)
    response = call(view, body("t1", "run-1", [user("the Q3 report")]))
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    first = streamed(response)
    check_run(first)
    asked = first[-1]["outcome"]["interrupts"][0]["id"]
    resume = [{"interruptId": asked, "status": "resolved"}]
    second = streamed(call(view, body("t1", "run-2", [user("the Q3 report")], resume=resume)))
    check_run(second)
    assert second[-1]["outcome"]["pendingToolCallIds"] == ["call-pick-1"]
    answer = {"id": "tm", "role": "tool", "toolCallId": "call-pick-1", "content": "blue"}
    third = streamed(call(view, body("t1", "run-3", [user("the Q3 report"), answer])))
    assert third[-1]["result"] == "Done: publisher: published Q3; colour blue."


def test_the_view_is_closed_unless_the_app_says_who_asks(rt: Any) -> None:
    with pytest.raises(ConfigError):
        agui.django_view(rt, agent="assistant")
    view = agui.django_view(rt, agent="assistant", authorize=by_header)
    response = call(view, body("t1", "run-1", [user("x")]), who=None)
    assert response.status_code == 401 and json.loads(response.content) == {"error": "authentication required"}
    assert view(RequestFactory().get("/agui")).status_code == 405
    assert len(rt.handles()) == 1


def test_a_hook_may_refuse_with_permission_denied(rt: Any) -> None:
    def hook(request: Any) -> str:
        raise PermissionDenied

    with pytest.raises(PermissionDenied):
        call(agui.django_view(rt, agent="assistant", authorize=hook), body("t1", "run-1", [user("x")]))


@pytest.mark.parametrize(
    ("given", "content_type", "status"),
    [
        (b"{", "application/json", 400),
        (body("t1", "run-1", [user("x")]), "text/plain", 415),
        ({"threadId": "t1", "runId": "r", "messages": [], "tools": [], "context": []}, "application/json", 422),
    ],
)
def test_a_refused_input_is_its_status_and_starts_nothing(rt: Any, given: Any, content_type: str, status: int) -> None:
    view = agui.django_view(rt, agent="assistant", authorize=by_header)
    response = call(view, given, content_type=content_type)
    assert response.status_code == status and json.loads(response.content)["error"]
    assert len(rt.handles()) == 1


def test_another_principal_gets_404_and_one_stream_too_many_is_503(rt: Any) -> None:
    view = agui.django_view(rt, agent="assistant", authorize=by_header, max_streams=1)
    first = streamed(call(view, body("t1", "run-1", [user("the Q3 report")])))
    resume = [{"interruptId": first[-1]["outcome"]["interrupts"][0]["id"], "status": "resolved"}]
    stranger = call(view, body("t1", "run-2", [user("x")], resume=resume), who="mallory")
    assert stranger.status_code == 404
    held = call(view, body("t2", "run-1", [user("hello")]))  # open, not read yet
    over = call(view, body("t3", "run-1", [user("hello")]))
    assert over.status_code == 503 and over["Retry-After"]
    streamed(held)
    assert streamed(call(view, body("t3", "run-1", [user("hello")])))[-1]["type"] == "RUN_FINISHED"
