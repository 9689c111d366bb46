"""A fork: a new run whose history up to a step is a recorded run's (``Runtime.fork``).

The fork is a new handle under the root, seeded with its source's journal up to the fork
point: the turns before it whole, the turn it falls in up to that step, and the
transcript those earlier turns left. Its turn is then continued the way a failed turn is
retried (``Scheduler.retry``): the journal serves every recorded reply and tool result
(not asked, not run, not charged) and the turn goes on live from the first step it does
not have. A fork at an answer continues that turn as a resume with the new Answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .._run.recorded import RecordedTurn, Row, recorded_turns
from ..data import Answer, Request
from ..errors import ConfigError, ReplayError, UnknownRequest
from .handle import RUNNING, Handle
from .record import Resume

if TYPE_CHECKING:
    from .._stores.parts import TreeStore


@attrs.frozen(kw_only=True)
class ForkPoint:
    """Where a fork leaves its source's record: the turn it goes on from (its serial and
    input), the recorded steps of that turn it keeps, and the resume it continues with."""

    serial: int
    input: str
    kept_steps: int
    history: list[dict[str, Any]]
    resume: Resume | None = None


def fork_point(
    source: Handle, rows: list[Row], *, at: int | None, prompt: str | None, answer: Answer | None
) -> ForkPoint:
    """Where a fork of ``source`` (whose journal is ``rows``) goes on live.

    Raises:
        ConfigError: ``answer`` with ``at`` or ``prompt``.
        ReplayError: ``source`` is running or has no journal, ``at`` is out of range, or
            not a turn's first step with ``prompt``.
        UnknownRequest: ``answer`` names no request ``source`` asked.
    """
    if answer is not None and (at is not None or prompt is not None):
        raise ConfigError("fork takes answer= alone: the fork point is the step that asked")
    with source.lock:
        source.sync()
        record = source.record
        if record.state == RUNNING or source.busy:
            raise ReplayError(f"{record.id} is running: fork a run once it has settled or suspended")
        suspension = record.suspension
    turns = recorded_turns(rows)
    if not turns:
        raise ReplayError(f"{source.id} has no journal to fork (pruned, or recorded before journals were kept)")
    if answer is not None:
        return _at_answer(source.id, turns, answer, suspension)
    total = sum(len(turn.steps) for turn in turns)
    if at is None:
        at = total + 1 if prompt is None else total - len(turns[-1].steps) + 1
    if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= total + 1:
        raise ReplayError(f"{source.id}: at must be a step from 1 to {total + 1}, not {at!r}")
    offset = 0
    for index, turn in enumerate(turns):
        last = index == len(turns) - 1
        if at <= offset + len(turn.steps) or last:
            local = at - offset
            if prompt is not None and local != 1:
                raise ReplayError(f"{source.id}: step {at} does not start a turn; a new prompt replaces a turn's input")
            history = _history(turns, index)
            return ForkPoint(serial=turn.serial, input=turn.input if prompt is None else prompt,
                             kept_steps=local - 1, history=history)
        offset += len(turn.steps)
    raise AssertionError("unreachable: the last turn takes every step past the others")


def _at_answer(handle_id: str, turns: list[RecordedTurn], answer: Answer, suspension: Any) -> ForkPoint:
    """The fork point of an Answer to a request ``handle_id``'s own tool raised."""
    for index, turn in enumerate(turns):
        for (step, call), given in turn.answers.items():
            request = next((request for request, _ in given if request.id == answer.id), None)
            if request is not None:
                return _resumed(turns, index, step, call, request, answer)
    if suspension is not None and suspension.request.id == answer.id:
        request = suspension.request
        if "/".join((request.data or {}).get("path") or []) != handle_id:
            raise ReplayError(f"{handle_id}: request {answer.id!r} was asked by a teammate; fork that teammate's run")
        return _resumed(turns, len(turns) - 1, suspension.step, suspension.call, request, answer)
    raise UnknownRequest(f"{handle_id} asked no request {answer.id!r}")


def _resumed(
    turns: list[RecordedTurn], index: int, step: int, call: str, request: Request, answer: Answer
) -> ForkPoint:
    turn = turns[index]
    resume = Resume(call=call, step=step, request=request, answer=answer)
    return ForkPoint(serial=turn.serial, input=turn.input, kept_steps=step, history=_history(turns, index),
                     resume=resume)


def _history(turns: list[RecordedTurn], index: int) -> list[dict[str, Any]]:
    """The transcript the turns before ``turns[index]`` left: its first request without
    its new input (a turn with no step yet has none to show, and starts from nothing)."""
    first = turns[index].steps[0].request if turns[index].steps else None
    if index == 0 or first is None:
        return []
    return list(first.get("messages", []))[:-1]


def seeded_rows(rows: list[Row], point: ForkPoint) -> list[Row]:
    """The journal rows a fork starts with: the turns before ``point`` whole; of its turn,
    the input and each step it keeps with its tool results and the Answers they were given
    (at an answer, the step that asked without the call that asked: it is made again)."""
    kept: list[Row] = []
    for row in rows:
        serial, segment, kind, step, call, status, payload = row
        if serial < point.serial:
            kept.append(row)
        elif serial == point.serial and _kept(kind, step, call, status, point):
            kept.append(row)
    kept.append((point.serial, 0, "input", 0, "", "done", {"input": point.input}))
    return kept


def _kept(kind: str, step: int, call: str, status: str, point: ForkPoint) -> bool:
    if kind == "model":
        return step <= point.kept_steps and status == "done"
    if kind not in ("tool", "answers") or status != "done":
        return False
    if point.resume is not None and step == point.resume.step:
        return call != point.resume.call
    return step <= point.kept_steps


def seed(fork: Handle, rows: list[Row], point: ForkPoint) -> None:
    """Write the fork's transcript and journal, and make its turn the one a retry
    continues (the journal and the record in one unit)."""
    store: TreeStore = fork.store
    if point.history:
        store.transcripts.conversations.save(fork.id, point.history)
    with fork.lock, store.change(fork):
        for serial, segment, kind, step, call, status, payload in seeded_rows(rows, point):
            store.journal.put(fork.id, serial, segment, kind, step, call, status, payload)
        if point.resume is not None:
            store.journal.keep_resume(fork.id, point.serial, point.resume)
        fork.seed_turn(point.serial)
