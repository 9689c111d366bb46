"""CONTRACT §22: the A2A endpoint mounted as a Flask blueprint and as Django URL patterns
serves the same card and methods as the WSGI app, behind the app's ``authorize``."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from _a2a_team import bearer, model, registry
from toolnexus import Runtime, a2a

flask = pytest.importorskip("flask")
django = pytest.importorskip("django")

import _django_site  # noqa: E402,F401  (configures the in-process site)
from django.core.exceptions import PermissionDenied  # noqa: E402
from django.test import RequestFactory, override_settings  # noqa: E402

VERSION = {"A2A-Version": "1.0"}


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = Runtime(registry(), generate=model())
    yield runtime
    runtime.close(runtime.root)


def send(text: str, method: str = "SendMessage", **more: Any) -> dict[str, Any]:
    message = {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}], **more}
    return {"jsonrpc": "2.0", "id": "r1", "method": method, "params": {"message": message}}


# --- Flask ----------------------------------------------------------------------------------------


@pytest.fixture
def flask_client(rt: Runtime) -> Any:
    app = flask.Flask(__name__)
    app.register_blueprint(a2a.blueprint(rt, agent="lead", authorize=lambda: bearer(flask.request)))
    return app.test_client()


def test_the_blueprint_serves_the_card_with_its_endpoint_under_the_prefix(flask_client: Any) -> None:
    card = flask_client.get("/a2a/.well-known/agent-card.json", headers={"Authorization": "Bearer alice"}).get_json()
    assert card["supportedInterfaces"][0]["url"] == "http://localhost/a2a/"
    assert [skill["id"] for skill in card["skills"]] == ["lead", "asker", "worker"]


@pytest.mark.parametrize("path", ["/a2a/", "/a2a"])
def test_the_blueprint_takes_messages_with_and_without_the_slash(flask_client: Any, path: str) -> None:
    response = flask_client.post(path, json=send("hello"), headers={"Authorization": "Bearer alice", **VERSION})
    assert response.status_code == 200
    task = response.get_json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "lead heard: hello"}]


def test_the_blueprint_streams_a_task_until_it_waits_for_input(flask_client: Any) -> None:
    response = flask_client.post(
        "/a2a/", json=send("ask ship", "SendStreamingMessage"), headers={"Authorization": "Bearer alice", **VERSION}
    )
    assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    lines = response.get_data(as_text=True).splitlines()
    frames = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    states = [next(iter(frame["result"].values()))["status"]["state"] for frame in frames]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]


def test_the_blueprint_asks_authorize_before_anything(flask_client: Any, rt: Runtime) -> None:
    assert flask_client.post("/a2a/", json=send("hello"), headers=VERSION).status_code == 401
    assert flask_client.get("/a2a/.well-known/agent-card.json").status_code == 401
    assert [view.id for view in rt.handles()] == ["root"]


# --- Django ----------------------------------------------------------------------------------------


def user_of(request: Any) -> str | None:
    if request.headers.get("X-Banned"):
        raise PermissionDenied
    return bearer(request)


@pytest.fixture
def views(rt: Runtime) -> tuple[Any, Any]:
    patterns = a2a.django_urls(lambda: rt, agent="lead", authorize=user_of)
    assert [(str(p.pattern), p.name) for p in patterns] == [("", "a2a"), (".well-known/agent-card.json", "a2a-card")]
    return patterns[0].callback, patterns[1].callback


def django_post(view: Any, body: Any, **headers: str) -> Any:
    request = RequestFactory().post("/a2a/", data=json.dumps(body), content_type="application/json", **headers)
    return view(request)


def test_the_django_views_serve_the_card_and_the_methods(views: tuple[Any, Any]) -> None:
    rpc, card = views
    asked = RequestFactory().get("/a2a/.well-known/agent-card.json", HTTP_AUTHORIZATION="Bearer bob")
    with override_settings(ALLOWED_HOSTS=["testserver"]):
        shown = json.loads(card(asked).content)
    assert shown["supportedInterfaces"][0]["url"] == "http://testserver/a2a/"
    response = django_post(rpc, send("hello"), HTTP_AUTHORIZATION="Bearer bob", HTTP_A2A_VERSION="1.0")
    reply = json.loads(response.content)
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_the_django_views_stream_a_task(views: tuple[Any, Any]) -> None:
    rpc, _ = views
    body = send("hello", "SendStreamingMessage")
    response = django_post(rpc, body, HTTP_AUTHORIZATION="Bearer bob", HTTP_A2A_VERSION="1.0")
    assert response.streaming and response["Content-Type"] == "text/event-stream; charset=utf-8"
    text = b"".join(response.streaming_content).decode()
    response.close()
    assert '"TASK_STATE_COMPLETED"' in text and '"lead heard: hello"' in text


def test_the_django_views_ask_authorize_first_and_are_exempt_from_csrf(views: tuple[Any, Any], rt: Runtime) -> None:
    rpc, card = views
    assert getattr(rpc, "csrf_exempt", False)
    assert django_post(rpc, send("hello"), HTTP_A2A_VERSION="1.0").status_code == 401
    with pytest.raises(PermissionDenied):
        django_post(rpc, send("hello"), HTTP_AUTHORIZATION="Bearer bob", HTTP_X_BANNED="1")
    assert rpc(RequestFactory().get("/a2a/", HTTP_AUTHORIZATION="Bearer bob")).status_code == 405
    assert [view.id for view in rt.handles()] == ["root"]
