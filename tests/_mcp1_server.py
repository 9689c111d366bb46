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

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel

from _mcp_common_tools import TOOLS

server = FastMCP("toolnexus-tests-1x")


class Approval(BaseModel):
    approve: bool
    note: str = ""


for common in TOOLS[:4]:  # add, echo, slow, cancellations
    server.tool()(common)


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
