"""Toolkit: the set of tools one run offers, and the one place a tool call is executed."""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable, Iterable, Union, cast

import attrs

from ..data import ToolResult
from ..errors import ConfigError
from .tools import Tool, ToolContext, sanitize_name, tool as make_tool

log = logging.getLogger("toolnexus")

#: What a parameter that takes tools accepts: a ``Toolkit``, a ``Tool`` or a plain function
#: (made a tool with ``@tool``'s rules), or an iterable of those; ``None`` is no tools.
ToolsLike = Union["Toolkit", Tool, Callable[..., Any], Iterable[Union[Tool, Callable[..., Any]]], None]


def as_tool(item: Any) -> Tool:
    """A ``Tool`` as it is; a plain function as ``tool(item)``.

    Raises:
        ConfigError: ``item`` is neither (or the function's annotations have no schema).
    """
    if isinstance(item, Tool):
        return item
    if callable(item) and not isinstance(item, type):
        return make_tool(item)
    raise ConfigError(f"expected a Tool or a function, got {type(item).__name__}: {item!r}")


def as_tools(value: Any) -> list[Tool]:
    """Every tool in ``value`` (see ``ToolsLike``), in order."""
    if value is None:
        return []
    if isinstance(value, Toolkit):
        return value.tools()
    listed = type(value) is list or type(value) is tuple  # the common case: no ABC check
    if not listed and (isinstance(value, Tool) or (callable(value) and not isinstance(value, type))):
        return [as_tool(value)]
    if not listed and (isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable)):
        raise ConfigError(f"expected a Toolkit, a Tool, a function or a list of them, got {type(value).__name__}")
    items = cast("Iterable[Any]", value)  # a list or tuple, or any other iterable of tools
    return [tool for item in items for tool in (item.tools() if isinstance(item, Toolkit) else [as_tool(item)])]


def as_toolkit(value: Any) -> Toolkit:
    """``value`` when it is a ``Toolkit``; otherwise a new one of its tools (see ``ToolsLike``)."""
    return value if isinstance(value, Toolkit) else Toolkit(as_tools(value))


class Toolkit:
    """An ordered set of tools; on duplicate names the first one registered wins.

    ``Toolkit(tools)`` takes ``Tool`` objects or plain functions (made tools with the
    ``@tool`` rules), or a single one of them.
    """

    def __init__(self, tools: ToolsLike = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._schemas: dict[str, list[dict[str, Any]]] = {}  # per wire style, built once
        for item in as_tools(tools):
            self.register(item)

    def register(self, tool: Tool | Callable[..., Any]) -> bool:
        """Add ``tool`` (a ``Tool`` or a plain function); returns False (and keeps the
        first) when the name is taken."""
        tool = as_tool(tool)
        if tool.name in self._tools:
            return False
        self._tools[tool.name] = tool
        self._schemas = {}
        return True

    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def tool_names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name) or self._tools.get(sanitize_name(name))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def execute(self, name: str, args: Any, ctx: ToolContext | None = None) -> ToolResult:
        """Run one call; an unknown name, bad arguments or a raising tool become error results."""
        found = self.get(name)
        if found is None:
            known = ", ".join(self._tools) or "(none)"
            return ToolResult(output=f"unknown tool {name!r}; known tools: {known}", is_error=True)
        if not isinstance(args, dict):
            return ToolResult(
                output=f"invalid arguments for {found.name}: expected a JSON object, got {type(args).__name__}",
                is_error=True,
            )
        try:
            value = found.execute(args, ctx if ctx is not None else ToolContext())
        except Exception as exc:  # a tool's exception never escapes the loop
            log.debug("tool %s raised", found.name, exc_info=True)
            return ToolResult(output=f"tool {found.name} failed: {exc}", is_error=True)
        if isinstance(value, ToolResult):
            return value if isinstance(value.output, str) else attrs.evolve(value, output=str(value.output))
        return ToolResult(output=value if isinstance(value, str) else str(value))

    def prepare(self, name: str, args: dict[str, Any], ctx: ToolContext) -> None:
        """Run the tool's optional in-order first step; its value lands on ``ctx.prepared``.

        A failing prepare step is logged and forgotten: ``execute`` must work without it.
        """
        found = self.get(name)
        if found is None or found.prepare is None:
            return
        try:
            ctx.prepared = found.prepare(args, ctx)
        except Exception:
            log.debug("prepare step of %s raised; execute runs without it", found.name, exc_info=True)

    def to_openai(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.schemas("openai"))

    def to_anthropic(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.schemas("anthropic"))

    def schemas(self, style: str) -> list[dict[str, Any]]:
        """The tool list in ``style``'s wire shape (the style module renders each tool:
        ``TOOL_SHAPES``), built once per toolkit (do not mutate)."""
        cached = self._schemas.get(style)
        if cached is None:
            render = TOOL_SHAPES[style]
            cached = self._schemas[style] = [render(t) for t in self._tools.values()]
        return cached


#: A wire style's name -> how it renders one tool: each style module registers its own
#: when it is imported (``toolnexus.styles`` imports them all).
TOOL_SHAPES: dict[str, Callable[[Tool], dict[str, Any]]] = {}
