"""What ``toolnexus.agui`` reaches inside a runtime, in one place (as ``toolnexus.sse`` and
the served layer's bindings reach it): the cursor a run's events start after, the stream
of a thread that ends when its handle rests, and the frontend tools a thread's agent is
offered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .._events.streams import RunStream
from .._team import offers
from .._tools import hosted

if TYPE_CHECKING:
    from .._team.runtime import Runtime
    from ._input import OfferedTool

#: The ``Request`` kind a frontend tool call suspends on.
KIND = hosted.KIND


def now(rt: Runtime) -> str:
    """The id of the tree's latest durable event (read from the state, with one): a run's
    own events come after it, whichever process commits them."""
    return str(rt._streams._events.last())


def watch(rt: Runtime, handle: str, after: str) -> RunStream:
    """The events of ``handle``'s subtree after ``after``, until its result, or until it
    rests with nothing more to send (``toolnexus.sse``'s stream)."""
    return rt._streams.watch(rt._tree.get(handle), after, None, rests=True)


def offer(rt: Runtime, handle: str, tools: Sequence[OfferedTool]) -> None:
    """Offer ``tools`` to the model of ``handle``'s turns from its next one on (and to a
    turn that resumes), instead of what it was offered before."""
    offers.offer(rt._tree, handle, [spec(tool) for tool in tools])


def spec(tool: OfferedTool) -> dict[str, Any]:
    """A frontend tool as the runtime keeps it."""
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
