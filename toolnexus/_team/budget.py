"""Budgets: every rule and the message that names it.

The carve at spawn, the refusals of a spawn, the concurrency cap (and the root's
exemption), the limits checked before turns, model calls and spawns. Pure functions over
``Budget`` values and ledger numbers, so the rules read in one place.
"""

from __future__ import annotations

import functools
from typing import Callable, Literal, TypeVar

import attrs

from ..data import Budget

DEFAULT_MAX_TURNS = 6
DEFAULT_MAX_CONCURRENT = 8
DEFAULT_MAX_DEPTH = 3

ROOT_BUDGET = Budget(max_depth=DEFAULT_MAX_DEPTH)
_UNSET = Budget()


def merge(base: Budget | None, override: Budget | None) -> Budget:
    """Field by field, ``override`` wins where it is set (a spawn's budget over the def's)."""
    base = base or _UNSET
    if override is None:
        return base
    changes = {f.name: getattr(override, f.name) for f in attrs.fields(Budget) if getattr(override, f.name) is not None}
    return attrs.evolve(base, **changes)


N = TypeVar("N", int, float)


def _least(*values: N | None) -> N | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def carve(own: Budget, parent: Budget, parent_tokens: int, parent_tool_calls: int, parent_cost: float = 0.0) -> Budget:
    """A child's effective budget: ``min(own, parent's remaining)`` for every shared pool
    (tokens, tool calls, money), so a child of a capped parent is always capped.

    ``max_children`` and ``max_concurrent`` are the child's own caps on its own children;
    ``max_depth`` is inherited when the child sets none.
    """
    tokens_left = max(0, parent.max_tokens - parent_tokens) if parent.max_tokens is not None else None
    calls_left = max(0, parent.max_tool_calls - parent_tool_calls) if parent.max_tool_calls is not None else None
    cost_left = max(0.0, parent.max_cost - parent_cost) if parent.max_cost is not None else None
    return _carved(own, parent, tokens_left, calls_left, cost_left)


@functools.lru_cache(maxsize=256)
def _carved(
    own: Budget, parent: Budget, tokens_left: int | None, calls_left: int | None, cost_left: float | None
) -> Budget:
    """``carve`` once the parent's pools are reduced to what is left: budgets are frozen
    values, so a spawn like the last one (the common case) reuses its result."""
    return Budget(
        max_turns=_least(own.max_turns, parent.max_turns),
        max_tokens=_least(own.max_tokens, tokens_left),
        max_tool_calls=_least(own.max_tool_calls, calls_left),
        max_wall=_least(own.max_wall, parent.max_wall),
        max_children=own.max_children,
        max_concurrent=own.max_concurrent,
        max_depth=own.max_depth if own.max_depth is not None else parent.max_depth,
        max_cost=_least(own.max_cost, cost_left),
    )


def has_pool(budget: Budget) -> bool:
    """Whether ``budget`` caps a shared pool (tokens, tool calls, money), so that a spent
    ledger could stop a spawn or a wake."""
    return budget.max_tokens is not None or budget.max_tool_calls is not None or budget.max_cost is not None


def pool_limit(budget: Budget, tokens: int, tool_calls: int, cost: float | None = None) -> str | None:
    """The name of the spent pool, if any: ``maxTokens``, ``maxToolCalls`` or ``maxCost``."""
    if budget.max_tokens is not None and tokens >= budget.max_tokens:
        return "maxTokens"
    if budget.max_tool_calls is not None and tool_calls >= budget.max_tool_calls:
        return "maxToolCalls"
    if budget.max_cost is not None and (cost or 0.0) >= budget.max_cost:
        return "maxCost"
    return None


def may_fly(cap: float, spent: float, largest: float | None, flying: int) -> bool:
    """Whether one more model call may start under a money cap (not reached yet) while
    ``flying`` calls already count against it.

    A call's cost is known only once its reply is in, so each call in flight is reckoned
    at ``largest``, the most one call charged to that ledger has cost. A call may start
    alone, or when the calls in flight, at that reckoning, cannot take the ledger past the
    cap. The cap is then passed by at most one call (one costing no more than ``largest``),
    however many handles spend under it at once. Until a first call has been charged
    (``largest`` unknown) calls under the cap go one at a time.
    """
    if flying == 0:
        return True
    return largest is not None and spent + flying * largest <= cap


def max_turns(budget: Budget) -> int:
    return budget.max_turns if budget.max_turns is not None else DEFAULT_MAX_TURNS


def max_concurrent(budget: Budget) -> int | None:
    return budget.max_concurrent if budget.max_concurrent is not None else DEFAULT_MAX_CONCURRENT


def max_depth(budget: Budget) -> int:
    return budget.max_depth if budget.max_depth is not None else DEFAULT_MAX_DEPTH


def slot_free(parent: Budget, take_slot: Callable[[int | None], bool], *, root: bool) -> bool:
    """Whether a child's turn may start now under its parent's ``max_concurrent``, taking
    the slot when it may. The root caps nothing: its children's turns take no slot."""
    return root or take_slot(max_concurrent(parent))


# --- the refusals and limits, each with the message that names it ---------------------------

#: The limits a run can reach, as ``AgentResult.limit``/``RunResult.limit`` name them.
Limit = Literal["maxTurns", "maxTokens", "maxToolCalls", "maxWallMs", "maxCost"]

LIMIT_TEXT: dict[str, str] = {
    "maxTurns": "turn limit reached",
    "maxTokens": "budget exhausted: token pool spent",
    "maxToolCalls": "budget exhausted: tool-call pool spent",
    "maxWallMs": "wall-clock limit reached",
    "maxCost": "budget exhausted: money cap reached",
}


def spawn_refusal(parent: Budget, *, parent_id: str, accepting: bool, children: int, depth: int) -> str | None:
    """Why ``parent`` may not have another child now (its message names the cap), or None.
    ``depth`` is the parent's own depth."""
    if not accepting:
        return f"closed: {parent_id} does not accept new children"
    cap = parent.max_children
    if cap is not None and children >= cap:
        return f"maxChildren: {parent_id} already has {cap} children"
    if depth + 1 > max_depth(parent):
        return f"maxDepth: a child of {parent_id} would be at depth {depth + 1} (max {max_depth(parent)})"
    return None


def exhausted(limit: str, handle_id: str) -> str:
    """A spawn refused because a pool on the chain is spent."""
    return f"budget exhausted: {limit} of {handle_id} or an ancestor is spent"


def on_chain(limit: str, handle_id: str) -> str:
    """A turn not started because a pool on its ancestor chain is spent."""
    return f"{LIMIT_TEXT[limit]} on the ancestor chain of {handle_id}"


def unpriced(agent: str, model: str) -> str:
    """A money cap that applies to an agent whose model has no price (a ``ConfigError``)."""
    return f"maxCost applies to agent {agent!r}, but its model {model!r} has no price: add {model!r} to prices="


def turn_limit(budget: Budget, tokens: int, tool_calls: int, elapsed_s: float, cost: float | None = None) -> str | None:
    """Checked before every model call of a turn: its own carved pools, then its wall clock
    (the money caps of its ancestors are checked as the call starts, see ``may_fly``)."""
    spent = pool_limit(budget, tokens, tool_calls, cost)
    if spent is None and budget.max_wall is not None and elapsed_s >= budget.max_wall:
        return "maxWallMs"
    return spent
