"""What one run is given: the ``Engine`` that reaches the model and runs tool calls, and
the ``RunSpec`` that says how the run behaves (model, system prompt, hooks, limits,
cancellation, journal, events). ``loop.py`` drives a run with them.

``Engine`` pairs what reaches the model (a ``ModelEngine``: an HTTP endpoint or an
in-process ``generate``) with the pool that runs tool calls.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any, Callable, ContextManager

import attrs

from .._model import pricing
from . import tracing
from .._model.cancel import CancelScope, TurnGate
from ..data import Answer, Request, Usage
from .._model.engine import ModelEngine, WireStyle
from .._events.log import RunEvents
from ..hooks import Hooks
from .journal import Journal
from .._tools.output import OutputType
from .._team.record import Resume
from .._model.styles._usage import Once

Metric = Callable[[dict[str, Any]], None]


@attrs.frozen(kw_only=True)
class Engine:
    """What a run needs from its owner: the model's engine and the pool for tool calls."""

    model: ModelEngine
    executor: Callable[[], Executor | None] = lambda: None
    #: Tool sources whose calls run on the turn's own thread, in call order, while the
    #: other calls run on the executor (a runtime with a dispatcher: delegations).
    here_sources: frozenset[str] = frozenset()
    #: Warnings this client (or runtime) logs only once.
    once: Once = attrs.field(factory=Once, eq=False, repr=False)

    @property
    def style(self) -> WireStyle:
        return self.model.style


@attrs.frozen(kw_only=True)
class RunSpec:
    """How one run behaves. ``guard`` is asked before every model call and returns the name
    of a limit that is reached (``maxTokens``...) or None; ``on_usage`` and ``on_tool_calls``
    feed a ledger as the run spends; ``around_tool`` makes the context entered around each
    tool execution, on the thread that runs it. ``price`` gives every reply its
    ``Usage.cost``; ``flight`` is entered around each model call the guard let through
    and yields a money limit reached on the way (``maxCost``) or None: it may wait while
    other calls in flight could take a money cap too far (``budget.may_fly``)."""

    model: str
    system: str | None = None
    max_turns: int = 10
    hooks: Hooks = Hooks()
    wait_for: Callable[[Request], Answer] | None = None
    metric: Metric = lambda metric: None
    guard: Callable[[int], str | None] | None = None
    scope: CancelScope | None = None
    gate: TurnGate | None = None
    handle_id: str | None = None
    on_usage: Callable[[Usage], None] | None = None
    on_tool_calls: Callable[[int], None] | None = None
    #: With a journal, every model reply and tool result is recorded (and charged) there.
    journal: Journal | None = None
    #: The idempotency key of a tool call, by call id.
    call_key: Callable[[str], str] | None = None
    #: A run replayed from its journal to continue a suspension: the answer its halted call gets.
    continues: Resume | None = None
    #: Request parameters of this run's agent, over the engine's own.
    request_params: dict[str, Any] | None = None
    #: A forcing ``tool_choice`` is sent as ``auto`` once the run has called a tool
    #: (``Client(reset_tool_choice=True)``, ``AgentDef(reset_tool_choice=True)``).
    reset_tool_choice: bool = False
    around_tool: Callable[[], ContextManager[Any]] | None = None
    trace: tracing.Tracer = tracing.OFF
    price: pricing.Price | None = None
    flight: Callable[[], ContextManager[str | None]] | None = None
    #: A typed run: it ends when the model gives a value of this type (``final_result``).
    output: OutputType | None = None
    #: Where the run announces its steps to streams (``events.RunEvents``), if anywhere.
    events: RunEvents | None = None
    #: A cap on tokens or money depends on this run's usage (``ModelCall.needs_usage``).
    needs_usage: bool = False
