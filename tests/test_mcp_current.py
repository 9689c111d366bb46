"""The client against the official SDK's server (``mcp`` 2.3.0) speaking MCP 2026-07-28:
over stdio, and over stateless Streamable HTTP answering JSON or an event stream (CONTRACT
§18b "Client"). The server's questions are CONTRACT §18b "MRTR ⇒ suspension"."""

from __future__ import annotations

import threading

import pytest
import requests

from _mcp import sdk_http_server, sdk_stdio_command, wrong_sums
from conftest import HANG_TIMEOUT
from toolnexus import Answer, Client, ToolContext, Toolkit
from toolnexus import mcp
from toolnexus.testing import ScriptedModel, tool_messages

TRANSPORTS = ["stdio", "http-json", "http-sse"]
MODERN_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
}


@pytest.fixture(scope="module")
def endpoints():
    """The SDK's stateless HTTP servers, started once for the module: mode -> URL."""
    with sdk_http_server("http-json", ttl_ms=60000) as json_url, sdk_http_server("http-sse") as sse_url:
        yield {"http-json": json_url, "http-sse": sse_url}


@pytest.fixture(params=TRANSPORTS)
def server(request, endpoints, closing):
    if request.param == "stdio":
        return closing(mcp.stdio(sdk_stdio_command(), timeout=HANG_TIMEOUT))
    return closing(mcp.http(endpoints[request.param], timeout=HANG_TIMEOUT))


def test_the_client_speaks_2026_without_a_session_and_knows_the_server(server):
    toolkit = Toolkit(server.tools())
    assert server.protocol_version == "2026-07-28"
    assert server.server_info == {"name": "toolnexus-tests", "version": "2.3-tests"}
    assert server.session_id is None
    assert {"add", "echo", "confirm", "ask_name"} <= set(toolkit.tool_names())
    assert toolkit.execute("add", {"a": 5, "b": 6}).output == "11"
    assert toolkit.execute("echo", {"text": "one\ntwo"}).output == "one\ntwo"


def test_a_reply_the_server_streams_as_events_is_read(endpoints, closing):
    url = endpoints["http-sse"]
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "progress_echo", "arguments": {"text": "hi"}, "_meta": META}}
    raw = requests.post(url, json=message, headers={**MODERN_HEADERS, "Mcp-Name": "progress_echo"}, timeout=HANG_TIMEOUT)
    assert raw.headers["Content-Type"].startswith("text/event-stream")  # the SDK does stream this one
    assert closing(mcp.http(url)).call("progress_echo", {"text": "streamed"}).output == "streamed"


def test_threads_share_one_stateless_server(server):
    assert wrong_sums(server, threads=6, calls=10) == []


def test_a_change_comes_on_the_listen_and_the_list_is_listed_again(endpoints, closing):
    server = closing(mcp.http(endpoints["http-json"]))  # tools/list is fresh for 60 s there
    before = {each.name for each in server.tools()}
    adder = closing(mcp.http(endpoints["http-json"]))
    assert adder.call("add_tool", {"name": "late_comer"}).output == "added late_comer"
    deadline = threading.Event()
    for _ in range(100):  # the notification crosses another connection: wait for it, boundedly
        if "late_comer" in {each.name for each in server.tools()}:
            break
        deadline.wait(0.05)
    assert "late_comer" in {each.name for each in server.tools()} - before


def test_a_question_of_the_server_suspends_the_call_as_an_mcp_input_request(server):
    result = server.call("confirm", {"action": "deploy"})
    request = result.pending
    assert request is not None and request.kind == "mcp_input" and request.prompt == "Approve deploy?"
    data = request.data
    assert data["server"] == "toolnexus-tests" and data["tool"] == "confirm" and data["arguments"] == {"action": "deploy"}
    (key,) = data["inputRequests"]
    assert key.endswith("ask_approval") and data["inputRequests"][key]["method"] == "elicitation/create"
    assert data["requestState"].startswith("v1.") and data["message"] == "Approve deploy?"
    assert data["schema"]["required"] == ["approve"]


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        (dict(ok=True, data={"approve": True, "note": "go"}), "deploy: approve=True note=go"),
        (dict(ok=False, reason="declined"), "deploy: decline"),
        (dict(ok=False, reason="expired"), "deploy: cancel"),
    ],
)
def test_the_answer_is_sent_back_with_the_request_state_and_the_servers_result_is_the_tools(server, answer, text):
    request = server.call("confirm", {"action": "deploy"}).pending
    result = server.call("confirm", {"action": "deploy"}, ToolContext(answer=Answer(id=request.id, **answer), request=request))
    assert not result.is_error and result.output == text


def test_answers_go_to_their_questions_by_key(server):
    request = server.call("ask_name", {"question": "Your name?"}).pending
    assert sorted(request.data["inputRequests"]) == ["colour", "name"] and request.prompt == "Your name?"
    answer = Answer(id=request.id, ok=True, data={"name": {"value": "Ada"}, "colour": {"value": "green"}})
    output = server.call("ask_name", {"question": "Your name?"}, ToolContext(answer=answer, request=request)).output
    assert "state=asked-once" in output
    assert "'name': {'action': 'accept', 'content': {'value': 'Ada'}}" in output
    assert "'colour': {'action': 'accept', 'content': {'value': 'green'}}" in output


def test_on_input_answers_the_server_inline(endpoints, closing):
    asked = []

    def on_input(request):
        asked.append(request.prompt)
        return Answer(id=request.id, ok=True, data={"approve": False})

    server = closing(mcp.http(endpoints["http-sse"], on_input=on_input))
    assert server.call("confirm", {"action": "rollback"}).output == "rollback: approve=False note="
    assert asked == ["Approve rollback?"]


def test_wait_for_answers_the_question_in_a_run_and_the_model_sees_the_servers_result(endpoints, closing):
    server = closing(mcp.http(endpoints["http-json"]))
    calls = [{"id": "c1", "name": "confirm", "arguments": {"action": "publish"}}]
    model = ScriptedModel({"m": [{"tool_calls": calls}, lambda request: {"content": tool_messages(request)[-1]}]})
    seen = []

    def wait_for(request):
        seen.append(request.kind)
        return Answer(id=request.id, ok=True, data={"approve": True, "note": "by wait_for"})

    result = Client(generate=model, model="m", wait_for=wait_for).run("publish it", server.tools())
    assert seen == ["mcp_input"]
    assert result.status == "done" and result.text == "publish: approve=True note=by wait_for"


def test_a_declined_question_in_a_run_reaches_the_server_and_the_run_goes_on(endpoints, closing):
    server = closing(mcp.http(endpoints["http-json"]))
    calls = [{"id": "c1", "name": "confirm", "arguments": {"action": "publish"}}]
    model = ScriptedModel({"m": [{"tool_calls": calls}, lambda request: {"content": tool_messages(request)[-1]}]})
    client = Client(generate=model, model="m")
    pending = client.run("publish it", server.tools())
    assert pending.status == "pending" and pending.pending.kind == "mcp_input"
    resumed = client.resume(pending.pending, Answer(id=pending.pending.id, ok=False, reason="declined"), server.tools(), messages=pending.messages)
    assert resumed.status == "done" and resumed.text == "publish: decline"


def test_close_ends_the_listen_and_its_thread(endpoints):
    server = mcp.http(endpoints["http-sse"])  # the SDK offers tools.listChanged: a listen is opened
    server.tools()
    listening = [each for each in threading.enumerate() if each.name == "toolnexus-mcp-listen"]
    assert listening
    server.close()
    for each in listening:
        each.join(HANG_TIMEOUT)
    assert not any(each.is_alive() for each in listening)
