"""A user's own code, as it would be written against the installed package: type-checked by
.ci/release-check under ``mypy --strict`` and pyright's strict mode against the wheel.

It is checked, not run; every public name it touches must keep its types for users. A
``type: ignore`` marks a line the checkers must find wrong: an ignore with nothing to ignore
is an error under both (a constructor that swallowed any keyword would hide the typo).
"""
# pyright: strict, reportUnnecessaryTypeIgnoreComment=true

from __future__ import annotations

from typing import Any

from toolnexus import (
    AgentDef,
    AgentResult,
    Budget,
    Client,
    Event,
    RunResult,
    Runtime,
    ToolContext,
    ToolnexusError,
    ToolResult,
    agent,
    make_answer,
    make_request,
    suspend,
    tool,
)
from toolnexus import mcp
from toolnexus.testing import ScriptedModel
from toolnexus.wire import from_json, to_json


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


@tool
def deploy(service: str, ctx: ToolContext) -> str | ToolResult:
    """Deploy a service (a person approves it first)."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Deploy {service}?"))
    return f"{service} deployed"


def model(request: dict[str, Any]) -> dict[str, Any]:
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    if not results:
        return {"tool_calls": [{"name": "word_count", "arguments": {"text": "to be or not to be"}}]}
    return {"content": f"There are {results[-1]} words."}


def a_client_run() -> tuple[str, int]:
    with Client(generate=model, model="stand-in", timeout=30.0) as client:
        result: RunResult = client.run("How many words?", [word_count])
        return result.text, result.usage.total_tokens


def a_team() -> str:
    researcher = agent("researcher", does="Finds the key facts")
    lead = agent("lead", does="Delegates", team=[researcher], budget=Budget(max_tokens=40_000, max_wall=60.0))
    result: AgentResult = lead.run("A paragraph", generate=model, model="stand-in")
    return result.status


def an_approval() -> str | None:
    scripted = ScriptedModel({"ops": [{"tool_calls": [{"name": "deploy", "arguments": {"service": "api"}}]}]})
    team = {"ops": AgentDef("ops", "Ships services", tools=[deploy])}
    with Runtime(team, generate=scripted, shutdown_timeout=2.0) as rt:
        result = rt.run_agent("ops", "Ship api v2")
        if result.pending is not None:
            rt.resume(make_answer(result.pending.id, True))
            return rt.wait(result.handle_id, timeout=10.0).text
    return None


def streamed(rt: Runtime) -> list[str]:
    kinds: list[str] = []
    with rt.stream_agent("ops", "Ship api v2", timeout=10.0) as events:
        for event in events:
            assert isinstance(event, Event)
            kinds.append(event.kind)
    return kinds


def mcp_tools() -> list[str]:
    try:
        with mcp.stdio(["npx", "-y", "@modelcontextprotocol/server-everything"], timeout=20.0) as server:
            return [t.name for t in server.tools()]
    except ToolnexusError as exc:
        return [str(exc)]


def round_trip(result: AgentResult) -> AgentResult:
    return from_json(AgentResult, to_json(result))


def a_misspelt_keyword() -> None:
    Client(generate=model, model="stand-in", timout=30.0)  # type: ignore[call-arg]
    Runtime({}, generate=model, lease_sec=5.0)  # type: ignore[call-arg]


def a_deprecated_name_still_type_checks() -> None:
    Client(generate=model, model="stand-in", timeout_ms=30_000).close()
