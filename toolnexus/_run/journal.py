"""A turn's journal: each model reply and tool result recorded as it happens, with its
ledger charge, and the documents a turn is continued from (its input, its resume).

A tree store's journal part keeps the rows (``JournalRows``: a dict in memory, a table in
a state; ``_stores/journaling.py``); the rules are the same for both, and live here once.
A turn that is continued (a takeover after a crash, a ``retry`` after a failure) is served
what its journal recorded, so a recorded reply is not asked again and a finished tool call
is not run again. Rows are keyed by the turn (serial and segment), the model step, and the
call id together.
"""

from __future__ import annotations

import json
from typing import Any, Callable, ContextManager, Iterator, Protocol

import attrs

from ..data import AgentResult, Answer, ModelReply, Request, ToolCall, ToolResult, Usage, make_request
from ..errors import Cancelled
from .._team.handle import Handle, Turn
from .._team.record import Resume
from .._tools.toolkit import Toolkit
from .._tools.tools import failure, hears_declines, suspend
from ..wire import from_wire, to_wire
from .recorded import declined, pack_request, reply_of, unpack_request


class Journal(Protocol):
    """What the run loop records a turn's steps to (``TurnJournal`` is the runtime's), so
    that a turn continued later (taken over after a crash, resumed, retried) is served
    what was done instead of doing it again. Tool calls are keyed by the model ``step``
    that made them and their id."""

    def model_reply(self, step: int) -> ModelReply | None:
        """The recorded reply of model call ``step`` (1-based), if there is one."""
        ...

    def record_model(self, step: int, reply: ModelReply, request: dict[str, Any] | None = None) -> None:
        """Commit ``reply`` together with its charge to the ledger, and the ``request``
        that asked for it (``engine.request_of``)."""
        ...

    def tool_outcomes(self, step: int, call_ids: list[str]) -> dict[str, ToolResult | str | None]:
        """Recorded calls among ``call_ids``: the result, ``AGAIN`` when a call ended
        asking (it runs again, and was announced already), or ``None`` when a call started
        and never finished (in doubt)."""
        ...

    def tools_started(self, step: int, call_ids: list[str]) -> None:
        """Commit that these calls are about to run."""
        ...

    def tool_done(self, step: int, call_id: str, result: ToolResult) -> None:
        """Commit one call's result together with its charge to the ledger (a suspension
        is not an effect: it is marked ``AGAIN``, to be asked again)."""
        ...


class JournalRows(Protocol):
    """Where a tree store keeps journal rows. ``payload`` is plain JSON data."""

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]: ...

    def get(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str
    ) -> tuple[str, Any] | None: ...

    def put(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str, status: str, payload: Any
    ) -> None: ...


#: A tool call's status once it ended asking (a suspension, or a child to be retried): it
#: is made again when its turn goes on, and its ``tool_call`` event was already sent.
AGAIN = "again"


# --- a turn's documents ----------------------------------------------------------------------


def keep_turn(rows: JournalRows, handle_id: str, turn: Turn) -> None:
    """Write ``turn``'s input, once, when it begins: a takeover or a retry replays from it."""
    rows.put(handle_id, turn.serial, 0, "input", 0, "", "done", {"input": turn.input})


def keep_resume(rows: JournalRows, handle_id: str, serial: int, resume: Resume) -> None:
    """Write the answer a resumed turn continues with (the latest one stands), and add it
    to the answers its call was given (a replay gives them again)."""
    given = {"request": to_wire(resume.request), "answer": to_wire(resume.answer)}
    rows.put(handle_id, serial, 0, "resume", 0, "", "done", {"call": resume.call, "step": resume.step, **given})
    found = rows.get(handle_id, serial, 0, "answers", resume.step, resume.call)
    answers = [*(found[1] if found is not None else []), given]
    rows.put(handle_id, serial, 0, "answers", resume.step, resume.call, "done", answers)


def keep_outcome(rows: JournalRows, handle_id: str, serial: int, result: AgentResult) -> None:
    """Write how a turn settled: its journal is kept, with it, until its run is pruned
    (a retried turn's next outcome replaces it)."""
    outcome = {"status": result.status, "text": result.text, "limit": result.limit}
    rows.put(handle_id, serial, 0, "outcome", 0, "", "done", outcome)


def turn_documents(rows: JournalRows, handle_id: str, serial: int) -> tuple[str, Resume | None]:
    """A turn's kept input and, when it continues a suspension, its resume."""
    found = rows.get(handle_id, serial, 0, "input", 0, "")
    input = found[1]["input"] if found is not None else ""
    kept = rows.get(handle_id, serial, 0, "resume", 0, "")
    if kept is None:
        return input, None
    data = kept[1]
    request, answer = from_wire(Request, data["request"]), from_wire(Answer, data["answer"])
    return input, Resume(call=data["call"], step=data["step"], request=request, answer=answer)


# --- the journal a running turn records to ------------------------------------------------------


class TurnJournal:
    """A turn's journal (``loop.Journal``): each model reply and tool result commits
    together with its ledger charge, fenced by the turn's owner (a process whose turn was
    taken over cannot record anything more)."""

    def __init__(
        self,
        handle: Handle,
        turn: Turn,
        rows: JournalRows,
        lineage: Callable[[Handle], Iterator[Handle]],
        owner: str,
        counted: Callable[[], None],
        *,
        defer_final: bool = False,
    ) -> None:
        self._handle = handle
        #: A final reply (no tool calls) waits to commit with the turn's outcome: one commit
        #: fewer per turn. Not under a money cap, whose gate must see every charge at once.
        self._defer_final = defer_final
        self._deferred: tuple[int, dict[str, Any], Usage] | None = None
        self._counted = counted  # one model call of the turn (asked now, or served again)
        self._serial = turn.serial
        self._rows = rows
        self._lineage = lineage
        self._owner = owner
        # A turn started here (not read back from the store) has recorded nothing yet.
        self._fresh = not turn.kept
        #: The request of the step recorded last, as kept (the next one is kept as what differs).
        self._sent: dict[str, Any] | None = None

    # Every row of the turn has segment 0: a resumed turn replays the same journal.

    def _get(self, kind: str, step: int, call_id: str) -> tuple[str, Any] | None:
        return self._rows.get(self._handle.id, self._serial, 0, kind, step, call_id)

    def _put(self, kind: str, step: int, call_id: str, status: str, payload: Any) -> None:
        self._rows.put(self._handle.id, self._serial, 0, kind, step, call_id, status, payload)

    def model_reply(self, step: int) -> ModelReply | None:
        found = None if self._fresh else self._get("model", step, "")
        if found is None or found[0] != "done":
            return None
        self._counted()
        return reply_of(found[1])

    def record_model(self, step: int, reply: ModelReply, request: dict[str, Any] | None = None) -> None:
        payload: dict[str, Any] = {
            "message": reply.message,
            "text": reply.text,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
            "usage": _usage_data(reply.usage),
            "finish_reason": reply.finish_reason,
            "truncated": reply.truncated,
        }
        if request is not None:
            packed = pack_request(self._sent, request)
            self._sent = unpack_request(self._sent, packed)
            payload["request"] = packed
        self._counted()
        if self._defer_final and not reply.tool_calls:
            self._deferred = (step, payload, reply.usage)  # committed with the outcome (or before the next call)
            return
        self._in_chain(lambda chain: self._charge(chain, step, payload, reply.usage))

    def _charge(self, chain: list[Handle], step: int, payload: dict[str, Any], usage: Usage) -> None:
        self._put("model", step, "", "done", payload)
        self._handle.charge_model_call()
        for each in chain:
            each.charge_usage(usage)

    @property
    def deferred(self) -> Usage | None:
        """The usage of a final reply not committed yet (it counts in the turn's result)."""
        return self._deferred[2] if self._deferred is not None else None

    def deferred_chain(self) -> list[Handle] | None:
        """The handles a deferred reply charges (the handle, then its ancestors), or None."""
        return list(self._lineage(self._handle)) if self._deferred is not None else None

    def write_deferred(self, chain: list[Handle]) -> None:
        """Commit the deferred reply with its charge, in the caller's unit of work (the
        chain's locks held, root first): the turn's outcome commits with it."""
        if self._deferred is not None:
            step, payload, usage = self._deferred
            self._deferred = None
            self._charge(chain, step, payload, usage)

    def flush(self) -> None:
        """Commit a deferred reply now (another model call of the turn comes first)."""
        if self._deferred is not None:
            self._in_chain(self.write_deferred)

    def tool_outcomes(self, step: int, call_ids: list[str]) -> dict[str, ToolResult | str | None]:
        found: dict[str, ToolResult | str | None] = {}
        if self._fresh:
            return found
        for call_id in call_ids:
            row = self._get("tool", step, call_id)
            if row is None:
                continue
            status, data = row
            if status == "done":
                found[call_id] = ToolResult(data["output"], is_error=data["is_error"], metadata=data.get("metadata"))
            else:
                found[call_id] = AGAIN if status == AGAIN else None
        return found

    def tools_started(self, step: int, call_ids: list[str]) -> None:
        with self._handle.lock, self._rows.change(self._handle, dirty=False):
            self._fence()
            for call_id in call_ids:
                self._put("tool", step, call_id, "started", None)

    def tool_done(self, step: int, call_id: str, result: ToolResult) -> None:
        def record(chain: list[Handle]) -> None:
            if result.pending is not None or retried_later(result):  # not an effect: asked again on replay
                self._put("tool", step, call_id, AGAIN, None)
            else:
                done = {"output": result.output, "is_error": result.is_error, "metadata": _plain(result.metadata)}
                self._put("tool", step, call_id, "done", done)
            for each in chain:
                each.charge_tool_calls(1, own=each is self._handle)

        self._in_chain(record)

    def noted(self, key: str) -> Any:
        """What the turn noted under ``key`` before (``note``), or ``None``."""
        found = None if self._fresh else self._get("note", 0, key)
        return found[1] if found is not None else None

    def note(self, key: str, payload: Any) -> None:
        """Keep ``payload`` (plain JSON) under ``key`` with the turn's journal, fenced by its
        owner: what a continued turn must find again that is neither a model reply nor a
        tool result (the task a remote teammate's turn started). No ledger charge."""
        with self._handle.lock, self._rows.change(self._handle, dirty=False):
            self._fence()
            self._put("note", 0, key, "done", payload)

    def _in_chain(self, work: Callable[[list[Handle]], None]) -> None:
        """``work(chain)`` with the handle and its ancestors locked, root first, in one unit
        of work, fenced by the owner."""
        chain = list(self._lineage(self._handle))
        taken: list[Handle] = []
        try:
            for each in reversed(chain):
                each.lock.acquire()
                taken.append(each)
            with self._rows.change(*taken, dirty=False):
                self._fence()
                work(chain)
        finally:
            for each in reversed(taken):
                each.lock.release()

    def _fence(self) -> None:
        if not self._handle.owned_by(self._owner):
            raise Cancelled(f"the turn of {self._handle.id} was interrupted or taken over by another process")


#: A tool result's metadata key: the call is to be made again when its turn is retried
#: (a ``task`` call whose child failed and can itself be retried).
RETRY_LATER = "retry_later"


def retried_later(result: ToolResult) -> bool:
    return bool(result.metadata and result.metadata.get(RETRY_LATER))


def _usage_data(usage: Usage) -> dict[str, Any]:
    return {field.name: getattr(usage, field.name) for field in _USAGE_FIELDS}


_USAGE_FIELDS = attrs.fields(Usage)


def _plain(metadata: dict[str, Any] | None) -> Any:
    """Metadata as JSON data (anything else is kept as its string form)."""
    if metadata is None:
        return None
    if all(type(value) in _SCALARS for value in metadata.values()):
        return dict(metadata)  # already plain: the common case (a task result's counts)
    return json.loads(json.dumps(to_wire(metadata), default=str))


_SCALARS = frozenset({str, int, float, bool, type(None)})


# --- the replay rules the run loop applies ---------------------------------------------------

IN_DOUBT = "in doubt: {tool} was running when its process stopped, and did not finish; it was not run again"

RETRY_KIND = "retry"


def apply_resume(
    resume: Resume | None,
    step: int,
    calls: list[ToolCall],
    kept: dict[str, ToolResult],
    answers: dict[str, tuple[Request, Answer]],
) -> str | None:
    """Apply a resume to the step whose call halted: an ok answer goes to that call (run
    again with ``ctx.answer`` and ``ctx.request``), as does a declined one when its tool
    hears declines (``hears_declines``); any other declined one is fed back without
    running it. Returns the call a ``retry`` question said to run again, in doubt or not."""
    if resume is None or resume.step != step or not any(call.id == resume.call for call in calls):
        return None
    return apply_answer(resume.call, resume.request, resume.answer, kept, answers)


def apply_answer(
    call: str, request: Request, answer: Answer, kept: dict[str, ToolResult], answers: dict[str, tuple[Request, Answer]]
) -> str | None:
    """Apply ``answer`` to the halted ``call`` (see ``apply_resume``): into ``answers`` for
    the call to get, into ``kept`` as its result, or returned as the call to run again."""
    if request.kind == RETRY_KIND:  # about running the call again, not an answer for the tool itself
        if answer.ok:
            return call
        kept[call] = failure(IN_DOUBT.format(tool=(request.data or {}).get("tool", "the tool")))
    elif answer.ok or hears_declines(request):
        answers[call] = (request, answer)
    else:
        kept[call] = declined(answer, request)
    return None


def served(
    journal: Journal,
    toolkit: Toolkit,
    step: int,
    calls: list[ToolCall],
    kept: dict[str, ToolResult],
    rerun: str | None = None,
) -> tuple[dict[str, ToolResult], set[str]]:
    """Serve recorded results into ``kept``; a call in doubt follows its tool's ``retry``
    option (``rerun`` is run again whatever it says). Returns the calls that ask whether
    to run again (``retry="ask"``), and the calls to make again that were announced
    already (they ended asking)."""
    asked: dict[str, ToolResult] = {}
    announced: set[str] = set()
    for call_id, result in journal.tool_outcomes(step, [call.id for call in calls]).items():
        call = next(c for c in calls if c.id == call_id)
        if isinstance(result, str):  # AGAIN
            announced.add(call_id)
            continue
        if isinstance(result, ToolResult):
            kept[call_id] = result
            continue
        if call_id == rerun:
            continue
        found = toolkit.get(call.name)
        policy = found.retry if found is not None else "never"
        if policy == "never":
            kept[call_id] = failure(IN_DOUBT.format(tool=call.name))
        elif policy == "ask":
            question = make_request(
                RETRY_KIND,
                f"{call.name} was running when its process stopped and may or may not have finished. Run it again?",
                data={"tool": call.name, "call": call_id},
            )
            asked[call_id] = suspend(question)
        # "safe": left in the to-do list, run again with the same idempotency key
    return asked, announced


