"""The calls of ``toolnexus.agui``: a run as events, or as SSE frames."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from .._serve.access import SHARED
from ..sse import HEADERS as _SSE_HEADERS
from ._input import read_input
from ._run import Run
from ._thread import Plan, Started, plan, start

if TYPE_CHECKING:
    from .._team.runtime import Runtime

#: The response headers of a run's stream (as ``toolnexus.sse.HEADERS``).
HEADERS: dict[str, str] = dict(_SSE_HEADERS)

#: What a stream writes after ``heartbeat_s`` of silence (a client ignores it; a proxy keeps
#: the connection, and a client that went is noticed).
KEEP_ALIVE = b": keep-alive\n\n"

def events(
    rt: Runtime, body: bytes | str | Mapping[str, Any], *, agent: str, principal: str = SHARED
) -> Iterator[dict[str, Any]]:
    """One run of ``agent``'s thread as AG-UI events (wire dicts: camelCase, an optional
    field left out, never ``null``).

    The input is checked, and the run started, before this returns. ``principal`` is who
    asks (a view's own authorization decides it; ``toolnexus.agui.blueprint`` asks its
    ``authorize=``): threads are bound to it. Closing the iterator before its last event
    interrupts the run.

    Args:
        rt: the runtime the thread lives in.
        body: the request body, a ``RunAgentInput`` (``bytes``, ``str`` or a dict).
        agent: the agent a new thread runs.
        principal: who asks (``""``, the shared principal, by default).

    Raises:
        AGUIInputError: the input was refused; nothing started.
    """
    return _Events(Run(start(prepare(rt, body, agent=agent, principal=principal)), None))


def stream(
    rt: Runtime,
    body: bytes | str | Mapping[str, Any],
    *,
    agent: str,
    heartbeat_s: float = 15,
    principal: str = SHARED,
) -> Iterator[bytes]:
    """``events`` as Server-Sent Events: ``data: <one line of JSON>`` and a blank line per
    event, a ``: keep-alive`` comment after ``heartbeat_s`` seconds of silence. Return it
    with ``HEADERS`` from a Flask ``Response`` or a Django ``StreamingHttpResponse``.

    Raises:
        AGUIInputError: the input was refused; nothing started.
    """
    return frames(start(prepare(rt, body, agent=agent, principal=principal)), heartbeat_s)


def prepare(
    rt: Runtime, body: bytes | str | Mapping[str, Any], *, agent: str, principal: str = SHARED
) -> Plan:
    """The input read and checked against its thread, with nothing started yet.

    Raises:
        AGUIInputError: the input was refused.
    """
    return plan(rt, read_input(body), agent=agent, principal=principal)


def frames(started: Started, heartbeat_s: float) -> Iterator[bytes]:
    """A started run's events as SSE frames."""
    return _Frames(Run(started, heartbeat_s))


def frame(item: dict[str, Any]) -> bytes:
    """One event as one SSE frame: LF only, one line of strict JSON."""
    text = json.dumps(item, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return b"data: " + text.encode() + b"\n\n"


class _OfRun:
    """An iterator over a run, closed with the run."""

    def __init__(self, run: Run) -> None:
        self._run = run

    def close(self) -> None:
        self._run.close()


class _Events(_OfRun):
    """A run's events (its silences left out)."""

    def __iter__(self) -> _Events:
        return self

    def __next__(self) -> dict[str, Any]:
        while True:
            item = next(self._run)
            if item is not None:
                return item


class _Frames(_OfRun):
    """A run's events as SSE frames, with a keep-alive for each silence."""

    def __iter__(self) -> _Frames:
        return self

    def __next__(self) -> bytes:
        item = next(self._run)
        return KEEP_ALIVE if item is None else frame(item)
