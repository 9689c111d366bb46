"""Threads (CONTRACT §21): what one run's input means for its thread, decided before
anything starts, and then the start itself.

A ``threadId`` names one conversation of one principal: a binding of the served layer
(``_serve.bindings``, surface ``"agui"``) from the id the client chose to the handle of the
thread's agent, under the root. Its first run spawns the handle; every later run, on any
worker process of a runtime with a state, wakes that handle (a new prompt) or resumes it
(the answers to what it waits on). ``plan`` reads the thread and refuses an input it cannot
take, changing nothing; ``start`` claims the thread (a compare-and-set on its binding, so
two requests cannot both continue it) and spawns, wakes or resumes.

The binding's data is the thread's own bookkeeping, all of it plain JSON:

- ``pending``: the frontend tool calls the last run ended waiting for;
- ``calls``: the thread agent's tool calls streamed since its turn began (the client sends
  their results back with every later input: they are not answers);
- ``spans``: for each handle on the path to a pending request, its teammate span
  (``name``, the ``task`` call that made it), so a resumed run can start the spans again;
- ``answered``: the latest request ids answered here, so a second answer is ``409``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs

from .._serve import Binding, bindings_of
from .._serve.access import SHARED
from ..data import Answer, Request
from .._tools.hosted import hosted_tool
from ..errors import AGUIInputError, ConfigError, HandleClosed, SpawnError, UnknownHandle, UnknownRequest
from . import _port
from ._input import OfferedTool, ResumeEntry, RunInput, ToolAnswer
from ._translate import asker
from ._tree import TreeState

if TYPE_CHECKING:
    from .._events.streams import RunStream

if TYPE_CHECKING:
    from .._team.runtime import Runtime

#: The surface name of AG-UI threads in the runtime's bindings.
SURFACE = "agui"
#: A frontend tool's name: what every provider accepts.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: How many answered request ids a thread remembers (for ``409`` on a second answer).
ANSWERED_KEPT = 32
#: The ``Request`` kind of a frontend tool call.
FRONTEND = _port.KIND


@attrs.frozen
class Plan:
    """A checked input: how its run starts. ``handle`` is ``None`` for a new thread."""

    rt: Any
    agent: str
    principal: str
    input: RunInput
    binding: Binding | None = None
    handle: str | None = None
    #: The answer the run resumes with; ``None`` for a new prompt.
    answer: Answer | None = None
    #: Answers to frontend calls of the same step that will ask once the first is answered.
    stashed: dict[str, Answer] = attrs.Factory(dict)
    #: The request the run answers, when it resumes the thread.
    request: Request | None = None
    #: The frontend calls the input's tool messages answer (the client has their results).
    answered: tuple[str, ...] = ()


@attrs.frozen
class Started:
    """A run that started: its thread's handle, and the binding as this run claimed it."""

    plan: Plan
    handle: str
    binding: Binding
    #: The tree's latest event before the run acted: the run's events come after it.
    cursor: str
    #: The thread's tree as it was before the run acted, and its snapshot then.
    tree: TreeState
    snapshot: dict[str, Any]
    #: The run's events, watched from before it acted (so its model calls stream their text).
    watch: RunStream


def plan(rt: Runtime, run_input: RunInput, *, agent: str, principal: str = SHARED) -> Plan:
    """How ``run_input`` starts a run of ``agent``'s thread for ``principal``.

    Raises:
        AGUIInputError: ``422`` an input the thread cannot take; ``409`` the thread is
            running, closed, or its request was answered already; ``404`` a run that
            continues a thread this principal does not have.
    """
    _check_tools(rt, agent, run_input.tools)
    binding = bindings_of(rt).get(SURFACE, principal, run_input.thread_id)
    made = Plan(rt, agent, principal, run_input, binding, binding.handle if binding is not None else None)
    if binding is None:
        if run_input.resume:
            raise AGUIInputError(404, f"no thread {run_input.thread_id[:80]!r} to resume")
        _need_prompt(run_input)
        return made
    try:
        view = rt.inspect(binding.handle)
    except UnknownHandle:
        raise AGUIInputError(404, f"no thread {run_input.thread_id[:80]!r}") from None
    if view.state in ("running", "closed"):
        raise AGUIInputError(409, f"thread {run_input.thread_id[:80]!r} is {view.state}; one run at a time")
    if view.state == "suspended" and view.pending is not None:
        return _resuming(made, binding, view.pending)
    _no_stray_resume(binding, run_input.resume, open_ids=())
    _need_prompt(run_input)
    return made


def _check_tools(rt: Runtime, agent: str, tools: tuple[OfferedTool, ...]) -> None:
    definition = rt.definition(agent)
    taken = {tool.name for tool in definition.tools} | {"task"}
    for index, tool in enumerate(tools):
        if not TOOL_NAME.fullmatch(tool.name):
            raise AGUIInputError(422, f"tools[{index}].name: {tool.name[:80]!r} is not [A-Za-z0-9_-]{{1,64}}")
        if tool.name in taken:
            raise AGUIInputError(422, f"tools[{index}].name: {tool.name!r} is one of the agent's own tools")
        try:
            hosted_tool(_port.spec(tool))
        except ConfigError as exc:
            raise AGUIInputError(422, f"tools[{index}]: {exc}") from None


def _need_prompt(run_input: RunInput) -> None:
    if run_input.prompt is None:
        raise AGUIInputError(422, "the last message must be a user message: it is the run's prompt")
    if not run_input.prompt.strip():
        raise AGUIInputError(422, "the last user message has no text")


def _resuming(made: Plan, binding: Binding, request: Request) -> Plan:
    """A suspended thread: the input must answer what it waits on, and nothing else."""
    run_input = made.input
    if request.kind == FRONTEND and asker(request) in (None, binding.handle):
        _no_stray_resume(binding, run_input.resume, open_ids=())
        return _answering(made, binding, request)
    _no_stray_resume(binding, run_input.resume, open_ids=(request.id,))
    entries = {entry.interrupt_id: entry for entry in run_input.resume}
    if request.id not in entries:
        raise AGUIInputError(422, f"thread {run_input.thread_id[:80]!r} waits on interrupt {request.id}: resume it")
    _no_stray_answers(made, binding, pending=())
    return attrs.evolve(made, answer=answer_of(request.id, entries[request.id]), request=request)


def _answering(made: Plan, binding: Binding, request: Request) -> Plan:
    pending = [str(call) for call in binding.data.get("pending") or []]
    halted = str((request.data or {}).get("call") or "")
    if halted not in pending:
        pending.insert(0, halted)
    given = {answer.call_id: answer for answer in made.input.answers if answer.call_id in pending}
    missing = [call for call in pending if call not in given]
    if missing:
        raise AGUIInputError(
            422, f"thread {made.input.thread_id[:80]!r} waits for frontend tool calls {', '.join(missing)}:"
            " send a tool message with the result of each"
        )
    _no_stray_answers(made, binding, pending)
    stashed = {call: _frontend_answer("", given[call]) for call in pending if call != halted}
    answer = _frontend_answer(request.id, given[halted])
    return attrs.evolve(made, answer=answer, stashed=stashed, request=request, answered=tuple(pending))


def _frontend_answer(request_id: str, given: ToolAnswer) -> Answer:
    """A tool message as the answer to its call's request (see ``_offered``)."""
    data: dict[str, Any] = {"content": given.content}
    if given.error is not None:
        data["error"] = given.error
    return Answer(id=request_id, ok=True, data=data)


def answer_of(request_id: str, entry: ResumeEntry) -> Answer:
    """A ``resume`` entry as the ``Answer`` to its request: ``resolved`` is ``ok`` with its
    payload, unless the payload is an object with ``"ok": false`` (then declined, with its
    ``reason``); ``cancelled`` is not ``ok``, reason ``cancelled``."""
    if entry.status == "cancelled":
        return Answer(id=request_id, ok=False, reason="cancelled")
    payload = entry.payload
    if isinstance(payload, dict) and payload.get("ok") is False:
        reason = payload.get("reason")
        return Answer(id=request_id, ok=False, data=payload, reason=reason if isinstance(reason, str) else "declined")
    return Answer(id=request_id, ok=True, data=payload)


def _no_stray_resume(binding: Binding, entries: tuple[ResumeEntry, ...], *, open_ids: tuple[str, ...]) -> None:
    answered = set(binding.data.get("answered") or ())
    for entry in entries:
        if entry.interrupt_id in open_ids:
            continue
        if entry.interrupt_id in answered:
            raise AGUIInputError(409, f"interrupt {entry.interrupt_id[:80]!r} was answered already")
        raise AGUIInputError(422, f"resume names interrupt {entry.interrupt_id[:80]!r}, which is not open")


def _no_stray_answers(made: Plan, binding: Binding, pending: Any) -> None:
    """A tool message answers an open call, or repeats a result this thread has (a client
    sends its whole history every time); one naming another call is refused."""
    known = set(binding.data.get("calls") or ()) | set(pending) | _calls_in(made.rt, binding.handle)
    for answer in made.input.answers:
        if answer.call_id not in known:
            raise AGUIInputError(422, f"a tool message names call {answer.call_id[:80]!r}, which is not open")


def _calls_in(rt: Runtime, handle: str) -> set[str]:
    """The ids of the tool calls in the thread agent's transcript (either wire style)."""
    found: set[str] = set()
    for message in rt.conversation_store.get(handle) or []:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            found.add(str(call.get("id")))
        content = message.get("content")
        if isinstance(content, list):
            blocks = [block for block in content if isinstance(block, dict)]
            found.update(str(block.get("id")) for block in blocks if block.get("type") == "tool_use")
    return found


def start(made: Plan) -> Started:
    """Claim the thread and start the run: spawn (a new thread), wake or resume.

    Raises:
        AGUIInputError: ``409`` another request started or answered the thread first.
    """
    rt, run_input = made.rt, made.input
    if made.binding is None:
        return _new_thread(made)
    binding = _claim(made, made.binding)
    started = _watching(made, binding)
    try:
        _port.offer(rt, binding.handle, run_input.tools)
        if made.answer is None:
            rt.wake(binding.handle, run_input.prompt)
        else:
            rt.resume(made.answer)
    except BaseException as exc:
        started.watch.close()
        shown = f"thread {run_input.thread_id[:80]!r}"
        if isinstance(exc, UnknownRequest):
            raise AGUIInputError(409, f"{shown}: its request was answered already") from None
        if isinstance(exc, HandleClosed):
            raise AGUIInputError(409, f"{shown} is closed") from None
        raise
    return started


def _watching(made: Plan, binding: Binding) -> Started:
    """The run, watched from the tree's latest event, before it acts."""
    rt = made.rt
    cursor, tree = _port.now(rt), TreeState(rt, binding.handle)
    snapshot = tree.snapshot(made.input.state)
    return Started(made, binding.handle, binding, cursor, tree, snapshot, _port.watch(rt, binding.handle, cursor))


def _new_thread(made: Plan) -> Started:
    rt, run_input = made.rt, made.input
    try:
        handle = rt.spawn(rt.root, made.agent)
    except SpawnError as exc:
        raise AGUIInputError(409, f"no new thread now: {exc}") from None
    data = {"calls": [], "run": run_input.run_id}
    bound = bindings_of(rt).bind(SURFACE, made.principal, handle.id, data, id=run_input.thread_id)
    if bound is None:
        rt.close(handle, force=True)  # another request made the thread first: this handle never ran
        raise AGUIInputError(409, f"thread {run_input.thread_id[:80]!r} was started by another request")
    started = _watching(made, bound)
    try:
        _port.offer(rt, handle.id, run_input.tools)
        rt.wake(handle, run_input.prompt)
    except BaseException:
        started.watch.close()
        raise
    return started


def _claim(made: Plan, binding: Binding) -> Binding:
    """This run's claim on the thread: one compare-and-set, so of two requests that read
    the thread alike, one continues it and the other is ``409``."""
    data = dict(binding.data)
    data["run"] = made.input.run_id
    data["pending"] = []
    if made.answer is None:
        data["calls"], data["spans"] = [], {}  # a new turn: what the last one streamed is history
    else:
        data["answered"] = ([*(data.get("answered") or ()), made.answer.id])[-ANSWERED_KEPT:]
    claimed = bindings_of(made.rt).update(binding, data)
    if claimed is None:
        raise AGUIInputError(409, f"thread {made.input.thread_id[:80]!r} is being continued by another request")
    return claimed
