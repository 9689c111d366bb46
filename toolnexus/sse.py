"""A runtime's stream as Server-Sent Events, for a browser's ``EventSource``.

``stream(rt, h, last_event_id=...)`` renders the events of ``h``'s subtree after
``last_event_id`` as ``text/event-stream`` frames: ``id:`` the event's id, ``event:`` its
kind, ``data:`` the event as one line of JSON (``{"kind", "handle", "id", "data"}``), and a
blank line; a ``: keep-alive`` comment after ``heartbeat_s`` of silence, so proxies and
browsers keep the connection. Return it as it is from a Flask ``Response`` or a Django
``StreamingHttpResponse`` with ``HEADERS``.

The frames end after ``h``'s ``result``, and as soon as ``h`` rests (waits on a person,
has settled with no turn to come, or is closed) once every event after ``last_event_id``
is sent: a stream never holds a server thread while a person decides. A page closes its
``EventSource`` at ``pending`` and, after its answer, comes back with the last id it saw
(``Last-Event-ID``, or ``?after=`` on a new ``EventSource``), on any worker process of a
stored tree: every durable event after it comes once. The function leaves authorization
to the view that calls it (``toolnexus.flask`` asks the app's ``authorize=``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .data import Event
from ._events.cursor import parse_after
from ._events.streams import RunStream
from .wire import to_json

if TYPE_CHECKING:
    from ._team.handle import Handle
    from ._team.runtime import Runtime

#: The response headers of an event stream (no caching, no proxy buffering).
HEADERS: dict[str, str] = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

KEEP_ALIVE = b": keep-alive\n\n"


def frame(event: Event) -> bytes:
    """One event as an SSE frame."""
    return f"id: {event.id}\nevent: {event.kind}\ndata: {to_json(event)}\n\n".encode()


def stream(
    rt: Runtime, h: Handle | str, *, last_event_id: str | None = None, heartbeat_s: float = 15
) -> Iterator[bytes]:
    """The events of ``h``'s subtree after ``last_event_id`` as SSE frames, until ``h``'s
    result or until ``h`` rests with nothing more to send (without ``last_event_id``, a
    finished run replays its last turn). Closing the iterator (the server does when the
    client goes) stops watching.

    Raises:
        ToolnexusError: ``last_event_id`` is not an id a store can hold (not numeric,
            negative, more than 18 digits), or ``h`` is not a handle: checked at once,
            before the first frame, so a view can answer 400 or 404.
    """
    parse_after(last_event_id)  # an empty id too is refused, before the first frame
    watched = rt.stream(h, after=last_event_id or None, end_at_rest=True)
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
