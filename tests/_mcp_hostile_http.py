"""Hostile MCP servers over HTTP, as scripts for ``_rawserver.RawServer``: each speaks the
protocol up to the handshake and then attacks a ``tools/call`` (an endless or huge body, a
gzip bomb, a reply that drips, headers that never end). Used by the tests and by
``benchmarks/mcp_hostile.py``."""

from __future__ import annotations

import functools
import json
import zlib
from typing import Any, Callable

from _rawserver import Exchange

MIB = 1 << 20
BLOCK = b"x" * 65536

Attack = Callable[[Exchange, dict[str, Any]], None]


def body_of(exchange: Exchange) -> dict[str, Any]:
    return json.loads(exchange.request.partition(b"\r\n\r\n")[2])


def reply(exchange: Exchange, request_id: Any, result: dict[str, Any]) -> None:
    exchange.reply(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode())


def mcp_endpoint(attack: Attack, tools_list: Attack | None = None) -> Callable[[Exchange], None]:
    """A script that speaks MCP over HTTP to the handshake (of the 2025 era: the 2026-07-28
    probe is answered 404 method not found), then answers ``tools/call`` (and ``tools/list``
    when given) with ``attack``."""

    def script(exchange: Exchange) -> None:
        message = body_of(exchange)
        method = message.get("method")
        if "id" not in message:
            exchange.reply(b"", status=202)
        elif method == "server/discover":
            error = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
            exchange.reply(json.dumps(error).encode(), status=404)
        elif method == "initialize":
            reply(exchange, message["id"], {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                                             "serverInfo": {"name": "hostile", "version": "1"}})
        elif method == "tools/list" and tools_list is None:
            reply(exchange, message["id"], {"tools": [{"name": "attack", "inputSchema": {"type": "object"}}]})
        elif method == "tools/list":
            tools_list(exchange, message)
        else:
            attack(exchange, message)

    return script


def chunked_head(exchange: Exchange, kind: str) -> None:
    exchange.send(f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nTransfer-Encoding: chunked\r\n\r\n".encode())


def endless_json(exchange: Exchange, message: dict[str, Any]) -> None:
    chunked_head(exchange, "application/json")
    exchange.chunk(b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"' % message["id"])
    while not exchange.server.closing.is_set():
        exchange.chunk(BLOCK)


def endless_event(exchange: Exchange, message: dict[str, Any]) -> None:
    chunked_head(exchange, "text/event-stream")
    exchange.chunk(b'data: {"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"' % message["id"])
    while not exchange.server.closing.is_set():
        exchange.chunk(BLOCK)


@functools.lru_cache(maxsize=None)
def bomb() -> bytes:
    """A gzip body of about 64 KiB that decodes to a 64 MiB reply (made in pieces; it is
    refused before its end, so the request id it names does not matter)."""
    squeeze = zlib.compressobj(6, zlib.DEFLATED, 31)
    head = b'{"jsonrpc":"2.0","id":0,"result":{"content":[{"type":"text","text":"'
    block = b"x" * MIB
    return b"".join([squeeze.compress(head), *(squeeze.compress(block) for _ in range(64)), squeeze.flush()])


def compressed_bomb(exchange: Exchange, message: dict[str, Any]) -> None:
    body = bomb()
    exchange.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def long_announced_body(exchange: Exchange, message: dict[str, Any]) -> None:
    exchange.headers(200, length=1 << 40)
    exchange.stall()


def dripping_body(exchange: Exchange, message: dict[str, Any]) -> None:
    chunked_head(exchange, "application/json")
    while not exchange.server.closing.wait(0.05):
        exchange.chunk(b" ")


def endless_keepalives(exchange: Exchange, message: dict[str, Any]) -> None:
    chunked_head(exchange, "text/event-stream")
    while not exchange.server.closing.is_set():
        exchange.chunk(b": keep-alive\n\n" * 1000)


def dripping_headers(exchange: Exchange, message: dict[str, Any]) -> None:
    exchange.send(b"HTTP/1.1 200 OK\r\n")
    while not exchange.server.closing.wait(0.05):
        exchange.send(b"X-Slow: a\r\n")
