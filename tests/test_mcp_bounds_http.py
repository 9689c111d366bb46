"""An HTTP MCP server we do not control cannot exhaust or hold the client, nor draw its
headers to another origin (CONTRACT §18 "Bounded peers"): raw-socket servers written here
answer the handshake and then attack; a second server records whatever reaches it."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

import pytest

from _mcp import peak_memory
from _mcp_hostile_http import (
    MIB,
    Attack,
    bomb,
    chunked_head,
    compressed_bomb,
    dripping_body,
    dripping_headers,
    endless_event,
    endless_json,
    endless_keepalives,
    long_announced_body,
    mcp_endpoint,
    reply,
)
from _rawserver import Exchange
from conftest import HANG_TIMEOUT, run_in_thread
from toolnexus import ToolContext
from toolnexus import mcp
from toolnexus.mcp import MCPError

MARGIN = 3 * MIB  # what the client may hold beyond the limit: a read, the decoding, its own objects
SECRETS = {"X-Api-Key": "k-one-secret", "api-key": "k-two-secret", "Authorization": "Bearer t-three-secret"}


def _endpoint(servers, attack: Attack, **options: Any) -> mcp.MCPServer:
    server = servers(mcp_endpoint(attack))
    return mcp.http(f"http://127.0.0.1:{server.port}/mcp", **options)


# --- bounded messages ---------------------------------------------------------------------------


@pytest.mark.parametrize("attack", [endless_json, endless_event, long_announced_body, compressed_bomb])
def test_a_reply_over_the_limit_fails_the_call_naming_max_message_bytes_and_holds_about_the_limit(
    servers, closing, attack
):
    client = closing(_endpoint(servers, attack, max_message_bytes=MIB, timeout=20))
    client.tools()
    bomb()  # made before the measure
    with peak_memory() as memory:
        result = run_in_thread(lambda: client.call("attack", {}))
    assert result.is_error and "max_message_bytes (1048576 bytes)" in result.output
    assert memory["peak"] < MIB + MARGIN


def test_a_listing_over_the_limit_raises_mcp_error_naming_max_message_bytes(servers, closing):
    server = servers(mcp_endpoint(endless_json, tools_list=endless_json))
    client = closing(mcp.http(f"http://127.0.0.1:{server.port}/mcp", max_message_bytes=MIB))
    with pytest.raises(MCPError, match=r"max_message_bytes \(1048576 bytes\)"):
        run_in_thread(client.tools)


def test_the_session_goes_on_after_a_reply_over_the_limit(servers, closing):
    calls = []

    def once_too_long(exchange: Exchange, message: dict[str, Any]) -> None:
        calls.append(message["id"])
        if len(calls) == 1:
            endless_json(exchange, message)
        else:
            reply(exchange, message["id"], {"content": [{"type": "text", "text": "fine"}]})

    client = closing(_endpoint(servers, once_too_long, max_message_bytes=MIB))
    assert client.call("attack", {}).is_error
    assert client.call("attack", {}).output == "fine"


def test_an_event_nested_past_any_decoder_is_passed_over_and_the_reply_after_it_arrives(servers, closing):
    def deep_then_reply(exchange: Exchange, message: dict[str, Any]) -> None:
        chunked_head(exchange, "text/event-stream")
        exchange.chunk(b"data: " + b"[" * 100_000 + b"\n\n")
        exchange.chunk(b"data: " + b"[" * 900 + b"{}" + b"]" * 900 + b"\n\n")
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"content": [{"type": "text", "text": "survived"}]}}
        exchange.chunk(b"data: " + json.dumps(answer).encode() + b"\n\n")
        exchange.chunk(b"")

    client = closing(_endpoint(servers, deep_then_reply))
    assert client.call("attack", {}).output == "survived"


# --- one deadline over the whole call -----------------------------------------------------------


@pytest.mark.parametrize("attack", [dripping_body, endless_keepalives, dripping_headers])
def test_timeout_bounds_the_whole_call_within_a_second_across_a_slow_or_endless_reply(servers, closing, attack):
    client = closing(_endpoint(servers, attack, timeout=1.0))
    client.tools()
    begun = time.monotonic()
    result = run_in_thread(lambda: client.call("attack", {}))
    assert result.is_error and "timed out after 1 s" in result.output
    assert time.monotonic() - begun < 1.0 + 1.0


def test_an_interrupt_ends_a_call_reading_an_endless_body_within_100_ms(servers, closing):
    body_begun = threading.Event()

    def drip_after_saying_so(exchange: Exchange, message: dict[str, Any]) -> None:
        chunked_head(exchange, "application/json")
        body_begun.set()
        dripping_body(exchange, message)

    client = closing(_endpoint(servers, drip_after_saying_so, timeout=30.0))
    client.tools()
    ctx = ToolContext()
    returned: list[float] = []
    caller = threading.Thread(target=lambda: returned.append((client.call("attack", {}, ctx), time.monotonic())))
    caller.start()
    assert body_begun.wait(HANG_TIMEOUT)
    interrupted = time.monotonic()
    ctx.cancelled.set()
    caller.join(HANG_TIMEOUT)
    result, at = returned[0]
    assert "interrupted" in result.output
    assert at - interrupted < 0.1


# --- no redirect to another origin --------------------------------------------------------------


def _redirect(status: int, location: Callable[[], str]) -> Callable[[Exchange], None]:
    def script(exchange: Exchange) -> None:
        exchange.send(f"HTTP/1.1 {status} Moved\r\nLocation: {location()}\r\nContent-Length: 0\r\n\r\n".encode())

    return script


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_fails_naming_the_status_and_sends_nothing_there(servers, closing, status):
    elsewhere = servers(mcp_endpoint(endless_json))  # records every connection and request
    here = servers(_redirect(status, lambda: f"http://127.0.0.1:{elsewhere.port}/mcp"))
    client = closing(mcp.http(f"http://127.0.0.1:{here.port}/mcp", headers=SECRETS))
    with pytest.raises(MCPError, match=f"HTTP {status}, a redirect to http://127.0.0.1:{elsewhere.port}/mcp") as caught:
        run_in_thread(client.tools)
    assert "not followed" in str(caught.value) and "secret" not in str(caught.value)
    result = client.call("attack", {})
    assert result.is_error and f"HTTP {status}" in result.output
    assert elsewhere.accepted == 0 and elsewhere.requests == 0
    assert b"k-one-secret" in here.last_request  # the headers went to the URL given, and only there


def test_a_redirect_to_another_scheme_on_the_same_host_and_port_is_not_followed(servers, closing):
    here = servers(_redirect(307, lambda: f"https://127.0.0.1:{here.port}/mcp"))
    client = closing(mcp.http(f"http://127.0.0.1:{here.port}/mcp", headers=SECRETS))
    with pytest.raises(MCPError, match="HTTP 307"):
        run_in_thread(client.tools)
    assert here.requests == 1


def _same_origin(status: int) -> Callable[[Exchange], None]:
    """``/mcp`` redirects to ``/mcp/``, which speaks MCP."""
    endpoint = mcp_endpoint(endless_json)
    moved = _redirect(status, lambda: "/mcp/")

    def script(exchange: Exchange) -> None:
        path = exchange.request.split(b" ", 2)[1]
        (moved if path == b"/mcp" else endpoint)(exchange)

    return script


@pytest.mark.parametrize("status", [307, 308])
def test_a_307_or_308_within_the_same_origin_is_followed_with_the_same_post(servers, closing, status):
    here = servers(_same_origin(status))
    client = closing(mcp.http(f"http://127.0.0.1:{here.port}/mcp", headers=SECRETS))
    assert [each.name for each in run_in_thread(client.tools)] == ["attack"]
    assert here.last_request.startswith(b"POST /mcp/ ") and b"k-one-secret" in here.last_request


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_redirect_that_would_turn_the_post_into_a_get_is_not_followed_even_within_the_origin(
    servers, closing, status
):
    here = servers(_same_origin(status))
    client = closing(mcp.http(f"http://127.0.0.1:{here.port}/mcp"))
    with pytest.raises(MCPError, match=f"HTTP {status}.*307 or 308"):
        run_in_thread(client.tools)
    assert here.requests == 1


def test_a_redirect_loop_within_the_origin_ends(servers, closing):
    here = servers(_redirect(307, lambda: "/mcp"))
    client = closing(mcp.http(f"http://127.0.0.1:{here.port}/mcp"))
    with pytest.raises(MCPError, match="redirected more than 5 times"):
        run_in_thread(client.tools)
