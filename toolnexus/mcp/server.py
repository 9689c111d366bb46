"""``MCPServer``: one MCP server's tools, called synchronously from any number of threads.

A server connects on first use (``initialize``, version agreement, then
``notifications/initialized``) and again after its connection ended (a stdio server that
exited, an HTTP session the server forgot). ``close()`` ends the connection; a later use
makes a new one, so a server shared by runtimes that each close it keeps working.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Callable

from .. import __version__
from ..data import ToolResult
from ..errors import ToolnexusError
from .._tools.tools import Tool, ToolContext, failure
from . import _results
from ._rpc import Expired, Failed, Gone, Session, Wire

log = logging.getLogger("toolnexus")

#: The protocol versions this client speaks, newest first; it asks for the first.
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
_MAX_PAGES = 1000
#: The least time a connection gets for its handshake, the server's start included (a
#: process that loads its libraries, ``npx`` fetching a package), whatever ``timeout``.
CONNECT_TIMEOUT_S = 30.0


class MCPError(ToolnexusError):
    """An MCP server could not be reached, or did not answer as the protocol says."""


class _Link:
    """One connection: the JSON-RPC session, the wire under it, the agreed version."""

    def __init__(self, session: Session, wire: Wire) -> None:
        self.session = session
        self.wire = wire
        self.version: str | None = None

    def close(self) -> None:
        try:
            self.wire.close()
        finally:
            self.session.fail_all(_closed(self.session.server))


def _closed(name: str) -> Gone:
    return Gone(f"mcp server {name} is closed")


class _Links:
    """The connection of one server: kept apart from ``MCPServer`` so that a server dropped
    without ``close`` still ends its process (its finaliser holds only this)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards: link, opening, tools, changes
        self.link: _Link | None = None
        self.opening: _Link | None = None  # a connection whose handshake is under way
        self.tools: list[Tool] | None = None
        self.changes = 0  # notifications/tools/list_changed seen

    def close(self) -> None:
        with self.lock:
            links = [each for each in (self.link, self.opening) if each is not None]
            self.link = self.opening = None
            self.tools = None
        for link in links:
            link.close()


class MCPServer:
    """An MCP server's tools (see ``toolnexus.mcp.stdio`` and ``toolnexus.mcp.http``).

    ``tools()`` lists them (every page, cached until the server says the list changed);
    each ``Tool`` sends ``tools/call`` when run. A context manager; ``close()`` ends the
    connection (a stdio server's process with it).
    """

    def __init__(self, name: str, connect: Callable[[Session], Wire], *, timeout: float) -> None:
        #: How the server is named in messages and logs.
        self.name = name
        #: The bound on each request (a page of the list, a call); the handshake gets at
        #: least ``CONNECT_TIMEOUT_S``.
        self.timeout = timeout
        self._connect = connect
        self._links = _Links()
        self._connecting = threading.Lock()  # one handshake at a time; the others wait for it
        self._finalizer = weakref.finalize(self, self._links.close)

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r})"

    def __enter__(self) -> MCPServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def protocol_version(self) -> str | None:
        """The version agreed with the server, once connected."""
        with self._links.lock:
            return self._links.link.version if self._links.link is not None else None

    @property
    def pid(self) -> int | None:
        """The process id of a stdio server while it runs, else None."""
        with self._links.lock:
            link = self._links.link or self._links.opening
        return getattr(link.wire, "pid", None) if link is not None else None

    @property
    def session_id(self) -> str | None:
        """The ``Mcp-Session-Id`` an HTTP server gave this connection, else None."""
        with self._links.lock:
            link = self._links.link
        return getattr(link.wire, "session_id", None) if link is not None else None

    def close(self) -> None:
        """End the connection (a stdio server: stdin closed, SIGTERM after 2 s, SIGKILL
        after 2 s more, reaped). Calls in flight fail; a later use connects again."""
        self._links.close()

    # --- the tools --------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """Every tool the server lists, as ``Tool``s.

        Raises:
            MCPError: the server cannot be reached, fails the handshake or the listing
                (timed out, a reply over ``max_message_bytes``, a redirect not followed...).
        """
        links = self._links
        with links.lock:
            if links.tools is not None:
                return list(links.tools)
            changes = links.changes
        try:
            listed = self._listing()
        except Failed as exc:
            raise MCPError(str(exc)) from None
        made = [_results.tool_of(self.name, each, self._executor, self) for each in listed]
        tools = [each for each in made if each is not None]
        with links.lock:
            if links.changes == changes and links.link is not None:
                links.tools = tools
        return list(tools)

    def _listing(self) -> list[Any]:
        listed: list[Any] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = self._request("tools/list", {"cursor": cursor} if cursor is not None else None, what="tools/list")
            if not isinstance(page, dict) or not isinstance(page.get("tools", []), list):
                raise MCPError(f"mcp server {self.name}: tools/list answered without a list of tools")
            listed.extend(page.get("tools", []))
            cursor = page.get("nextCursor")
            if not cursor:
                return listed
        raise MCPError(f"mcp server {self.name}: tools/list went on past {_MAX_PAGES} pages")

    def _executor(self, name: str) -> Callable[[dict[str, Any], ToolContext], ToolResult]:
        def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return self.call(name, args, ctx)

        return execute

    def call(self, name: str, arguments: dict[str, Any], ctx: ToolContext | None = None) -> ToolResult:
        """Call the server's tool ``name`` (its own name, not sanitised). Never raises: a
        failure (timed out, interrupted, the server gone or erring) is an error result."""
        cancelled = ctx.cancelled if ctx is not None else None
        try:
            params = {"name": name, "arguments": arguments}
            result = self._request("tools/call", params, cancelled=cancelled, what=f"tool {name}")
        except (MCPError, Failed) as exc:
            return failure(str(exc))
        return _results.tool_result(result)

    # --- requests and the connection --------------------------------------------------------

    @property
    def _connect_timeout(self) -> float:
        return max(self.timeout, CONNECT_TIMEOUT_S)

    def _request(
        self, method: str, params: dict[str, Any] | None, *, cancelled: threading.Event | None = None, what: str
    ) -> Any:
        """One request on the live connection (made first if need be); an HTTP session the
        server forgot is started again once. Raises ``MCPError`` or ``Failed``."""
        for attempt in (1, 2):
            link = self._link()
            try:
                return link.session.request(method, params, timeout=self.timeout, cancelled=cancelled, what=what)
            except Expired:
                self._drop(link)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _link(self) -> _Link:
        link = self._live()
        if link is not None:
            return link
        if not self._connecting.acquire(timeout=self._connect_timeout + 5):
            raise MCPError(f"mcp server {self.name}: timed out waiting for another thread's connection")
        try:
            return self._live() or self._open()
        finally:
            self._connecting.release()

    def _live(self) -> _Link | None:
        """The connection, unless it has ended (then it is let go: the next use starts again)."""
        links = self._links
        with links.lock:
            link = links.link
            if link is None or link.session.failure is None:
                return link
            links.link = None
            links.tools = None
        link.close()  # reaps an exited process
        return None

    def _drop(self, link: _Link) -> None:
        with self._links.lock:
            if self._links.link is link:
                self._links.link = None
                self._links.tools = None
        link.close()

    def _open(self) -> _Link:
        session = Session(self.name, self._notified)
        try:
            wire = self._connect(session)
        except Failed as exc:
            raise MCPError(str(exc)) from None
        session.wire = wire
        link = _Link(session, wire)
        with self._links.lock:
            self._links.opening = link
        try:
            self._handshake(link)
        except BaseException:
            with self._links.lock:
                if self._links.opening is link:
                    self._links.opening = None
            link.close()
            raise
        with self._links.lock:
            closed_meanwhile = self._links.opening is not link
            self._links.opening = None
            if not closed_meanwhile:
                self._links.link = link
        if closed_meanwhile:
            link.close()
            raise MCPError(f"mcp server {self.name} was closed while connecting")
        return link

    def _handshake(self, link: _Link) -> None:
        client = {"name": "toolnexus", "version": __version__}
        params = {"protocolVersion": PROTOCOL_VERSIONS[0], "capabilities": {}, "clientInfo": client}
        try:
            result = link.session.request("initialize", params, timeout=self._connect_timeout)
        except Failed as exc:
            raise MCPError(str(exc)) from None
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if version not in PROTOCOL_VERSIONS:
            raise MCPError(
                f"mcp server {self.name} answered protocol version {version!r} "
                f"to this client's {PROTOCOL_VERSIONS[0]}; "
                f"this client speaks {', '.join(PROTOCOL_VERSIONS)}"
            )
        link.version = version
        if hasattr(link.wire, "protocol_version"):
            link.wire.protocol_version = version
        link.session.notify("notifications/initialized")
        log.debug("mcp server %s connected (protocol %s)", self.name, version)

    def _notified(self, method: str, params: Any) -> None:
        if method == "notifications/tools/list_changed":
            with self._links.lock:
                self._links.tools = None
                self._links.changes += 1
