"""Budgets: the carve at spawn and the limit checks before turns, model calls and spawns.

Pure functions over ``Budget`` values and ledger numbers, so the rules read in one place.
"""

from __future__ import annotations

import attrs

from .data import Budget

DEFAULT_MAX_TURNS = 6
DEFAULT_MAX_CONCURRENT = 8
DEFAULT_MAX_DEPTH = 3

ROOT_BUDGET = Budget(max_depth=DEFAULT_MAX_DEPTH)


def merge(base: Budget | None, override: Budget | None) -> Budget:
    """Field by field, ``override`` wins where it is set (a spawn's budget over the def's)."""
    base = base or Budget()
    if override is None:
        return base
    changes = {f.name: getattr(override, f.name) for f in attrs.fields(Budget) if getattr(override, f.name) is not None}
    return attrs.evolve(base, **changes)


def _least(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def carve(own: Budget, parent: Budget, parent_tokens: int, parent_tool_calls: int) -> Budget:
    """A child's effective budget: ``min(own, parent's remaining)`` for every shared pool.

    ``max_children`` and ``max_concurrent`` are the child's own caps on its own children;
    ``max_depth`` is inherited when the child sets none.
    """
    tokens_left = max(0, parent.max_tokens - parent_tokens) if parent.max_tokens is not None else None
    calls_left = max(0, parent.max_tool_calls - parent_tool_calls) if parent.max_tool_calls is not None else None
    return Budget(
        max_turns=_least(own.max_turns, parent.max_turns),
        max_tokens=_least(own.max_tokens, tokens_left),
        max_tool_calls=_least(own.max_tool_calls, calls_left),
        max_wall_ms=_least(own.max_wall_ms, parent.max_wall_ms),
        max_children=own.max_children,
        max_concurrent=own.max_concurrent,
        max_depth=own.max_depth if own.max_depth is not None else parent.max_depth,
    )


def pool_limit(budget: Budget, tokens: int, tool_calls: int) -> str | None:
    """The name of the spent pool, if any: ``maxTokens`` or ``maxToolCalls``."""
    if budget.max_tokens is not None and tokens >= budget.max_tokens:
        return "maxTokens"
    if budget.max_tool_calls is not None and tool_calls >= budget.max_tool_calls:
        return "maxToolCalls"
    return None


def max_turns(budget: Budget) -> int:
    return budget.max_turns if budget.max_turns is not None else DEFAULT_MAX_TURNS


def max_concurrent(budget: Budget) -> int | None:
    return budget.max_concurrent if budget.max_concurrent is not None else DEFAULT_MAX_CONCURRENT


def max_depth(budget: Budget) -> int:
    return budget.max_depth if budget.max_depth is not None else DEFAULT_MAX_DEPTH
