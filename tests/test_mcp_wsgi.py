"""``toolnexus.mcp.wsgi_app`` under gunicorn with two worker processes, driven by the
official SDK's client (``mcp`` 2.3.0) in its 2026-07-28 and legacy modes, and by this
package's own client (CONTRACT §18b "Server")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from _gunicorn import free_port, serving
from _mcp_served_app import build
from _sdk_client import sdk_client, texts
from _wsgi_server import wsgi_serving
from toolnexus import Answer, ToolContext
from toolnexus import mcp

HERE = Path(__file__).parent
SECRET = "a-test-secret-of-the-served-team"
TOKEN = "t0ken-for-the-tests"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    """The served team under ``gunicorn -w 2`` on a SQLite state, behind a bearer token."""
    folder = tmp_path_factory.mktemp("served")
    env = {"MCP_TEST_STATE": str(folder / "team.db"), "MCP_TEST_SECRET": SECRET, "MCP_TEST_TOKEN": TOKEN}
    port = free_port()
    with serving(port, str(HERE), "_mcp_served_app:app", env=env):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module")
def recycling(tmp_path_factory):
    """The same team under gunicorn whose workers each serve one request and are replaced:
    no two requests are answered by one process. Yields the URL and the request log."""
    folder = tmp_path_factory.mktemp("recycled")
    log = folder / "requests.log"
    env = {"MCP_TEST_STATE": str(folder / "team.db"), "MCP_TEST_SECRET": SECRET, "MCP_TEST_LOG": str(log), "MCP_TEST_SSE": "1"}
    port = free_port()
    with serving(port, str(HERE), "_mcp_served_app:app", "--max-requests", "1", env=env):
        yield f"http://127.0.0.1:{port}/mcp", log


def test_the_sdks_client_finds_the_served_tools_in_2026(url):
    async def steps(client):
        listed = await client.list_tools()
        return client.protocol_version, client.server_info, listed, await client.call_tool("add", {"a": 2, "b": 40})

    version, info, listed, added = sdk_client(url, steps, headers=BEARER)
    assert version == "2026-07-28" and info.name == "toolnexus"
    assert [tool.name for tool in listed.tools] == ["lead", "add", "ask_approval"]
    assert listed.tools[0].description == "Leads releases: give it what to release"
    assert listed.tools[0].input_schema == {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}
    assert texts(added) == "42" and not added.is_error


def test_the_sdks_legacy_mode_is_served_without_a_session(url):
    async def steps(client):
        listed = await client.list_tools()
        return client.protocol_version, listed, await client.call_tool("ask_approval", {"action": "deploy"})

    version, listed, asked = sdk_client(url, steps, mode="legacy", headers=BEARER)
    assert version == "2025-11-25" and len(listed.tools) == 3
    assert asked.is_error and texts(asked) == "pending: Approve deploy?"


def test_a_tools_question_is_answered_by_the_sdks_client_and_the_retry_runs_it_with_the_answer(url):
    asked: list = []

    async def steps(client):
        return await client.call_tool("ask_approval", {"action": "deploy"})

    result = sdk_client(url, steps, headers=BEARER, answer={"action": "accept", "content": {"approve": True, "note": "go"}}, asked=asked)
    assert asked == ["Approve deploy?"]
    assert texts(result) == 'deploy: approved with {"approve": true, "note": "go"}'


def test_a_declined_question_is_not_run_and_says_declined(url):
    async def steps(client):
        return await client.call_tool("ask_approval", {"action": "deploy"})

    result = sdk_client(url, steps, headers=BEARER, answer={"action": "decline"})
    assert result.is_error and texts(result) == "declined: Approve deploy?"


def test_a_suspending_teammate_is_answered_through_the_retry_on_another_worker_process(recycling):
    url, log = recycling
    asked: list = []

    async def steps(client):
        return await client.call_tool("lead", {"prompt": "release v2"})

    result = sdk_client(url, steps, answer={"action": "accept", "content": {"signer": "ada"}}, asked=asked)
    assert asked == ["Sign off v2?"]
    assert texts(result).startswith("lead: v2 signed off by ada in process ")
    calls = [line.split()[0] for line in log.read_text().splitlines() if line.endswith(" tools/call")]
    assert len(calls) == 2 and calls[0] != calls[1]  # the question and its retry: two processes
    assert texts(result).endswith(calls[1])  # the teammate's turn went on where the retry landed


def test_our_own_client_asks_the_served_team_and_answers_later(url, closing):
    server = closing(mcp.http(url, headers=BEARER))
    assert server.protocol_version is None and server.server_info is None
    asked = server.call("lead", {"prompt": "release v2"})
    request = asked.pending
    assert server.protocol_version == "2026-07-28" and request.kind == "mcp_input"
    assert request.prompt == "Sign off v2?" and request.data["schema"]["required"] == ["signer"]
    answer = Answer(id=request.id, ok=True, data={"signer": "grace"})
    done = server.call("lead", {"prompt": "release v2"}, ToolContext(answer=answer, request=request))
    assert done.output.startswith("lead: v2 signed off by grace") and not done.is_error
    again = server.call("lead", {"prompt": "release v2"}, ToolContext(answer=answer, request=request))
    assert again.is_error and "-32602" in again.output  # that run was answered: nothing to continue


def test_an_event_stream_reply_carries_the_response(recycling):
    url, _ = recycling
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    reply = requests.post(url, json=message, headers=headers, timeout=30)
    assert reply.headers["Content-Type"] == "text/event-stream" and reply.headers["X-Accel-Buffering"] == "no"
    event, data = reply.text.strip().split("\n")
    assert event == "event: message" and json.loads(data[len("data: "):])["id"] == 7


def test_mounted_in_a_flask_app_it_answers_under_its_prefix_and_the_app_keeps_its_routes(closing):
    flask = pytest.importorskip("flask")
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    site = flask.Flask("shop")
    site.add_url_rule("/", "home", lambda: "the shop")
    mcp_app = build(None, secret=SECRET, token=TOKEN)
    site.wsgi_app = DispatcherMiddleware(site.wsgi_app, {"/mcp": mcp_app})
    with wsgi_serving(site) as base:
        server = closing(mcp.http(base + "/mcp", headers=BEARER))
        assert server.call("add", {"a": 20, "b": 22}).output == "42"
        assert requests.get(base + "/", timeout=30).text == "the shop"
        server.close()
    mcp_app.close()
