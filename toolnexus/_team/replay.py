"""Replaying a settled run with the code as it is now (``Runtime.replay``).

Each recorded turn of each handle runs through the same loop a live turn does, over two
seams of that loop: the engine is a ``ReplayEngine`` (the journal answers every model
step, after the request made now is compared with the recorded one) and the journal is a
``_ReplayJournal`` (it serves the recorded tool results, or with ``tools="live"`` lets
today's tools run and compares what they give). A ``task`` call replays the recorded
child that call made, on this thread, one handle after another. Nothing is written: no
handle is made, nothing is charged, no model is asked. The first divergence cancels the
replay's scope, and the run stops there.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn

import attrs

from .._diff import first_difference
from .._model.cancel import CancelScope
from .._model.replaying import ReplayEngine, plain
from .._run import loop
from .._run.recorded import RecordedTurn, Row, recorded_turns
from .._run.runspec import Engine, RunSpec
from .._tools.output import output_type
from .._tools.toolkit import Toolkit
from .._tools.tools import Tool, ToolContext
from ..data import AgentResult, Answer, Budget, Divergence, ModelReply, Request, RunResult, ToolResult
from ..errors import Cancelled, ReplayError, SpawnError
from . import budget as budgets
from .agentdef import AgentDef
from .record import HandleRecord
from .task import delegating_tool, refusal, result_as_tool_output
from .turns import TurnRunner, call_key

#: What ``tools=`` may be.
TOOL_MODES = ("recorded", "live")


class Diverged(Cancelled):
    """The replay met its first divergence (a ``Cancelled``: the loop lets it through)."""


class _RecordEnds(Cancelled):
    """The record of a turn that was cut short (an error, an interrupt) ends here, as the
    turn did: not a divergence."""


@attrs.define
class Session:
    """One replay: the scope every replayed turn runs under, the first divergence, the
    model steps served."""

    scope: CancelScope = attrs.Factory(CancelScope)
    divergence: Divergence | None = None
    steps: int = 0
    #: A handle the run reaches that cannot be replayed: raised once the run has stopped.
    error: ReplayError | None = None

    def diverge(self, divergence: Divergence) -> NoReturn:
        if self.divergence is None:
            self.divergence = divergence
        self.scope.cancel()
        raise Diverged(str(self.divergence))


@attrs.frozen(kw_only=True)
class Sources:
    """Where a replay reads the record and today's code: the runtime's parts."""

    record: Callable[[str], HandleRecord]
    rows: Callable[[str], list[Row]]
    definition: Callable[[str], AgentDef]
    turns: TurnRunner
    nonce: str


class Replayer:
    """Replays the handles of one run, depth first, as their recorded ``task`` calls reach them."""

    def __init__(self, sources: Sources, *, live: bool) -> None:
        self._sources = sources
        self._live = live
        self.session = Session()

    def run(self, handle_id: str) -> None:
        """Replay ``handle_id``'s recorded turns (its children as its calls reach them);
        ``session.divergence`` says where it first differed.

        Raises:
            ReplayError: the handle (or a child its calls reach) has no replayable journal.
        """
        record = self._sources.record(handle_id)
        try:
            definition = self._sources.definition(record.name)
        except SpawnError:
            self.session.divergence = Divergence(handle=handle_id, step=1, kind="delegation", field="agent",
                                                 recorded={"agent": record.name}, actual=None)
            return
        try:
            self._handle(record, definition)
        except Cancelled:
            if self.session.error is None and self.session.divergence is None:
                raise
        if self.session.error is not None:
            raise self.session.error

    def _handle(self, record: HandleRecord, definition: AgentDef) -> AgentResult:
        """Replay every recorded turn of ``record``; the last one's result."""
        turns = recorded_turns(self._sources.rows(record.id))
        if not turns:
            raise ReplayError(f"{record.id} has no journal to replay (pruned, or recorded before journals were kept)")
        if any(step.request is None for turn in turns for step in turn.steps):
            raise ReplayError(f"{record.id} was recorded by a version that kept no requests: it cannot be replayed")
        history: list[dict[str, Any]] = []
        offset = 0
        last = AgentResult(text="", status="done", handle_id=record.id)
        for turn in turns:
            run = self._turn(record, definition, turn, history, offset)
            if run is None:  # cut short where its record is
                outcome = turn.outcome or {}
                last = AgentResult(text=outcome.get("text", ""), status=outcome.get("status", "error"),
                                   is_error=True, handle_id=record.id)
            else:
                last = AgentResult(text=run.text, status=run.status, turns=run.turns, limit=run.limit,
                                   handle_id=record.id, output=run.output)
                history = run.messages
            offset += len(turn.steps)
        return last

    def _turn(
        self, record: HandleRecord, definition: AgentDef, turn: RecordedTurn, history: list[dict[str, Any]],
        offset: int,
    ) -> RunResult | None:
        """One recorded turn replayed; ``None`` when its record ends where the turn was cut short."""
        handle_id = record.id
        diverge = self.session.diverge

        def differs(step: int, field: str, recorded: Any, actual: Any) -> NoReturn:
            diverge(Divergence(handle=handle_id, step=offset + step, kind="request", field=field,
                               recorded=recorded, actual=actual))

        def missing(step: int, actual: dict[str, Any]) -> NoReturn:
            if turn.cut_short:
                raise _RecordEnds(handle_id)
            diverge(Divergence(handle=handle_id, step=offset + step, kind="end", recorded=None, actual=plain(actual)))

        steps = [(step.request, step.reply) for step in turn.steps]
        model = ReplayEngine(self._sources.turns.engine.style, steps, differs=differs, missing=missing)
        journal = _ReplayJournal(turn, handle_id, offset, self._live, self.session)
        toolkit = Toolkit(definition.tools)
        if definition.team:
            toolkit.register(self._task_tool(definition, turn, journal))
        spec = self._spec(record, definition, turn, journal)
        messages = loop.initial_messages(model.style, spec.system, history, turn.input)
        try:
            run = loop.start(Engine(model=model), spec, toolkit, messages)
        except _RecordEnds:
            return None
        finally:
            self.session.steps += model.served
        if model.served < len(turn.steps):  # the record goes on
            ahead = turn.steps[model.served].request
            diverge(Divergence(handle=handle_id, step=offset + model.served + 1, kind="end", recorded=ahead))
        return run

    def _spec(self, record: HandleRecord, definition: AgentDef, turn: RecordedTurn, journal: _ReplayJournal) -> RunSpec:
        runner = self._sources.turns

        def guard(steps: int) -> str | None:
            """A turn stopped by a recorded budget stops where it did (the ledger is the record's)."""
            outcome = turn.outcome or {}
            own = outcome.get("limit") not in (None, "maxTurns", loop.MAX_OUTPUT_TOKENS)
            return outcome["limit"] if own and steps >= len(turn.steps) else None

        return RunSpec(
            model=runner.model_of(definition),
            system=definition.soul or None,
            max_turns=budgets.max_turns(_today(definition.budget, record.budget)),
            hooks=runner.hooks_of(definition),
            wait_for=journal.answer,
            guard=guard,
            scope=self.session.scope,
            handle_id=record.id,
            journal=journal,
            call_key=call_key(self._sources.nonce, record.id, turn.serial),
            request_params=definition.request_params,
            reset_tool_choice=definition.reset_tool_choice,
            output=output_type(definition.output),
        )

    def _task_tool(self, definition: AgentDef, turn: RecordedTurn, journal: _ReplayJournal) -> Tool:
        """The ``task`` tool as the team sees it now, replaying the recorded child of each call."""
        members = definition.team_names

        def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            call_id = ctx.call_id or ""
            recorded = turn.result(journal.step, call_id)
            child = (recorded.metadata or {}).get("handle") if recorded is not None else None
            asked = {"agent": args.get("agent"), "prompt": args.get("prompt")}
            refused = refusal(members, args)
            if refused is not None or child is None:
                if child is None and (refused is not None or turn.cut_short):
                    return refused if refused is not None else journal.record_ends()
                journal.diverge("delegation", call_id, field="agent", recorded=self._asked(child, asked), actual=asked)
            result = self._child(child, args["agent"], asked, journal, call_id)
            if self._live or recorded is None:
                return result_as_tool_output(args["agent"], result)
            return recorded

        return delegating_tool(self._sources.definition, members, execute)

    def _child(
        self, child_id: str, agent: str, asked: dict[str, Any], journal: _ReplayJournal, call_id: str
    ) -> AgentResult:
        record = self._sources.record(child_id)
        try:
            definition = self._sources.definition(agent)
        except SpawnError:
            definition = None
        if record.name != agent or definition is None:
            journal.diverge("delegation", call_id, field="agent", recorded=self._asked(child_id, asked), actual=asked)
        try:
            return self._handle(record, definition)
        except ReplayError as exc:  # stops the whole run, past the tool that called
            self.session.error = exc
            self.session.scope.cancel()
            raise

    def _asked(self, child_id: str | None, asked: dict[str, Any]) -> dict[str, Any] | None:
        if child_id is None:
            return None
        return {"agent": self._sources.record(child_id).name, "prompt": asked.get("prompt")}


class _ReplayJournal:
    """The loop's journal during a replay (``journal.Journal``): tool results come from the
    record (``tools="recorded"``), or today's tools run and are compared with it; a tool
    that asks is given the recorded Answer. It records nothing."""

    def __init__(self, turn: RecordedTurn, handle_id: str, offset: int, live: bool, session: Session) -> None:
        self._turn = turn
        self._handle_id = handle_id
        self._offset = offset
        self._live = live
        self._session = session
        #: The step whose calls run now, and those of its calls not done yet, in call order
        #: (a replay runs them one after another: the first is the one running).
        self.step = 0
        self._running: list[str] = []
        self._answers = {key: list(given) for key, given in turn.answers.items()}

    def diverge(self, kind: str, call_id: str, *, field: str | None, recorded: Any, actual: Any) -> NoReturn:
        self._session.diverge(Divergence(handle=self._handle_id, step=self._offset + self.step, kind=kind,
                                         field=field, recorded=recorded, actual=actual, call_id=call_id))

    def record_ends(self) -> NoReturn:
        raise _RecordEnds(self._handle_id)

    def model_reply(self, step: int) -> ModelReply | None:
        return None  # the engine answers, after comparing the request

    def record_model(self, step: int, reply: ModelReply, request: dict[str, Any] | None = None) -> None:
        pass

    def tool_outcomes(self, step: int, call_ids: list[str]) -> dict[str, ToolResult | str | None]:
        if self._live:
            return {}
        tasks = {call.id for call in self._turn.steps[step - 1].reply.tool_calls if call.name == "task"}
        found: dict[str, ToolResult | str | None] = {}
        for call_id in call_ids:
            result = self._turn.result(step, call_id)
            if result is not None and call_id not in tasks:
                found[call_id] = result
            elif result is None and call_id not in tasks:
                self.step = step
                if self._turn.cut_short:
                    self.record_ends()
                self.diverge("tool_result", call_id, field=None, recorded=None, actual=None)
        return found

    def tools_started(self, step: int, call_ids: list[str]) -> None:
        self.step = step
        self._running = list(call_ids)

    def tool_done(self, step: int, call_id: str, result: ToolResult) -> None:
        self._running.remove(call_id)
        if not self._live:
            return
        if self._answers.get((step, call_id)):  # the record asked a person here; the tool did not
            self.diverge("tool_result", call_id, field="suspended", recorded=True, actual=False)
        recorded = self._turn.result(step, call_id)
        if recorded is None:
            if self._turn.cut_short:
                self.record_ends()
            self.diverge("tool_result", call_id, field=None, recorded=None, actual=_outcome(result))
        found = first_difference(_outcome(recorded), _outcome(result))
        if found is not None:
            self.diverge("tool_result", call_id, field=found[0], recorded=_outcome(recorded), actual=_outcome(result))

    def answer(self, request: Request) -> Answer:
        """``wait_for`` of a replayed turn: the Answer the record gave the running call."""
        call_id = self._running[0] if self._running else ""
        given = self._answers.get((self.step, call_id))
        if not given:
            self.diverge("tool_result", call_id, field="suspended", recorded=False, actual=True)
        _, answer = given.pop(0)
        return attrs.evolve(answer, id=request.id)


def _today(budget: Budget | None, recorded: Budget) -> Budget:
    """The agent's budget as its definition says now, else as the record carved it."""
    return budget if budget is not None and budget.max_turns is not None else recorded


def _outcome(result: ToolResult) -> dict[str, Any]:
    return {"output": result.output, "is_error": result.is_error}
