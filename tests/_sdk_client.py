"""The official SDK's MCP client (``mcp`` 2.3.0), driven from a synchronous test: ``sdk_client``
runs an async function of a connected ``mcp.Client`` to its end with ``anyio.run``."""

from __future__ import annotations

import sys
from typing import Any, Awaitable, Callable

from _mcp import require_sdk

Asked = list  # the messages of the questions the server asked, in order


def sdk_client(
    target: str | list[str],
    steps: Callable[[Any], Awaitable[Any]],
    *,
    mode: str = "auto",
    answer: dict[str, Any] | None = None,
    asked: Asked | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """``await steps(client)`` on a client of ``target`` (a URL, or a command over stdio);
    ``answer`` (an ``ElicitResult`` as a dict) answers every question the server asks, whose
    message is appended to ``asked``."""
    require_sdk()
    import anyio
    import mcp_types as types
    from mcp import Client, StdioServerParameters

    async def on_elicit(context: Any, params: Any) -> Any:
        if asked is not None:
            asked.append(params.message)
        return types.ElicitResult(**(answer or {"action": "decline"}))

    async def main() -> Any:
        if isinstance(target, list):
            where: Any = StdioServerParameters(command=target[0], args=target[1:])
        elif headers:
            from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

            where = streamable_http_client(target, http_client=create_mcp_http_client(headers=headers))
        else:
            where = target
        async with Client(where, mode=mode, elicitation_callback=on_elicit if answer is not None else None) as client:
            return await steps(client)

    return anyio.run(main)


def texts(result: Any) -> str:
    """A call result's text content, joined by newlines."""
    return "\n".join(getattr(item, "text", "") for item in result.content)


def python_command(*args: str) -> list[str]:
    return [sys.executable, *args]
