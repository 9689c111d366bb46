"""One agent turn: the run spec, the toolkit, the loop, and the ledger it charges.

``TurnRunner`` turns an admitted ``Turn`` into an ``AgentResult``; the runtime owns the
state machine around it (admission, settling, slots). Everything here that touches a
handle takes that handle's lock for a moment and never holds it across the model call.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator


from . import budget as budgets, loop, tracing
from .agentdef import AgentDef
from .data import AgentResult, RunResult, Usage
from .errors import Cancelled
from .events import RunEvents
from .handle import Handle, Turn
from .loop import Engine, Hooks, RunSpec
from .metrics import Metrics, emitter
from .store import ConversationStore
from .toolkit import Toolkit
from .tools import Tool
from ._cancel import TurnGate

if TYPE_CHECKING:
    from .tree import TreeStore

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
        nonce: str,
        tree_store: TreeStore,
        owner: str,
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
        self._tree_store = tree_store
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
            text = budgets.on_chain(spent, handle.id)
            return AgentResult(text=text, status="incomplete", limit=spent, handle_id=handle.id), None
        spec = self._spec(handle, turn)
        toolkit = Toolkit(definition.tools)
        if definition.team:
            toolkit.register(self._task_tool(handle, turn.serial))
        # A resumed (or taken-over) turn replays from its input: its journal serves every
        # model reply and tool result it recorded, so nothing already done is done again.
        history = self._store.get(handle.id) or []
        messages = loop.initial_messages(self.engine.style, spec.system, history, turn.input)
        run = loop.start(self.engine, spec, toolkit, messages)
        result = AgentResult(
            text=run.text,
            status=run.status,
            pending=run.pending,
            turns=run.turns,
            total_tokens=self._spent(handle, turn),
            limit=run.limit,
            handle_id=handle.id,
            finish_reason=run.finish_reason,
        )
        return result, run

    def failed(self, handle: Handle, turn: Turn, exc: BaseException) -> AgentResult:
        """A turn that raised: an error result for the waiters, never an exception."""
        text = f"{type(exc).__name__}: {exc}"
        return AgentResult(text=text, status="error", is_error=True, turns=self.turn_calls(turn), total_tokens=self._spent(handle, turn), handle_id=handle.id)

    def halted_call(self, run: RunResult | None) -> tuple[int, str]:
        """The model step and the call a run that ended pending halted on (the last tool
        result of its transcript is that call's placeholder)."""
        if run is None:
            return 0, ""
        results = self.engine.style.tool_results_in(run.messages)
        return run.turns, results[-1][0] if results else ""

    def turn_calls(self, turn: Turn) -> int:
        """The model calls ``turn`` made so far (served again by its journal included)."""
        with self._calls_lock:
            return turn.model_calls

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
            journal=self._tree_store.journal(handle, turn, self._lineage, self._owner, lambda: self._count_call(turn)),
            call_key=call_key(self._nonce, handle.id, turn.serial),
            continues=turn.resume,
            around_tool=self._around_tool,
            trace=self.trace,
            events=RunEvents(handle.id, self._tree_store.emit, self._tree_store.stream_events.log),
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
        """Checked before every model call: the handle's own carve and wall clock, and
        whether the turn is still this runtime's (another process may have interrupted it
        or taken it over)."""
        with handle.lock:
            record = handle.record
            handle.sync()
            if not handle.owned_by(self._owner):
                raise Cancelled(f"the turn of {record.id} was interrupted or taken over by another process")
            return budgets.turn_limit(record.budget, record.tokens, record.pool_tool_calls, self._clock() - turn.started)

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


def call_key(nonce: str, handle_id: str, serial: int) -> Callable[[str], str]:
    """Idempotency keys for the calls of one turn: stable across retries and recovery."""

    def key(call_id: str) -> str:
        digest = hashlib.sha256(f"{nonce}\x00{handle_id}\x00{serial}\x00{call_id}".encode()).hexdigest()
        return f"tn-{digest[:40]}"

    return key
