"""What ``toolnexus.agui`` asks of a runtime, in one place: the cursor a run's events start
after, the stream of a thread that ends when its handle rests, and the frontend tools a
thread's agent is offered (the runtime's private port, as the served layer's bindings use it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .._team.port import port_of
from .._tools import hosted

if TYPE_CHECKING:
    from .._events.streams import RunStream
    from .._team.runtime import Runtime
    from ._input import OfferedTool

#: The ``Request`` kind a frontend tool call suspends on.
KIND = hosted.KIND


def now(rt: Runtime) -> str:
    """The id of the tree's latest durable event: a run's own events come after it,
    whichever process commits them."""
    return port_of(rt).latest_event()


def watch(rt: Runtime, handle: str, after: str) -> RunStream:
    """The events of ``handle``'s subtree after ``after``, until its result, or until it
    rests with nothing more to send (``toolnexus.sse``'s stream)."""
    return rt.stream(handle, after=after, end_at_rest=True)


def offer(rt: Runtime, handle: str, tools: Sequence[OfferedTool]) -> None:
    """Offer ``tools`` to the model of ``handle``'s turns from its next one on (and to a
    turn that resumes), instead of what it was offered before."""
    port_of(rt).offer(handle, [spec(tool) for tool in tools])


def spec(tool: OfferedTool) -> dict[str, Any]:
    """A frontend tool as the runtime keeps it."""
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
