"""CONTRACT §22 "Bad input" and §20 on the A2A endpoint: every JSON-RPC error code with HTTP
200 and nothing started, the served layer's refusals (who asks, body type and size, the
stream cap), and another caller's task answered as a missing one."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from _a2a_team import bearer, model, registry
from toolnexus import Runtime, a2a
from toolnexus.errors import ConfigError

werkzeug_test = pytest.importorskip("werkzeug.test")

ALICE = {"Authorization": "Bearer alice", "A2A-Version": "1.0"}
BOB = {"Authorization": "Bearer bob", "A2A-Version": "1.0"}


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = Runtime(registry(), generate=model())
    yield runtime
    runtime.close(runtime.root)


@pytest.fixture
def client(rt: Runtime) -> Any:
    return werkzeug_test.Client(a2a.wsgi_app(rt, agent="lead", authorize=bearer, max_streams=1))


def post(client: Any, body: Any, headers: dict[str, str] = ALICE, **options: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post("/", data=data, headers={"Content-Type": "application/json", **headers}, **options)


def rpc(client: Any, method: str, params: Any, headers: dict[str, str] = ALICE, id: Any = 7) -> dict[str, Any]:
    response = post(client, {"jsonrpc": "2.0", "id": id, "method": method, "params": params}, headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["Content-Type"] == "application/json"
    return json.loads(response.get_data())


def code(reply: dict[str, Any]) -> int:
    assert "result" not in reply, reply
    return int(reply["error"]["code"])


def message(text: str, **more: Any) -> dict[str, Any]:
    return {"messageId": "m-" + text.replace(" ", "-"), "role": "ROLE_USER", "parts": [{"text": text}], **more}


def started(rt: Runtime) -> list[str]:
    """The handles of runs ever started under the root (closed ones too)."""
    return [view.id for view in rt.handles() if view.id != "root"]


def ask(client: Any) -> dict[str, Any]:
    """A task of alice's that waits for input."""
    task = rpc(client, "SendMessage", {"message": message("ask ship")})["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


def done(client: Any) -> dict[str, Any]:
    task = rpc(client, "SendMessage", {"message": message("hello")})["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return task


# --- JSON-RPC -----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"{", b"", b"\xff\xfe", b'{"jsonrpc": "2.0", "id": 1, "method": NaN}'])
def test_a_body_that_is_not_json_is_32700_with_id_null_and_starts_nothing(
    client: Any, rt: Runtime, body: bytes
) -> None:
    response = post(client, body)
    assert response.status_code == 200
    reply = json.loads(response.get_data())
    assert code(reply) == -32700 and reply["id"] is None
    assert started(rt) == []


@pytest.mark.parametrize(
    "body",
    [
        [{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}],
        "GetTask",
        5,
        {"id": 1, "method": "SendMessage", "params": {"message": message("hi")}},
        {"jsonrpc": "1.0", "id": 1, "method": "SendMessage", "params": {"message": message("hi")}},
        {"jsonrpc": "2.0", "id": True, "method": "SendMessage", "params": {"message": message("hi")}},
        {"jsonrpc": "2.0", "id": 1.5, "method": "SendMessage", "params": {"message": message("hi")}},
        {"jsonrpc": "2.0", "id": 1, "params": {"message": message("hi")}},
    ],
)
def test_what_is_not_a_json_rpc_request_is_32600_and_starts_nothing(client: Any, rt: Runtime, body: Any) -> None:
    reply = json.loads(post(client, body).get_data())
    assert code(reply) == -32600
    assert reply["id"] in (None, 1)
    assert started(rt) == []


@pytest.mark.parametrize("method", ["message/send", "tasks/get", "sendMessage", "Shutdown"])
def test_a_method_a2a_does_not_have_is_32601(client: Any, method: str) -> None:
    assert code(rpc(client, method, {"message": message("hi")})) == -32601


def test_a2a_methods_not_offered_get_their_own_errors(client: Any) -> None:
    assert code(rpc(client, "CreateTaskPushNotificationConfig", {})) == -32003
    assert code(rpc(client, "ListTasks", {})) == -32004


@pytest.mark.parametrize("version", [None, "", "0.3", "2.0", "abc", "1.x"])
def test_an_a2a_version_other_than_1_x_is_32009_and_starts_nothing(client: Any, rt: Runtime, version: Any) -> None:
    headers = {"Authorization": "Bearer alice"} if version is None else {**ALICE, "A2A-Version": version}
    reply = rpc(client, "SendMessage", {"message": message("hello")}, headers)
    assert code(reply) == -32009
    assert "is not supported" in reply["error"]["message"]
    assert started(rt) == []


@pytest.mark.parametrize("version", ["1.0", "1", "1.5", "1.0.3"])
def test_every_1_x_version_is_served(client: Any, version: str) -> None:
    reply = rpc(client, "SendMessage", {"message": message("hello")}, {**ALICE, "A2A-Version": version})
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_the_version_may_come_as_a_query_parameter(client: Any) -> None:
    response = client.post(
        "/?A2A-Version=1.0",
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}),
        headers={"Content-Type": "application/json", "Authorization": "Bearer alice"},
    )
    assert code(json.loads(response.get_data())) == -32001


@pytest.mark.parametrize(
    "params",
    [
        None,
        [],
        {},
        {"message": "hi"},
        {"message": {"role": "ROLE_USER", "parts": [{"text": "hi"}]}},
        {"message": {"messageId": 5, "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER"}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}},
        {"message": {"messageId": "m", "parts": [{"text": "hi"}]}},
        {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}},
        {"message": {"messageId": "m", "role": "user", "parts": [{"text": "hi"}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi", "data": {}}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"mediaType": "text/plain"}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": 5}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": ["hi"]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"raw": "not base64!"}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"raw": "aGVsbG8="}]}},
        {"message": message("hi"), "configuration": {"historyLength": -1}},
        {"message": message("hi"), "configuration": {"returnImmediately": "yes"}},
        {"message": message("hi"), "configuration": []},
    ],
)
@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
def test_params_that_do_not_fit_a_message_are_32602_and_start_nothing(
    client: Any, rt: Runtime, method: str, params: Any
) -> None:
    reply = rpc(client, method, params)
    assert code(reply) == -32602, reply
    assert started(rt) == []


@pytest.mark.parametrize("method", ["GetTask", "CancelTask", "SubscribeToTask"])
@pytest.mark.parametrize("params", [{}, {"id": 5}, {"id": ""}, [], {"id": "x", "historyLength": -2}])
def test_params_that_do_not_name_a_task_are_32602(client: Any, method: str, params: Any) -> None:
    assert code(rpc(client, method, params)) == -32602


# --- tasks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GetTask", "CancelTask", "SubscribeToTask"])
def test_an_unknown_task_is_32001(client: Any, method: str) -> None:
    assert code(rpc(client, method, {"id": "no-such-task"})) == -32001


def test_a_message_on_an_unknown_task_is_32001_and_starts_nothing(client: Any, rt: Runtime) -> None:
    for method in ("SendMessage", "SendStreamingMessage"):
        assert code(rpc(client, method, {"message": message("yes", taskId="no-such-task")})) == -32001
    assert started(rt) == []


def test_another_callers_task_is_32001_on_every_method_and_stays_as_it_was(client: Any, rt: Runtime) -> None:
    task = ask(client)
    answer = {"message": message("yes", taskId=task["id"])}
    for method, params in [
        ("GetTask", {"id": task["id"]}),
        ("CancelTask", {"id": task["id"]}),
        ("SubscribeToTask", {"id": task["id"]}),
        ("SendMessage", answer),
        ("SendStreamingMessage", answer),
    ]:
        reply = rpc(client, method, params, BOB)
        assert code(reply) == -32001, (method, reply)
        assert reply["error"]["message"] == f"Task {task['id']} not found"
    shown = rpc(client, "GetTask", {"id": task["id"]})["result"]
    assert shown["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert len(rt.open_requests()) == 1


def test_cancel_of_an_ended_task_is_32002(client: Any) -> None:
    task = done(client)
    reply = rpc(client, "CancelTask", {"id": task["id"]})
    assert code(reply) == -32002
    assert rpc(client, "GetTask", {"id": task["id"]})["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_message_to_or_a_subscribe_of_an_ended_task_is_32004_and_starts_nothing(client: Any, rt: Runtime) -> None:
    task = done(client)
    before = started(rt)
    for method in ("SendMessage", "SendStreamingMessage"):
        reply = rpc(client, method, {"message": message("again", taskId=task["id"])})
        assert code(reply) == -32004
        assert "terminal state: TASK_STATE_COMPLETED" in reply["error"]["message"]
    assert code(rpc(client, "SubscribeToTask", {"id": task["id"]})) == -32004
    assert started(rt) == before


def test_a_message_whose_context_is_not_the_tasks_is_32602_and_answers_nothing(client: Any, rt: Runtime) -> None:
    task = ask(client)
    reply = rpc(client, "SendMessage", {"message": message("yes", taskId=task["id"], contextId="another")})
    assert code(reply) == -32602
    assert len(rt.open_requests()) == 1


def test_a_failure_of_the_library_is_32603_not_a_500(rt: Runtime) -> None:
    client = werkzeug_test.Client(a2a.wsgi_app(rt, agent="lead", authorize=bearer))
    rt.close(rt.root)  # nothing can be spawned any more
    reply = rpc(client, "SendMessage", {"message": message("hello")})
    assert code(reply) == -32603
    assert "closed" in reply["error"]["message"]


# --- the served layer -----------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{"A2A-Version": "1.0"}, {"Authorization": "Bearer mallory", "A2A-Version": "1.0"}])
def test_a_caller_authorize_refuses_gets_401_reads_nothing_and_starts_nothing(
    client: Any, rt: Runtime, headers: dict[str, str]
) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("hi")}}
    response = post(client, body, headers)
    assert response.status_code == 401
    assert json.loads(response.get_data())["error"]["code"] == -32000
    assert client.get("/.well-known/agent-card.json", headers=headers).status_code == 401
    assert started(rt) == []


def test_an_endpoint_with_neither_authorize_nor_public_is_a_config_error(rt: Runtime) -> None:
    with pytest.raises(ConfigError, match="authorize="):
        a2a.wsgi_app(rt, agent="lead")
    with pytest.raises(ConfigError, match="no agent 'nobody'"):
        a2a.wsgi_app(rt, agent="nobody", public=True)


def test_a_body_not_sent_as_json_is_415_and_one_too_large_413(rt: Runtime) -> None:
    client = werkzeug_test.Client(a2a.wsgi_app(rt, agent="lead", authorize=bearer, max_body=200))
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("hi")}})
    assert client.post("/", data=body, headers={**ALICE, "Content-Type": "text/plain"}).status_code == 415
    large = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("x" * 300)}})
    assert post(client, large).status_code == 413
    assert started(rt) == []


def test_paths_and_methods_the_endpoint_does_not_have(client: Any) -> None:
    assert client.get("/", headers=ALICE).status_code == 405
    assert client.post("/.well-known/agent-card.json", headers=ALICE).status_code == 405
    assert client.get("/elsewhere", headers=ALICE).status_code == 404


def test_one_stream_more_than_max_streams_is_503_with_retry_after_and_starts_nothing(client: Any, rt: Runtime) -> None:
    first = post(
        client,
        {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": message("wait here")}},
        buffered=False,
    )
    assert first.status_code == 200 and first.headers["Content-Type"].startswith("text/event-stream")
    count = len(started(rt))
    second = post(
        client, {"jsonrpc": "2.0", "id": 2, "method": "SendStreamingMessage", "params": {"message": message("hello")}}
    )
    assert second.status_code == 503 and second.headers["Retry-After"]
    assert json.loads(second.get_data())["error"]["code"] == -32000
    assert len(started(rt)) == count
    task_id = json.loads(next(iter(first.response)).decode().removeprefix("data: "))["result"]["task"]["id"]
    assert rpc(client, "CancelTask", {"id": task_id})["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    first.close()  # the slot comes back
    assert rpc(client, "SubscribeToTask", {"id": done(client)["id"]})["error"]["code"] == -32004
