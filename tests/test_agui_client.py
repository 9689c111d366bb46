"""``@ag-ui/client`` 1.0.0's ``HttpAgent`` (node) holds a conversation with the AG-UI endpoint
of a Flask app under gunicorn (two worker processes, threads, one SQLite state): a
teammate's work as a span, an approval as an interrupt and its resume, a frontend tool the
client answers, and the final answer. The client must see every run end with
``RUN_FINISHED`` (it counts a stream that just stops as a success) and say nothing about
what it was sent (it warns, and carries on, on a field it does not know or a state patch
that does not apply). The model's text reaches the client while the model still writes it,
and a client that goes mid-reply interrupts its run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("flask")
pytest.importorskip("gunicorn")

from _agui_team import check_run  # noqa: E402
from _gunicorn import free_port, serving  # noqa: E402
from _services import missing, service_url  # noqa: E402
from conftest import run_in_thread  # noqa: E402
from toolnexus.testing import ScriptedLLMServer, text_completion  # noqa: E402

TESTS = Path(__file__).resolve().parent
CLIENT_S = 60
STORY = "Once upon a time"


@pytest.fixture(scope="module")
def node_modules() -> str:
    found = service_url("agui-client")
    if shutil.which("node") is None:
        missing("node is not installed (the AG-UI client runs on node 20)")
    if not (Path(found) / "@ag-ui" / "client").is_dir():
        pytest.fail(f"TOOLNEXUS_TEST_AGUI_CLIENT={found} holds no @ag-ui/client")
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: Any, node_modules: str) -> Any:
    port = free_port()
    state = str(tmp_path_factory.mktemp("agui") / "threads.db")
    with serving(port, str(TESTS), f"_agui_team:app({state!r})", "--threads", "4", "--worker-class", "gthread"):
        yield f"http://127.0.0.1:{port}/agui"


def converse(url: str, node_modules: str, thread: str, token: str = "alice") -> tuple[dict[str, Any], str]:
    env = {**os.environ, "NODE_PATH": node_modules}
    done = subprocess.run(
        ["node", str(TESTS / "_agui_client.cjs"), url, token, thread],
        capture_output=True, text=True, timeout=CLIENT_S, env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_httpagent_holds_a_conversation_with_the_endpoint_under_gunicorn(server: str, node_modules: str) -> None:
    seen, said = converse(server, node_modules, "thread-1")
    assert "[ag-ui]" not in said and "Failed to apply" not in said, said  # nothing stripped, no patch dropped
    first, second, third = seen["runs"]
    for each in seen["runs"]:
        assert "rejected" not in each and each["errors"] == [], each
        assert each["events"][0]["type"] == "RUN_STARTED" and each["events"][-1]["type"] == "RUN_FINISHED"

    # The teammate's work: a span, its events tagged with its run id.
    spans = [e for e in first["events"] if e["type"] == "SUBAGENT_STARTED"]
    assert [(e["name"], e["parentToolCallId"]) for e in spans] == [("publisher", "call-task-1")]
    child = spans[0]["subagentRunId"]
    tagged = {e["type"] for e in first["events"] if e.get("subagentRunId") == child}
    assert {"TEXT_MESSAGE_CONTENT", "TOOL_CALL_START", "SUBAGENT_FINISHED"} <= tagged

    # The approval: an interrupt the client keeps until it resumes it.
    assert first["finished"]["outcome"] == "interrupt"
    (asked,) = first["pendingInterrupts"]
    assert asked["reason"] == "approval" and asked["message"] == "publish Q3?" and asked["subagentRunId"] == child

    # The resume: the teammate finishes, and the agent calls the frontend tool.
    assert second["finished"]["outcome"] == "success" and second["finished"]["pendingToolCallIds"] == ["call-pick-1"]
    assert second["pendingInterrupts"] == []
    assert [e["result"] for e in second["events"] if e["type"] == "SUBAGENT_FINISHED"] == ["publisher: published Q3"]

    # The frontend tool's result: the final answer.
    assert third["result"] == "Done: publisher: published Q3; colour blue."

    # What the client built: the history, the teammate's messages attributed to it, the state.
    messages = seen["messages"]
    assert [m["role"] for m in messages if "subagentRunId" not in m][0] == "user"
    assert {m["subagentRunId"] for m in messages if "subagentRunId" in m} == {child}
    assert messages[-1] == {"id": messages[-1]["id"], "role": "assistant", "content": third["result"]}
    assert [m["id"] for m in messages if m.get("toolCallId") == "call-pick-1"] == ["tm-call-pick-1"]
    assert len({m["id"] for m in messages}) == len(messages)
    assert seen["state"]["theme"] == "dark"
    handles = seen["state"]["toolnexus"]["handles"]
    assert handles[seen["state"]["toolnexus"]["thread"]]["state"] == "idle"
    assert handles[child]["state"] == "closed"


def test_a_stranger_cannot_continue_the_thread(server: str, node_modules: str) -> None:
    converse(server, node_modules, "thread-2", token="alice")
    seen, _ = converse(server, node_modules, "thread-2", token="mallory")  # the same id: her own thread
    assert seen["runs"][0]["finished"]["outcome"] == "interrupt"
    assert seen["runs"][2]["result"] == "Done: publisher: published Q3; colour blue."



@pytest.fixture(scope="module")
def teller_server(tmp_path_factory: Any, node_modules: str) -> Any:
    """``teller`` behind the endpoint under gunicorn, its model a streaming server in this
    process whose replies stay open after their first word until ``held`` is set:
    ``(url, model, held)``."""
    held = threading.Event()
    state = str(tmp_path_factory.mktemp("agui-teller") / "threads.db")
    with ScriptedLLMServer(lambda request: text_completion(request, STORY), hold_rest_until=held) as model:
        port = free_port()
        app = f"_agui_team:teller_app({model.base_url!r}, {state!r}, heartbeat_s=0.05)"
        with serving(port, str(TESTS), app, "--threads", "2", "--worker-class", "gthread"):
            yield f"http://127.0.0.1:{port}/agui", model, held


@pytest.fixture
def teller(teller_server: Any) -> Any:
    url, model, held = teller_server
    held.clear()
    model.written.clear()
    yield url, model, held
    held.set()  # whatever the test left held goes on


@contextlib.contextmanager
def streaming_client(node_modules: str, url: str, thread: str, *mode: str) -> Iterator[subprocess.Popen[str]]:
    """``_agui_stream.cjs`` running against ``url``; killed if the block leaves it running."""
    client = subprocess.Popen(
        ["node", str(TESTS / "_agui_stream.cjs"), url, "alice", thread, *mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "NODE_PATH": node_modules},
    )
    try:
        yield client
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()


def said(client: subprocess.Popen[str]) -> str:
    """The client's next line, or the test fails after ``CLIENT_S``."""
    return str(run_in_thread(client.stdout.readline, CLIENT_S))  # type: ignore[union-attr]


def ended(client: subprocess.Popen[str]) -> dict[str, Any]:
    """What the client printed last, once it exits 0."""
    out, err = client.communicate(timeout=CLIENT_S)
    assert client.returncode == 0, err
    return json.loads(out.splitlines()[-1])


def test_the_models_text_reaches_httpagent_while_the_model_still_writes_it(node_modules: str, teller: Any) -> None:
    url, model, held = teller
    with streaming_client(node_modules, url, "thread-1") as client:
        first = json.loads(said(client).removeprefix("first "))
        assert not held.is_set() and [piece for _, piece in model.written] == ["Once "]  # the reply is still open
        assert first["delta"] == "Once "
        held.set()
        seen = ended(client)
    check_run(seen["events"])
    assert seen["events"][-1]["type"] == "RUN_FINISHED" and seen["events"][-1]["result"] == STORY
    pieces = [e["delta"] for e in seen["events"] if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert pieces[0] == "Once " and "".join(pieces) == STORY
    assert seen["messages"][-1]["content"] == STORY


def test_httpagent_going_mid_reply_interrupts_the_run_under_gunicorn(node_modules: str, teller: Any) -> None:
    url, model, held = teller
    with streaming_client(node_modules, url, "thread-2", "abort") as client:
        aborted = json.loads(said(client).removeprefix("aborted "))
        assert aborted[0] == "RUN_STARTED" and aborted[-1] == "RUN_ERROR"  # the client's own: it went
        # The first reply never ended (nothing was let go), yet the thread takes a new prompt:
        # the disconnect interrupted its run.
        assert said(client) == "started\n" and not held.is_set()
        assert [piece for _, piece in model.written] == ["Once ", "Once "]
        held.set()
        seen = ended(client)
    check_run(seen["events"])
    assert seen["events"][-1]["type"] == "RUN_FINISHED" and seen["events"][-1]["result"] == STORY
