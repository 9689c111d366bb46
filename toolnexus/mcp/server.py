"""``MCPServer``: one MCP server's tools, called synchronously from any number of threads.

A server connects on first use (the era probe, then the handshake for a server of the
handshake era: ``_era``) and again after its connection ended (a stdio server that exited,
an HTTP session the server forgot). ``close()`` ends the connection; a later use makes a
new one, so a server shared by runtimes that each close it keeps working.

The list of tools is kept while it is fresh: until the server says it changed (legacy), or
for the ``ttlMs`` its pages give and until a change comes on the ``subscriptions/listen``
opened when the server offers one (modern). A call answered ``input_required`` becomes a
``Request`` (``_input``): answered inline by ``on_input``, or returned as a suspension for
a person, whose ``Answer`` this tool gets back as ``ctx.answer`` to send the retry.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, Callable

from ..data import Answer, Request, ToolResult
from ..errors import ToolnexusError
from .._tools.tools import Tool, ToolContext, failure, suspend
from . import _input, _results
from . import _protocol as protocol
from ._era import Agreed, EraError, agree, request_meta
from ._rpc import Expired, Failed, Gone, Pending, Session, Wire

log = logging.getLogger("toolnexus")

#: The protocol versions this client speaks, newest first (it probes the first, then offers
#: the second in a handshake).
PROTOCOL_VERSIONS = protocol.PROTOCOL_VERSIONS
_MAX_PAGES = 1000
#: The least time a connection gets for its handshake, the server's start included (a
#: process that loads its libraries, ``npx`` fetching a package), whatever ``timeout``.
CONNECT_TIMEOUT_S = 30.0
#: The pause before retrying an ``input_required`` that asked nothing (only a requestState).
_STATE_ONLY_PAUSE_S = 0.05

#: ``on_input``: answers a server's question inline (None: leave it to ``wait_for`` or a person).
OnInput = Callable[[Request], "Answer | None"]


class MCPError(ToolnexusError):
    """An MCP server could not be reached, or did not answer as the protocol says."""


class _Link:
    """One connection: the JSON-RPC session, the wire under it, what was agreed, the listen."""

    def __init__(self, session: Session, wire: Wire) -> None:
        self.session = session
        self.wire = wire
        self.agreed: Agreed | None = None
        self.stop_listen: Callable[[], None] | None = None
        self.listening = False  # guarded by the server's links lock, as is listen_refused
        self.listen_refused = False

    @property
    def modern(self) -> bool:
        return self.agreed is not None and self.agreed.modern

    def close(self) -> None:
        stop, self.stop_listen = self.stop_listen, None
        try:
            if stop is not None:
                stop()
            self.wire.close()
        finally:
            self.session.fail_all(_closed(self.session.server))


def _closed(name: str) -> Gone:
    return Gone(f"mcp server {name} is closed")


class _Links:
    """The connection of one server: kept apart from ``MCPServer`` so that a server dropped
    without ``close`` still ends its process (its finaliser holds only this)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards: link, opening, tools, fresh_until, changes, each link's listening
        self.link: _Link | None = None
        self.opening: _Link | None = None  # a connection whose handshake is under way
        self.tools: list[Tool] | None = None
        self.fresh_until: float | None = None  # monotonic; None: until a change is announced
        self.changes = 0  # notifications/tools/list_changed seen, listens ended

    def stale(self) -> None:
        """The list may have changed (lock held)."""
        self.tools = None
        self.changes += 1

    def close(self) -> None:
        with self.lock:
            links = [each for each in (self.link, self.opening) if each is not None]
            self.link = self.opening = None
            self.tools = None
        for link in links:
            link.close()


class MCPServer:
    """An MCP server's tools (see ``toolnexus.mcp.stdio`` and ``toolnexus.mcp.http``).

    ``tools()`` lists them (every page, kept while fresh); each ``Tool`` sends
    ``tools/call`` when run. A context manager; ``close()`` ends the connection (a stdio
    server's process with it).
    """

    def __init__(
        self, name: str, connect: Callable[[Session], Wire], *, timeout: float, on_input: OnInput | None = None
    ) -> None:
        #: How the server is named in messages and logs.
        self.name = name
        #: The bound on each request (a page of the list, a call); the handshake gets at
        #: least ``CONNECT_TIMEOUT_S``.
        self.timeout = timeout
        #: Answers the server's questions inline (CONTRACT §18b ``on_input``), or None.
        self.on_input = on_input
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
        """The version in use with the server (``"2026-07-28"``, ``"2025-11-25"``, ...),
        None before the first use."""
        agreed = self._agreed()
        return agreed.version if agreed is not None else None

    @property
    def server_info(self) -> dict[str, Any] | None:
        """The server's ``{"name", "version"}`` as it gave them, None before the first use
        or when it gave none."""
        agreed = self._agreed()
        return dict(agreed.server_info) if agreed is not None and agreed.server_info else None

    def _agreed(self) -> Agreed | None:
        with self._links.lock:
            return self._links.link.agreed if self._links.link is not None else None

    @property
    def pid(self) -> int | None:
        """The process id of a stdio server while it runs, else None."""
        with self._links.lock:
            link = self._links.link or self._links.opening
        return getattr(link.wire, "pid", None) if link is not None else None

    @property
    def session_id(self) -> str | None:
        """The ``Mcp-Session-Id`` a legacy HTTP server gave this connection, else None."""
        with self._links.lock:
            link = self._links.link
        return getattr(link.wire, "session_id", None) if link is not None else None

    def close(self) -> None:
        """End the connection (a stdio server: stdin closed, SIGTERM after 2 s, SIGKILL
        after 2 s more, reaped; a listen stream ended). Calls in flight fail; a later use
        connects again."""
        self._links.close()

    # --- the tools --------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """Every tool the server lists, as ``Tool``s.

        Returns:
            The tools, in the server's order, their names sanitised to what a model accepts
            (an entry that cannot be a tool is skipped, with a warning in the log); a
            listing still fresh is served without asking again.

        Raises:
            MCPError: the server cannot be reached, fails the handshake or the listing
                (timed out, a reply over ``max_message_bytes``, a redirect not followed...).
        """
        links = self._links
        with links.lock:
            fresh = links.fresh_until is None or time.monotonic() < links.fresh_until
            if links.tools is not None and fresh:
                return list(links.tools)
            changes = links.changes
        try:
            link = self._link()
            self._listen(link)
            listed, ttl_ms = self._listing()
        except Failed as exc:
            raise MCPError(str(exc)) from None
        made = [_results.tool_of(self.name, each, self._executor, self) for each in listed]
        tools = [each for each in made if each is not None]
        with links.lock:
            if links.changes == changes and links.link is link and (not link.modern or ttl_ms > 0):
                links.tools = tools
                links.fresh_until = time.monotonic() + ttl_ms / 1000 if link.modern else None
        return list(tools)

    def _listing(self) -> tuple[list[Any], int]:
        """Every page's tools, and the least ``ttlMs`` of the pages (0 when one has none)."""
        listed: list[Any] = []
        cursor: str | None = None
        ttl_ms: int | None = None
        for _ in range(_MAX_PAGES):
            page = self._request("tools/list", {"cursor": cursor} if cursor is not None else None, what="tools/list")
            if not isinstance(page, dict) or not isinstance(page.get("tools", []), list):
                raise MCPError(f"mcp server {self.name}: tools/list answered without a list of tools")
            listed.extend(page.get("tools", []))
            hint = page.get("ttlMs")
            fresh = hint if isinstance(hint, int) and not isinstance(hint, bool) and hint > 0 else 0
            ttl_ms = fresh if ttl_ms is None else min(ttl_ms, fresh)
            cursor = page.get("nextCursor")
            if not cursor:
                return listed, ttl_ms
        raise MCPError(f"mcp server {self.name}: tools/list went on past {_MAX_PAGES} pages")

    def _executor(self, name: str) -> Callable[[dict[str, Any], ToolContext], ToolResult]:
        def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return self.call(name, args, ctx)

        return execute

    # --- a call, and the server's questions ---------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any], ctx: ToolContext | None = None) -> ToolResult:
        """Call the server's tool ``name`` (its own name, not sanitised). Never raises: a
        failure (timed out, interrupted, the server gone or erring) is an error result.

        A call answered ``input_required`` is a suspension on a ``Request`` of kind
        ``mcp_input`` (after ``on_input``, when given, had its say); run again with the
        ``Answer`` (``ctx.answer`` and ``ctx.request``), it sends the retry.

        Args:
            name: The tool's name as the server lists it.
            arguments: The call's arguments (a JSON object).
            ctx: The calling tool's context: its cancellation, and the answer of a resumed
                call; ``None`` outside a run.

        Returns:
            The ``ToolResult``: the server's text content as ``output``, other content and
            ``structuredContent`` in ``metadata``, ``is_error`` for a failure, and
            ``pending`` when the server asked a question.
        """
        cancelled = ctx.cancelled if ctx is not None else None
        given = _input.continued(ctx, name)
        try:
            if given is not None:
                request, answer = given
                params = _input.retry_params(request, answer)
                rounds = int((request.data or {}).get("round") or 1)
            else:
                params, rounds = {"name": name, "arguments": arguments}, 0
            return self._rounds(name, params, rounds, cancelled)
        except (MCPError, Failed, _input.Unanswerable) as exc:
            return failure(str(exc))

    def _rounds(self, name: str, params: dict[str, Any], rounds: int, cancelled: threading.Event | None) -> ToolResult:
        """Send the call, and each retry ``on_input`` answers inline, until a result or a
        question for a person."""
        while True:
            result = self._request("tools/call", params, cancelled=cancelled, what=f"tool {name}")
            kind = result.get("resultType") if isinstance(result, dict) else None
            if kind in (None, protocol.COMPLETE):
                return _results.tool_result(result)
            if kind != protocol.INPUT_REQUIRED:
                unknown = f"answered resultType {kind!r}, unknown to this client"
                return failure(f"mcp server {self.name}: tool {name} {unknown}")
            rounds += 1
            if rounds > _input.MAX_ROUNDS:
                rounds_done = f"was still input_required after {_input.MAX_ROUNDS} rounds"
                return failure(f"mcp server {self.name}: tool {name} {rounds_done}")
            if not result.get("inputRequests") and isinstance(result.get("requestState"), str):
                params = {**_plain(params), "requestState": result["requestState"]}  # asks nothing: again at once
                if cancelled is not None and cancelled.wait(_STATE_ONLY_PAUSE_S):
                    return failure(f"mcp server {self.name}: tool {name} interrupted")
                continue
            request = _input.question(self._label(), name, params.get("arguments") or {}, result, rounds)
            answer = self._inline(request)
            if answer is None:
                return suspend(request)
            params = _input.retry_params(request, answer)

    def _inline(self, request: Request) -> Answer | None:
        """``on_input``'s answer to ``request``, or None when there is no ``on_input`` or it
        left the request to a person. One that raises declines."""
        if self.on_input is None:
            return None
        try:
            answer = self.on_input(request)
        except Exception:
            log.warning("mcp server %s: on_input raised; the question is declined", self.name, exc_info=True)
            return Answer(id=request.id, ok=False, reason="declined")
        if answer is not None and (not isinstance(answer, Answer) or answer.id != request.id):
            wanted = f"the Answer to request {request.id} (or None)"
            raise _input.Unanswerable(f"on_input must return {wanted}, not {answer!r}")
        return answer

    def _legacy_question(self, params: Any, pending: Pending | None) -> dict[str, Any]:
        """A legacy server's ``elicitation/create`` during a call, answered by ``on_input``."""
        request = _input.legacy_question(self._label(), params, pending.params if pending is not None else None)
        try:
            answer = self._inline(request)
            form = not (isinstance(params, dict) and params.get("mode") == "url")
            return _input.elicit_result(answer, answer.data if answer is not None else None, form)
        except _input.Unanswerable as exc:
            log.warning("mcp server %s: %s; the question is declined", self.name, exc)
            return {"action": "decline"}

    def _label(self) -> str:
        info = self.server_info
        return info["name"] if info and info.get("name") else self.name

    # --- requests and the connection --------------------------------------------------------

    @property
    def _connect_timeout(self) -> float:
        return max(self.timeout, CONNECT_TIMEOUT_S)

    def _request(
        self, method: str, params: dict[str, Any] | None, *, cancelled: threading.Event | None = None, what: str
    ) -> Any:
        """One request on the live connection (made first if need be), with ``_meta`` when
        it is modern; an HTTP session the server forgot is started again once. Raises
        ``MCPError`` or ``Failed``."""
        for attempt in (1, 2):
            link = self._link()
            sent = {**(params or {}), "_meta": request_meta()} if link.modern else params
            try:
                return link.session.request(method, sent, timeout=self.timeout, cancelled=cancelled, what=what)
            except Expired:
                self._drop(link)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _link(self) -> _Link:
        link = self._live()
        if link is not None:
            return link
        if not self._connecting.acquire(timeout=self._connect_timeout * 2 + 5):
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
        asker = self._legacy_question if self.on_input is not None else None
        session = Session(self.name, self._notified, asker)
        try:
            wire = self._connect(session)
        except Failed as exc:
            raise MCPError(str(exc)) from None
        session.wire = wire
        link = _Link(session, wire)
        with self._links.lock:
            self._links.opening = link
        try:
            link.agreed = agree(
                session, wire, probe_timeout=self.timeout, connect_timeout=self._connect_timeout, asks=asker is not None
            )
        except BaseException as exc:
            with self._links.lock:
                if self._links.opening is link:
                    self._links.opening = None
            link.close()
            if isinstance(exc, (Failed, EraError)):
                raise MCPError(str(exc)) from None
            raise
        with self._links.lock:
            closed_meanwhile = self._links.opening is not link
            self._links.opening = None
            if not closed_meanwhile:
                self._links.link = link
        if closed_meanwhile:
            link.close()
            raise MCPError(f"mcp server {self.name} was closed while connecting")
        log.debug("mcp server %s connected (protocol %s)", self.name, link.agreed.version)
        return link

    # --- change notifications -------------------------------------------------------------

    def _listen(self, link: _Link) -> None:
        """Open the one ``subscriptions/listen`` of a modern connection whose server offers
        ``tools.listChanged`` (again after one that ended; never after a refused one)."""
        agreed = link.agreed
        tools = agreed.capabilities.get("tools") if agreed is not None and agreed.modern else None
        if not isinstance(tools, dict) or tools.get("listChanged") is not True:
            return
        with self._links.lock:
            if link.listening or link.listen_refused or self._links.link is not link:
                return
            link.listening = True
        params = {"notifications": {"toolsListChanged": True}, "_meta": request_meta()}
        ended: list[int] = []
        links = self._links  # not the server: a thread that holds this must not keep it alive

        def on_end(reply: dict[str, Any] | None) -> None:
            with links.lock:
                link.listening = False
                link.stop_listen = None
                link.listen_refused = link.listen_refused or (isinstance(reply, dict) and "error" in reply)
                if links.link is link:
                    links.stale()  # a change may have gone unseen
            link.session.close_stream(ended[0])

        message = link.session.open_stream("subscriptions/listen", params, on_end)
        ended.append(message["id"])
        try:
            stop = link.wire.listen(message, on_end)
        except Failed:
            on_end(None)
            return
        with self._links.lock:
            if link.listening:
                link.stop_listen = stop

    def _notified(self, method: str, params: Any) -> None:
        if method == "notifications/tools/list_changed":
            with self._links.lock:
                self._links.stale()


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    """A call's params without the answers of an earlier round."""
    return {key: value for key, value in params.items() if key not in ("inputResponses", "requestState")}
