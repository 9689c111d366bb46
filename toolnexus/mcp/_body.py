"""An MCP server's HTTP reply, read within bounds: one deadline over the whole exchange and
``max_message_bytes`` on a JSON body and on each event of a stream.

The deadline is kept by a timer that shuts the exchange's connections down when it passes,
wherever the exchange is blocked (connecting, the status line and headers inside urllib3,
a body that drips or never ends); the body reader also stops at it between reads. A body
or an event longer than the limit raises ``TooLarge`` once the limit is passed: the reader
never holds more than the limit and one read (64 KiB) of it.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from typing import TYPE_CHECKING, Iterator

from .._model.cancel import CancelScope
from .._model.sse_reader import SSEDecoder, SSEEvent
from ._rpc import TooLarge

if TYPE_CHECKING:
    import requests

CHUNK = 65536


@contextlib.contextmanager
def severed_at(deadline: float | None, scope: CancelScope) -> Iterator[None]:
    """Shut ``scope``'s connections down if ``deadline`` passes before the block ends."""
    if deadline is None:
        yield
        return
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), scope.sever)
    timer.name = "toolnexus-mcp-deadline"
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


class Body:
    """The body of one reply (see the module docs). ``what`` names it in a ``TooLarge``
    error, e.g. ``the reply to tools/call (POST http://host/mcp)``."""

    def __init__(self, response: requests.Response, deadline: float | None, limit: int, server: str, what: str) -> None:
        self._response = response
        self._deadline = deadline
        self._limit = limit
        self._server = server
        self._what = what

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives, content coding removed, until it ends or the deadline."""
        raw = self._response.raw
        read = raw.read1 if hasattr(raw, "read1") else raw.read  # urllib3 1.x has no read1
        while self._deadline is None or time.monotonic() < self._deadline:
            chunk = read(CHUNK, decode_content=True)
            if not chunk:
                return
            yield chunk

    def whole(self) -> bytearray:
        """The whole body (what came by the deadline).

        Raises:
            TooLarge: its ``Content-Length``, or what came of it, is over the limit.
        """
        length = self._response.headers.get("Content-Length", "")
        if length.isascii() and length.isdigit() and int(length) > self._limit:
            raise self._too_large(self._what)
        content = bytearray()
        for chunk in self.chunks():
            content += chunk
            if len(content) > self._limit:
                raise self._too_large(self._what)
        return content

    def events(self) -> Iterator[SSEEvent]:
        """The events of a ``text/event-stream`` body as each completes. The decoder is fed
        whole lines only (a line under way is kept here), so that a long line costs no
        more than its length to take in.

        Raises:
            TooLarge: an event, its lines so far, is over the limit.
        """
        decoder = SSEDecoder()
        line = bytearray()  # the line under way: not given to the decoder before its end
        held = 0  # bytes of the event under way given to the decoder
        for chunk in self.chunks():
            for piece in _pieces(chunk):
                if not piece.endswith((b"\n", b"\r")):
                    line += piece
                    if held + len(line) > self._limit:
                        raise self._too_large(f"an event of {self._what}")
                    continue
                whole = bytes(line) + piece if line else piece
                line.clear()
                events = decoder.feed(whole)
                held = held + len(whole) if decoder.partial else 0
                if held > self._limit:
                    raise self._too_large(f"an event of {self._what}")
                yield from events

    def _too_large(self, what: str) -> TooLarge:
        return TooLarge(self._server, what, self._limit)


_LINE_END = re.compile(rb"\r\n|\r|\n")


def _pieces(data: bytes) -> Iterator[bytes]:
    """``data`` cut after each line end (CRLF, CR or LF); the last piece may have none."""
    start = 0
    for match in _LINE_END.finditer(data):
        yield data[start : match.end()]
        start = match.end()
    if start < len(data):
        yield data[start:]
