"""The level-1 surface: ``agent()``, ``Agent.run``, ``Agent.as_tool`` (definitions live in ``agentdef``)."""

from __future__ import annotations

import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable

import attrs

from .agentdef import AgentDef
from ..data import AgentResult, Answer, Budget, Request
from ..hooks import HooksLike
from .pool import DEFAULT_WORKERS, WorkerPool
from .port import port_of
from .runtime import Runtime
from .task import agent_tool
from .._tools.tools import Tool

if TYPE_CHECKING:
    from .._events.streams import RunStream


class Agent:
    """A level-1 agent: a definition plus the team it can delegate to."""

    def __init__(self, definition: AgentDef) -> None:
        self.definition = definition
        self._named: tuple[AgentDef, AgentDef] | None = None  # (definition, its registry form)
        self._kept = _Kept()
        # Dropping the agent lets its kept connections and threads go (no reference back to it).
        self._finalizer = weakref.finalize(self, self._kept.release_all)

    @property
    def name(self) -> str:
        """The agent's name (its registry name, and a segment of its handles' ids)."""
        return self.definition.name

    def __repr__(self) -> str:
        return f"Agent({self.definition.name!r}, team={list(self.definition.team_names)!r})"

    @property
    def registry(self) -> dict[str, AgentDef]:
        """This agent plus the transitive closure of its team, by name."""
        found: dict[str, AgentDef] = {}
        stack: list[Agent] = [self]
        while stack:
            current = stack.pop()
            if current.name in found:
                continue
            definition = current.definition
            found[current.name] = current._by_names()
            stack.extend(member for member in definition.team if isinstance(member, Agent))
        return found

    def _by_names(self) -> AgentDef:
        """The definition with its team as names, as a registry holds it: made again only
        when ``definition`` or a member's name changed (a fresh runtime on every ``run``
        reuses it)."""
        definition = self.definition
        names = definition.team_names
        made = self._named
        if made is None or made[0] is not definition or made[1].team != names:
            made = self._named = (definition, attrs.evolve(definition, team=names))
        return made[1]

    def runtime(self, **runtime_options: Any) -> Runtime:
        """A fresh runtime of this agent's registry (``Runtime(agent.registry, ...)``).

        Args:
            **runtime_options: ``Runtime``'s options.

        Returns:
            The runtime; closing its root ends it.

        Raises:
            ConfigError: the options are refused, as ``Runtime`` refuses them.
        """
        return Runtime(self.registry, **runtime_options)

    def _borrowing_runtime(self, runtime_options: dict[str, Any]) -> Runtime:
        """A fresh runtime on the worker threads and model connections this agent keeps."""
        rt = self.runtime(**self._kept.lend_pool(runtime_options))
        self._kept.keep(port_of(rt).keep_connections())
        return rt

    def run(self, prompt: str, *, timeout: float | None = None, **runtime_options: Any) -> AgentResult:
        """Run once in a fresh runtime. A pending result keeps the runtime open on
        ``result.runtime`` for ``resume``; otherwise the runtime is closed. The runtime
        borrows the agent's kept worker threads and model connections: ``close()`` ends them.

        Args:
            prompt: what the agent's turn starts from.
            timeout: seconds, as ``Runtime.run_agent``'s; ``None`` waits as long as it takes.
            **runtime_options: ``Runtime``'s options (``base_url``, ``model``, ``generate``,
                ``state``, ``prices``...).

        Returns:
            The run's ``AgentResult``, with ``runtime`` set to the runtime it ran on.

        Raises:
            ConfigError: the options are refused, as ``Runtime`` refuses them.
            StateError: the state failed while the run went on.
        """
        rt = self._borrowing_runtime(runtime_options)
        result = rt.run_agent(self.name, prompt, timeout=timeout)
        if result.status != "pending":
            rt.close(rt.root)
        return attrs.evolve(result, runtime=rt)

    def stream(self, prompt: str, *, timeout: float | None = None, **runtime_options: Any) -> RunStream:
        """``run`` as a stream (``Runtime.stream_agent`` in a fresh runtime): the team's
        events while it works. When it ends, ``stream.result`` carries ``.runtime`` as
        ``run``'s does (kept open for ``resume`` on a pending result, else closed);
        closing the stream early interrupts the run and closes the runtime.

        Args:
            prompt: what the agent's turn starts from.
            timeout: seconds; when they are up the stream ends with a ``timeout`` result.
            **runtime_options: ``Runtime``'s options.

        Returns:
            A ``RunStream`` of ``Event``.

        Raises:
            ConfigError: the options are refused, as ``Runtime`` refuses them.
        """
        rt = self._borrowing_runtime(runtime_options)

        def finished(result: Any) -> Any:
            if result is None or result.status != "pending":
                rt.close(rt.root)
            return attrs.evolve(result, runtime=rt) if result is not None else None

        try:
            return port_of(rt).stream_agent(self.name, prompt, timeout, finished)
        except BaseException:
            rt.close(rt.root)
            raise

    def close(self) -> None:
        """End the worker threads and close the connections this agent keeps between its
        runs (each ``run`` makes a fresh runtime that borrows them). A later ``run`` starts
        them again; closing twice is harmless."""
        self._kept.release_all(wait=True)

    def as_tool(self, **runtime_options: Any) -> Tool:
        """This agent as a plain ``{prompt}`` tool (``Runtime.agent_tool``), on a runtime of
        its own that the tool belongs to.

        The runtime is the tool's ``resource``: a runtime or ``Client`` given the tool
        closes it when it closes (ending its threads), as it closes an MCP server's;
        ``tool.resource.close()`` closes it otherwise.

        Args:
            **runtime_options: ``Runtime``'s options for the tool's runtime.

        Returns:
            The tool: each call runs the agent once under the runtime's root; a call that
            ends pending suspends with the agent's request, and the retry that carries the
            answer resumes that same run.

        Raises:
            ConfigError: the options are refused, as ``Runtime`` refuses them.
        """
        own = _OwnRuntime(functools.partial(self._borrowing_runtime, runtime_options))
        own.runtime()  # now: options a runtime refuses fail here, not at the first call
        return agent_tool(own.runtime, self.name, self.definition.does, resource=own)


class _OwnRuntime:
    """The runtime an ``as_tool`` tool runs on: closed (its root, so its threads end) by
    whichever owner of the tool closes first, and built again, on the agent's kept threads
    and connections, by the next call, as an MCP server connects again."""

    def __init__(self, build: Callable[[], Runtime]) -> None:
        self._build = build
        self._lock = threading.Lock()  # guards: _runtime
        self._runtime: Runtime | None = None

    def __repr__(self) -> str:
        return f"<the runtime of an agent tool: {self._runtime!r}>"

    def runtime(self) -> Runtime:
        with self._lock:
            if self._runtime is None:
                self._runtime = self._build()
            return self._runtime

    def close(self) -> None:
        with self._lock:
            rt, self._runtime = self._runtime, None
        if rt is not None:
            rt.close(rt.root)


class _Kept:
    """What an agent keeps across its runs: one hold per model endpoint on its pooled
    connections, and one worker pool per pool size."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _holds, _pools
        self._holds: dict[Any, Callable[[], None]] = {}
        self._pools: dict[int, WorkerPool] = {}

    def keep(self, hold: tuple[Any, Callable[[], None]] | None) -> None:
        if hold is None:
            return
        endpoint, release = hold
        with self._lock:
            if endpoint not in self._holds:
                self._holds[endpoint] = release
                return
        release()  # already kept

    def lend_pool(self, runtime_options: dict[str, Any]) -> dict[str, Any]:
        """``runtime_options`` with this agent's pool of their size, unless they run inline
        or bring a pool of their own."""
        if runtime_options.get("inline") or runtime_options.get("pool") is not None:
            return runtime_options
        options = dict(runtime_options)
        workers = options.pop("max_workers", None) or DEFAULT_WORKERS
        with self._lock:
            pool = self._pools.get(workers)
            if pool is None:
                pool = self._pools[workers] = WorkerPool(workers)
        options["pool"] = pool
        return options

    def release_all(self, *, wait: bool = False) -> None:
        with self._lock:
            holds, self._holds = list(self._holds.values()), {}
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close(wait=wait)
        for release in holds:
            release()


def agent(
    name: str,
    *,
    does: str,
    tools: Any = (),
    soul: str = "",
    team: Iterable[Any] = (),
    budget: Budget | None = None,
    model: str = "inherit",
    wait_for: Callable[[Request], Answer] | None = None,
    on_spawn: Callable[..., Any] | None = None,
    on_close: Callable[..., Any] | None = None,
    hooks: HooksLike = None,
    on_metric: Callable[[dict[str, Any]], Any] | None = None,
    output: Any = None,
    a2a: Any = None,
) -> Agent:
    """Define an agent (``AgentDef``'s fields), ready to ``run``.

    Args:
        name: its name, ``[A-Za-z0-9_-]+``.
        does: what it does, as its teammates' ``task`` tool describes it.
        tools: ``Tool``s or plain functions (a toolkit).
        soul: its system prompt.
        team: the agents it may delegate to, as ``Agent`` objects or registry names.
        budget: its own limits.
        model: its model; ``"inherit"`` uses the runtime's.
        wait_for: answers its requests itself (nearest interpreter first).
        on_spawn: called with each new handle of it.
        on_close: called with each handle of it and the reason when it closes.
        hooks: its own hooks, replacing the runtime's.
        on_metric: its own metric sink, replacing the runtime's.
        output: a type (attrs class, dataclass, ``TypedDict``, JSON Schema): its runs are typed.
        a2a: a remote A2A agent (the URL of its card, or ``toolnexus.a2a.Peer``): this agent
            is that agent, with no model, tools, team, soul or output of its own.

    Returns:
        The ``Agent``.

    Raises:
        ConfigError: a name that is not one, or a tool name its team or output needs.
    """
    return Agent(
        AgentDef(
            name,
            does,
            model=model,
            soul=soul,
            tools=tools,
            team=tuple(team),
            budget=budget,
            wait_for=wait_for,
            on_spawn=on_spawn,
            on_close=on_close,
            hooks=hooks,
            on_metric=on_metric,
            output=output,
            a2a=a2a,
        )
    )
