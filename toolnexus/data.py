"""Frozen value types shared by the client loop, the runtime and the host.

Mutable state lives only in ``Client``, ``Runtime`` and the runtime's handle table; every
type here is immutable and changed with ``attrs.evolve``.
"""

from __future__ import annotations

import math
import uuid
import warnings
from typing import Any

import attrs

from . import _seconds as seconds
from .errors import ConfigError


@attrs.frozen
class ToolResult:
    """What a tool hands back to the model: ``output``, the text the model reads, and
    ``metadata``, values for the host that the model never sees (``None`` when there are
    none: read them as ``(result.metadata or {}).get(key)``)."""

    output: str
    is_error: bool = False
    metadata: dict[str, Any] | None = None

    @property
    def pending(self) -> Request | None:
        """The request this result suspends on, if it is a suspension."""
        if self.metadata is None:
            return None
        pending = self.metadata.get("pending")
        return pending if isinstance(pending, Request) else None


@attrs.frozen
class Request:
    """A question a tool asks outside the model: an approval, a form, a URL to visit."""

    id: str
    kind: str
    prompt: str
    url: str | None = None
    data: dict[str, Any] | None = None
    expires_at: str | None = None


@attrs.frozen
class Answer:
    """The reply to a ``Request``; ``reason`` is set only when ``ok`` is false."""

    id: str
    ok: bool
    data: Any = None
    reason: str | None = None


@attrs.frozen
class Usage:
    """Token counts and their cost, summed across model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    #: Of ``prompt_tokens``, those read from the provider's prompt cache (OpenAI
    #: ``prompt_tokens_details.cached_tokens``, Anthropic ``cache_read_input_tokens``).
    cached_tokens: int = 0
    #: US dollars, at the ``prices=`` of the model; ``None`` when the model has no price.
    #: A sum is ``None`` only when no part of it was priced.
    cost: float | None = None
    #: Of the model calls summed here, those whose server reported no usage: they count 0
    #: tokens and no cost, so with any of them the tokens and ``cost`` here are a lower bound
    #: (``cost`` stays ``None`` when no call was priced). ``0``: the server measured every call.
    unmeasured_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost=add_cost(self.cost, other.cost),
            unmeasured_calls=self.unmeasured_calls + other.unmeasured_calls,
        )

    def since(self, before: Usage) -> Usage:
        """What a ledger that read ``before`` spent since (``cost`` ``None`` when nothing
        priced was ever charged)."""
        return Usage(
            prompt_tokens=self.prompt_tokens - before.prompt_tokens,
            completion_tokens=self.completion_tokens - before.completion_tokens,
            total_tokens=self.total_tokens - before.total_tokens,
            cached_tokens=self.cached_tokens - before.cached_tokens,
            cost=cost_since(self.cost, before.cost),
            unmeasured_calls=self.unmeasured_calls - before.unmeasured_calls,
        )


#: Nothing spent.
NO_USAGE = Usage()
#: One model call whose server reported no usage: 0 tokens, not priced.
UNMEASURED = Usage(unmeasured_calls=1)


def add_cost(a: float | None, b: float | None) -> float | None:
    """Two costs together; ``None`` (nothing priced) only when both are."""
    if a is None:
        return b
    return a if b is None else a + b


def cost_since(now: float | None, before: float | None) -> float | None:
    """What a ledger spent since it read ``before``; ``None`` when nothing priced was ever charged."""
    return None if now is None else now - (before or 0.0)


@attrs.frozen
class ToolCallRecord:
    """One executed tool call, as the loop fed it back to the model."""

    id: str
    name: str
    args: dict[str, Any]
    output: str
    is_error: bool
    metadata: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class RunResult:
    """The outcome of ``Client.run``/``ask``/``resume``."""

    text: str
    messages: list[dict[str, Any]]
    tool_calls: list[ToolCallRecord]
    tool_call_count: int
    turns: int
    usage: Usage
    model: str
    status: str
    limit: str | None = None
    pending: Request | None = None
    #: The last model reply's finish reason as the server sent it (``stop``, ``length``,
    #: ``tool_calls``, ``end_turn``, ``max_tokens``...), None when it sent none.
    finish_reason: str | None = None
    #: A typed run's value (``output=T``): a ``T``, or a dict for a ``TypedDict`` or a
    #: schema; ``None`` when the run was not typed or did not end ``done``.
    output: Any = None


@attrs.frozen(kw_only=True)
class AgentResult:
    """The outcome of one agent turn as a waiter sees it."""

    text: str
    status: str
    is_error: bool = False
    pending: Request | None = None
    turns: int = 0
    #: What this turn spent, its children's included, as ``RunResult.usage``.
    usage: Usage = attrs.field(factory=Usage)
    #: ``usage.total_tokens``.
    total_tokens: int = attrs.field(default=attrs.Factory(lambda self: self.usage.total_tokens, takes_self=True))
    limit: str | None = None
    handle_id: str = ""
    #: The last model reply's finish reason in this turn, as the server sent it.
    finish_reason: str | None = None
    #: ``usage.cost``: US dollars this turn spent, its children's included; ``None`` when
    #: the handle was never charged a priced call.
    cost: float | None = attrs.field(default=attrs.Factory(lambda self: self.usage.cost, takes_self=True))
    #: A typed agent's value (``AgentDef(output=T)``): a ``T``, or a dict for a
    #: ``TypedDict`` or a schema; ``None`` otherwise.
    output: Any = None
    #: The runtime that produced this result (set by ``Agent.run``), for ``resume``.
    runtime: Any = attrs.field(default=None, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.usage == NO_USAGE and (self.total_tokens or self.cost is not None):
            # kept before results had a ``usage`` (or built with the totals alone)
            object.__setattr__(self, "usage", Usage(total_tokens=self.total_tokens, cost=self.cost))


def _cap(instance: Budget, field: attrs.Attribute[int | None], value: int | None) -> None:
    """A cap is unset or a whole number >= 0; 0 means "none allowed"."""
    if value is None:
        return
    if type(value) is not int:
        raise ConfigError(f"Budget.{field.name} must be a whole number or None, not {type(value).__name__}")
    if value < 0:
        raise ConfigError(f"Budget.{field.name} must be >= 0, not {value}")


def _money(instance: Budget, field: attrs.Attribute[float | None], value: float | None) -> None:
    """A money cap is unset or a finite number of US dollars >= 0."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"Budget.{field.name} must be a number of US dollars or None, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"Budget.{field.name} must be a finite number >= 0, not {value}")


def _wall(instance: Budget, field: attrs.Attribute[float | None], value: float | None) -> None:
    """A wall-clock cap is unset or a finite number of seconds >= 0."""
    if value is not None:
        seconds.duration(f"Budget.{field.name}", value, zero=True)


def _concurrency(instance: Budget, field: attrs.Attribute[int | None], value: int | None) -> None:
    _cap(instance, field, value)
    if value == 0:
        raise ConfigError(
            "Budget.max_concurrent must be >= 1: 0 could never admit a child (leave it unset for the default)"
        )


@attrs.frozen(kw_only=True, init=False)
class Budget:
    """Caps on an agent's spend; ``None`` means unset (inherits or takes the default).

    Checked when built: a negative cap, or ``max_concurrent=0`` (no child could ever
    run), is a ``ConfigError``. Other zeros mean "none allowed".

    ``max_wall`` is the seconds one turn may run. ``max_cost`` (US dollars) is carved and
    rolled up like ``max_tokens``, and checked on the handle and every ancestor before
    each model call; it needs a price for the model of every agent it applies to
    (``prices=``). (``max_wall_ms`` still works for this release, with a
    ``DeprecationWarning``.)
    """

    max_turns: int | None = attrs.field(default=None, validator=_cap)
    max_tokens: int | None = attrs.field(default=None, validator=_cap)
    max_tool_calls: int | None = attrs.field(default=None, validator=_cap)
    max_wall: float | None = attrs.field(default=None, validator=_wall)
    max_children: int | None = attrs.field(default=None, validator=_cap)
    max_concurrent: int | None = attrs.field(default=None, validator=_concurrency)
    max_depth: int | None = attrs.field(default=None, validator=_cap)
    max_cost: float | None = attrs.field(default=None, validator=_money)

    def __init__(
        self,
        *,
        max_turns: int | None = None,
        max_tokens: int | None = None,
        max_tool_calls: int | None = None,
        max_wall: float | None = None,
        max_children: int | None = None,
        max_concurrent: int | None = None,
        max_depth: int | None = None,
        max_cost: float | None = None,
        max_wall_ms: float | None = None,  # deprecated: max_wall in milliseconds, with a warning
    ) -> None:
        if max_wall_ms is not None:
            max_wall = seconds.renamed("Budget", {"max_wall_ms": max_wall_ms}, {"max_wall": max_wall})["max_wall"]
        # attrs writes __attrs_init__ (init=False); pyright's dataclass_transform does not know it
        self.__attrs_init__(  # pyright: ignore[reportAttributeAccessIssue]
            max_turns=max_turns,
            max_tokens=max_tokens,
            max_tool_calls=max_tool_calls,
            max_wall=max_wall,
            max_children=max_children,
            max_concurrent=max_concurrent,
            max_depth=max_depth,
            max_cost=max_cost,
        )

    @property
    def max_wall_ms(self) -> float | None:
        """Deprecated: ``max_wall`` in milliseconds."""
        warnings.warn(
            "Budget.max_wall_ms is deprecated and goes in the next release: use max_wall (seconds)",
            DeprecationWarning,
            stacklevel=2,
        )
        return None if self.max_wall is None else self.max_wall * 1000


@attrs.frozen(kw_only=True)
class HandleView:
    """A read-only snapshot of one handle."""

    id: str
    name: str
    state: str
    parent: str | None
    children: list[str]
    turns: int
    tokens: int
    tool_calls: int
    inbox: int
    pending: Request | None = None
    #: US dollars this handle spent, its descendants' included (as ``tokens``); ``None``
    #: when it was never charged a priced call.
    cost: float | None = None
    #: Of the model calls in ``tokens``, those whose server reported no usage (counted 0):
    #: with any, ``tokens`` and ``cost`` are a lower bound.
    unmeasured_calls: int = 0


@attrs.frozen(kw_only=True)
class Divergence:
    """Where a replayed run first did something other than its record (``ReplayReport``).

    ``handle`` is the recorded handle's id and ``step`` that handle's model step (numbered
    from 1 across its turns). ``kind`` says what differed: ``"request"`` (the request sent
    to the model), ``"tool_result"`` (a tool's ``{"output", "is_error"}``, or a suspension
    the record does not have), ``"delegation"`` (a ``task`` call's ``{"agent", "prompt"}``
    with no recorded child to replay, or a target no longer in the team) or ``"end"`` (a
    step the record does not have, or a record that goes on after the replay ended).
    ``field`` is the first differing field as a path (``messages[0].content``); ``recorded``
    and ``actual`` are plain JSON data; ``call_id`` names the call of a ``tool_result`` or
    a ``delegation``."""

    handle: str
    step: int
    kind: str
    field: str | None = None
    recorded: Any = None
    actual: Any = None
    call_id: str | None = None

    def __str__(self) -> str:
        where = f" at {self.field}" if self.field else ""
        call = f" (call {self.call_id})" if self.call_id else ""
        return f"{self.handle} step {self.step}: {self.kind} differs{where}{call}"


@attrs.frozen(kw_only=True)
class ReplayReport:
    """What ``Runtime.replay`` found: whether the run, replayed with today's code and its
    journal answering every model step, did what it did (``same``), or where it first did
    not (``divergence``). ``result`` is the run's last result as recorded; ``tokens`` and
    ``cost`` its recorded totals, descendants' included; ``steps`` the model steps served,
    at every depth."""

    run: str
    same: bool
    divergence: Divergence | None
    result: AgentResult | None
    tokens: int
    cost: float | None
    steps: int

    def __str__(self) -> str:
        if self.divergence is None:
            return f"{self.run}: same ({self.steps} steps replayed)"
        return f"{self.run}: diverged at {self.divergence}"


@attrs.frozen(kw_only=True)
class Event:
    """One thing that happened in a run, as a stream yields it (``Runtime.stream``).

    ``kind`` is one of ``text``, ``message``, ``tool_call``, ``tool_result``, ``spawn``,
    ``state``, ``pending``, ``retry``, ``result``; ``handle`` is the handle's id (``None``
    for a ``Client`` run); ``id`` orders the events of a tree: a durable event's id is its
    serial (``"42"``), a ``text`` event's is ``"<serial before it>.<k>"`` (``"42.3"``).
    """

    kind: str
    handle: str | None
    id: str
    data: dict[str, Any]


@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call the model asked for; ``arguments`` is raw (a dict or a JSON string)."""

    id: str
    name: str
    arguments: Any


@attrs.frozen(kw_only=True)
class ModelReply:
    """One model reply, decoded from any wire style.

    ``message`` is the assistant message in the style's own shape, normalised so it is
    valid to send back; ``truncated`` says the server cut the reply at its output limit;
    ``usage_missing`` that the reply carried no usage at all.
    """

    message: dict[str, Any]
    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    #: Why the model stopped, as the wire says it ("stop", "tool_calls", "end_turn"...).
    finish_reason: str | None = None
    truncated: bool = False
    usage_missing: bool = False

    @property
    def empty(self) -> bool:
        """No text and no tool calls: nothing worth keeping in a transcript."""
        return not self.text and not self.tool_calls


def make_request(
    kind: str,
    prompt: str,
    *,
    url: str | None = None,
    data: dict[str, Any] | None = None,
    expires_at: str | None = None,
) -> Request:
    """Build a ``Request`` with a fresh unique id."""
    return Request(id=f"req_{uuid.uuid4().hex}", kind=kind, prompt=prompt, url=url, data=data, expires_at=expires_at)


def make_answer(request_id: str, ok: bool, data: Any = None, reason: str | None = None) -> Answer:
    """Build the ``Answer`` to the request with ``request_id``."""
    return Answer(id=request_id, ok=ok, data=data, reason=reason)
