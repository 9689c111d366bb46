"""An MCP server built with the official Python SDK's 1.x line (the handshake era only),
started by the tests with the interpreter of its own virtualenv (``TOOLNEXUS_TEST_MCP1_PYTHON``;
``.ci/run`` builds it: ``mcp`` 1.x cannot live beside 2.x).

    python _mcp1_server.py stdio     # JSON-RPC over stdin/stdout
    python _mcp1_server.py http      # Streamable HTTP with sessions under uvicorn; prints its port

``confirm`` asks the client to approve with ``elicitation/create`` during the call.
"""

from __future__ import annotations

import socket
import sys

import anyio
from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

server = FastMCP("toolnexus-tests-1x")
_cancelled = {"count": 0}
_cancel_seen = anyio.Event()


class Approval(BaseModel):
    approve: bool
    note: str = ""


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
async def confirm(action: str, ctx: Context) -> str:
    """Ask the user to approve ``action`` (``elicitation/create`` during the call)."""
    answer = await ctx.elicit(f"Approve {action}?", Approval)
    if answer.action == "accept":
        return f"{action}: approve={answer.data.approve} note={answer.data.note}"
    return f"{action}: {answer.action}"


def _serve_http() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        _serve_http()
    else:
        server.run("stdio")
