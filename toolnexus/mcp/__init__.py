"""MCP tools, synchronously: ``stdio(command)`` and ``http(url)`` give an ``MCPServer``.

No event loop anywhere: a server is one JSON-RPC session over a pipe to a child process,
or over Streamable HTTP with the library's ``requests`` session, shared by every thread.
Both eras: the stateless revision 2026-07-28 when the server speaks it, else the
``initialize`` handshake (2025-11-25 and older). A server's questions (``input_required``)
become ``Request``s of kind ``mcp_input``: answered by ``on_input``, ``wait_for``, or a
person later, from any process (CONTRACT §18b)::

    from toolnexus import mcp

    with mcp.stdio(["npx", "-y", "@modelcontextprotocol/server-everything"]) as server:
        agent = toolnexus.agent("helper", does="...", tools=server.tools())
"""

from __future__ import annotations

import os
import shlex
from typing import Sequence

from .. import _seconds as seconds
from ..errors import ConfigError
from . import _stdio
from ._rpc import Session
from .server import PROTOCOL_VERSIONS, MCPError, MCPServer, OnInput
from .wsgi import MCPApp, django_view, wsgi_app

__all__ = [
    "stdio",
    "http",
    "MCPServer",
    "MCPError",
    "OnInput",
    "PROTOCOL_VERSIONS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "wsgi_app",
    "django_view",
    "MCPApp",
]

#: The longest message a server may send (a stdio line, an HTTP body, one event of a stream).
DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024


def stdio(
    command: Sequence[str] | str,
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 30.0,
    name: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    on_input: OnInput | None = None,
) -> MCPServer:
    """A server run as a child process speaking JSON-RPC over its stdin and stdout.

    ``command`` is a list (a string is split as a shell would, without running one). The
    process starts on first use, with ``PATH``, ``HOME``, ``USER``, ``LANG`` and a few
    more from this process's environment plus ``env`` (no other variable is handed on, so
    a model key in the environment stays here). ``timeout`` (seconds) bounds each request,
    however the server behaves (the start and handshake get at least 30 s). A line the
    server writes longer than ``max_message_bytes`` (default 8 MiB) fails the calls in
    flight with an error naming the limit and restarts the server; messages to a server
    that stops reading wait no longer than their call. ``name`` (default: the command)
    names the server in error results and logs.

    ``on_input(request) -> Answer | None`` answers the server's questions inline, on the
    calling thread: each ``mcp_input`` ``Request`` before any ``wait_for`` (None leaves it
    to ``wait_for`` or a person), and a legacy server's ``elicitation/create`` during a
    call (None, or no ``on_input``, declines it).

    Raises:
        ConfigError: an empty command, a ``timeout`` that is not positive, or a
            ``max_message_bytes`` that is not a positive integer.
    """
    argv = shlex.split(command) if isinstance(command, str) else [str(part) for part in command]
    if not argv:
        raise ConfigError(
            "mcp.stdio needs a command, e.g. ['npx', '-y', '@modelcontextprotocol/server-everything']"
        )
    timeout = seconds.duration("timeout", timeout)
    limit = _byte_limit(max_message_bytes)
    workdir = os.fspath(cwd) if cwd is not None else None
    environment = {str(key): str(value) for key, value in (env or {}).items()}

    def connect(session: Session) -> _stdio.StdioWire:
        return _stdio.StdioWire(session, argv, environment, workdir, limit)

    label = name or " ".join([os.path.basename(argv[0]), *argv[1:]])[:80]
    return MCPServer(label, connect, timeout=timeout, on_input=_callable("on_input", on_input))


def http(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    name: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    on_input: OnInput | None = None,
) -> MCPServer:
    """A server reached over Streamable HTTP at ``url`` (its MCP endpoint, e.g.
    ``http://127.0.0.1:8000/mcp``). ``headers`` go on every request (an ``Authorization``
    header, say); they never appear in a message and never go to another origin: a
    redirect is followed only for a 307 or 308 to the same scheme, host and port, any
    other fails the call (``tools()``: ``MCPError``) naming its status. ``timeout``
    (seconds) bounds each request as a whole, connection, headers and body. A JSON body or
    one event of a stream longer than ``max_message_bytes`` (default 8 MiB) fails that
    request with an error naming the limit; no more of it is read. ``on_input`` as for
    ``stdio``.

    Raises:
        ConfigError: a URL that is not http(s), a ``timeout`` that is not positive, or a
            ``max_message_bytes`` that is not a positive integer.
    """
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
        raise ConfigError(f"mcp.http needs an http:// or https:// URL, not {url!r}")
    timeout = seconds.duration("timeout", timeout)
    limit = _byte_limit(max_message_bytes)
    fixed = {str(key): str(value) for key, value in (headers or {}).items()}
    from . import _http
    from .._model.transport import public_url

    def connect(session: Session) -> _http.HttpWire:
        return _http.HttpWire(session, url, fixed, limit)

    return MCPServer(name or public_url(url), connect, timeout=timeout, on_input=_callable("on_input", on_input))


def _byte_limit(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"max_message_bytes must be a positive integer (bytes), not {value!r}")
    return value


def _callable(what: str, value: OnInput | None) -> OnInput | None:
    if value is not None and not callable(value):
        raise ConfigError(f"{what} must be a callable taking a Request, not {value!r}")
    return value
