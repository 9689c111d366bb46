"""``toolnexus.agui.blueprint`` as a served surface (CONTRACT §20, §21): closed unless the app
says who asks; the input's refusals as their status with ``{"error": reason}``; a thread
another principal started is not found; one more stream than ``max_streams`` is ``503``;
the stream is SSE frames a client parses; a client that disconnects interrupts its run."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import pytest

flask = pytest.importorskip("flask")
pytest.importorskip("ag_ui.core")

import _agui_team as team  # noqa: E402
from _agui_team import body, check_run, sse_events, user  # noqa: E402
from toolnexus import ConfigError, agui  # noqa: E402

HANG = 10.0


def make_app(rt: Any, **options: Any) -> Any:
    app = flask.Flask("agui-flask")
    options.setdefault("authorize", team.bearer)
    app.register_blueprint(agui.blueprint(rt, agent=options.pop("agent", "assistant"), **options))
    return app


def post(client: Any, given: Any, who: str | None = "alice", **options: Any) -> Any:
    headers = {"Authorization": f"Bearer {who}"} if who else {}
    data = given if isinstance(given, (bytes, str)) else json.dumps(given)
    content_type = options.pop("content_type", "application/json")
    return client.post("/agui", data=data, headers=headers, content_type=content_type, **options)


@pytest.fixture
def rt(cleanup: Any) -> Any:
    return cleanup.runtime(team.registry(), generate=team.model())


def test_the_endpoint_is_closed_unless_the_app_says_who_asks(rt: Any) -> None:
    with pytest.raises(ConfigError, match="authorize="):
        agui.blueprint(rt, agent="assistant")
    client = make_app(rt).test_client()
    response = post(client, body("t1", "run-1", [user("x")]), who=None)
    assert response.status_code == 401 and response.get_json() == {"error": "authentication required"}
    assert len(rt.handles()) == 1
    opened = make_app(rt, authorize=None, public=True).test_client()
    assert post(opened, body("t1", "run-1", [user("x")]), who=None).status_code == 200


def test_a_run_streams_as_sse_frames_a_client_parses(rt: Any) -> None:
    response = post(make_app(rt).test_client(), body("t1", "run-1", [user("the Q3 report")]))
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache" and response.headers["X-Accel-Buffering"] == "no"
    raw = response.get_data()
    assert all(frame.startswith(b"data: {") for frame in raw.split(b"\n\n") if frame)
    events = sse_events(raw)
    check_run(events)
    assert events[-1]["outcome"]["type"] == "interrupt"


@pytest.mark.parametrize(
    ("given", "content_type", "status"),
    [
        (b"{", "application/json", 400),
        (body("t1", "run-1", [user("x")]), "text/plain", 415),
        ({"threadId": "t1", "runId": "r", "messages": []}, "application/json", 422),
        (body("t1", "run-1", [{"id": "a", "role": "assistant", "content": "hi"}]), "application/json", 422),
    ],
    ids=["malformed", "not json", "no tools", "no prompt"],
)
def test_a_refused_input_is_its_status_with_a_reason_and_starts_nothing(
    rt: Any, given: Any, content_type: str, status: int
) -> None:
    response = post(make_app(rt).test_client(), given, content_type=content_type)
    assert response.status_code == status
    assert set(response.get_json()) == {"error"} and response.get_json()["error"]
    assert len(rt.handles()) == 1


def test_a_body_over_max_body_is_413(rt: Any) -> None:
    client = make_app(rt, max_body=200).test_client()
    assert post(client, body("t1", "run-1", [user("x" * 500)])).status_code == 413


def test_another_principal_gets_404_for_a_thread(rt: Any) -> None:
    client = make_app(rt).test_client()
    events = sse_events(post(client, body("t1", "run-1", [user("the Q3 report")])).get_data())
    asked = events[-1]["outcome"]["interrupts"][0]["id"]
    resume = body("t1", "run-2", [user("the Q3 report")], resume=[{"interruptId": asked, "status": "resolved"}])
    response = post(client, resume, who="mallory")
    assert response.status_code == 404 and "t1" in response.get_json()["error"]
    assert rt.open_requests()[0].id == asked  # still waiting for alice
    assert post(client, resume).status_code == 200


def test_a_running_thread_is_409(cleanup: Any) -> None:
    rt, entered, gate = team.gated(cleanup, HANG)
    client = make_app(rt, agent="slow").test_client()
    held = post(client, body("t1", "run-1", [user("go")]), buffered=False)
    assert entered.wait(HANG)
    again = post(client, body("t1", "run-2", [user("go"), user("more", id="u2")]))
    assert again.status_code == 409 and "running" in again.get_json()["error"]
    gate.set()
    assert sse_events(held.get_data())[-1]["type"] == "RUN_FINISHED"
    held.close()


def test_one_more_stream_than_max_streams_is_503_at_once(cleanup: Any) -> None:
    rt, entered, gate = team.gated(cleanup, HANG)
    client = make_app(rt, agent="slow", max_streams=1).test_client()
    held = post(client, body("t1", "run-1", [user("go")]), buffered=False)
    assert entered.wait(HANG)
    over = post(client, body("t2", "run-1", [user("go")]))
    assert over.status_code == 503 and over.headers["Retry-After"]
    assert [view.state for view in rt.handles()][1:] == ["running"]  # t2 was not started
    gate.set()
    held.get_data()
    held.close()
    assert post(client, body("t2", "run-1", [user("go")])).status_code == 200


def test_the_stream_cap_comes_from_the_apps_config(rt: Any) -> None:
    app = make_app(rt, agent="chatty")
    app.config["TOOLNEXUS_MAX_STREAMS"] = 1
    client = app.test_client()
    held = post(client, body("t1", "run-1", [user("go")]), buffered=False)
    assert post(client, body("t2", "run-1", [user("go")])).status_code == 503
    held.close()


@pytest.fixture
def served(cleanup: Any) -> Any:
    """A real threaded WSGI server (werkzeug's) with the endpoint for ``slow``, heartbeats
    every 50 ms; yields ``(port, runtime, entered, gate)``."""
    from werkzeug.serving import make_server

    rt, entered, gate = team.gated(cleanup, HANG)
    server = make_server("127.0.0.1", 0, make_app(rt, agent="slow", heartbeat_s=0.05), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port, rt, entered, gate
    server.shutdown()
    thread.join(HANG)


def test_a_client_that_disconnects_interrupts_its_run_and_the_thread_runs_again(served: Any) -> None:
    port, rt, entered, gate = served
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG)
    connection.request("POST", "/agui", json.dumps(body("t1", "run-1", [user("go")])), {
        "Content-Type": "application/json", "Authorization": "Bearer alice",
    })
    response = connection.getresponse()
    assert response.status == 200
    assert response.readline().startswith(b"data: ")  # RUN_STARTED
    assert entered.wait(HANG)
    handle = rt.handles()[1].id
    response.close()  # the client goes (HttpAgent's abortRun)
    connection.close()
    assert rt.wait(handle, timeout=HANG).status == "interrupted"
    assert rt.inspect(handle).state == "idle"
    gate.set()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG)
    connection.request("POST", "/agui", json.dumps(body("t1", "run-2", [user("go"), user("again", id="u2")])), {
        "Content-Type": "application/json", "Authorization": "Bearer alice",
    })
    events = sse_events(connection.getresponse().read())
    connection.close()
    check_run(events)
    assert events[-1]["outcome"] == {"type": "success"}
