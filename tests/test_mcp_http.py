"""MCP over Streamable HTTP against the official Python SDK's servers under uvicorn: the
handshake era's sessions against ``mcp`` 1.x (which speaks nothing newer), the rest against
``mcp`` 2.3.0 (2026-07-28, no session)."""

from __future__ import annotations

import socket
import threading

import pytest
import requests

from _mcp import mcp1_http_server, sdk_http_server, wrong_sums
from conftest import HANG_TIMEOUT
from toolnexus import ConfigError, ToolContext, Toolkit
from toolnexus import mcp
from toolnexus.mcp import MCPError


@pytest.fixture(scope="module")
def url():
    with sdk_http_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def legacy_url():
    with mcp1_http_server() as endpoint:
        yield endpoint


@pytest.fixture
def server(legacy_url, closing):
    return closing(mcp.http(legacy_url, headers={"Authorization": "Bearer s3cret-token"}))


def _post(url: str, session_id: str, message: dict) -> requests.Response:
    headers = {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
    return requests.post(url, json=message, headers=headers, timeout=HANG_TIMEOUT)


def test_tools_are_listed_and_called_over_http_in_one_session(server):
    # The server refuses a message without the session id it gave, so each call succeeding
    # shows the id is sent back (and not the one it gave with its refusal of the probe).
    toolkit = Toolkit(server.tools())
    assert server.protocol_version == "2025-11-25" and server.session_id
    assert {"add", "echo", "slow"} <= set(toolkit.tool_names())
    first = server.session_id
    assert toolkit.execute("add", {"a": 5, "b": 6}).output == "11"
    assert toolkit.execute("echo", {"text": "one\ntwo"}).output == "one\ntwo"
    assert server.session_id == first


def test_close_deletes_the_http_session(server, legacy_url):
    server.tools()
    session_id = server.session_id
    server.close()
    reply = _post(legacy_url, session_id, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert reply.status_code == 404


def test_a_session_the_server_forgot_is_started_again_once(server, legacy_url):
    server.tools()
    old = server.session_id
    headers = {"Mcp-Session-Id": old, "MCP-Protocol-Version": "2025-11-25"}
    assert requests.delete(legacy_url, headers=headers, timeout=HANG_TIMEOUT).status_code in (200, 204)
    assert server.call("add", {"a": 1, "b": 2}).output == "3"
    assert server.session_id not in (None, old)


def test_many_threads_share_one_http_session(server):
    server.tools()
    session_id = server.session_id
    assert wrong_sums(server, threads=8, calls=25) == [] and server.session_id == session_id


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
def test_an_interrupt_over_http_returns_at_once_and_the_server_is_told(url, legacy_url, closing, era):
    # 2026-07-28: the reply is cut; the handshake era: notifications/cancelled is posted.
    server = closing(mcp.http(url if era == "2026-07-28" else legacy_url))
    before = int(server.call("cancellations", {}).output)
    assert server.protocol_version == era
    ctx = ToolContext()
    threading.Timer(0.2, ctx.cancelled.set).start()
    result = server.call("slow", {"seconds": 30}, ctx)
    assert result.is_error and "interrupted" in result.output
    assert int(server.call("cancellations", {"wait_s": 5}).output) == before + 1


def test_a_timeout_over_http_is_an_error_result_that_says_timed_out(url, closing):
    server = closing(mcp.http(url, timeout=0.5))
    server.tools()
    result = server.call("slow", {"seconds": 30})
    assert result.is_error and "timed out" in result.output


def test_a_dead_endpoint_is_an_error_naming_the_cause_and_never_the_headers(closing):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = closing(mcp.http(f"http://127.0.0.1:{port}/mcp", headers={"Authorization": "Bearer s3cret-token"}))
    with pytest.raises(MCPError, match="connection refused") as caught:
        server.tools()
    assert "s3cret" not in str(caught.value)
    result = server.call("add", {"a": 1, "b": 2})
    assert result.is_error and "connection refused" in result.output


def test_an_http_url_is_checked():
    with pytest.raises(ConfigError, match="http"):
        mcp.http("ftp://example.invalid/mcp")
