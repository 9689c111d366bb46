"""One agent turn: the run spec, the toolkit, the loop, and the ledger it charges.

``TurnRunner`` turns an admitted ``Turn`` into an ``AgentResult``; the runtime owns the
state machine around it (admission, settling, slots). Everything here that touches a
handle takes that handle's lock for a moment and never holds it across the model call.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator

import attrs

from . import budget as budgets, loop, tracing
from .agent import AgentDef
from .data import AgentResult, ModelReply, RunResult, ToolCall, ToolResult, Usage
from .errors import Cancelled
from .handle import RUNNING, Handle, Turn
from .loop import Engine, Hooks, RunSpec
from .metrics import Metrics, emitter
from .output import output_type
from .store import ConversationStore
from .toolkit import Toolkit
from .tools import Tool
from ._cancel import TurnGate
from .wire import to_wire

if TYPE_CHECKING:
    from .state import DurableTree

log = logging.getLogger("toolnexus")

Emit = Callable[[dict[str, Any]], None]


class TurnRunner:
    """Runs turns for one runtime: shared engine, store, turn gate and metrics."""

    def __init__(
        self,
        *,
        engine: Engine,
        store: ConversationStore,
        model: str,
        hooks: Any,
        on_metric: Callable[[dict[str, Any]], Any] | None,
        gate: TurnGate | None,
        clock: Callable[[], float],
        lineage: Callable[[Handle], Iterator[Handle]],
        task_tool: Callable[[Handle, int], Tool],
        nonce: str = "",
        durable: DurableTree | None = None,
        owner: str | None = None,
        around_tool: Callable[[], ContextManager[Any]] | None = None,
        trace: tracing.Tracer = tracing.OFF,
    ) -> None:
        self.engine = engine
        self.trace = trace
        self.metrics = Metrics()
        self._store = store
        self._model = model
        self._hooks = hooks
        self._on_metric = on_metric
        self._gate = gate
        self._clock = clock
        self._lineage = lineage
        self._task_tool = task_tool
        self._nonce = nonce
        self._durable = durable
        self._owner = owner
        self._around_tool = around_tool
        self._emitters_lock = threading.Lock()  # guards: _emitters
        self._emitters: dict[str, Emit] = {}
        self._calls_lock = threading.Lock()  # guards: Turn.model_calls

    def execute(self, handle: Handle, turn: Turn) -> tuple[AgentResult, RunResult | None]:
        """Run ``turn`` to its outcome; raises ``Cancelled`` when interrupted.

        The turn is one ``invoke_agent`` span, nested where the turn was queued.
        """
        name, model = handle.definition.name, self.model_of(handle.definition)
        with self.trace.agent(name, model=model, handle_id=handle.id, parent=turn.trace, follows=turn.suspended_trace, text=turn.input) as traced:
            result, run = self._execute(handle, turn)
            traced.done(result.status, result.text, result.pending)
        if result.pending is not None:
            turn.suspended_trace = traced.carrier()
        return result, run

    def _execute(self, handle: Handle, turn: Turn) -> tuple[AgentResult, RunResult | None]:
        definition: AgentDef = handle.definition
        spent = self.chain_limit(handle)
        if spent is not None:
            text = f"{loop.LIMIT_TEXT[spent]} on the ancestor chain of {handle.id}"
            return AgentResult(text=text, status="incomplete", limit=spent, handle_id=handle.id), None
        spec = self._spec(handle, turn)
        toolkit = Toolkit(definition.tools)
        if definition.team:
            toolkit.register(self._task_tool(handle, turn.serial))
        if turn.resume is not None:
            checkpoint, pending, answer = turn.resume
            run = loop.resume(self.engine, spec, toolkit, checkpoint, pending, answer)
        else:
            history = self._store.get(handle.id) or []
            messages = loop.initial_messages(self.engine.style, spec.system, history, turn.input)
            run = loop.start(self.engine, spec, toolkit, messages)
        result = AgentResult(
            text=run.text,
            status=run.status,
            pending=run.pending,
            turns=turn.prior_turns + run.turns,
            total_tokens=self._spent(handle, turn),
            limit=run.limit,
            handle_id=handle.id,
            finish_reason=run.finish_reason,
            output=run.output,
        )
        return result, run

    def failed(self, handle: Handle, turn: Turn, exc: BaseException) -> AgentResult:
        """A turn that raised: an error result for the waiters, never an exception."""
        text = f"{type(exc).__name__}: {exc}"
        return AgentResult(text=text, status="error", is_error=True, turns=self.turn_calls(turn), total_tokens=self._spent(handle, turn), handle_id=handle.id)

    def turn_calls(self, turn: Turn) -> int:
        """The model calls ``turn`` made so far (with those before its suspension)."""
        with self._calls_lock:
            return turn.prior_turns + turn.model_calls

    def emit_run(self, handle: Handle, result: AgentResult, run: RunResult | None, started: float, error: str | None) -> None:
        event: dict[str, Any] = {
            "event": "run",
            "model": run.model if run is not None else self.model_of(handle.definition),
            "turns": result.turns,
            "tool_calls": run.tool_call_count if run is not None else 0,
            "total_tokens": result.total_tokens,
            "ms": round((time.perf_counter() - started) * 1000, 3),
            "handle": handle.id,
        }
        if error is not None:
            event["error"] = error
        self._emitter(handle.definition)(event)

    def model_of(self, definition: AgentDef) -> str:
        return self._model if definition.model in ("inherit", "", None) else definition.model

    def _spec(self, handle: Handle, turn: Turn) -> RunSpec:
        definition: AgentDef = handle.definition
        return RunSpec(
            model=self.model_of(definition),
            system=definition.soul or None,
            max_turns=budgets.max_turns(handle.record.budget),
            hooks=Hooks.of(definition.hooks if definition.hooks is not None else self._hooks),
            wait_for=definition.wait_for,
            emit=self._emitter(definition),
            guard=lambda _turns: self._own_limit(handle, turn),
            scope=turn.scope,
            gate=self._gate,
            handle_id=handle.id,
            on_usage=lambda usage: self._charge_tokens(handle, turn, usage),
            on_tool_calls=lambda count: self._charge_tool_calls(handle, count),
            journal=DurableJournal(handle, turn, self._durable, self._lineage, self._owner, lambda: self._count_call(turn))
            if self._durable is not None and self._owner
            else None,
            call_key=call_key(self._nonce, handle.id, turn.serial),
            around_tool=self._around_tool,
            trace=self.trace,
            output=output_type(definition.output),
        )

    def _emitter(self, definition: AgentDef) -> Emit:
        """The def's own ``on_metric`` replaces the runtime's; both feed the metrics."""
        with self._emitters_lock:
            emit = self._emitters.get(definition.name)
            if emit is None:
                on_metric = definition.on_metric if definition.on_metric is not None else self._on_metric
                emit = self._emitters[definition.name] = emitter(self.metrics, on_metric)
            return emit

    # --- the ledger and the limits --------------------------------------------------------

    def _spent(self, handle: Handle, turn: Turn) -> int:
        with handle.lock:
            return handle.record.tokens - turn.tokens_before

    def _count_call(self, turn: Turn) -> None:
        with self._calls_lock:
            turn.model_calls += 1

    def _charge_tokens(self, handle: Handle, turn: Turn, usage: Usage) -> None:
        self._count_call(turn)
        with handle.lock:
            if handle.turn is not turn:  # interrupted while the reply arrived: not charged
                raise Cancelled("the turn was interrupted before its reply was charged")
            handle.charge_model_call()
        for each in self._lineage(handle):
            with each.lock:
                each.charge_tokens(usage.total_tokens)

    def _charge_tool_calls(self, handle: Handle, count: int) -> None:
        for each in self._lineage(handle):
            with each.lock:
                each.charge_tool_calls(count, own=each is handle)

    def _own_limit(self, handle: Handle, turn: Turn) -> str | None:
        """Checked before every model call: the handle's own carve and wall clock, and (with
        a durable state) whether another process interrupted or took over the turn."""
        with handle.lock:
            record = handle.record
            if self._durable is not None:
                handle.sync()
                if record.state != RUNNING or record.turn_owner != self._owner:
                    raise Cancelled(f"the turn of {record.id} was interrupted or taken over by another process")
            spent = budgets.pool_limit(record.budget, record.tokens, record.pool_tool_calls)
        wall = record.budget.max_wall_ms
        if spent is None and wall is not None and (self._clock() - turn.started) * 1000 >= wall:
            return "maxWallMs"
        return spent

    def chain_limit(self, handle: Handle) -> str | None:
        """The live walk before every wake and spawn: any spent pool on the chain (with a
        state, as every process has charged it)."""
        for each in self._lineage(handle):
            with each.lock:
                each.sync()
                spent = budgets.pool_limit(each.record.budget, each.record.tokens, each.record.pool_tool_calls)
            if spent is not None:
                return spent
        return None


class DurableJournal:
    """A turn's journal in the durable state: each model reply and tool result commits
    together with its ledger charge, fenced by the turn's owner (a process whose turn was
    taken over cannot record anything more)."""

    def __init__(
        self,
        handle: Handle,
        turn: Turn,
        durable: DurableTree,
        lineage: Callable[[Handle], Iterator[Handle]],
        owner: str,
        counted: Callable[[], None],
    ) -> None:
        self._handle = handle
        self._counted = counted  # one model call of the turn (asked now, or served again)
        self._serial = turn.serial
        self._segment = turn.segment
        self._durable = durable
        self._lineage = lineage
        self._owner = owner

    def model_reply(self, step: int) -> ModelReply | None:
        found = self._durable.journal_get(self._handle.id, self._serial, self._segment, "model", step, "")
        if found is None or found[0] != "done":
            return None
        self._counted()
        data = found[1]
        calls = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in data["tool_calls"]]
        return ModelReply(
            message=data["message"],
            text=data["text"],
            tool_calls=calls,
            usage=Usage(**data["usage"]),
            finish_reason=data.get("finish_reason"),
            truncated=data.get("truncated", False),
        )

    def record_model(self, step: int, reply: ModelReply) -> None:
        payload = {
            "message": reply.message,
            "text": reply.text,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
            "usage": attrs.asdict(reply.usage),
            "finish_reason": reply.finish_reason,
            "truncated": reply.truncated,
        }
        self._counted()
        with self._ledger() as chain:
            self._durable.journal_put(self._handle.id, self._serial, self._segment, "model", step, "", "done", payload)
            self._handle.charge_model_call()
            for each in chain:
                each.charge_tokens(reply.usage.total_tokens)

    def tool_outcomes(self, call_ids: list[str]) -> dict[str, ToolResult | None]:
        found: dict[str, ToolResult | None] = {}
        for call_id in call_ids:
            row = self._durable.journal_get(self._handle.id, self._serial, self._segment, "tool", -1, call_id)
            if row is None:
                continue
            status, data = row
            found[call_id] = ToolResult(output=data["output"], is_error=data["is_error"], metadata=data.get("metadata")) if status == "done" else None
        return found

    def tools_started(self, call_ids: list[str]) -> None:
        with self._handle.lock, self._durable.change(self._handle, dirty=False):
            self._fence()
            for call_id in call_ids:
                self._durable.journal_put(self._handle.id, self._serial, self._segment, "tool", -1, call_id, "started", None)

    def tool_done(self, call_id: str, result: ToolResult) -> None:
        with self._ledger() as chain:
            if result.pending is not None:  # a question, not an effect: asked again on replay
                self._durable.journal_drop(self._handle.id, self._serial, self._segment, "tool", -1, call_id)
            else:
                payload = {"output": result.output, "is_error": result.is_error, "metadata": _plain(result.metadata)}
                self._durable.journal_put(self._handle.id, self._serial, self._segment, "tool", -1, call_id, "done", payload)
            for each in chain:
                each.charge_tool_calls(1, own=each is self._handle)

    @contextlib.contextmanager
    def _ledger(self) -> Iterator[list[Handle]]:
        """The handle and its ancestors, locked root first, in one transaction."""
        chain = list(self._lineage(self._handle))
        with contextlib.ExitStack() as held:
            for each in reversed(chain):
                held.enter_context(each.lock)
            held.enter_context(self._durable.change(*reversed(chain), dirty=False))
            self._fence()
            yield chain

    def _fence(self) -> None:
        record = self._handle.record
        if record.state != RUNNING or record.turn_owner != self._owner:
            raise Cancelled(f"the turn of {record.id} was interrupted or taken over by another process")


def call_key(nonce: str, handle_id: str, serial: int) -> Callable[[str], str]:
    """Idempotency keys for the calls of one turn: stable across retries and recovery."""

    def key(call_id: str) -> str:
        digest = hashlib.sha256(f"{nonce}\x00{handle_id}\x00{serial}\x00{call_id}".encode()).hexdigest()
        return f"tn-{digest[:40]}"

    return key


def _plain(metadata: dict[str, Any] | None) -> Any:
    """Metadata as JSON data (anything else is kept as its string form)."""
    if metadata is None:
        return None
    return json.loads(json.dumps(to_wire(metadata), default=str))
