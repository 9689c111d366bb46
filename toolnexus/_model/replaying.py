"""The third engine: a record answers each model step.

``ReplayEngine`` is what ``Runtime.replay`` (and the recorded part of ``Runtime.fork``)
puts where a turn's engine goes: for each call it compares the request the code makes now
with the one the record says was sent (``engine.request_of``, the same shape) and serves
the recorded reply. It asks nothing over the network and knows nothing of handles: what a
difference means is the caller's (``differs``, ``missing``), and both stop the run.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn, Sequence

from .._diff import ABSENT, first_difference
from ..data import ModelReply
from .engine import ModelCall, WireStyle, request_of

#: ``differs(step, field, recorded, actual)``: step ``step`` (1-based) sent another request.
Differs = Callable[[int, str, Any, Any], NoReturn]
#: ``missing(step, actual)``: the run asks for a step the record does not have.
Missing = Callable[[int, dict[str, Any]], NoReturn]


class ReplayEngine:
    """Serves ``steps`` (each a recorded request, ``None`` when unknown, and its reply) in
    order, after checking that each request is the recorded one."""

    def __init__(
        self,
        style: WireStyle,
        steps: Sequence[tuple[dict[str, Any] | None, ModelReply]],
        *,
        differs: Differs,
        missing: Missing,
    ) -> None:
        self._style = style
        self._steps = steps
        self._differs = differs
        self._missing = missing
        #: The steps served so far.
        self.served = 0

    def __repr__(self) -> str:
        return f"ReplayEngine(steps={len(self._steps)}, served={self.served})"

    @property
    def style(self) -> WireStyle:
        return self._style

    def complete(self, call: ModelCall) -> ModelReply:
        step = self.served + 1
        request = request_of(self._style, call)
        if step > len(self._steps):
            self._missing(step, request)
        recorded, reply = self._steps[step - 1]
        if recorded is not None:
            found = first_difference(recorded, plain(request))
            if found is not None:
                field, was, now = found
                self._differs(step, field, None if was is ABSENT else was, None if now is ABSENT else now)
        self.served = step
        if call.on_text is not None and reply.text:
            call.on_text(reply.text)
        return reply

    def close(self) -> None:
        pass

    def keep_connections(self) -> None:
        return None


def plain(value: Any) -> Any:
    """``value`` as the JSON data a journal gives back (tuples become lists)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
