"""A stdio MCP server that turns hostile on ``tools/call`` of its tool ``attack``:

    python _mcp_hostile_server.py flood         # floods pings and never reads stdin again
    python _mcp_hostile_server.py line BYTES    # a reply line of BYTES bytes, no newline
    python _mcp_hostile_server.py stderr BYTES  # a stderr line of BYTES bytes, then exits 3
    python _mcp_hostile_server.py deep          # JSON nested past any decoder, then the reply

It answers the handshake and ``tools/list`` as a server should, and ``tools/call`` of
``echo`` with its ``text`` argument, so that a test can show the client still works.
Every mode writes in pieces, never holding the whole of what it sends.
"""

from __future__ import annotations

import json
import sys

PIECE = b"x" * (1 << 20)
TOOLS = [
    {"name": "attack", "description": "Turns hostile.", "inputSchema": {"type": "object"}},
    {"name": "echo", "description": "Echoes text.", "inputSchema": {"type": "object"}},
]


def send(message: dict) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def flood() -> None:
    """Requests of the server's own, as fast as the pipe takes them; stdin is read no more."""
    n = 0
    while True:
        n += 1
        send({"jsonrpc": "2.0", "id": f"flood-{n}", "method": "ping"})


def long_line(request_id: int, size: int) -> None:
    out = sys.stdout.buffer
    out.write(b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"' % request_id)
    for _ in range(size // len(PIECE)):
        out.write(PIECE)
    out.flush()
    sys.stdin.read()  # no newline, ever: wait for the end of input


def stderr_line(size: int) -> None:
    for _ in range(size // len(PIECE)):
        sys.stderr.buffer.write(PIECE)
    sys.stderr.buffer.flush()
    sys.exit(3)


def deep(request_id: int) -> None:
    """Lines nested deeper than a decoder goes (one not even closed), a batch of batches,
    then the reply, which a client that survived them gets."""
    out = sys.stdout.buffer
    out.write(b"[" * 100_000 + b"\n")
    out.write(b"[" * 50_000 + b"]" * 50_000 + b"\n")
    out.write(b"[" * 900 + b"{}" + b"]" * 900 + b"\n")
    send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": "survived"}]}})


def main() -> None:
    mode = sys.argv[1]
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "hostile", "version": "1"}}
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call" and message["params"]["name"] == "echo":
            text = message["params"]["arguments"].get("text", "")
            send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})
        elif method == "tools/call" and mode == "flood":
            flood()
        elif method == "tools/call" and mode == "line":
            long_line(request_id, int(sys.argv[2]))
        elif method == "tools/call" and mode == "stderr":
            stderr_line(int(sys.argv[2]))
        elif method == "tools/call" and mode == "deep":
            deep(request_id)
        elif request_id is not None and method != "tools/call":  # the 2026-07-28 probe: a server of the 2025 era
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


main()
