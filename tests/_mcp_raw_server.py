"""A small stdio MCP server written against the wire format, for the protocol's corners
that the SDK's server does not show: tools listed over pages, a list that changes, requests
of the server's own, other protocol versions, every kind of content, stray output.

    python _mcp_raw_server.py [--version V] [--pages N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--version", default=None, help="answer initialize with this version (default: the client's)")
parser.add_argument("--pages", type=int, default=3)
options = parser.parse_args()

tools = [{"name": f"tool_{n}", "description": f"Tool number {n}.", "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}} for n in range(options.pages * 2)]
tools.append({"name": "ask.back", "description": "Asks the client things.", "inputSchema": {"type": "object", "properties": {}}})
tools.append({"name": "media", "description": "Every kind of content.", "inputSchema": {"type": "object", "properties": {}}})
tools.append({"name": "change", "description": "Adds a tool and says the list changed.", "inputSchema": {"type": "object", "properties": {}}})
tools.append({"name": "env", "description": "The environment variables the server sees.", "inputSchema": {"type": "object", "properties": {}}})
tools.append({"name": "broken", "description": "Answers with a JSON-RPC error.", "inputSchema": {"type": "object", "properties": {}}})
page_size = max(1, -(-len(tools) // options.pages))
lists_served = 0
asked: dict[str, str] = {}  # the server's own request id -> what it asked


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def reply(request_id, result) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def call(request_id, name: str, pending_calls: dict) -> None:
    if name == "ask.back":
        # Ask the client two things first; the call is answered once both answers are in.
        send({"jsonrpc": "2.0", "id": "s-ping", "method": "ping"})
        send({"jsonrpc": "2.0", "id": "s-sample", "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}})
        pending_calls["ask.back"] = request_id
        return
    if name == "media":
        content = [
            {"type": "text", "text": "first"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///notes.txt", "name": "notes"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
            {"type": "text", "text": "last"},
        ]
        reply(request_id, {"content": content, "isError": True, "structuredContent": {"n": 1}})
        return
    if name == "change":
        tools.append({"name": "added_later", "description": "Appeared after a change.", "inputSchema": {"type": "object"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        reply(request_id, {"content": [{"type": "text", "text": "changed"}]})
        return
    if name == "env":
        reply(request_id, {"content": [{"type": "text", "text": json.dumps(sorted(os.environ))}]})
        return
    if name == "broken":
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": "the broken tool is broken"}})
        return
    # Chatter before the reply: a log message, a progress note and a line that is not JSON.
    send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}})
    send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}})
    sys.stdout.write("not json at all\n")
    reply(request_id, {"content": [{"type": "text", "text": f"{name} ran"}]})


def main() -> None:
    global lists_served
    pending_calls: dict = {}
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        if method is None:  # an answer to one of our requests
            asked[message["id"]] = json.dumps(message.get("result", message.get("error")))
            if len(asked) == 2 and "ask.back" in pending_calls:
                text = f"ping answered {asked['s-ping']}; sampling answered {asked['s-sample']}"
                reply(pending_calls.pop("ask.back"), {"content": [{"type": "text", "text": text}]})
            continue
        if method == "initialize":
            version = options.version or message["params"]["protocolVersion"]
            reply(message["id"], {"protocolVersion": version, "capabilities": {"tools": {"listChanged": True}}, "serverInfo": {"name": "raw", "version": "1"}})
        elif method == "tools/list":
            lists_served += 1
            start = int((message.get("params") or {}).get("cursor") or 0)
            page = {"tools": tools[start : start + page_size]}
            if start + page_size < len(tools):
                page["nextCursor"] = str(start + page_size)
            reply(message["id"], page)
        elif method == "tools/call":
            call(message["id"], message["params"]["name"], pending_calls)
        elif "id" in message:
            send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no"}})
        sys.stderr.write(f"handled {method}\n")
        sys.stderr.flush()


main()
