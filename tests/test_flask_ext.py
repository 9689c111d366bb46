"""toolnexus.flask: the extension builds one runtime per process from the app's config; the
blueprint starts a run (202), reads it (``?wait=``), takes exactly one answer, refuses bad
bodies with 400 (never 500) and streams the run as Server-Sent Events."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

flask = pytest.importorskip("flask")

import _stream_team as team  # noqa: E402
from conftest import run_in_thread  # noqa: E402
from toolnexus.flask import Toolnexus  # noqa: E402

HANG = 10.0


def by_header() -> str | None:
    """The tests' login: the caller's name in ``X-User`` (an app asks its own login)."""
    return flask.request.headers.get("X-User")


def as_user(client: Any, user: str = "alice") -> Any:
    client.environ_base["HTTP_X_USER"] = user
    return client


def make_app(**config: Any) -> Any:
    """An app whose config names the registry and the model as import paths, as a config file would."""
    app = flask.Flask("tn-test")
    app.config.update({"TOOLNEXUS_REGISTRY": "_stream_team:TEAM", "TOOLNEXUS_GENERATE": "_stream_team:generate", "TOOLNEXUS_ENTRY": "boss", **config})
    return app


@pytest.fixture
def app(tmp_path: Any) -> Any:
    app = make_app(TOOLNEXUS_STATE=str(tmp_path / "runs.db"))
    ext = Toolnexus(app, authorize=by_header)
    yield app
    with app.app_context():
        ext.let_go()


@pytest.fixture
def client(app: Any) -> Any:
    return as_user(app.test_client())


def started(client: Any, prompt: str = "go", **body: Any) -> str:
    response = client.post("/runs", json={"prompt": prompt, **body})
    assert response.status_code == 202, response.get_json()
    assert response.headers["Location"].endswith(f"/runs/{response.get_json()['run']}")
    return str(response.get_json()["run"])


def pending_of(client: Any, run: str) -> dict[str, Any]:
    shown = client.get(f"/runs/{run}?wait=5")
    assert shown.status_code == 200 and shown.get_json()["status"] == "pending", shown.get_json()
    return dict(shown.get_json()["pending"])


def test_start_answers_202_with_the_run_and_the_run_goes_on(client: Any) -> None:
    run = started(client)
    assert run != "boss.1" and len(run) == 22  # a random id, not the handle's
    request = pending_of(client, run)
    assert request["prompt"] == "ship it?" and request["data"]["path"] == ["root", "boss.1", "asker.1"]


def test_start_with_wait_answers_with_the_first_result(client: Any) -> None:
    response = client.post("/runs?wait=5", json={"prompt": "go", "agent": "worker"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "done" and body["result"]["text"] == "did go"
    assert body["result"]["handle_id"] == "root/worker.1"


def test_read_answers_202_while_the_run_runs(tmp_path: Any) -> None:
    gate = threading.Event()
    app = make_app(TOOLNEXUS_ENTRY="slow")
    ext = Toolnexus(app, registry=team.registry(lambda: gate.wait(HANG)), generate=team.model(), authorize=by_header)
    client = as_user(app.test_client())
    try:
        run = started(client)
        shown = client.get(f"/runs/{run}?wait=0.1")
        assert shown.status_code == 202 and shown.get_json()["status"] == "running" and shown.get_json()["state"] == "running"
        gate.set()
        assert client.get(f"/runs/{run}?wait=5").get_json()["result"]["text"] == "slow done"
    finally:
        gate.set()
        with app.app_context():
            ext.let_go()


def test_an_answer_resumes_the_run(client: Any) -> None:
    run = started(client)
    request = pending_of(client, run)
    answered = client.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True})
    assert answered.status_code == 202 and answered.get_json()["status"] == "running"
    done = client.get(f"/runs/{run}?wait=5").get_json()
    assert done["status"] == "done" and done["result"]["text"] == "boss: asker: approved"


def test_exactly_one_of_many_concurrent_answers_wins(client: Any, app: Any) -> None:
    run = started(client)
    request = pending_of(client, run)
    codes: list[int] = []
    lock = threading.Lock()

    def answer() -> None:
        answered = as_user(app.test_client()).post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True})
        status = answered.status_code
        with lock:
            codes.append(status)

    threads = [threading.Thread(target=answer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG)
    assert sorted(codes) == [202] + [409] * 7
    assert client.get(f"/runs/{run}?wait=5").get_json()["result"]["text"] == "boss: asker: approved"


def test_a_wrong_answer_is_409_and_the_run_still_waits(client: Any) -> None:
    run = started(client)
    request = pending_of(client, run)
    wrong = client.post(f"/runs/{run}/answer", json={"id": "req_other", "ok": True})
    assert wrong.status_code == 409 and wrong.get_json()["pending"]["id"] == request["id"]
    assert client.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True}).status_code == 202


def test_a_late_answer_is_409(client: Any) -> None:
    run = started(client)
    request = pending_of(client, run)
    assert client.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True}).status_code == 202
    client.get(f"/runs/{run}?wait=5")
    late = client.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True})
    assert late.status_code == 409 and "not waiting" in late.get_json()["error"]


def test_an_unknown_run_is_404(client: Any) -> None:
    run = started(client)
    for path in ("/runs/boss.1", "/runs/boss.1/events"):  # a handle's id is no run id
        assert client.get(path).status_code == 404
    assert client.post("/runs/boss.1/answer", json={"id": "x", "ok": True}).status_code == 404
    assert client.get("/runs/boss.1%2Fasker.1").status_code == 404
    assert client.get(f"/runs/{run[:-1]}").status_code == 404


@pytest.mark.parametrize(
    "payload",
    [b"{not json", b'{"id": "x", "ok": NaN}', b"[" * 100_000 + b"]" * 100_000, b'{"id": 3, "ok": true}', b'"x"', b'{"ok": true}', b"\xff\xfe"],
    ids=["malformed", "nan", "100000-deep", "wrong-type", "not-an-object", "no-id", "not-utf8"],
)
def test_a_bad_answer_body_is_400_never_500(client: Any, payload: bytes) -> None:
    run = started(client)
    pending_of(client, run)
    response = client.post(f"/runs/{run}/answer", data=payload, content_type="application/json")
    assert response.status_code == 400, response.get_data()


@pytest.mark.parametrize("payload", [b"{", b"[" * 100_000, b'{"prompt": 3}', b'{"prompt": "  "}', b"[]", b'{"prompt": "x", "agent": "nobody"}'])
def test_a_bad_start_body_is_400(client: Any, payload: bytes) -> None:
    assert client.post("/runs", data=payload, content_type="application/json").status_code == 400


def test_a_bad_wait_or_event_id_is_400(client: Any) -> None:
    run = started(client)
    assert client.get(f"/runs/{run}?wait=soon").status_code == 400
    assert client.get(f"/runs/{run}?wait=-1").status_code == 400
    assert client.get(f"/runs/{run}/events", headers={"Last-Event-ID": "12; DROP"}).status_code == 400


def sse_events(response: Any) -> list[dict[str, Any]]:
    """The frames of an event-stream response, read to its end."""
    text = b"".join(response.response).decode()
    frames = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "data" in fields:
            frames.append({"id": fields["id"], "event": fields["event"], "data": json.loads(fields["data"])})
    return frames


def test_the_events_route_streams_the_run_and_a_reconnect_resumes_after_last_event_id(client: Any) -> None:
    run = started(client)
    response = client.get(f"/runs/{run}/events")
    assert response.headers["Content-Type"] == "text/event-stream" and response.headers["Cache-Control"] == "no-cache"
    assert response.headers["X-Accel-Buffering"] == "no"
    first = run_in_thread(lambda: sse_events(response), HANG)
    assert first[0]["event"] == "state" and first[-1]["event"] == "result" and first[-1]["data"]["data"]["status"] == "pending"
    assert all(frame["id"] == frame["data"]["id"] and frame["event"] == frame["data"]["kind"] for frame in first)
    request = pending_of(client, run)
    client.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True})
    again = client.get(f"/runs/{run}/events", headers={"Last-Event-ID": first[-1]["id"]})
    rest = run_in_thread(lambda: sse_events(again), HANG)
    assert rest[-1]["data"]["data"] == {"status": "done", "text": "boss: asker: approved", "total_tokens": 20}
    ids = [int(f["id"]) for f in first + rest if "." not in f["id"]]
    assert ids == sorted(set(ids))


def test_the_extension_builds_one_runtime_per_process_from_the_config(tmp_path: Any) -> None:
    app = make_app(TOOLNEXUS_STATE=str(tmp_path / "cfg.db"), TOOLNEXUS_RUNTIME_ID="cfg", TOOLNEXUS_ENTRY="worker", TOOLNEXUS_INLINE=True)
    ext = Toolnexus(public=True)
    ext.init_app(app)
    try:
        with app.app_context():
            rt = ext.runtime()
            assert ext.runtime() is rt and rt.inline
            assert rt._tree.store.runtime_id == "cfg"
        response = app.test_client().post("/runs?wait=5", json={"prompt": "hi"})
        assert response.status_code == 200 and response.get_json()["result"]["text"] == "did hi"
    finally:
        with app.app_context():
            ext.let_go()


def test_unknown_options_are_refused() -> None:
    from toolnexus import ToolnexusError

    with pytest.raises(ToolnexusError, match="unknown option"):
        Toolnexus(flask.Flask("x"), colour="blue")
