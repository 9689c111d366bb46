"""The shapes of ``hooks``: what each hook is called with and what it may return.

``hooks`` (on ``Client``, ``Runtime``, ``AgentDef`` and ``agent()``) is a dict of these
callables (``HookFunctions``) or any object with methods of these names; a missing hook
is simply not called. Every hook is called with keyword arguments.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, TypedDict, Union

import attrs

from .data import ToolResult


class BeforeLLM(Protocol):
    """Before each model call. Return ``{"messages": [...]}`` and/or ``{"tools": [...]}``
    to replace them (the new transcript is the working transcript from then on), or None."""

    def __call__(
        self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]], model: str, turn: int
    ) -> dict[str, Any] | None: ...


class AfterLLM(Protocol):
    """After each model call, with the assistant message as it enters the transcript."""

    def __call__(self, *, response: dict[str, Any], model: str, turn: int) -> None: ...


class BeforeTool(Protocol):
    """Before each tool call. Return ``{"result": ToolResult}`` to answer it without running
    the tool, ``{"args": {...}}`` to run it with other arguments, or None."""

    def __call__(self, *, name: str, args: dict[str, Any], id: str, turn: int) -> dict[str, Any] | None: ...


class AfterTool(Protocol):
    """After each tool call. Return ``{"result": ToolResult}`` to replace its result, or None."""

    def __call__(
        self, *, name: str, args: dict[str, Any], result: ToolResult, id: str, turn: int
    ) -> dict[str, Any] | None: ...


class HookFunctions(TypedDict, total=False):
    """``hooks`` as a dict; any subset of the four keys."""

    before_llm: BeforeLLM
    after_llm: AfterLLM
    before_tool: BeforeTool
    after_tool: AfterTool


#: What ``hooks=`` accepts: a ``HookFunctions`` dict, or an object with any of the four
#: methods (``before_llm``, ``after_llm``, ``before_tool``, ``after_tool``), or None.
HooksLike = Union[HookFunctions, object, None]

_HOOK_NAMES = ("before_llm", "after_llm", "before_tool", "after_tool")


@attrs.frozen
class Hooks:
    """The four optional hook callables, from an object with those methods or a dict."""

    before_llm: Callable[..., Any] | None = None
    after_llm: Callable[..., Any] | None = None
    before_tool: Callable[..., Any] | None = None
    after_tool: Callable[..., Any] | None = None

    @classmethod
    def of(cls, hooks: Any) -> Hooks:
        if hooks is None:
            return cls()
        if isinstance(hooks, Hooks):
            return hooks
        if isinstance(hooks, dict):
            unknown = set(hooks) - set(_HOOK_NAMES)
            if unknown:
                raise ValueError(f"unknown hook(s): {', '.join(sorted(unknown))}")
            return cls(**hooks)
        return cls(**{name: getattr(hooks, name, None) for name in _HOOK_NAMES})


__all__ = ["AfterLLM", "AfterTool", "BeforeLLM", "BeforeTool", "HookFunctions", "Hooks", "HooksLike"]
