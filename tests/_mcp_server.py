"""An MCP server built with the official Python SDK, started by the tests as a real process.

    python _mcp_server.py stdio       # JSON-RPC over stdin/stdout
    python _mcp_server.py http        # Streamable HTTP under uvicorn on 127.0.0.1 (legacy sessions
                                      # and 2026-07-28 on one URL); prints its port
    python _mcp_server.py http-json   # stateless Streamable HTTP, JSON replies only
    python _mcp_server.py http-sse    # stateless Streamable HTTP, SSE replies when a tool notifies

``add``, ``echo``, ``slow``, ``cancellations`` and ``slow_started`` are ``_mcp_common_tools``'.
``confirm`` and ``ask_name`` ask the client (MCP 2026-07-28 ``input_required``; in the
handshake era ``confirm`` sends ``elicitation/create``); their ``requestState`` is sealed with
a fixed key, so a retry from another process, to another server process, is good.
``progress_echo`` reports progress first (an SSE reply in ``http-sse``); ``add_tool`` adds a
tool and says the list changed. ``tools/list`` is fresh for ``TOOLNEXUS_TEST_MCP_TTL_MS``
(default 0).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Annotated

from pydantic import BaseModel

import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.request_state import RequestStateSecurity

from _mcp_common_tools import TOOLS

#: The key every test server process seals its requestState with (a test secret).
STATE_KEY = b"toolnexus-tests-request-state-key-0123456789"
_TTL_MS = int(os.environ.get("TOOLNEXUS_TEST_MCP_TTL_MS", "0"))


class Approval(BaseModel):
    approve: bool
    note: str = ""


server = MCPServer(
    "toolnexus-tests",
    version="2.3-tests",
    request_state_security=RequestStateSecurity(keys=[STATE_KEY]),
    cache_hints={"tools/list": CacheHint(ttl_ms=_TTL_MS, scope="public")} if _TTL_MS else None,
)
for common in TOOLS:  # add, echo, slow, cancellations, slow_started
    server.tool()(common)


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


def ask_approval(action: str) -> Elicit[Approval]:
    return Elicit(f"Approve {action}?", Approval)


@server.tool()
def confirm(action: str, answer: Annotated[ElicitationResult[Approval], Resolve(ask_approval)]) -> str:
    """Ask the user to approve ``action`` (the server asks the client; both eras)."""
    if answer.action == "accept":
        return f"{action}: approve={answer.data.approve} note={answer.data.note}"
    return f"{action}: {answer.action}"


@server.tool()
async def ask_name(question: str, ctx: Context) -> types.CallToolResult | types.InputRequiredResult:
    """Ask two things by hand, then say what came back and the requestState it was given."""
    responses = ctx.input_responses or {}
    name, colour = responses.get("name"), responses.get("colour")
    if name is None or colour is None:
        schema = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}
        asked = {
            key: types.ElicitRequest(params=types.ElicitRequestFormParams(message=text, requested_schema=schema))
            for key, text in (("name", question), ("colour", "Favourite colour?"))
        }
        return types.InputRequiredResult(input_requests=asked, request_state="asked-once")
    said = {key: each.model_dump(mode="json", exclude_none=True) for key, each in responses.items()}
    return types.CallToolResult(content=[types.TextContent(text=f"state={ctx.request_state} answers={said}")])


@server.tool()
async def progress_echo(text: str, ctx: Context) -> str:
    """Report progress, then echo ``text`` (in ``http-sse`` the reply is an event stream)."""
    session = ctx.request_context.session  # a token of its own: the client asked for no progress
    await session.send_progress_notification("echo", 0.5, 1.0, "half way", related_request_id=str(ctx.request_id))
    return text


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool named ``name`` and tell listeners that the list changed."""
    server.add_tool(lambda: name, name=name, description="added while serving")
    await ctx.notify_tools_changed()
    return f"added {name}"


def _serve_http(mode: str) -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections made before uvicorn is up wait in the backlog
    print(sock.getsockname()[1], flush=True)
    if mode == "http":
        app = server.streamable_http_app()
    else:
        app = server.streamable_http_app(json_response=mode == "http-json", stateless_http=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:2] and sys.argv[1].startswith("http"):
        _serve_http(sys.argv[1])
    else:
        server.run("stdio")
