"""What this package's MCP server serves, and how a call of it runs: a ``Tool``, or an agent
(a team is served by its lead) run on a runtime (CONTRACT §18b "Server").

A call either finishes (a ``ToolResult``) or rests on a ``Request`` a person must answer: a
tool's suspension, or an agent's run that ended ``pending`` (its handle stays suspended in
the runtime, durable with a state). The answer continues it: a tool runs again with
``ctx.answer`` (§10; a declined answer is not run again unless the tool hears declines), an
agent's run is resumed on whichever process holds the answer.

A suspended run is known to the client only by a public id bound to the caller's principal
(the served layer's bindings, in the runtime's state when it has one, §20): another
principal's retry finds nothing, and no handle id leaves the server.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

import attrs

from ..data import AgentResult, Answer, Request, ToolResult
from ..errors import ConfigError, UnknownRequest
from .. import Tool, ToolContext
from .._serve import bindings_of
from .._tools.tools import hears_declines

if TYPE_CHECKING:
    from .. import Agent, Runtime

log = logging.getLogger("toolnexus")

#: The served layer's name for the runs this server binds to a principal.
SURFACE = "mcp"
#: What ``exposed`` may hold: tools, level-1 agents, or names of the runtime's agents.
ExposedLike = Union["Tool", "Agent", str]
#: The runtime agents run on: one, or what gives it on first use (``toolnexus.django.runtime``).
RuntimeLike = Union["Runtime", Callable[[], "Runtime"]]
PROMPT_SCHEMA = {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}


class Stale(Exception):
    """The answer continues nothing: the request is no longer open (answered already)."""


@attrs.frozen
class Outcome:
    """A call's end: its ``result``, or the ``asked`` request it rests on (an agent's with
    ``run``, the public id of its suspended run)."""

    result: ToolResult | None = None
    asked: Request | None = None
    run: str | None = None


class Exposed:
    """One MCP tool of the server (see the module docs)."""

    def __init__(self, name: str, input_schema: dict[str, Any]) -> None:
        self.name = name
        self.input_schema = input_schema

    @property
    def description(self) -> str:
        raise NotImplementedError

    def listed(self) -> dict[str, Any]:
        """Its entry in ``tools/list``."""
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema}

    def tree(self) -> str | None:
        """The id of the tree its runs live in (None: it has no runs)."""
        return None

    def call(self, arguments: dict[str, Any], key: str, principal: str) -> Outcome:
        """Run it on ``arguments`` for ``principal`` (``key``: the call's idempotency key,
        kept for its retries)."""
        raise NotImplementedError

    def answer(self, arguments: dict[str, Any], request: Request, answer: Answer, asked: Asked) -> Outcome:
        """Continue the call that asked ``request`` with ``answer``.

        Raises:
            Stale: the request is no longer open (or its run is not this principal's).
        """
        raise NotImplementedError

    def let_go(self, run: str, principal: str) -> None:
        """Give up a suspended run nobody can answer (a client that cannot be asked)."""


@attrs.frozen
class Asked:
    """What the sealed requestState said of the call being continued."""

    key: str
    principal: str
    run: str | None = None


class ExposedTool(Exposed):
    """A ``Tool``: a suspension is its ``Request``; the answer runs it again (§10)."""

    def __init__(self, tool: Tool) -> None:
        super().__init__(tool.name, tool.input_schema)
        self.tool = tool

    @property
    def description(self) -> str:
        return self.tool.description

    def call(self, arguments: dict[str, Any], key: str, principal: str) -> Outcome:
        return _outcome(self._run(arguments, ToolContext(idempotency_key=key)))

    def answer(self, arguments: dict[str, Any], request: Request, answer: Answer, asked: Asked) -> Outcome:
        if not answer.ok and not hears_declines(request):
            return Outcome(result=ToolResult(output=f"{answer.reason or 'declined'}: {request.prompt}", is_error=True))
        ctx = ToolContext(answer=answer, request=request, idempotency_key=asked.key)
        return _outcome(self._run(arguments, ctx))

    def _run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        from .. import Toolkit  # validation of the arguments and a raising tool, as in a run

        return Toolkit([self.tool]).execute(self.tool.name, arguments, ctx)


class ExposedAgent(Exposed):
    """An agent of ``runtime``, called with ``{"prompt": ...}``; its run's final text is the
    result (``isError`` unless it is ``done``). A runtime given as a callable is asked for
    on first use (in each worker process, after it forked)."""

    def __init__(self, runtime: RuntimeLike, name: str) -> None:
        super().__init__(name, dict(PROMPT_SCHEMA))
        self._runtime = runtime
        if not callable(runtime):
            runtime.definition(name)  # an agent the runtime does not know is refused now

    @property
    def runtime(self) -> Runtime:
        found = self._runtime
        return found() if callable(found) else found

    @property
    def description(self) -> str:
        return self.runtime.definition(self.name).does

    def tree(self) -> str | None:
        # A friend's read: ``Runtime`` has no public name for the id of its tree in its store.
        return str(self.runtime._tree.store.runtime_id)

    def call(self, arguments: dict[str, Any], key: str, principal: str) -> Outcome:
        prompt = arguments.get("prompt")
        if not isinstance(prompt, str):
            return Outcome(result=ToolResult(output=f"{self.name} needs a prompt (a string)", is_error=True))
        result = self.runtime.run_agent(self.name, prompt)  # closed unless pending
        if result.status == "pending" and result.pending is not None:
            bound = bindings_of(self.runtime).bind(SURFACE, principal, result.handle_id)
            assert bound is not None  # a random id is never taken
            return Outcome(asked=result.pending, run=bound.id)
        return _agent_outcome(result)

    def answer(self, arguments: dict[str, Any], request: Request, answer: Answer, asked: Asked) -> Outcome:
        bindings = bindings_of(self.runtime)
        bound = bindings.get(SURFACE, asked.principal, asked.run) if asked.run is not None else None
        if bound is None:
            raise Stale(f"no run of {self.name} of this caller waits on request {request.id}")
        try:
            self.runtime.resume(answer)
        except UnknownRequest as exc:
            raise Stale(str(exc)) from None
        result = self.runtime.wait(bound.handle)
        if result.status == "pending" and result.pending is not None:
            return Outcome(asked=result.pending, run=bound.id)
        self._close(bound.handle)
        bindings.delete(bound)
        return _agent_outcome(result)

    def let_go(self, run: str, principal: str) -> None:
        bindings = bindings_of(self.runtime)
        bound = bindings.get(SURFACE, principal, run)
        if bound is not None:
            self._close(bound.handle)
            bindings.delete(bound)

    def _close(self, handle: str) -> None:
        try:
            self.runtime.close(handle)
        except Exception:  # gone already: nothing to let go
            log.debug("mcp: closing the run %s failed", handle, exc_info=True)


def _agent_outcome(result: AgentResult) -> Outcome:
    if result.status == "done":
        return Outcome(result=ToolResult(output=result.text))
    return Outcome(result=ToolResult(output=f"[{result.status}] {result.text}", is_error=True))


def _outcome(result: ToolResult) -> Outcome:
    return Outcome(asked=result.pending) if result.pending is not None else Outcome(result=result)


def exposed_tools(exposed: Iterable[ExposedLike], runtime: RuntimeLike | None) -> dict[str, Exposed]:
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
