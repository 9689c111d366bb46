"""What this package's MCP server serves, and how a call of it runs: a ``Tool``, or an agent
(a team is served by its lead) run on a runtime (CONTRACT §18b "Server").

A call either finishes (a ``ToolResult``) or rests on a ``Request`` a person must answer: a
tool's suspension, or an agent's run that ended ``pending`` (its handle stays suspended in
the runtime, durable with a state). The answer continues it: a tool runs again with
``ctx.answer`` (§10; a declined answer is not run again unless the tool hears declines), an
agent's run is resumed on whichever process holds the answer.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable, Union

import attrs

from ..data import AgentResult, Answer, Request, ToolResult
from ..errors import ConfigError, UnknownRequest
from .. import Tool, ToolContext
from .._tools.tools import hears_declines

if TYPE_CHECKING:
    from .. import Agent, Runtime

log = logging.getLogger("toolnexus")

#: What ``exposed`` may hold: tools, level-1 agents, or names of the runtime's agents.
ExposedLike = Union["Tool", "Agent", str]
PROMPT_SCHEMA = {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}


class Stale(Exception):
    """The answer continues nothing: the request is no longer open (answered already)."""


@attrs.frozen
class Outcome:
    """A call's end: its ``result``, or the ``asked`` request it rests on (an agent's with
    the ``handle`` of its suspended run)."""

    result: ToolResult | None = None
    asked: Request | None = None
    handle: str | None = None


class Exposed:
    """One MCP tool of the server (see the module docs)."""

    def __init__(self, name: str, description: str, input_schema: dict[str, Any]) -> None:
        self.name = name
        self.description = description
        self.input_schema = input_schema

    def listed(self) -> dict[str, Any]:
        """Its entry in ``tools/list``."""
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema}

    def call(self, arguments: dict[str, Any], key: str) -> Outcome:
        """Run it on ``arguments`` (``key``: the call's idempotency key, kept for its retries)."""
        raise NotImplementedError

    def answer(
        self, arguments: dict[str, Any], request: Request, answer: Answer, handle: str | None, key: str
    ) -> Outcome:
        """Continue the call that asked ``request`` with ``answer`` (an agent's run is ``handle``).

        Raises:
            Stale: the request is no longer open.
        """
        raise NotImplementedError


class ExposedTool(Exposed):
    """A ``Tool``: a suspension is its ``Request``; the answer runs it again (§10)."""

    def __init__(self, tool: Tool) -> None:
        super().__init__(tool.name, tool.description, tool.input_schema)
        self.tool = tool

    def call(self, arguments: dict[str, Any], key: str) -> Outcome:
        return _outcome(self._run(arguments, ToolContext(idempotency_key=key)))

    def answer(
        self, arguments: dict[str, Any], request: Request, answer: Answer, handle: str | None, key: str
    ) -> Outcome:
        if not answer.ok and not hears_declines(request):
            return Outcome(result=ToolResult(output=f"{answer.reason or 'declined'}: {request.prompt}", is_error=True))
        return _outcome(self._run(arguments, ToolContext(answer=answer, request=request, idempotency_key=key)))

    def _run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        from .. import Toolkit  # validation of the arguments and a raising tool, as in a run

        return Toolkit([self.tool]).execute(self.tool.name, arguments, ctx)


class ExposedAgent(Exposed):
    """An agent of ``runtime``, called with ``{"prompt": ...}``; its run's final text is the
    result (``isError`` unless it is ``done``)."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        definition = runtime.definition(name)
        super().__init__(name, definition.does, dict(PROMPT_SCHEMA))
        self.runtime = runtime

    def call(self, arguments: dict[str, Any], key: str) -> Outcome:
        prompt = arguments.get("prompt")
        if not isinstance(prompt, str):
            return Outcome(result=ToolResult(output=f"{self.name} needs a prompt (a string)", is_error=True))
        return self._ended(self.runtime.run_agent(self.name, prompt))  # closed unless pending

    def answer(
        self, arguments: dict[str, Any], request: Request, answer: Answer, handle: str | None, key: str
    ) -> Outcome:
        if handle is None:
            raise Stale(f"no run of {self.name} waits on request {request.id}")
        try:
            self.runtime.resume(answer)
        except UnknownRequest as exc:
            raise Stale(str(exc)) from None
        result = self.runtime.wait(handle)
        if result.status != "pending":
            self.let_go(handle)
        return self._ended(result)

    def _ended(self, result: AgentResult) -> Outcome:
        if result.status == "pending" and result.pending is not None:
            return Outcome(asked=result.pending, handle=result.handle_id)
        if result.status == "done":
            return Outcome(result=ToolResult(output=result.text))
        return Outcome(result=ToolResult(output=f"[{result.status}] {result.text}", is_error=True))

    def let_go(self, handle: str) -> None:
        """Close a run that is over, or suspended with nobody to answer it."""
        try:
            self.runtime.close(handle)
        except Exception:  # gone already: nothing to let go
            log.debug("mcp: closing the unanswerable run %s failed", handle, exc_info=True)


def _outcome(result: ToolResult) -> Outcome:
    return Outcome(asked=result.pending) if result.pending is not None else Outcome(result=result)


def exposed_tools(exposed: Iterable[ExposedLike], runtime: Runtime | None) -> dict[str, Exposed]:
    """The served tools by name, in the order given.

    Raises:
        ConfigError: nothing to serve, an entry that is none of the three, an agent name
            without a runtime (or not in its registry), or two entries of one name.
    """
    from .. import Agent

    served: dict[str, Exposed] = {}
    for item in exposed:
        if isinstance(item, Tool):
            entry: Exposed = ExposedTool(item)
        elif isinstance(item, (Agent, str)):
            name = item.name if isinstance(item, Agent) else item
            if runtime is None:
                raise ConfigError(f"mcp server: agent {name!r} needs a runtime to run on")
            try:
                entry = ExposedAgent(runtime, name)
            except Exception as exc:
                raise ConfigError(f"mcp server: {exc}") from None
        else:
            raise ConfigError(f"mcp server: expose Tools, agents or agent names, not {type(item).__name__}")
        if entry.name in served:
            raise ConfigError(f"mcp server: two exposed tools are named {entry.name!r}")
        served[entry.name] = entry
    if not served:
        raise ConfigError("mcp server: nothing is exposed")
    return served
