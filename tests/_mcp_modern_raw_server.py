"""A small stdio MCP server of the 2026-07-28 revision written against the wire format, for
the corners the SDK's server does not show on demand: cache hints it can count, questions
that never end, questions other than forms, a round that asks nothing, the ``_meta`` each
request carries, a listen it reports on, and a start slow enough that the client's probe
times out (it then refuses ``initialize`` with -32022, as the SDK's stdio server does).

    python _mcp_modern_raw_server.py [--late SECONDS] [--ttl MS] [--no-listen] [--log FILE]

``--log`` appends a line for each listen opened and each request cancelled, which a test can
read once the process has gone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--late", type=float, default=0.0, help="wait this long before reading anything")
parser.add_argument("--ttl", type=int, default=0, help="ttlMs of tools/list")
parser.add_argument("--no-listen", action="store_true", help="offer no tools.listChanged")
parser.add_argument("--log", help="append 'listen ID' and 'cancelled ID' lines to this file")
options = parser.parse_args()

MODERN = "2026-07-28"
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
TOOL_NAMES = ["again", "sample", "state_only", "meta", "lists", "change", "listens", "ask"]
tools = [{"name": name, "description": f"The {name} tool.", "inputSchema": {"type": "object"}} for name in TOOL_NAMES]
seen = {"lists": 0, "listens": [], "cancelled": [], "meta": None, "rounds": 0}
listen_id = None


def note(line: str) -> None:
    if options.log:
        with open(options.log, "a") as out:
            out.write(line + "\n")


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def reply(request_id, result: dict) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": {"resultType": "complete", **result}})


def error(request_id, code: int, message: str, data=None) -> None:
    body = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    send({"jsonrpc": "2.0", "id": request_id, "error": body})


def text(request_id, value: str) -> None:
    reply(request_id, {"content": [{"type": "text", "text": value}]})


def asking(method: str, params: dict) -> dict:
    return {"method": method, "params": params}


def call(request_id, params: dict) -> None:
    name = params["name"]
    answers, state = params.get("inputResponses"), params.get("requestState")
    if name == "again":  # asks forever
        seen["rounds"] += 1
        question = asking("elicitation/create", {"mode": "form", "message": f"Round {seen['rounds']}?", "requestedSchema": SCHEMA})
        reply(request_id, {"resultType": "input_required", "inputRequests": {"q": question}, "requestState": f"r{seen['rounds']}"})
    elif name == "sample":
        question = asking("sampling/createMessage", {"messages": [], "maxTokens": 5})
        reply(request_id, {"resultType": "input_required", "inputRequests": {"s": question}})
    elif name == "state_only":
        if state == "work-done":
            text(request_id, "finished after a round that asked nothing")
        else:
            reply(request_id, {"resultType": "input_required", "requestState": "work-done"})
    elif name == "ask":  # one question; echoes what came back
        if answers is None:
            question = asking("elicitation/create", {"message": "OK?", "requestedSchema": SCHEMA})
            reply(request_id, {"resultType": "input_required", "inputRequests": {"k": question}, "requestState": "s1"})
        else:
            text(request_id, json.dumps({"answers": answers, "state": state, "arguments": params.get("arguments")}))
    elif name == "meta":
        text(request_id, json.dumps(seen["meta"]))
    elif name == "lists":
        text(request_id, str(seen["lists"]))
    elif name == "listens":
        text(request_id, json.dumps({"opened": seen["listens"], "cancelled": seen["cancelled"]}))
    elif name == "change":
        tools.append({"name": f"added_{len(tools)}", "description": "Added.", "inputSchema": {"type": "object"}})
        if listen_id is not None:
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": listen_id}}})
        text(request_id, "changed")
    else:
        text(request_id, f"Unknown tool: {name}")


def serve(message: dict) -> None:
    global listen_id
    method, request_id, params = message.get("method"), message.get("id"), message.get("params") or {}
    if method == "notifications/cancelled":
        seen["cancelled"].append(params.get("requestId"))
        note(f"cancelled {params.get('requestId')}")
        return
    if request_id is None:
        return
    if method == "initialize":  # locked to 2026-07-28 by the probe read first
        error(request_id, -32022, "this connection serves 2026-07-28", {"supported": [MODERN], "requested": params.get("protocolVersion")})
        return
    meta = params.get("_meta") or {}
    if meta.get("io.modelcontextprotocol/protocolVersion") != MODERN:
        error(request_id, -32602, "no _meta protocol version")
        return
    seen["meta"] = meta
    if method == "server/discover":
        capabilities = {"tools": {"listChanged": not options.no_listen}}
        reply(request_id, {"supportedVersions": [MODERN], "capabilities": capabilities, "ttlMs": 0, "cacheScope": "public",
                           "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern-raw", "version": "7"}}})
    elif method == "tools/list":
        seen["lists"] += 1
        reply(request_id, {"tools": tools, "ttlMs": options.ttl, "cacheScope": "public"})
    elif method == "tools/call":
        call(request_id, params)
    elif method == "subscriptions/listen":
        listen_id = request_id
        seen["listens"].append(request_id)
        note(f"listen {request_id}")
        send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
              "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": request_id}, "notifications": {"toolsListChanged": True}}})
    else:
        error(request_id, -32601, f"Method not found: {method}")


def main() -> None:
    if options.late:
        time.sleep(options.late)  # a start this slow: the probe is read after it timed out
    for line in sys.stdin:
        serve(json.loads(line))


main()
