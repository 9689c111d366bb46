"""A team, agents and tools served over MCP by ``toolnexus.mcp.wsgi_app``, for the tests: under
gunicorn (``_mcp_served_app:app``, configured by the environment) and in-process.

lead delegates releases to releaser, whose ``sign_off`` tool suspends until a person
approves; ``add`` is a plain tool; ``ask_approval`` a plain tool that suspends (its answer
is echoed); every model answers with the last tool result it sees. Each request served is
logged as ``<pid> <method>`` to ``$MCP_TEST_LOG`` (when set), so a test can tell which
worker process answered what.

Environment: ``MCP_TEST_STATE`` (SQLite file), ``MCP_TEST_SECRET``, ``MCP_TEST_TOKEN``
(else ``public=True``), ``MCP_TEST_SSE=1``, ``MCP_TEST_LOG``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolnexus import AgentDef, Runtime, ToolContext, make_request, mcp, suspend, tool  # noqa: E402
from toolnexus.testing import ScriptedModel, tool_messages  # noqa: E402


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@tool
def ask_approval(action: str, ctx: ToolContext) -> Any:
    """Ask a person to approve ``action``; says what they answered."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Approve {action}?"))
    return f"{action}: approved with {json.dumps(ctx.answer.data, sort_keys=True)}"


@tool
def sign_off(release: str, ctx: ToolContext) -> Any:
    """A release needs a person's sign-off."""
    if ctx.answer is None:
        schema = {"type": "object", "properties": {"signer": {"type": "string"}}, "required": ["signer"]}
        return suspend(make_request("sign_off", f"Sign off {release}?", data={"schema": schema}))
    return f"{release} signed off by {ctx.answer.data['signer']} in process {os.getpid()}"


def registry() -> dict[str, AgentDef]:
    releaser = AgentDef("releaser", "Releases with a sign-off", model="m-releaser", tools=[sign_off])
    lead = AgentDef("lead", "Leads releases: give it what to release", model="m-lead", team=("releaser",))
    return {"lead": lead, "releaser": releaser}


def model(first_call: dict[str, Any] | None = None) -> ScriptedModel:
    """lead delegates ``release v2``; releaser makes ``first_call`` (its ``sign_off`` by
    default), then each says the last tool result it sees (lead prefixes ``lead: ``)."""
    call = first_call or {"name": "sign_off", "arguments": {"release": "v2"}}

    def lead(request: dict[str, Any]) -> dict[str, Any]:
        found = tool_messages(request)
        if found:
            return {"content": f"lead: {found[-1]}"}
        return {"tool_calls": [{"id": "t1", "name": "task", "arguments": {"agent": "releaser", "prompt": "release v2"}}]}

    def releaser(request: dict[str, Any]) -> dict[str, Any]:
        found = tool_messages(request)
        return {"content": found[-1]} if found else {"tool_calls": [{"id": "s1", **call}]}

    return ScriptedModel({"m-lead": lead, "m-releaser": releaser})


def logged(app: Any, log: str | None) -> Any:
    """``app``, appending ``<pid> <method>`` for each request it reads to ``log``."""
    if not log:
        return app

    def wrapper(environ: dict[str, Any], start_response: Any) -> Any:
        method = environ.get("HTTP_MCP_METHOD") or environ.get("REQUEST_METHOD")
        with open(log, "a") as out:
            out.write(f"{os.getpid()} {method}\n")
        return app(environ, start_response)

    return wrapper


def build(state: str | None, *, secret: str, token: str | None = None, sse: bool = False, **options: Any) -> mcp.MCPApp:
    runtime = Runtime(registry(), generate=model(), state=state) if state else Runtime(registry(), generate=model())
    access: dict[str, Any] = {"authorize": token} if token else {"public": True}
    return mcp.wsgi_app(["lead", add, ask_approval], runtime=runtime, secret=secret, sse=sse, **access, **options)


if "MCP_TEST_SECRET" in os.environ:
    app = logged(
        build(
            os.environ.get("MCP_TEST_STATE"),
            secret=os.environ["MCP_TEST_SECRET"],
            token=os.environ.get("MCP_TEST_TOKEN"),
            sse=os.environ.get("MCP_TEST_SSE") == "1",
        ),
        os.environ.get("MCP_TEST_LOG"),
    )
