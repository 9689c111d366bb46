"""One agent turn: the run spec, the toolkit, the loop, and the ledger it charges.

``TurnRunner`` turns an admitted ``Turn`` into an ``AgentResult``; the runtime owns the
state machine around it (admission, settling, slots). Everything here that touches a
handle takes that handle's lock for a moment and never holds it across the model call.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Mapping

import attrs

from . import budget as budgets
from .._run import loop
from .._run import tracing
from .agentdef import AgentDef, model_of
from ..data import AgentResult, Budget, Request, RunResult, Usage
from ..errors import Cancelled, ConfigError
from .._events.log import RunEvents
from .handle import Handle, Turn
from .offers import offered
from .remote import RemoteTurns
from ..hooks import Hooks
from .._run.runspec import Engine, RunSpec
from .._run.metrics import Metrics, metric_sink
from .._model.pricing import Price
from .._run.spending import Cap, Spending
from .._tools.output import output_type
from .._stores.conversations import ConversationStore
from .._tools.toolkit import Toolkit
from .._tools.tools import Tool
from .._model.cancel import TurnGate

if TYPE_CHECKING:
    from .._stores.parts import TreeStore

log = logging.getLogger("toolnexus")

Metric = Callable[[dict[str, Any]], None]


@attrs.frozen
class _Shape:
    """The parts of a run spec that depend only on the agent (a toolkit without a team's
    ``task`` tool is shared by its turns: the loop never changes it)."""

    definition: AgentDef
    model: str
    hooks: Hooks
    metric: Metric
    price: Price | None
    output: Any
    toolkit: Toolkit | None


class TurnRunner:
    """Runs turns for one runtime: shared engine, conversation store, turn gate and metrics."""

    def __init__(
        self,
        *,
        engine: Engine,
        conversations: ConversationStore,
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
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self.engine = engine
        self.trace = trace
        self.metrics = Metrics()
        #: The runtime's model (for agents that inherit it) and the price of each model.
        self.model = model
        self.prices = dict(prices or {})
        self._spending = Spending()
        self._conversations = conversations
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
        self._sinks_lock = threading.Lock()  # guards: _sinks
        self._sinks: dict[str, Metric] = {}
        self._calls_lock = threading.Lock()  # guards: Turn.model_calls
        self._remote = RemoteTurns(tree_store=tree_store, lineage=lineage, owner=owner, nonce=nonce)
        self._shapes: dict[str, _Shape] = {}  # by agent name; a lost race only builds one twice

    def execute(self, handle: Handle, turn: Turn) -> tuple[AgentResult, RunResult | None]:
        """Run ``turn`` to its outcome; raises ``Cancelled`` when interrupted.

        The turn is one ``invoke_agent`` span, nested where the turn was queued.
        """
        name, model = handle.definition.name, self.model_of(handle.definition)
        span = self.trace.agent(
            name, model=model, handle_id=handle.id, parent=turn.trace, follows=turn.suspended_trace, text=turn.input
        )
        with span as traced:
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
            usage = self._spent(handle, turn)
            return AgentResult(text=text, status="incomplete", limit=spent, handle_id=handle.id, usage=usage), None
        if definition.a2a is not None:  # a remote teammate: one task of a remote agent, no model
            return self._remote.run(handle, turn, functools.partial(self._count_call, turn)), None
        shape = self._shape(definition)
        spec = self._spec(handle, turn, shape)
        toolkit = shape.toolkit
        if toolkit is None:  # a team's toolkit has this turn's own ``task`` tool
            toolkit = Toolkit(definition.tools)
            toolkit.register(self._task_tool(handle, turn.serial))
        for hosted in offered(handle):  # the agent's own tools win a clash of names
            toolkit.register(hosted)
        # A resumed (or taken-over) turn replays from its input: its journal serves every
        # model reply and tool result it recorded, so nothing already done is done again.
        # A stored handle that never settled has saved no transcript (it is saved with an
        # outcome): its first turn reads none from the state.
        unsettled = self._tree_store.state is not None and handle.record.settled == 0
        history = [] if unsettled else self._conversations.get(handle.id) or []
        messages = loop.initial_messages(self.engine.style, spec.system, history, turn.input)
        run = loop.start(self.engine, spec, toolkit, messages)
        result = AgentResult(
            text=run.text,
            status=run.status,
            pending=run.pending,
            turns=run.turns,
            usage=self._spent(handle, turn),
            limit=run.limit,
            handle_id=handle.id,
            finish_reason=run.finish_reason,
            output=run.output,
        )
        return result, run

    def failed(self, handle: Handle, turn: Turn, exc: BaseException) -> AgentResult:
        """A turn that raised: an error result for the waiters, never an exception."""
        text = f"{type(exc).__name__}: {exc}"
        return AgentResult(
            text=text,
            status="error",
            is_error=True,
            turns=self.turn_calls(turn),
            usage=self._spent(handle, turn),
            handle_id=handle.id,
        )

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

    def request_cancelled(self, handle: Handle, request: Request) -> None:
        """``handle``'s pending ``request`` was cancelled: a remote teammate's question
        cancels its remote task too (what a local turn asked needs nothing more)."""
        self._remote.cancelled(handle, request)

    def run_metric(
        self, handle: Handle, result: AgentResult, run: RunResult | None, started: float, error: str | None
    ) -> None:
        """The ``run`` metric of a finished turn, to the agent's ``on_metric`` and the metrics."""
        metric: dict[str, Any] = {
            "event": "run",
            "model": run.model if run is not None else self.model_of(handle.definition),
            "turns": result.turns,
            "tool_calls": run.tool_call_count if run is not None else 0,
            "total_tokens": result.total_tokens,
            "ms": round((time.perf_counter() - started) * 1000, 3),
            "handle": handle.id,
        }
        if error is not None:
            metric["error"] = error
        if result.cost is not None:
            metric["cost"] = result.cost
        self._sink(handle.definition)(metric)

    def model_of(self, definition: AgentDef) -> str:
        return model_of(definition, self.model)

    def hooks_of(self, definition: AgentDef) -> Hooks:
        """The agent's own hooks, else the runtime's."""
        return Hooks.of(definition.hooks if definition.hooks is not None else self._hooks)

    def _shape(self, definition: AgentDef) -> _Shape:
        """What every turn of ``definition`` runs with, worked out once per runtime."""
        shape = self._shapes.get(definition.name)
        if shape is None or shape.definition is not definition:
            model = self.model_of(definition)
            shape = self._shapes[definition.name] = _Shape(
                definition=definition,
                model=model,
                hooks=self.hooks_of(definition),
                metric=self._sink(definition),
                price=self.prices.get(model),
                output=output_type(definition.output),
                toolkit=None if definition.team else Toolkit(definition.tools),
            )
        return shape

    def _spec(self, handle: Handle, turn: Turn, shape: _Shape) -> RunSpec:
        definition = shape.definition
        budget = handle.record.budget  # carved: a cap of an ancestor's is in it too
        capped = budget.max_cost is not None
        counted = functools.partial(self._count_call, turn)
        turn.journal = self._tree_store.journal.open(
            handle, turn, self._lineage, self._owner, counted, defer_final=not capped
        )
        return RunSpec(
            model=shape.model,
            system=definition.soul or None,
            max_turns=budgets.max_turns(budget),
            hooks=shape.hooks,
            wait_for=definition.wait_for,
            metric=shape.metric,
            guard=lambda _turns: self._own_limit(handle, turn),
            scope=turn.scope,
            gate=self._gate,
            handle_id=handle.id,
            journal=turn.journal,
            call_key=call_key(self._nonce, handle.id, turn.serial),
            request_params=definition.request_params,
            reset_tool_choice=definition.reset_tool_choice,
            continues=turn.resume,
            around_tool=self._around_tool,
            trace=self.trace,
            price=shape.price,
            flight=self._flight(handle, turn) if capped else None,
            output=shape.output,
            events=RunEvents(handle.id, self._tree_store.events.emit, self._tree_store.events.stream.log),
            needs_usage=capped or budget.max_tokens is not None,
        )

    def _sink(self, definition: AgentDef) -> Metric:
        """The def's own ``on_metric`` replaces the runtime's; both feed the metrics."""
        with self._sinks_lock:
            sink = self._sinks.get(definition.name)
            if sink is None:
                on_metric = definition.on_metric if definition.on_metric is not None else self._on_metric
                sink = self._sinks[definition.name] = metric_sink(self.metrics, on_metric, definition.name)
            return sink

    # --- the ledger and the limits --------------------------------------------------------

    def _spent(self, handle: Handle, turn: Turn) -> Usage:
        """What the turn spent so far, its children's included (and a final reply that
        commits with the outcome)."""
        deferred = turn.journal.deferred if turn.journal is not None else None
        with handle.lock:
            spent = handle.record.spent.since(turn.before)
        return spent + deferred if deferred is not None else spent

    def _count_call(self, turn: Turn) -> None:
        with self._calls_lock:
            turn.model_calls += 1

    def _own_limit(self, handle: Handle, turn: Turn) -> str | None:
        """Checked before every model call: the handle's own carve and wall clock, and
        whether the turn is still this runtime's (another process may have interrupted it
        or taken it over)."""
        if turn.journal is not None:
            turn.journal.flush()  # a reply waiting to commit is charged before the next call
        with handle.lock:
            record = handle.record
            handle.sync(exact=True)
            if not handle.owned_by(self._owner):
                raise Cancelled(f"the turn of {record.id} was interrupted or taken over by another process")
            wall = self._clock() - turn.started
            return budgets.turn_limit(record.budget, record.tokens, record.pool_tool_calls, wall, record.cost)

    def _flight(self, handle: Handle, turn: Turn) -> Callable[[], ContextManager[str | None]]:
        """Around each model call of a capped handle: the money caps of the handle and of
        every ancestor, read live (with a state, as every process has charged them)."""

        def caps() -> list[Cap]:
            found = []
            for each in self._lineage(handle):
                cap = each.record.budget.max_cost  # a budget never changes after spawn
                if cap is None:
                    continue
                with each.lock:
                    each.sync(exact=True)
                    record = each.record
                    spent = record.cost or 0.0
                    found.append(Cap(handle_id=record.id, cap=cap, spent=spent, largest=record.largest_cost))
            return found

        return lambda: self._spending.flight(caps, turn.scope)

    def chain_limit(self, handle: Handle) -> str | None:
        """The live walk before every wake and spawn: any spent pool on the chain (with a
        state, as every process has charged it)."""
        for each in self._lineage(handle):
            if not budgets.has_pool(each.record.budget):  # a budget never changes after spawn
                continue
            with each.lock:
                each.sync(exact=True)
                record = each.record
                spent = budgets.pool_limit(record.budget, record.tokens, record.pool_tool_calls, record.cost)
            if spent is not None:
                return spent
        return None


def check_priced(
    registry: Mapping[str, AgentDef],
    model: str,
    prices: Mapping[str, Price],
    capped: str | None = None,
    budget: Budget | None = None,
) -> Mapping[str, Price]:
    """A money cap needs a price for the model of every agent it applies to: ``capped``
    (under its carved ``budget``) and every agent it may delegate to, as their children
    inherit the cap; without ``capped``, each agent whose own budget has a ``max_cost``.
    ``model`` is the runtime's, for the agents that inherit it. Returns ``prices``.

    Raises:
        ConfigError: naming the agent and its model that has no price.
    """
    if capped is None:
        for name, definition in registry.items():
            check_priced(registry, model, prices, name, definition.budget)
        return prices
    if budget is None or budget.max_cost is None:
        return prices
    seen: set[str] = set()
    todo = [capped]
    while todo:
        name = todo.pop()
        found = registry.get(name)
        if name in seen or found is None:
            continue
        seen.add(name)
        if model_of(found, model) not in prices:
            raise ConfigError(budgets.unpriced(name, model_of(found, model)))
        todo.extend(found.team_names)
    return prices


def call_key(nonce: str, handle_id: str, serial: int) -> Callable[[str], str]:
    """Idempotency keys for the calls of one turn: stable across retries and recovery."""

    def key(call_id: str) -> str:
        digest = hashlib.sha256(f"{nonce}\x00{handle_id}\x00{serial}\x00{call_id}".encode()).hexdigest()
        return f"tn-{digest[:40]}"

    return key
