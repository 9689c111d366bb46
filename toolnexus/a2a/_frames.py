"""A task as Server-Sent Events (``SendStreamingMessage``, ``SubscribeToTask``): each frame
``data:`` one JSON-RPC response whose ``result`` is ``{"task"}`` (first), then
``{"statusUpdate"}`` or ``{"artifactUpdate"}``; a ``: keep-alive`` comment after
``heartbeat_s`` of silence.

The frames end when the run rests: after the terminal ``statusUpdate`` (a completed task's
answer comes just before it, as one ``artifactUpdate``), or after the ``INPUT_REQUIRED``
one, so that no server thread is held while a person decides (CONTRACT §20); the caller
answers with a message on the task and streams again.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterator

from .. import sse
from .._serve import Binding
from ..errors import ToolnexusError
from .._a2a import shapes
from .._a2a.rpc import INTERNAL_ERROR, error_reply, result_reply
from ._tasks import Now, Tasks

log = logging.getLogger("toolnexus")

#: The response headers of a streamed task.
HEADERS = [
    ("Content-Type", "text/event-stream; charset=utf-8"),
    ("Cache-Control", "no-store"),
    ("X-Accel-Buffering", "no"),
]


def _frame(reply: dict[str, Any], *, event: str | None = None) -> bytes:
    named = f"event: {event}\n" if event else ""
    data = json.dumps(reply, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f"{named}data: {data}\n\n".encode("utf-8")


def status_update(tasks: Tasks, binding: Binding, now: Now) -> dict[str, Any]:
    context_id = binding.data.get("contextId", "")
    return {"statusUpdate": {"taskId": binding.id, "contextId": context_id, "status": tasks.status(binding, now)}}


def artifact_update(tasks: Tasks, binding: Binding, now: Now) -> dict[str, Any]:
    update = {
        "taskId": binding.id,
        "contextId": binding.data.get("contextId", ""),
        "artifact": tasks.artifact(binding, now),
        "lastChunk": True,
    }
    return {"artifactUpdate": update}


def streamed(
    tasks: Tasks, binding: Binding, now: Now, request_id: Any, *, history_length: int | None, heartbeat_s: float
) -> Iterator[bytes]:
    """The frames of ``binding``'s task from ``now`` until its run rests."""
    yield _frame(result_reply(request_id, {"task": tasks.task(binding, now, history_length)}))
    if now.terminal or now.state in shapes.INTERRUPTED:
        return
    try:
        if now.state == shapes.SUBMITTED:
            yield _frame(result_reply(request_id, status_update(tasks, binding, Now(shapes.WORKING))))
        yield from _until_rest(tasks, binding.handle, heartbeat_s)
        binding, now = tasks.current(binding)
    except ToolnexusError as exc:
        yield _frame(error_reply(request_id, INTERNAL_ERROR, str(exc)), event="error")
        return
    except Exception:
        log.exception("a2a: a streamed task failed")
        yield _frame(error_reply(request_id, INTERNAL_ERROR, "internal error"), event="error")
        return
    if now.state == shapes.COMPLETED:
        yield _frame(result_reply(request_id, artifact_update(tasks, binding, now)))
    if now.state != shapes.WORKING:
        yield _frame(result_reply(request_id, status_update(tasks, binding, now)))


def _until_rest(tasks: Tasks, handle: str, heartbeat_s: float) -> Iterator[bytes]:
    """Keep-alives while the run goes on; the end once it rests (settled, or waiting on a
    person anywhere in its tree): ``toolnexus.sse``'s stream of the run, whose events the
    task's frames do not need. Inline, iterating runs the turn."""
    frames = sse.stream(tasks.rt, handle, heartbeat_s=heartbeat_s)
    try:
        for frame in frames:
            if frame == sse.KEEP_ALIVE:
                yield frame
    finally:
        close = getattr(frames, "close", None)  # a generator: its cleanup runs now, not when collected
        if close is not None:
            close()
