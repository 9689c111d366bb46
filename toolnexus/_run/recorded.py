"""What a settled turn's journal says, read back whole: its input, each model step (the
request it sent and the reply it got), each tool result, every Answer it was given and
its outcome. ``Runtime.replay`` and ``Runtime.fork`` read a run from here.

A step's request is kept beside its reply in the ``model`` row, as the part that differs
from the turn's previous step (``pack_request``): a turn's transcript grows by a few
messages a step, and is not written again with every one.
"""

from __future__ import annotations

from typing import Any, Iterable

import attrs

from .._stores.conversations import snapshot
from ..data import Answer, ModelReply, Request, ToolCall, ToolResult, Usage
from ..wire import from_wire

#: The statuses of a turn that ended before its model said it was done: its record may
#: stop part-way through a step.
CUT_SHORT = frozenset({"error", "interrupted", "timeout"})


def pack_request(previous: dict[str, Any] | None, request: dict[str, Any]) -> dict[str, Any]:
    """``request`` as kept: the messages it shares with ``previous`` (the turn's previous
    step, or ``None``) counted, not copied, and its tools left out when they are the same."""
    messages = request["messages"]
    shared = 0
    if previous is not None:
        before = previous["messages"]
        limit = min(len(before), len(messages))
        while shared < limit and (before[shared] is messages[shared] or before[shared] == messages[shared]):
            shared += 1
    packed = {key: value for key, value in request.items() if key not in ("messages", "tools")}
    packed["shared"] = shared
    packed["messages"] = snapshot(messages[shared:])
    if previous is None or previous["tools"] != request["tools"]:
        packed["tools"] = snapshot(request["tools"])
    return packed


def unpack_request(previous: dict[str, Any] | None, packed: dict[str, Any]) -> dict[str, Any]:
    """The request ``pack_request`` kept, whole again (``previous``: the step before, unpacked)."""
    shared = packed.get("shared", 0)
    head = previous["messages"][:shared] if previous is not None else []
    request = {key: value for key, value in packed.items() if key not in ("shared", "messages", "tools")}
    request["messages"] = [*head, *packed["messages"]]
    request["tools"] = packed["tools"] if "tools" in packed else (previous or {}).get("tools", [])
    return request


def reply_of(data: dict[str, Any]) -> ModelReply:
    """A recorded model reply (the ``model`` row's payload) as the loop takes it."""
    calls = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in data["tool_calls"]]
    return ModelReply(
        message=data["message"],
        text=data["text"],
        tool_calls=calls,
        usage=Usage(**data["usage"]),
        finish_reason=data.get("finish_reason"),
        truncated=data.get("truncated", False),
    )


def declined(answer: Answer | None, request: Request) -> ToolResult:
    """What a call gets when a person declines what it asked (it is not run again)."""
    reason = (answer.reason if answer is not None else None) or "declined"
    return ToolResult(output=f"{reason}: {request.prompt}", is_error=True)


@attrs.frozen
class Step:
    """One recorded model step: the request it sent (``None`` when recorded by a version
    that kept none) and the reply it got."""

    request: dict[str, Any] | None
    reply: ModelReply


@attrs.frozen
class RecordedTurn:
    """One turn of a handle as its journal kept it."""

    serial: int
    input: str
    steps: tuple[Step, ...]
    #: ``(step, call id)`` -> the call's result (calls that finished).
    results: dict[tuple[int, str], ToolResult]
    #: ``(step, call id)`` -> the requests the call raised and the Answers it was given, in order.
    answers: dict[tuple[int, str], tuple[tuple[Request, Answer], ...]]
    #: ``{"status", "text", "limit"}`` once the turn settled; ``None`` before.
    outcome: dict[str, Any] | None

    @property
    def status(self) -> str | None:
        return self.outcome["status"] if self.outcome is not None else None

    @property
    def cut_short(self) -> bool:
        """The turn ended before its record did (an error, an interrupt)."""
        return self.status in CUT_SHORT

    def result(self, step: int, call_id: str) -> ToolResult | None:
        """The call's recorded result; a call whose last Answer declined it without running
        it again has none kept, and gets what the decline gave it."""
        found = self.results.get((step, call_id))
        given = self.answers.get((step, call_id))
        if found is None and given and not given[-1][1].ok:
            return declined(given[-1][1], given[-1][0])
        return found


#: One journal row: ``(serial, segment, kind, step, call id, status, payload)``.
Row = tuple[int, int, str, int, str, str, Any]


def recorded_turns(rows: Iterable[Row]) -> list[RecordedTurn]:
    """A handle's journal rows as its turns, in serial order (a turn with no kept input is
    left out: nothing started it)."""
    by_serial: dict[int, list[Row]] = {}
    for row in rows:
        by_serial.setdefault(row[0], []).append(row)
    turns = [_turn(serial, found) for serial, found in sorted(by_serial.items())]
    return [turn for turn in turns if turn is not None]


def _turn(serial: int, rows: list[Row]) -> RecordedTurn | None:
    documents = {(kind, step, call): (status, payload) for _, _, kind, step, call, status, payload in rows}
    if ("input", 0, "") not in documents:
        return None
    steps: list[Step] = []
    previous: dict[str, Any] | None = None
    for number in range(1, 1 + max((step for kind, step, _ in documents if kind == "model"), default=0)):
        found = documents.get(("model", number, ""))
        if found is None or found[0] != "done":
            break
        packed = found[1].get("request")
        previous = unpack_request(previous, packed) if packed is not None else None
        steps.append(Step(request=previous, reply=reply_of(found[1])))
    results = {
        (step, call): ToolResult(data["output"], is_error=data["is_error"], metadata=data.get("metadata"))
        for (kind, step, call), (status, data) in documents.items()
        if kind == "tool" and status == "done"
    }
    answers = {
        (step, call): tuple((from_wire(Request, each["request"]), from_wire(Answer, each["answer"])) for each in data)
        for (kind, step, call), (_, data) in documents.items()
        if kind == "answers"
    }
    outcome = documents.get(("outcome", 0, ""))
    input = documents[("input", 0, "")][1]["input"]
    return RecordedTurn(serial, input, tuple(steps), results, answers, outcome[1] if outcome is not None else None)
