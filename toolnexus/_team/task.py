"""Delegation: the model-facing ``task`` tool, its mechanics, and ``agent_tool``.

A ``task`` call is spawn, wake, wait and close fused, with the parent's reattachment
index keyed by ``(agent, prompt)`` within the turn that made the child: a repeated or
replayed call reattaches to that child (settled ⇒ its result; suspended ⇒ its request;
running ⇒ wait for it), except that a child which ended in failure is retried with a
fresh one. Written against ``Team``, the few runtime calls it needs (the runtime's
private port, ``port.RuntimePort``); ``agent_tool`` uses public verbs only.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Protocol

import attrs

from .agentdef import AgentDef
from ..data import AgentResult, Answer, HandleView, ToolResult
from ..errors import HandleClosed, SpawnError, UnknownHandle
from .._run.journal import RETRY_LATER
from .handle import SUSPENDED, Handle
from .._tools.tools import Tool, ToolContext, failure
from .tree import HandleTree
from .waiting import runnable

log = logging.getLogger("toolnexus")


class Team(Protocol):
    """The runtime calls delegation makes: a ``task`` call's child is made, waited for,
    resumed and closed through them (``port.RuntimePort`` has them)."""

    def definition(self, name: str) -> AgentDef: ...

    def inspect(self, h: Handle | str) -> HandleView: ...

    def spawn_woken(self, parent: Handle, agent: str, prompt: str, serial: int, call_id: str) -> Handle:
        """Spawn ``agent`` under ``parent``, remember it in the index for turn ``serial``
        and wake it on ``prompt``, as one unit of work; its turn waits for the caller."""
        ...

    def settled(self, child: Handle) -> AgentResult:
        """The child's next result, running its turn on this thread if nobody has."""
        ...

    def resume_below(self, answer: Answer, child: Handle) -> None:
        """Resume the handles suspended on ``answer`` from the asking one up to ``child``."""
        ...

    def close_child(self, child: Handle, *, force: bool) -> None:
        """Close a settled task child and its subtree."""
        ...

    def retry(self, h: Handle | str) -> None:
        """Admit a handle's failed last turn again, from its journal."""
        ...


class Verbs(Protocol):
    """The public verbs ``agent_tool`` drives (``Runtime`` has them)."""

    def run_agent(self, name: str, prompt: str, *, timeout: float | None = None) -> AgentResult: ...

    def resume(self, answer: Answer) -> None: ...

    def wait(self, h: Handle | str, timeout: float | None = None) -> AgentResult: ...

    def close(self, h: Handle | str, force: bool = False) -> None: ...


TASK_DESCRIPTION = "Delegate a subtask to an isolated subagent."

_AGENT_PROPERTY = {"type": "string", "description": "Team agent to delegate to"}
_PROMPT_PROPERTY = {"type": "string", "description": "The subtask prompt"}

TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"agent": _AGENT_PROPERTY, "prompt": _PROMPT_PROPERTY},
    "required": ["agent", "prompt"],
}


def task_schema(team: list[str]) -> dict[str, Any]:
    """``TASK_SCHEMA`` with the team listed as the ``agent`` property's ``enum``: small
    models pick a real teammate when the schema names them, and rarely otherwise."""
    agent = {**_AGENT_PROPERTY, "enum": sorted(team)}
    properties = {"agent": agent, "prompt": dict(_PROMPT_PROPERTY)}
    return {"type": "object", "properties": properties, "required": ["agent", "prompt"]}


def task_description(team: dict[str, str]) -> str:
    """The description the model sees: the caller's own team only, sorted by name."""
    listing = "; ".join(f"{name}: {does}" for name, does in sorted(team.items()))
    return (
        f"{TASK_DESCRIPTION} It runs on a fresh transcript and returns its final answer."
        f" Available agents — {listing}"
    )


class Delegation:
    """The mechanics behind every ``task`` call of one runtime's tree."""

    #: The runtime calls it makes, set once the runtime's port is built: the port is made
    #: of the parts (turns, scheduler) that are built with this delegation's hooks.
    team: Team

    def __init__(self, tree: HandleTree, submit: Callable[..., None]) -> None:
        self._tree = tree
        self._submit = submit

    def task_child(
        self, parent: Handle, serial: int, agent: str, prompt: str, call_id: str = ""
    ) -> Handle | ToolResult:
        """The child for one ``task`` call: reattached by key within the turn ``serial``,
        or spawned and woken. A child that ended ``error``, ``interrupted`` or ``timeout``
        is not reattached by another call: that repeated call is a retry and runs a fresh
        child, which the index then names (the same call, replayed after a resume or a
        crash, still reattaches). A refused spawn is an error result."""
        key = (agent, prompt)
        with parent.task_lock:
            with parent.lock:
                parent.sync()
                entry = parent.task_entry(key, serial)
            child = self._tree.get(entry.child) if entry is not None else None
            another_call = entry is not None and (not call_id or entry.call != call_id)
            if child is not None and another_call and _ended_in_failure(child):
                child = None
            if child is None:
                try:
                    return self.team.spawn_woken(parent, agent, prompt, serial, call_id)
                except (SpawnError, HandleClosed) as exc:
                    return failure(f"cannot delegate to {agent}: {exc}")
        self._tree.event("reattach", child.id, parent=parent.id, state=self.team.inspect(child).state)
        spawned = {"child": child.id, "agent": agent, "prompt": prompt}
        self._tree.store.events.emit(parent.id, "spawn", spawned, now=True)
        if _retryable(child):
            self.team.retry(child)  # the parent's turn is tried again: so is the child's
        return child

    def delegate(self, parent: Handle, serial: int, agent: str, prompt: str, ctx: ToolContext) -> ToolResult:
        """One ``task`` call: spawn, wake, wait and close fused, reattaching by key."""
        child = ctx.prepared
        if not isinstance(child, (Handle, ToolResult)):
            child = self.task_child(parent, serial, agent, prompt, ctx.call_id or "")
        if isinstance(child, ToolResult):
            return child
        result = self._child_result(child, ctx)
        output = result_as_tool_output(agent, result)
        named = {**(output.metadata or {}), "handle": child.id}  # which child answered: a replay replays it
        if result.status in ("error", "interrupted") and _retryable(child):
            # Kept open (it failed, or was interrupted to be continued): when the parent's
            # turn is tried again, this call reattaches and tries the child's turn again,
            # so the call's result is not journaled.
            return attrs.evolve(output, metadata={**named, RETRY_LATER: True})
        if result.status != "pending":
            self.team.close_child(child, force=False)
        return attrs.evolve(output, metadata=named)

    def _child_result(self, child: Handle, ctx: ToolContext) -> AgentResult:
        with child.lock:
            record = child.record
            answer_fits = ctx.answer is not None and record.pending is not None and ctx.answer.id == record.pending.id
            if record.state == SUSPENDED and not answer_fits:
                return record.result  # type: ignore[return-value]
        if answer_fits:
            self.team.resume_below(ctx.answer, child)  # type: ignore[arg-type]
        return self.team.settled(child)

    def children(self, handle: Handle, serial: int) -> list[Handle]:
        """The task children the turn ``serial`` of ``handle`` made."""
        with handle.task_lock:
            ids = handle.task_children(serial)
        found = []
        for child_id in ids:
            try:
                found.append(self._tree.get(child_id))
            except UnknownHandle:  # deleted from the state: nothing is left to hand over or close
                log.warning("%s: its task child %s is gone from the state", handle.id, child_id)
        return found

    def hand_over(self, handle: Handle, serial: int) -> None:
        """A ``task`` child is woken for its caller to run (caller-runs); if the turn ended
        before waiting on it (a failure, an interrupt), a worker runs it instead."""
        for child in self.children(handle, serial):
            with child.lock:
                job = child.turn.job if runnable(child) else None  # type: ignore[union-attr]
            if job is not None:
                self._submit(job)

    def retire(self, handle: Handle, serial: int, failed: bool) -> None:
        """A finished turn leaves no delegated child waiting: a child still suspended
        (its request was declined upstream) has its request cancelled and is closed, and
        so is a failed one, unless the turn failed too (both may be tried again)."""
        for child in self.children(handle, serial):
            with child.lock:
                failed_alone = not failed and child.record.failed is not None and child.accepting
                waiting = child.record.state == SUSPENDED or failed_alone
            if waiting:
                self.team.close_child(child, force=True)

    def task_tool(self, parent: Handle, serial: int) -> Tool:
        """The ``task`` tool for one turn (``serial``) of ``parent``."""
        return task_tool(self, self.team, parent, serial)


def _does(definition: Callable[[str], AgentDef], name: str) -> str | None:
    try:
        return definition(name).does
    except SpawnError:
        return None


def task_tool(delegation: Delegation, team: Team, parent: Handle, serial: int) -> Tool:
    """The ``task`` tool for one turn (``serial``) of ``parent``."""
    members = parent.definition.team_names

    def prepare(args: dict[str, Any], ctx: ToolContext) -> Any:
        # In call order: spawn and wake (or find) the child, so ids follow call order.
        if refusal(members, args) is None:
            return delegation.task_child(parent, serial, args["agent"], args["prompt"], ctx.call_id or "")
        return None

    def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        refused = refusal(members, args)
        if refused is not None:
            return refused
        return delegation.delegate(parent, serial, args["agent"], args["prompt"], ctx)

    # A task call in doubt after a crash is safe to issue again: it reattaches to its child.
    return delegating_tool(team.definition, members, execute, prepare=prepare, retry="safe")


def delegating_tool(
    definition: Callable[[str], AgentDef], members: Any, execute: Callable[..., ToolResult], **options: Any
) -> Tool:
    """The ``task`` tool a caller with the team ``members`` sees (a replay's too, whose
    requests must be the recorded ones), running ``execute``. A team name missing from the
    registry is still a member: calling it gives an ``unknown agent`` error result (from
    spawn), not a failed turn."""
    known = {name: _does(definition, name) for name in members}
    known_team = {name: does for name, does in known.items() if does is not None}
    description, schema = task_description(known_team), task_schema(list(members))
    return Tool("task", description, schema, execute, source="agent", **options)


def refusal(members: Any, args: dict[str, Any]) -> ToolResult | None:
    """Why a ``task`` call with ``args`` is refused before any child is made, or ``None``."""
    agent, prompt = args.get("agent"), args.get("prompt")
    if not isinstance(agent, str) or not agent or not isinstance(prompt, str):
        return failure("invalid arguments: task needs a string 'agent' and a string 'prompt'")
    if agent not in members:
        return failure(f"{agent!r} is not in this agent's team; the team is: {', '.join(sorted(members))}")
    return None


def result_as_tool_output(name: str, result: AgentResult) -> ToolResult:
    """A settled child's result as one tool message: its text, prefixed unless ``done``
    (a typed child's text is its value's JSON, and the value is ``metadata["output"]``)."""
    metadata: dict[str, Any] = {"agent": name, "turns": result.turns, "total_tokens": result.total_tokens}
    if result.status == "pending" and result.pending is not None:
        return ToolResult(output=result.pending.prompt, is_error=True, metadata={**metadata, "pending": result.pending})
    text = result.text if result.status == "done" else f"[{result.status}] {result.text}"
    if result.output is not None:  # a typed teammate: its value beside its JSON
        metadata["output"] = result.output
    return ToolResult(output=text, is_error=result.is_error, metadata=metadata)


def agent_tool(runtime: Callable[[], Verbs], name: str, does: str, *, resource: Any = None) -> Tool:
    """The agent ``name`` as a plain ``{prompt}`` tool: spawn, wake, wait, close, on the
    runtime ``runtime()`` returns at each call (``Runtime.agent_tool``: itself;
    ``Agent.as_tool``: its own, built again after its owner closed it).

    A run that ends pending suspends the calling tool with the agent's request; the retry
    that carries the Answer resumes that same agent (on the runtime it ran on) rather than
    starting a new one.
    """
    lock = threading.Lock()  # guards: parked
    parked: dict[str, tuple[Verbs, str]] = {}  # request id -> the runtime and handle waiting on it

    def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        prompt = args.get("prompt")
        if not isinstance(prompt, str):
            return failure("invalid arguments: a string 'prompt' is required")
        with lock:
            waiting = parked.pop(ctx.answer.id, None) if ctx.answer is not None else None
        if waiting is not None:
            rt, handle_id = waiting
            rt.resume(ctx.answer)  # type: ignore[arg-type]
            result = rt.wait(handle_id)
            if result.status != "pending":
                rt.close(handle_id)
        else:
            rt = runtime()
            result = rt.run_agent(name, prompt)
        if result.status == "pending" and result.pending is not None:
            with lock:
                parked[result.pending.id] = (rt, result.handle_id)
        return result_as_tool_output(name, result)

    schema = {
        "type": "object",
        "properties": {"prompt": {"type": "string", "description": "What to do"}},
        "required": ["prompt"],
    }
    return Tool(name, does, schema, execute, source="agent", resource=resource)


_RETRIED_STATUSES = ("error", "interrupted", "timeout")


def _ended_in_failure(child: Handle) -> bool:
    """Whether a task child settled on an outcome worth a retry rather than a reattach."""
    with child.lock:
        child.sync()
        record = child.record
        settled = not child.busy and record.state != SUSPENDED
        return settled and record.result is not None and record.result.status in _RETRIED_STATUSES


def _retryable(child: Handle) -> bool:
    """Whether the child's last turn failed and kept its journal for a retry."""
    with child.lock:
        child.sync()
        return child.record.failed is not None and not child.busy and child.accepting
