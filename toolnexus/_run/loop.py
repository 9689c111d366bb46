"""The run loop shared by ``Client`` and the agent runtime.

``start`` and ``resume`` drive a run (an ``Engine`` and a ``RunSpec``, see ``runspec.py``)
to one of its three outcomes: ``done``, ``pending`` or ``incomplete``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import time
from typing import Any, Callable

import attrs

from .._team import jobs as _jobs
from .._team import budget
from . import journal
from .._model import pricing
from ..data import UNMEASURED, Answer, ModelReply, Request, RunResult, ToolCall, ToolCallRecord, ToolResult, Usage
from .._model.engine import ModelCall, request_of
from .._model.styles import TranscriptStyle
from ..errors import Cancelled, LLMError, UnknownRequest
from .recorded import declined as _declined
from .._tools.output import FINAL_RESULT, Accepted, check_toolkit
from .runspec import Engine, RunSpec
from .._tools.toolkit import Toolkit
from .._tools.tools import ToolContext, hears_declines

__all__ = ["Engine", "RunSpec", "initial_messages", "resume", "start"]

log = logging.getLogger("toolnexus")


@attrs.define
class _State:
    messages: list[dict[str, Any]]
    records: list[ToolCallRecord] = attrs.Factory(list)
    usage: Usage = Usage()
    turns: int = 0
    text: str = ""
    finish_reason: str | None = None
    #: A model step of this run asked for tool calls (served again from a journal or not).
    called_tool: bool = False


@attrs.frozen
class _Outcome:
    call: ToolCall
    args: Any
    result: ToolResult


LIMIT_TEXT = budget.LIMIT_TEXT
#: How often ``wait_for`` is asked again by a tool that hears declines (an MCP server's rounds).
MAX_ASKED_AGAIN = 10
#: The server cut the final answer at its output-token limit; the text stays as it came.
MAX_OUTPUT_TOKENS = "maxOutputTokens"
#: The result given to a tool call that a stored transcript left without one (a run that
#: ended pending with several calls, then went on with a new prompt).
NOT_RUN = ToolResult(output="not run: the run stopped before this call was made", is_error=True)


def initial_messages(
    style: TranscriptStyle, system: str | None, history: list[dict[str, Any]] | None, prompt: str
) -> list[dict[str, Any]]:
    """System message (if the style carries one and history lacks it), history, the prompt.

    Every tool call in the history gets exactly one result (``NOT_RUN`` for those that
    have none), so the transcript stays valid to send.
    """
    history = style.answer_every_call(list(history or []), NOT_RUN)
    head = [] if history and history[0].get("role") == "system" else style.system_messages(system)
    return [*head, *history, style.user_message(prompt)]


def start(engine: Engine, spec: RunSpec, toolkit: Toolkit, messages: list[dict[str, Any]]) -> RunResult:
    """Run the loop over ``messages`` (already ending with the new user input)."""
    check_toolkit(spec.output, toolkit)
    return _drive(engine, spec, toolkit, _State(messages=messages))


def resume(
    engine: Engine,
    spec: RunSpec,
    toolkit: Toolkit,
    messages: list[dict[str, Any]],
    pending: Request,
    answer: Answer,
) -> RunResult:
    """Continue a run that ended ``pending``: rerun the halted call with the answer, run the
    calls of that turn that have no result yet, then go on. No user message is added."""
    check_toolkit(spec.output, toolkit)
    if answer.id != pending.id:
        raise UnknownRequest(f"answer {answer.id!r} does not match the pending request {pending.id!r}")
    index, calls = _last_tool_turn(engine.style, messages)
    results = engine.style.tool_results_in(messages[index + 1 :]) if index is not None else []
    found = [(cid, res) for cid, res in results if any(c.id == cid for c in calls)]
    if index is None or not found:
        raise UnknownRequest(f"the transcript has no tool call waiting on request {pending.id!r}")
    kept = dict(found[:-1])
    answers: dict[str, tuple[Request, Answer]] = {}
    halted_id = found[-1][0]
    journal.apply_answer(halted_id, pending, answer, kept, answers)
    if halted_id in kept and spec.events is not None:  # fed back without running: its result is now
        spec.events.result(next(call for call in calls if call.id == halted_id), kept[halted_id])
    state = _State(messages=list(messages[: index + 1]))
    announced = frozenset(call.id for call in calls)  # when the step first ran
    halted, accepted = _step(engine, spec, toolkit, state, calls, kept=kept, answers=answers, announced=announced)
    if halted is not None:
        return _result(spec, state, "pending", pending=halted)
    if accepted is not None:
        return _result(spec, state, "done", accepted=accepted)
    return _drive(engine, spec, toolkit, state)


def _last_tool_turn(style: TranscriptStyle, messages: list[dict[str, Any]]) -> tuple[int | None, list[ToolCall]]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            calls = style.tool_calls_of(messages[index])
            return (index, calls) if calls else (None, [])
    return None, []


def _drive(engine: Engine, spec: RunSpec, toolkit: Toolkit, state: _State) -> RunResult:
    tools = engine.style.tools_payload(toolkit)  # the in-process model uses the openai style
    typed = spec.output
    if typed is not None:
        tools = [*tools, *engine.style.tools_payload(typed.toolkit)]
    # Delegation fans out to other turns: have a worker ready by the time the reply asks
    # (unless delegations run on this thread, as with a dispatcher).
    delegates = "agent" not in engine.here_sources and any(tool.source == "agent" for tool in toolkit.tools())
    while True:
        reply = _next_reply(engine, spec, state, tools, delegates)
        if isinstance(reply, str):
            return _result(spec, state, "incomplete", limit=reply)
        state.finish_reason = reply.finish_reason
        if not reply.tool_calls:
            if typed is None or reply.truncated:
                if reply.truncated:
                    return _result(spec, state, "incomplete", limit=MAX_OUTPUT_TOKENS)
                return _result(spec, state, "done")
            verdict = typed.from_text(reply.text)
            if isinstance(verdict, Accepted):
                return _result(spec, state, "done", accepted=verdict)
            state.messages.append(engine.style.user_message(verdict))  # asks for final_result
            continue
        halted, accepted = _step(engine, spec, toolkit, state, reply.tool_calls)
        if halted is not None:
            return _result(spec, state, "pending", pending=halted)
        if accepted is not None:
            return _result(spec, state, "done", accepted=accepted)


def _step(
    engine: Engine,
    spec: RunSpec,
    toolkit: Toolkit,
    state: _State,
    calls: list[ToolCall],
    *,
    kept: dict[str, ToolResult] | None = None,
    answers: dict[str, tuple[Request, Answer]] | None = None,
    announced: frozenset[str] | None = None,
) -> tuple[Request | None, Accepted | None]:
    """The tool calls of one model step; a typed run's ``final_result`` calls are answered
    here (never run, recorded or counted as tool calls) and the first that fits wins."""
    finals, accepted = spec.output.from_calls(calls, decode_arguments) if spec.output is not None else ({}, None)
    kept = {**(kept or {}), **finals}
    halted = _tool_phase(engine, spec, toolkit, state, calls, kept=kept, answers=answers, announced=announced)
    return halted, accepted


def _next_reply(
    engine: Engine, spec: RunSpec, state: _State, tools: list[dict[str, Any]], delegates: bool
) -> ModelReply | str:
    """The next model reply, or the limit that stops the run before it is asked. A reply
    the journal recorded was asked (and checked) before a crash: it is served again
    without checking the limits a second time, as its charge is in the ledger already."""
    recorded = _served(spec, state)
    if recorded is not None:
        return recorded
    limit = _limit_reached(spec, state)
    if limit is not None:
        return limit
    with spec.flight() if spec.flight is not None else contextlib.nullcontext() as limit:
        if limit is not None:
            return limit
        return _call_model(engine, spec, state, tools, _jobs.readier(engine.executor()) if delegates else None)


def _limit_reached(spec: RunSpec, state: _State) -> str | None:
    _check_cancel(spec)
    if state.turns >= spec.max_turns:
        return "maxTurns"
    return spec.guard(state.turns) if spec.guard is not None else None


def _check_cancel(spec: RunSpec) -> None:
    if spec.scope is not None and spec.scope.cancelled:
        raise Cancelled("the run was interrupted")


def _result(
    spec: RunSpec, state: _State, status: str, *, limit: str | None = None, pending: Request | None = None,
    accepted: Accepted | None = None,
) -> RunResult:
    text = state.text if accepted is None else accepted.text
    if limit is not None and limit in LIMIT_TEXT:
        text = f"{text}\n[{LIMIT_TEXT[limit]}]" if text else LIMIT_TEXT[limit]
    if pending is not None:
        text = pending.prompt
    return RunResult(
        text=text,
        messages=state.messages,
        tool_calls=state.records,
        tool_call_count=len(state.records),
        turns=state.turns,
        usage=state.usage,
        model=spec.model,
        status=status,
        limit=limit,
        pending=pending,
        finish_reason=state.finish_reason,
        output=accepted.value if accepted is not None else None,
    )


# --- one model call ----------------------------------------------------------------------


def _served(spec: RunSpec, state: _State) -> ModelReply | None:
    turn = state.turns + 1
    _check_cancel(spec)
    recorded = spec.journal.model_reply(turn) if spec.journal is not None else None
    if recorded is not None:  # asked and charged before a crash: never asked again
        state.turns = turn
        state.usage = state.usage + recorded.usage
        if not recorded.empty:
            state.messages.append(recorded.message)
        state.text = recorded.text
    return recorded


def _call_model(
    engine: Engine, spec: RunSpec, state: _State, tools: list[dict[str, Any]],
    while_waiting: Callable[[], None] | None = None,
) -> ModelReply:
    turn = state.turns + 1
    if spec.hooks.before_llm is not None:
        change = spec.hooks.before_llm(messages=state.messages, tools=copy.deepcopy(tools), model=spec.model, turn=turn)
        if isinstance(change, dict):
            if "messages" in change:
                state.messages = list(change["messages"])
            tools = change.get("tools", tools)
    started = time.perf_counter()
    call = ModelCall(
        model=spec.model,
        system=spec.system,
        messages=state.messages,
        tools=tools,
        scope=spec.scope,
        gate=spec.gate,
        while_waiting=while_waiting,
        request_params=spec.request_params,
        needs_usage=spec.needs_usage,
        after_tool=spec.reset_tool_choice and state.called_tool,  # forced until a tool was called
        ends_run=FINAL_RESULT if spec.output is not None else None,
        **(spec.events.live_call() if spec.events is not None else {}),  # streaming mode while watched
    )
    try:
        with spec.trace.chat(spec.model, state.messages, spec.system) as traced:
            reply = engine.model.complete(call)
            traced.reply(reply)
    except (LLMError, Cancelled):
        spec.metric(_llm_metric(spec, "error", started, Usage()))
        raise
    _check_cancel(spec)  # a reply that arrived after an interrupt is dropped, never charged
    if reply.usage_missing:  # 0 tokens and no cost, said to be unmeasured (CONTRACT §13)
        engine.once.warn("usage", "model replies carry no usage: they count 0 tokens (Usage.unmeasured_calls)")
        reply = attrs.evolve(reply, usage=UNMEASURED)
    elif spec.price is not None:
        reply = attrs.evolve(reply, usage=pricing.priced(reply.usage, spec.price))
    spec.metric(_llm_metric(spec, "ok", started, reply.usage))
    if spec.journal is not None:
        spec.journal.record_model(turn, reply, request_of(engine.style, call))  # with its charge; may raise Cancelled
    elif spec.on_usage is not None:
        spec.on_usage(reply.usage)  # may raise Cancelled: the turn is no longer the handle's
    if spec.events is not None:
        spec.events.message(reply)
    state.turns = turn
    state.usage = state.usage + reply.usage
    if not reply.empty:  # an empty assistant message would make the transcript invalid
        state.messages.append(reply.message)
    state.text = reply.text
    if spec.hooks.after_llm is not None:
        spec.hooks.after_llm(response=reply.message, model=spec.model, turn=turn)
    return reply


def _llm_metric(spec: RunSpec, status: str, started: float, usage: Usage) -> dict[str, Any]:
    """§8's ``llm`` metric; with ``cost`` when the call was priced, ``unmeasured`` when the server
    reported no usage."""
    metric = {
        "event": "llm",
        "model": spec.model,
        "status": status,
        "ms": round((time.perf_counter() - started) * 1000, 3),
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
    }
    if usage.unmeasured_calls:
        metric["unmeasured"] = True
    return metric if usage.cost is None else {**metric, "cost": usage.cost}


# --- the tool calls of one turn -------------------------------------------------------------


def _tool_phase(
    engine: Engine,
    spec: RunSpec,
    toolkit: Toolkit,
    state: _State,
    calls: list[ToolCall],
    *,
    kept: dict[str, ToolResult] | None = None,
    answers: dict[str, tuple[Request, Answer]] | None = None,
    announced: frozenset[str] | None = None,
) -> Request | None:
    """Run every call without a kept result, concurrently (one after another when the
    engine has no executor: inline mode); append results in call order. A call made
    again after its turn suspended (``announced``, or so marked in the journal) gets no
    second ``tool_call`` event.

    Returns the request the turn halts on (the first suspension in call order when there
    is no ``wait_for``), after appending only that call's placeholder result.
    """
    state.called_tool = True
    kept = dict(kept or {})
    answers = dict(answers or {})
    asked: dict[str, ToolResult] = {}
    told = set(announced or ())  # calls whose tool_call event was sent when their step first ran
    turn = state.turns
    given = set(kept)
    rerun = journal.apply_resume(spec.continues, turn, calls, kept, answers)
    fed_back = [call for call in calls if call.id in kept and call.id not in given]  # declined: not run
    if spec.journal is not None:
        unkept = [call for call in calls if call.id not in kept]
        asked, again = journal.served(spec.journal, toolkit, turn, unkept, kept, rerun)
        told |= again
    todo = [call for call in calls if call.id not in kept and call.id not in asked]
    if spec.events is not None:  # before the journal's commit, which takes them along
        spec.events.calls([call for call in todo if call.id not in told])  # once per call, resumed or not
        for call in fed_back:
            spec.events.result(call, kept[call.id])
    if spec.journal is not None and todo:
        spec.journal.tools_started(turn, [call.id for call in todo])
    # In call order first (arguments, before_tool, a tool's own prepare step: the task
    # tool spawns its child here, so child ids follow call order); then concurrently.
    starts = [_start_call(spec, toolkit, call, turn, answers.get(call.id)) for call in todo]
    here = None
    if engine.here_sources:
        here = [_source(toolkit, start.call.name) in engine.here_sources for start in starts]
    finishes: list[Callable[[], Any]] = [functools.partial(_finish_call, spec, toolkit, start) for start in starts]
    ran: list[_Outcome] = _jobs.run_all(engine.executor(), finishes, here)
    _check_cancel(spec)
    if spec.on_tool_calls is not None and ran and spec.journal is None:
        spec.on_tool_calls(len(ran))
    by_id = {o.call.id: o for o in ran}
    for call in calls:
        if call.id in asked:
            by_id[call.id] = _Outcome(call=call, args=decode_arguments(call.arguments)[0], result=asked[call.id])
    outcomes = [by_id[call.id] for call in calls if call.id in by_id]
    halted = next((o for o in outcomes if o.result.pending is not None), None)
    if halted is not None:
        # A call that consumed an answer keeps its result, so a later resume does not ask again.
        answered = {o.call.id: o for o in outcomes if o.call.id in answers and o.result.pending is None}
        settled = {**kept, **{cid: o.result for cid, o in answered.items()}}
        entries = [(call.id, settled[call.id]) for call in calls if call.id in settled]
        entries.append((halted.call.id, halted.result))
        state.messages.extend(engine.style.tool_result_messages(entries))
        state.records.extend(_record(o) for o in answered.values())
        state.records.append(_record(halted))
        return halted.result.pending
    results = {**kept, **{o.call.id: o.result for o in outcomes}}
    state.records.extend(_record(o) for o in outcomes)
    state.messages.extend(engine.style.tool_result_messages([(call.id, results[call.id]) for call in calls]))
    return None


def _record(outcome: _Outcome) -> ToolCallRecord:
    args = outcome.args if isinstance(outcome.args, dict) else {}
    result = outcome.result
    call = outcome.call
    return ToolCallRecord(
        id=call.id, name=call.name, args=args, output=result.output, is_error=result.is_error, metadata=result.metadata
    )


def decode_arguments(raw: Any) -> tuple[Any, str | None]:
    """Arguments as a dict, or an error message saying why they are invalid."""
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            return None, f"invalid arguments: not valid JSON ({exc})"
        except RecursionError:
            return None, "invalid arguments: nested too deep to read"
    if not isinstance(raw, dict):
        return None, f"invalid arguments: expected a JSON object, got {type(raw).__name__}"
    return raw, None


def _source(toolkit: Toolkit, name: str) -> str | None:
    found = toolkit.get(name)
    return found.source if found is not None else None


@attrs.define
class _Started:
    """A call after its in-order first step: decoded arguments, hooks, prepared context."""

    call: ToolCall
    turn: int
    args: Any
    ctx: ToolContext
    started: float
    span: Any
    result: ToolResult | None = None


def _start_call(
    spec: RunSpec, toolkit: Toolkit, call: ToolCall, turn: int, given: tuple[Request, Answer] | None
) -> _Started:
    ctx = _context(spec, call, *(given or (None, None)))
    begun = _Started(call=call, turn=turn, args=None, ctx=ctx, started=time.perf_counter(), span=spec.trace.tool(call))
    args, problem = decode_arguments(call.arguments)
    if problem is not None:
        begun.result = ToolResult(output=f"{problem} for tool {call.name}", is_error=True)
        return begun
    if spec.hooks.before_tool is not None:
        change = spec.hooks.before_tool(name=call.name, args=args, id=call.id, turn=turn)
        if isinstance(change, dict):
            if isinstance(change.get("result"), ToolResult):
                begun.args, begun.result = args, change["result"]
                return begun
            if isinstance(change.get("args"), dict):
                args = change["args"]
    begun.args = args
    with begun.span.current():  # a child the prepare step starts nests in this call's span
        toolkit.prepare(call.name, args, ctx)
    return begun


def _finish_call(spec: RunSpec, toolkit: Toolkit, begun: _Started) -> _Outcome:
    call, args = begun.call, begun.args
    with begun.span.running(args) as traced:
        _check_cancel(spec)  # an interrupt stops the calls of the turn that have not started
        result = begun.result
        if result is None:
            result = _execute(spec, toolkit, call.name, args, begun.ctx)
            if result.pending is not None:
                traced.suspended(result.pending)
                if spec.wait_for is not None:
                    result = _interpret(spec, toolkit, call, args, result.pending, spec.wait_for)
        if spec.hooks.after_tool is not None:
            change = spec.hooks.after_tool(name=call.name, args=args, result=result, id=call.id, turn=begun.turn)
            if isinstance(change, dict) and isinstance(change.get("result"), ToolResult):
                result = change["result"]
        if not isinstance(result.output, str):
            result = attrs.evolve(result, output=str(result.output))
        if spec.events is not None:
            spec.events.result(call, result)
        if spec.journal is not None:
            spec.journal.tool_done(begun.turn, call.id, result)
        traced.result(result)
    _tool_metric(spec, toolkit, call.name, result, begun.started)
    return _Outcome(call=call, args=args, result=result)


def _interpret(
    spec: RunSpec, toolkit: Toolkit, call: ToolCall, args: dict[str, Any], request: Request,
    wait_for: Callable[[Request], Answer],
) -> ToolResult:
    """§10.1: ask ``wait_for``; on ok run the call once more with the answer. A tool that
    hears declines gets every answer, and may ask again (a bounded number of rounds)."""
    for _ in range(MAX_ASKED_AGAIN + 1):
        try:
            answer = wait_for(request)
        except Exception:
            log.debug("wait_for raised; treating the request as declined", exc_info=True)
            answer = None
        if not isinstance(answer, Answer) or (not answer.ok and not hears_declines(request)):
            return _declined(answer if isinstance(answer, Answer) else None, request)
        retried = _execute(spec, toolkit, call.name, args, _context(spec, call, request, answer))
        if retried.pending is None:
            return retried
        request = retried.pending
        if not hears_declines(request):
            break
    return ToolResult(output=f"unresolved: {request.prompt}", is_error=True)


def _execute(spec: RunSpec, toolkit: Toolkit, name: str, args: Any, ctx: ToolContext) -> ToolResult:
    """Run one tool inside the host's ``around_tool`` context; its failure is the call's error."""
    if spec.around_tool is None:
        return toolkit.execute(name, args, ctx)
    try:
        with spec.around_tool():
            return toolkit.execute(name, args, ctx)
    except Exception as exc:
        log.warning("around_tool failed around tool %s", name, exc_info=True)
        return ToolResult(output=f"tool {name} failed: around_tool raised {type(exc).__name__}: {exc}", is_error=True)


def _context(spec: RunSpec, call: ToolCall, request: Request | None, answer: Answer | None) -> ToolContext:
    key = spec.call_key(call.id) if spec.call_key is not None else None
    given: dict[str, Any] = {"answer": answer, "request": request if answer is not None else None}
    if spec.scope is not None:
        given["cancelled"] = spec.scope.event
    return ToolContext(**given, handle_id=spec.handle_id, call_id=call.id, idempotency_key=key)


def _tool_metric(spec: RunSpec, toolkit: Toolkit, name: str, result: ToolResult, started: float) -> None:
    found = toolkit.get(name)
    metric: dict[str, Any] = {
        "event": "tool",
        "tool": name,
        "source": found.source if found is not None else "unknown",
        "is_error": result.is_error and result.pending is None,
        "ms": round((time.perf_counter() - started) * 1000, 3),
    }
    if result.pending is not None:
        metric["pending"] = True
    spec.metric(metric)
