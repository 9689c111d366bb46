"""Reading Server-Sent Events: the ``text/event-stream`` format, decoded incrementally.

One decoder serves every place that reads an event stream (a model's streamed reply, an
MCP server's reply over Streamable HTTP), so the framing rules live here once: lines end
in CRLF, LF or CR (a CR at the end of one chunk may pair with an LF at the start of the
next); a line starting with ``:`` is a comment; ``field: value`` drops one leading space
of the value; ``data`` lines join with newlines; a blank line dispatches the event; ``id``
sets the last event id (unless it holds a NUL); ``retry`` takes ASCII digits only. A
stream that ends in the middle of an event leaves it undelivered, and ``partial`` says so,
which a reader that expects an end marker treats as a stream cut short.
"""

from __future__ import annotations

import codecs
import re
from typing import Iterable, Iterator

import attrs


@attrs.frozen
class SSEEvent:
    """One dispatched event."""

    #: The ``event`` field, ``"message"`` when the event named none.
    event: str = "message"
    #: The ``data`` lines, joined by newlines.
    data: str = ""
    #: The last event id at dispatch (the stream's, carried over from earlier events).
    id: str | None = None
    #: A ``retry`` field in this event (milliseconds), if any.
    retry: int | None = None


_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEDecoder:
    """Feed bytes as they arrive; get the events they complete, in order."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._after_cr = False  # the last chunk ended in CR: an LF that follows belongs to it
        self._started = False  # a byte-order mark is dropped only at the very start
        self._event = ""
        self._data: list[str] = []
        self._retry: int | None = None
        self._fields = False  # a field line was seen since the last dispatch
        #: The stream's last event id (``Last-Event-ID`` for a reconnect).
        self.last_event_id: str | None = None
        #: Comment lines seen (a heartbeat counts as a sign of life, not as an event).
        self.comments = 0

    @property
    def partial(self) -> bool:
        """Whether an event was begun and not yet dispatched (or a line not yet ended)."""
        return self._fields or bool(self._buffer)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        text = self._text.decode(chunk)
        if not self._started and text:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        if text:
            self._after_cr = text.endswith("\r")
        events: list[SSEEvent] = []
        # Only CR and LF end lines (str.splitlines would also split on U+2028 and others,
        # which JSON text may hold unescaped).
        *lines, self._buffer = _LINE_END.split(self._buffer + text)
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[SSEEvent]:
        """The end of the stream: a line left without its end is still read, but an event
        without its blank line is not dispatched (``partial`` stays true)."""
        tail = self._buffer + self._text.decode(b"", final=True)
        self._buffer = ""
        if tail:
            self._line(tail)
        return []

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        self._fields = True
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\x00" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data, self._event, self._retry, self._fields = [], "", None, False
        if not data:
            return None  # an event with no data is not dispatched (its id still counts)
        return SSEEvent(event=event or "message", data="\n".join(data), id=self.last_event_id, retry=retry)


def iter_events(chunks: Iterable[bytes], decoder: SSEDecoder | None = None) -> Iterator[SSEEvent]:
    """The events of a stream given as byte chunks, yielded as soon as each completes."""
    decoder = decoder or SSEDecoder()
    for chunk in chunks:
        yield from decoder.feed(chunk)
    yield from decoder.close()
