"""The Flask routes as a served surface (CONTRACT §20 "For the Flask extension,
precisely"): closed by default, runs bound to their principal under random ids (404 for
anyone else, on every route, with nothing changed), JSON bodies only (415), a cap on open
streams per process (503 with Retry-After), and ids no store can hold refused (400)."""

from __future__ import annotations

import base64
import threading
from typing import Any

import pytest

flask = pytest.importorskip("flask")

import _stream_team as team  # noqa: E402
from toolnexus import ConfigError  # noqa: E402
from toolnexus.flask import Toolnexus, blueprint  # noqa: E402

HANG = 10.0


def by_header() -> str | None:
    return flask.request.headers.get("X-User")


def make_app(tmp_path: Any, **options: Any) -> tuple[Any, Toolnexus]:
    app = flask.Flask("tn-served")
    app.config.update(TOOLNEXUS_ENTRY="boss", TOOLNEXUS_STATE=str(tmp_path / "runs.db"))
    options.setdefault("authorize", by_header)
    ext = Toolnexus(app, registry=team.registry(options.pop("gate", None)), generate=team.model(), **options)
    return app, ext


@pytest.fixture
def app(tmp_path: Any) -> Any:
    app, ext = make_app(tmp_path)
    yield app
    with app.app_context():
        ext.let_go()


def user(app: Any, name: str | None) -> Any:
    client = app.test_client()
    if name is not None:
        client.environ_base["HTTP_X_USER"] = name
    return client


def handles(app: Any) -> list[str]:
    with app.app_context():
        return [view.id for view in app.extensions["toolnexus"].runtime().handles()]


def pending_run(client: Any) -> tuple[str, dict[str, Any]]:
    started = client.post("/runs?wait=5", json={"prompt": "go"})
    assert started.status_code == 200 and started.get_json()["status"] == "pending", started.get_json()
    return started.get_json()["run"], started.get_json()["pending"]


# --- who asks -------------------------------------------------------------------------------


def test_without_an_authorization_hook_the_routes_refuse_to_register_unless_public(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="authorize="):
        Toolnexus(flask.Flask("closed"), registry=team.registry(), generate=team.model())
    with pytest.raises(ConfigError, match="not both"):
        Toolnexus(
            flask.Flask("both"), registry=team.registry(), generate=team.model(), authorize=by_header, public=True
        )
    Toolnexus(
        flask.Flask("no-routes"), registry=team.registry(), generate=team.model(), url_prefix=None
    )  # nothing served
    app, ext = make_app(tmp_path, authorize=None, public=True)
    try:
        assert user(app, None).post("/runs?wait=5", json={"prompt": "go"}).status_code == 200  # open, as asked
    finally:
        with app.app_context():
            ext.let_go()


def test_routes_registered_without_the_extensions_hook_answer_401(tmp_path: Any) -> None:
    app = flask.Flask("by-hand")
    ext = Toolnexus(app, registry=team.registry(), generate=team.model(), url_prefix=None)
    app.register_blueprint(blueprint(), url_prefix="/runs")
    assert user(app, "alice").post("/runs", json={"prompt": "go"}).status_code == 401
    with app.app_context():
        assert ext.runtime().handles()[1:] == []
        ext.let_go()


def test_no_credentials_is_401_on_every_route_and_nothing_starts_or_changes(app: Any) -> None:
    run, request = pending_run(user(app, "alice"))
    before = handles(app)
    nobody = user(app, None)
    assert nobody.post("/runs", json={"prompt": "go"}).status_code == 401
    assert nobody.get(f"/runs/{run}").status_code == 401
    assert nobody.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True}).status_code == 401
    assert nobody.get(f"/runs/{run}/events").status_code == 401
    assert handles(app) == before
    assert user(app, "alice").get(f"/runs/{run}").get_json()["status"] == "pending"


def test_a_stranger_gets_404_for_another_principals_run_on_every_route_and_nothing_changes(app: Any) -> None:
    owner, stranger = user(app, "alice"), user(app, "mallory")
    run, request = pending_run(owner)
    before = handles(app)
    missing = stranger.get("/runs/AAAAAAAAAAAAAAAAAAAAAA")
    for response in (
        stranger.get(f"/runs/{run}"),
        stranger.get(f"/runs/{run}?wait=1"),
        stranger.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True}),
        stranger.get(f"/runs/{run}/events"),
        stranger.get(f"/runs/{run}/events", headers={"Last-Event-ID": "1"}),
    ):
        assert response.status_code == 404 and response.get_json() == {"error": f"no run {run!r}"}
    assert missing.status_code == 404  # the same answer as a run that does not exist
    assert handles(app) == before
    assert owner.get(f"/runs/{run}").get_json()["status"] == "pending"
    assert owner.post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True}).status_code == 202


def test_the_hook_reads_flask_request_or_takes_it_and_may_abort_itself(tmp_path: Any) -> None:
    seen: list[Any] = []

    def refuses(request: Any) -> str:
        seen.append(request.path)
        flask.abort(403)

    app, ext = make_app(tmp_path, authorize=refuses)
    try:
        assert user(app, "alice").post("/runs", json={"prompt": "go"}).status_code == 403
        assert seen == ["/runs"] and handles(app) == ["root"]
    finally:
        with app.app_context():
            ext.let_go()


def test_a_hook_that_answers_true_admits_everyone_as_one_shared_principal(tmp_path: Any) -> None:
    app, ext = make_app(tmp_path, authorize=lambda: flask.request.headers.get("X-Key") == "k")
    try:
        first, second = app.test_client(), app.test_client()
        for client in (first, second):
            client.environ_base["HTTP_X_KEY"] = "k"
        run, _ = pending_run(first)
        assert second.get(f"/runs/{run}").status_code == 200
        assert user(app, None).get(f"/runs/{run}").status_code == 401
    finally:
        with app.app_context():
            ext.let_go()


# --- what belongs to whom ---------------------------------------------------------------------


def test_run_ids_carry_128_random_bits_and_are_never_agent_counters(app: Any) -> None:
    client = user(app, "alice")
    ids = [client.post("/runs", json={"prompt": "go", "agent": "worker"}).get_json()["run"] for _ in range(20)]
    assert len(set(ids)) == 20
    for run in ids:
        assert len(base64.urlsafe_b64decode(run + "==")) == 16 and "." not in run
    assert set(client.get(f"/runs/{ids[0]}?wait=5").get_json()["tree"][0]["id"].split("/")[1:]) == {"worker.1"}


def test_every_worker_process_agrees_who_a_run_belongs_to(tmp_path: Any) -> None:
    first_app, first = make_app(tmp_path)
    second_app, second = make_app(tmp_path)  # another worker: its own runtime on the same state
    try:
        run, request = pending_run(user(first_app, "alice"))
        assert user(second_app, "mallory").get(f"/runs/{run}").status_code == 404
        assert (
            user(second_app, "alice").post(f"/runs/{run}/answer", json={"id": request["id"], "ok": True}).status_code
            == 202
        )
        assert user(first_app, "alice").get(f"/runs/{run}?wait=5").get_json()["status"] == "done"
    finally:
        for app, ext in ((first_app, first), (second_app, second)):
            with app.app_context():
                ext.let_go()


def test_pruning_a_run_takes_its_binding_with_it(app: Any) -> None:
    client = user(app, "alice")
    run = client.post("/runs?wait=5", json={"prompt": "go", "agent": "worker"}).get_json()["run"]
    with app.app_context():
        rt = app.extensions["toolnexus"].runtime()
        handle = client.get(f"/runs/{run}").get_json()["tree"][0]["id"]
        rt.close(handle)
        rt.prune(0)
        store = rt._tree.store.state
        assert store.execute("SELECT COUNT(*) FROM tn_bindings WHERE handle_id = ?", (handle,)) == [(0,)]
    assert client.get(f"/runs/{run}").status_code == 404


# --- bodies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
        "json",
    ],
)
def test_a_body_that_is_not_json_is_415_and_starts_or_answers_nothing(app: Any, content_type: str | None) -> None:
    client = user(app, "alice")
    run, request = pending_run(client)
    before = handles(app)
    headers = {"Content-Type": content_type} if content_type else {}
    assert client.post("/runs", data=b'{"prompt": "go"}', headers=headers).status_code == 415
    answer = b'{"id": "%s", "ok": true}' % request["id"].encode()
    assert client.post(f"/runs/{run}/answer", data=answer, headers=headers).status_code == 415
    assert handles(app) == before
    assert client.get(f"/runs/{run}").get_json()["status"] == "pending"


def test_json_with_a_charset_is_json(app: Any) -> None:
    response = user(app, "alice").post(
        "/runs", data=b'{"prompt": "go"}', headers={"Content-Type": "Application/JSON; charset=utf-8"}
    )
    assert response.status_code == 202


def test_a_body_over_the_limit_is_413_and_starts_nothing(tmp_path: Any) -> None:
    app, ext = make_app(tmp_path)
    app.config["TOOLNEXUS_MAX_BODY"] = 1000
    try:
        big = b'{"prompt": "' + b"x" * 2000 + b'"}'
        assert user(app, "alice").post("/runs", data=big, content_type="application/json").status_code == 413
        assert handles(app) == ["root"]
    finally:
        with app.app_context():
            ext.let_go()


# --- streams ----------------------------------------------------------------------------------------


def test_over_max_streams_one_more_is_503_with_retry_after_and_a_closed_stream_gives_its_slot_back(
    tmp_path: Any,
) -> None:
    gate = threading.Event()
    app, ext = make_app(tmp_path, gate=lambda: gate.wait(HANG), max_streams=2)
    app.config["TOOLNEXUS_ENTRY"] = "slow"
    client = user(app, "alice")
    try:
        runs = [client.post("/runs", json={"prompt": "go"}).get_json()["run"] for _ in range(3)]
        held = [client.get(f"/runs/{run}/events", buffered=False) for run in runs[:2]]
        assert [response.status_code for response in held] == [200, 200]
        refused = client.get(f"/runs/{runs[2]}/events")
        assert refused.status_code == 503 and int(refused.headers["Retry-After"]) > 0
        held[0].close()  # the client went: its slot comes back
        third = client.get(f"/runs/{runs[2]}/events", buffered=False)
        assert third.status_code == 200
        gate.set()
        for response in (held[1], third):  # the runs end: so do their streams, and their slots come back
            assert b"event: result" in b"".join(response.response)
            response.close()
        assert ext.slots(app).open == 0
    finally:
        gate.set()
        with app.app_context():
            ext.let_go()


def test_max_streams_comes_from_the_config_too(tmp_path: Any) -> None:
    app = flask.Flask("cfg")
    app.config.update(TOOLNEXUS_MAX_STREAMS=5)
    ext = Toolnexus(app, registry=team.registry(), generate=team.model(), authorize=by_header)
    assert ext.slots(app).limit == 5
    with pytest.raises(ConfigError, match="max_streams"):
        Toolnexus(
            flask.Flask("bad"), registry=team.registry(), generate=team.model(), authorize=by_header, max_streams=0
        )


@pytest.mark.parametrize("bad", ["9" * 5000, str(2**63), "9" * 19, "-1", "1.5x"])
def test_a_last_event_id_no_store_can_hold_is_400_never_500_nor_a_cut_stream(app: Any, bad: str) -> None:
    client = user(app, "alice")
    run, _ = pending_run(client)
    for response in (
        client.get(f"/runs/{run}/events", headers={"Last-Event-ID": bad}),
        client.get(f"/runs/{run}/events?after={bad}"),
    ):
        assert response.status_code == 400 and "not an event id" in response.get_json()["error"]


def test_a_reconnect_to_a_waiting_run_ends_at_once(app: Any) -> None:
    client = user(app, "alice")
    run, _ = pending_run(client)
    replay = client.get(f"/runs/{run}/events").get_data(as_text=True)
    assert replay.rstrip().splitlines()[-2].startswith("event: result")
    last = [line for line in replay.splitlines() if line.startswith("id: ")][-1][4:]
    again = client.get(f"/runs/{run}/events", headers={"Last-Event-ID": last}).get_data(as_text=True)
    assert again.strip() == "retry: 1000"  # no event, no keep-alive: the stream ended
