"""The corners of MCP 2026-07-28 on the client side (CONTRACT §18b), against a small stdio
server written to the wire format: the era probe and a slow start, ``_meta`` on every
request, cache hints, the listen, and the rounds of questions a server may ask."""

from __future__ import annotations

import json
import sys
from typing import Callable

import pytest

from _mcp import HERE
from _mcp_hostile_http import reply
from _rawserver import Exchange
from conftest import HANG_TIMEOUT
from toolnexus import Answer, ConfigError, ToolContext
from toolnexus import mcp
from toolnexus.mcp import MCPError


def modern_raw(*args: str) -> list[str]:
    return [sys.executable, str(HERE / "_mcp_modern_raw_server.py"), *args]


@pytest.fixture
def server(closing):
    return closing(mcp.stdio(modern_raw(), name="raw"))


def answered(server, name: str, request, answer: Answer):
    """Run ``name`` again with ``answer`` as the run loop does after a suspension."""
    return server.call(name, {}, ToolContext(answer=answer, request=request))


def test_a_server_of_2026_is_spoken_to_without_a_handshake(server):
    assert server.protocol_version is None
    server.tools()
    assert server.protocol_version == "2026-07-28"
    assert server.server_info == {"name": "modern-raw", "version": "7"}


def test_every_request_carries_the_version_the_capabilities_and_the_client(server):
    meta = json.loads(server.call("meta", {}).output)
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {"elicitation": {"form": {}}}
    assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "toolnexus"


def test_a_server_that_reads_the_probe_after_it_timed_out_is_probed_again(closing):
    server = closing(mcp.stdio(modern_raw("--late", "2"), timeout=1))
    assert server.call("lists", {}).output == "0"
    assert server.protocol_version == "2026-07-28"


def test_a_list_without_a_cache_hint_is_listed_each_time(closing):
    server = closing(mcp.stdio(modern_raw("--no-listen")))
    server.tools()
    server.tools()
    assert server.call("lists", {}).output == "2"


def test_a_list_is_fresh_for_its_ttl_and_a_change_on_the_listen_makes_it_stale(closing):
    server = closing(mcp.stdio(modern_raw("--ttl", "600000")))
    first = {each.name for each in server.tools()}
    assert {each.name for each in server.tools()} == first
    assert server.call("lists", {}).output == "1"
    assert server.call("change", {}).output == "changed"
    assert len(server.tools()) == len(first) + 1
    assert server.call("lists", {}).output == "2"


def test_one_listen_is_opened_and_close_cancels_it(tmp_path):
    log = tmp_path / "listens.txt"
    server = mcp.stdio(modern_raw("--ttl", "1", "--log", str(log)))
    try:
        server.tools()
        server.tools()
        assert len(json.loads(server.call("listens", {}).output)["opened"]) == 1
    finally:
        server.close()
    opened, cancelled = log.read_text().split()[1::2]
    assert log.read_text().split()[::2] == ["listen", "cancelled"] and opened == cancelled


def test_the_retry_echoes_the_request_state_and_answers_by_key(server):
    pending = server.call("ask", {"x": 1}).pending
    assert pending.kind == "mcp_input" and pending.prompt == "OK?"
    assert pending.data["requestState"] == "s1" and pending.data["arguments"] == {"x": 1}
    result = answered(server, "ask", pending, Answer(id=pending.id, ok=True, data={"ok": True}))
    sent = json.loads(result.output)
    assert sent == {"answers": {"k": {"action": "accept", "content": {"ok": True}}}, "state": "s1", "arguments": {"x": 1}}


@pytest.mark.parametrize(("reason", "action"), [("declined", "decline"), ("cancelled", "cancel"), ("expired", "cancel")])
def test_a_no_is_sent_to_the_server_as_decline_or_cancel(server, reason, action):
    pending = server.call("ask", {}).pending
    result = answered(server, "ask", pending, Answer(id=pending.id, ok=False, reason=reason))
    assert json.loads(result.output)["answers"] == {"k": {"action": action}}


def test_a_server_that_keeps_asking_ends_as_an_error_after_ten_rounds(server):
    keep_saying_yes = lambda request: Answer(id=request.id, ok=True, data={"ok": True})  # noqa: E731
    server.on_input = keep_saying_yes
    result = server.call("again", {})
    assert result.is_error and "input_required" in result.output and "10 rounds" in result.output


def test_a_question_other_than_a_form_ends_the_call_naming_its_kind(server):
    result = server.call("sample", {})
    assert result.is_error and result.pending is None
    assert "sampling/createMessage" in result.output


def test_a_round_that_asks_nothing_is_retried_at_once_with_its_state(server):
    assert server.call("state_only", {}).output == "finished after a round that asked nothing"


def test_on_input_answers_inline_and_none_leaves_the_question_to_a_person(server):
    asked = []
    server.on_input = lambda request: asked.append(request) or None
    pending = server.call("ask", {}).pending
    assert pending is not None and asked[0].prompt == "OK?"
    server.on_input = lambda request: Answer(id=request.id, ok=True, data={"ok": False})
    sent = json.loads(server.call("ask", {}).output)
    assert sent["answers"] == {"k": {"action": "accept", "content": {"ok": False}}}


def test_on_input_that_answers_another_request_is_an_error_result(server):
    server.on_input = lambda request: Answer(id="req_other", ok=True)
    result = server.call("ask", {})
    assert result.is_error and "on_input must return the Answer" in result.output


def test_a_non_callable_on_input_is_refused():
    with pytest.raises(ConfigError, match="on_input"):
        mcp.stdio(modern_raw(), on_input="yes")


def test_a_server_that_is_gone_fails_the_probe_naming_it(closing):
    server = closing(mcp.stdio([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=HANG_TIMEOUT))
    with pytest.raises(MCPError, match="exited with code 3"):
        server.tools()


# --- over HTTP: the headers, and the probe's answers -----------------------------------------------


def modern_http(seen: list, discover: Callable[[Exchange, dict], None] | None = None) -> Callable[[Exchange], None]:
    """A raw 2026-07-28 endpoint that records each request's headers and body."""

    def script(exchange: Exchange) -> None:
        head, _, body = exchange.request.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")[1:]
        message = json.loads(body)
        seen.append(({k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}, message))
        method = message.get("method")
        if method == "server/discover" and discover is not None:
            discover(exchange, message)
        elif method == "server/discover":
            reply(exchange, message["id"], {"supportedVersions": ["2026-07-28"], "capabilities": {}, "resultType": "complete"})
        elif method == "tools/call":
            reply(exchange, message["id"], {"content": [{"type": "text", "text": "called"}], "resultType": "complete"})
        elif method == "initialize":
            reply(exchange, message["id"], {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "old", "version": "1"}})
        elif "id" in message:
            reply(exchange, message["id"], {"tools": [], "resultType": "complete"})
        else:
            exchange.reply(b"", status=202)

    return script


def test_a_modern_post_names_version_method_and_tool_and_encodes_a_name_that_is_not_plain_ascii(servers, closing):
    seen: list = []
    endpoint = servers(modern_http(seen))
    server = closing(mcp.http(f"http://127.0.0.1:{endpoint.port}/mcp"))
    assert server.call("héllo wörld", {}).output == "called"
    assert server.call("plain_name", {}).output == "called"
    (probe, _), (call, body), (plain, _) = seen
    assert probe["mcp-protocol-version"] == "2026-07-28" and probe["mcp-method"] == "server/discover"
    assert call["mcp-method"] == "tools/call" and call["mcp-name"] == "=?base64?aMOpbGxvIHfDtnJsZA==?="
    assert plain["mcp-name"] == "plain_name" and "mcp-session-id" not in plain
    assert body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"


def test_an_unsupported_version_error_naming_2026_is_modern(servers, closing):
    def refuse(exchange: Exchange, message: dict) -> None:
        error = {"code": -32022, "message": "unsupported", "data": {"supported": ["2026-07-28"], "requested": "x"}}
        exchange.reply(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).encode(), status=400)

    endpoint = servers(modern_http([], refuse))
    server = closing(mcp.http(f"http://127.0.0.1:{endpoint.port}/mcp"))
    server.tools()
    assert server.protocol_version == "2026-07-28"


@pytest.mark.parametrize("answer", [(400, b"Bad Request"), (400, b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"no"}}'), (406, b""), (500, b"oops")])
def test_a_probe_answered_without_a_modern_error_falls_back_to_the_handshake(servers, closing, answer):
    status, text = answer
    endpoint = servers(modern_http([], lambda exchange, message: exchange.reply(text, status=status)))
    server = closing(mcp.http(f"http://127.0.0.1:{endpoint.port}/mcp"))
    server.tools()
    assert server.protocol_version == "2025-11-25" and server.server_info == {"name": "old", "version": "1"}


def test_a_probe_not_answered_in_time_falls_back_to_the_handshake(servers, closing):
    endpoint = servers(modern_http([], lambda exchange, message: exchange.server.closing.wait(HANG_TIMEOUT)))
    server = closing(mcp.http(f"http://127.0.0.1:{endpoint.port}/mcp", timeout=0.5))
    server.tools()
    assert server.protocol_version == "2025-11-25"
