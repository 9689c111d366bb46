"""A runtime's stream as Server-Sent Events, for a browser's ``EventSource``.

``stream(rt, h, last_event_id=...)`` renders ``Runtime.stream(h, after=last_event_id)``
as ``text/event-stream`` frames: ``id:`` the event's id, ``event:`` its kind, ``data:``
the event as one line of JSON (``{"kind", "handle", "id", "data"}``), and a blank line;
a ``: keep-alive`` comment after ``heartbeat_s`` of silence, so proxies and browsers
keep the connection; the frames end after the ``result`` event. Return it as it is from
a Flask ``Response`` or a Django ``StreamingHttpResponse`` with ``HEADERS``. A browser
that reconnects sends the last id it saw as ``Last-Event-ID``: give it back here (on
any worker process of a stored tree) and every durable event after it comes once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .data import Event
from .streams import RunStream, parse_after
from .wire import to_json

if TYPE_CHECKING:
    from .handle import Handle
    from .runtime import Runtime

#: The response headers of an event stream (no caching, no proxy buffering).
HEADERS: dict[str, str] = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

KEEP_ALIVE = b": keep-alive\n\n"


def frame(event: Event) -> bytes:
    """One event as an SSE frame."""
    return f"id: {event.id}\nevent: {event.kind}\ndata: {to_json(event)}\n\n".encode()


def stream(rt: Runtime, h: Handle | str, *, last_event_id: str | None = None, heartbeat_s: float = 15) -> Iterator[bytes]:
    """The events of ``h``'s subtree after ``last_event_id`` as SSE frames, until ``h``'s
    result. Closing the iterator (the server does when the client goes) stops watching.

    Raises:
        ToolnexusError: ``last_event_id`` is not an event id (checked at once, before
            the first frame, so a view can answer 400).
    """
    parse_after(last_event_id)
    watched = rt.stream(h, after=last_event_id or None)
    return _frames(watched, heartbeat_s)


def _frames(watched: RunStream, heartbeat_s: float) -> Iterator[bytes]:
    try:
        while True:
            try:
                event = watched.next_event(heartbeat_s)
            except StopIteration:
                return
            yield KEEP_ALIVE if event is None else frame(event)
    finally:
        watched.close()
