"""The model-facing ``task`` tool and ``agent_tool``: delegation as an ordinary tool call."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .data import AgentResult, ToolResult
from .errors import SpawnError
from .tools import Tool, ToolContext, failure

if TYPE_CHECKING:
    from .handle import Handle
    from .runtime import Runtime

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
    return {"type": "object", "properties": {"agent": agent, "prompt": dict(_PROMPT_PROPERTY)}, "required": ["agent", "prompt"]}


def task_description(team: dict[str, str]) -> str:
    """The description the model sees: the caller's own team only, sorted by name."""
    listing = "; ".join(f"{name}: {does}" for name, does in sorted(team.items()))
    return f"{TASK_DESCRIPTION} It runs on a fresh transcript and returns its final answer. Available agents — {listing}"


def _does(rt: Runtime, name: str) -> str | None:
    try:
        return rt.definition(name).does
    except SpawnError:
        return None


def task_tool(rt: Runtime, parent: Handle, serial: int) -> Tool:
    """The ``task`` tool for one turn (``serial``) of ``parent``."""
    members = parent.definition.team_names
    # A team name missing from the registry is still a member: calling it gives an
    # ``unknown agent`` error result (from spawn), not a failed turn.
    known = {name: _does(rt, name) for name in members}
    team = {name: does for name, does in known.items() if does is not None}

    def refusal(args: dict[str, Any]) -> ToolResult | None:
        agent, prompt = args.get("agent"), args.get("prompt")
        if not isinstance(agent, str) or not agent or not isinstance(prompt, str):
            return failure("invalid arguments: task needs a string 'agent' and a string 'prompt'")
        if agent not in members:
            return failure(f"{agent!r} is not in this agent's team; the team is: {', '.join(sorted(members))}")
        return None

    def prepare(args: dict[str, Any], ctx: ToolContext) -> Any:
        # In call order: spawn and wake (or find) the child, so ids follow call order.
        if refusal(args) is None:
            return rt.task_child(parent, serial, args["agent"], args["prompt"], ctx.call_id or "")
        return None

    def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        refused = refusal(args)
        if refused is not None:
            return refused
        return rt.delegate(parent, serial, args["agent"], args["prompt"], ctx)

    # A task call in doubt after a crash is safe to issue again: it reattaches to its child.
    return Tool("task", task_description(team), task_schema(list(members)), execute, source="agent", prepare=prepare, retry="safe")


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


def agent_tool(rt: Runtime, name: str) -> Tool:
    """The agent ``name`` as a plain ``{prompt}`` tool: spawn, wake, wait, close.

    A run that ends pending suspends the calling tool with the agent's request; the retry
    that carries the Answer resumes that same agent rather than starting a new one.
    """
    definition = rt.definition(name)
    lock = threading.Lock()  # guards: parked
    parked: dict[str, str] = {}  # request id -> the handle waiting on it

    def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        prompt = args.get("prompt")
        if not isinstance(prompt, str):
            return failure("invalid arguments: a string 'prompt' is required")
        with lock:
            waiting = parked.pop(ctx.answer.id, None) if ctx.answer is not None else None
        if waiting is not None:
            rt.resume(ctx.answer)  # type: ignore[arg-type]
            result = rt.wait(waiting)
            if result.status != "pending":
                rt.close(waiting)
        else:
            result = rt.run_agent(name, prompt)
        if result.status == "pending" and result.pending is not None:
            with lock:
                parked[result.pending.id] = result.handle_id
        return result_as_tool_output(name, result)

    schema = {"type": "object", "properties": {"prompt": {"type": "string", "description": "What to do"}}, "required": ["prompt"]}
    return Tool(name, definition.does, schema, execute, source="agent")
