"""An MCP server built with the official Python SDK, started by the tests as a real process.

    python _mcp_server.py stdio    # JSON-RPC over stdin/stdout
    python _mcp_server.py http     # Streamable HTTP under uvicorn on 127.0.0.1; prints its port

``slow`` waits until it is cancelled (``notifications/cancelled``) or its time is up;
``cancellations`` reports, from the server's side, how many calls were cancelled, and
``slow_started`` how many ``slow`` calls have begun (so a test waits for one, not for a while).
"""

from __future__ import annotations

import os
import socket
import sys

import anyio

try:  # the SDK's high-level server: MCPServer since mcp 2, FastMCP before
    from mcp.server.mcpserver import MCPServer as FastMCP
except ImportError:  # pragma: no cover - mcp 1.x
    from mcp.server.fastmcp import FastMCP  # type: ignore[no-redef]

server = FastMCP("toolnexus-tests")
_cancelled = {"count": 0}
_cancel_seen = anyio.Event()
_slow = {"started": 0}
_slow_seen = anyio.Event()


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
async def slow(seconds: float) -> str:
    """Wait ``seconds``, unless the call is cancelled first."""
    _slow["started"] += 1
    _slow_seen.set()
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _cancelled["count"] += 1
        _cancel_seen.set()
        raise
    return f"slept {seconds}"


@server.tool()
async def cancellations(wait_s: float = 0.0) -> int:
    """How many calls were cancelled, after waiting up to ``wait_s`` for a first one."""
    if _cancelled["count"] == 0 and wait_s > 0:
        with anyio.move_on_after(wait_s):
            await _cancel_seen.wait()
    return _cancelled["count"]


@server.tool()
async def slow_started(wait_s: float = 0.0) -> int:
    """How many ``slow`` calls have begun, after waiting up to ``wait_s`` for a first one."""
    if _slow["started"] == 0 and wait_s > 0:
        with anyio.move_on_after(wait_s):
            await _slow_seen.wait()
    return _slow["started"]


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def die(code: int, last_words: str) -> str:
    """Write ``last_words`` to stderr and exit with ``code`` at once."""
    sys.stderr.write(last_words + "\n")
    sys.stderr.flush()
    os._exit(code)


@server.tool()
def fail(reason: str) -> str:
    """Raise an error (the SDK answers with isError)."""
    raise ValueError(reason)


def _serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections made before uvicorn is up wait in the backlog
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        _serve_http()
    else:
        server.run("stdio")
