"""A scripted route: the model exchanges of a test answered by the test, with no socket.

The way httpx's ``MockTransport`` serves tests: the client builds its request, and then,
where a connection would carry it, the test's script answers. Everything around it runs as
it does for users: request bodies, headers, retries, backoff, ``Retry-After``, the error
names, streamed replies decoded as they arrive. Installed for a block, it serves every
``Client`` and ``Runtime`` of the process, built before or inside the block, on any thread.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from typing import Any, Callable, Mapping, Union

import attrs

from .._model.cancel import CancelScope
from .._model.transport import overrides
from .._model.transport.base import OpenReply, Route, Waiting
from .streamed import sse_frame, streamed_form


@attrs.frozen(kw_only=True)
class ScriptedRequest:
    """A request the scripted route was given, as it would have gone on the wire."""

    #: ``"POST"``.
    method: str
    #: The whole URL, e.g. ``https://llm.test/v1/chat/completions``.
    url: str
    #: The URL's path, e.g. ``/v1/chat/completions``.
    path: str
    #: The headers sent (names in any case), credentials included.
    headers: Mapping[str, str] = attrs.field(repr=False)
    #: The body, as sent.
    body: bytes = attrs.field(repr=False)
    #: The request asks for a streamed reply (``"stream": true``).
    stream: bool = False

    def json(self) -> Any:
        """The body, decoded."""
        return json.loads(self.body)


@attrs.frozen(kw_only=True)
class ScriptedReply:
    """One scripted reply. ``json`` (sent as ``application/json``) or ``body`` (text, bytes,
    or a list of pieces handed over one read at a time; a ``text/event-stream`` body is
    handed over one event at a time, as a server's would arrive). ``error``, an exception
    such as ``ConnectionResetError()`` or ``TimeoutError()``, is raised where the
    connection would fail, and the exchange treats it as the HTTP stack's failure.
    ``delay_s`` holds the reply back that long (an interrupt or the client's ``timeout``
    ends the wait, as they would end a socket's)."""

    status: int = 200
    json: Any = None
    body: bytes | str | list[bytes | str] | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    content_type: str | None = None
    error: BaseException | None = None
    delay_s: float = 0.0

    def _pieces(self) -> tuple[str, list[bytes]]:
        """The content type and the body's pieces."""
        if self.json is not None:
            return self.content_type or "application/json", [json.dumps(self.json).encode()]
        content_type = self.content_type or "text/plain"
        body = self.body
        if body is None:
            return content_type, []
        if isinstance(body, list):
            return content_type, [_encoded(piece) for piece in body]
        if "event-stream" in content_type.lower():
            return content_type, event_pieces(_encoded(body))
        return content_type, [_encoded(body)]


#: What a script gives for one request: a reply, a dict (a whole reply body), or a
#: callable taking the ``ScriptedRequest`` and returning one of those two.
Answer = Union[ScriptedReply, Mapping[str, Any], Callable[[ScriptedRequest], Union[ScriptedReply, Mapping[str, Any]]]]


class ScriptedRoute:
    """Answers every model exchange of the process from a script while it is active.

    ``handler(request)`` answers each request (a ``ScriptedRequest``) with a
    ``ScriptedReply`` or a dict, a whole reply body; answers queued with ``add`` are used
    first, one per request, in order. A dict given to a request for a streamed reply is
    sent in the style's streamed form (OpenAI-style chunks, or the anthropic style's
    events on ``/messages``). With ``base_url``, only exchanges with URLs under it are
    answered; the others go on their way. A request with nothing left to answer it raises
    ``LookupError``; whatever a handler raises reaches the caller unchanged. Use it as a
    context manager, or ``start()`` and ``stop()``.
    """

    def __init__(self, handler: Answer | None = None, *, base_url: str | None = None) -> None:
        self._handler = handler
        self._base_url = base_url.rstrip("/") if base_url else None
        self._lock = threading.Lock()  # guards: _queue, _requests
        self._queue: collections.deque[Answer] = collections.deque()
        self._requests: list[ScriptedRequest] = []

    def add(self, answer: Answer | None = None, /, **reply: Any) -> None:
        """Queue the answer to the next request: ``answer`` as it is, or a ``ScriptedReply``
        made of the keyword arguments (``status``, ``json``, ``body``, ``headers``,
        ``content_type``, ``error``, ``delay_s``)."""
        if answer is None:
            answer = ScriptedReply(**reply)
        elif reply:
            raise TypeError("give an answer or reply fields, not both")
        with self._lock:
            self._queue.append(answer)

    @property
    def requests(self) -> list[ScriptedRequest]:
        """Every request answered so far, in the order they came."""
        with self._lock:
            return list(self._requests)

    @property
    def unserved(self) -> int:
        """How many queued answers no request has used yet."""
        with self._lock:
            return len(self._queue)

    def start(self) -> ScriptedRoute:
        """Answer every model exchange of the process from now on."""
        overrides.install(self._open)
        return self

    def stop(self) -> None:
        """Let exchanges go on their way again."""
        overrides.remove(self._open)

    def __enter__(self) -> ScriptedRoute:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _open(
        self, request: overrides.Outgoing, onward: Route, deadline: float | None, scope: CancelScope, waiting: Waiting
    ) -> OpenReply:
        if self._base_url is not None and not request.url.startswith(self._base_url):
            return onward.open(request.payload, deadline, scope, waiting, request.stream)
        seen = ScriptedRequest(
            method=request.method,
            url=request.url,
            path=request.path,
            headers=request.headers,
            body=request.payload,
            stream=request.stream,
        )
        with self._lock:
            self._requests.append(seen)
            answer = self._queue.popleft() if self._queue else self._handler
        if answer is None:
            raise overrides.PassedThrough(LookupError(f"no scripted answer left for {seen.method} {seen.url}"))
        if waiting:
            waiting.pop()()  # the request is out
        try:
            made = answer(seen) if callable(answer) else answer
        except Exception as exc:
            raise overrides.PassedThrough(exc) from exc
        reply = made if isinstance(made, ScriptedReply) else _as_reply(dict(made), seen)
        _wait(reply.delay_s, deadline, scope)
        if reply.error is not None:
            raise reply.error
        content_type, pieces = reply._pieces()
        headers = {"Content-Type": content_type, **reply.headers}
        return overrides.CannedReply(reply.status, headers, pieces, scope, deadline)


def event_pieces(body: bytes) -> list[bytes]:
    """An event stream's body cut after each event (each blank line), as it would arrive."""
    pieces: list[bytes] = []
    start = 0
    for end in _event_ends(body):
        pieces.append(body[start:end])
        start = end
    if start < len(body):
        pieces.append(body[start:])
    return pieces


def _event_ends(body: bytes) -> list[int]:
    ends: list[int] = []
    index = 0
    while True:
        found = [at for at in (body.find(b"\n\n", index), body.find(b"\r\n\r\n", index)) if at >= 0]
        if not found:
            return ends
        at = min(found)
        index = at + (4 if body.startswith(b"\r\n\r\n", at) else 2)
        ends.append(index)


def _as_reply(body: dict[str, Any], request: ScriptedRequest) -> ScriptedReply:
    if not request.stream:
        return ScriptedReply(json=body)
    anthropic = request.path.rstrip("/").endswith("/messages")
    chunks = streamed_form(body, request.json(), anthropic=anthropic)
    frames: list[bytes | str] = [sse_frame(chunk, named=anthropic) for chunk, _ in chunks]
    return ScriptedReply(body=frames, content_type="text/event-stream")


def _wait(delay: float, deadline: float | None, scope: CancelScope) -> None:
    """Hold a reply back ``delay`` seconds, as a slow server would: a cancelled scope ends
    the wait as a closed connection, the deadline as a read that timed out."""
    if delay <= 0:
        return
    until = time.monotonic() + delay
    limit = until if deadline is None else min(until, deadline)
    if scope.event.wait(max(0.0, limit - time.monotonic())):
        raise ConnectionAbortedError("the exchange was cancelled")
    if deadline is not None and deadline < until:
        raise TimeoutError("the reply did not come before the deadline")


def _encoded(piece: bytes | str) -> bytes:
    return piece.encode("utf-8") if isinstance(piece, str) else piece
