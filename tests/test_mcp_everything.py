"""The reference MCP server, ``@modelcontextprotocol/server-everything`` from npm, over stdio
(``.ci/run`` installs it; without it these tests skip, and fail under CI)."""

from __future__ import annotations

import asyncio

import pytest

from _mcp import everything_command, process_gone, require_sdk
from toolnexus import Runtime, Toolkit
from toolnexus import mcp
from toolnexus.testing import ScriptedModel, tool_messages


@pytest.fixture
def command():
    return everything_command()


@pytest.fixture
def server(command, closing):
    return closing(mcp.stdio(command, name="everything"))


def _listed_by_the_sdk(command: list[str]) -> list[dict]:
    """The reference server's tools as the official SDK's own client lists them."""
    require_sdk()
    from mcp import ClientSession, StdioServerParameters, stdio_client

    async def listing() -> list[dict]:
        async with stdio_client(StdioServerParameters(command=command[0], args=command[1:])) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.list_tools()
                return [each.model_dump(by_alias=True, exclude_none=True) for each in result.tools]

    return asyncio.run(listing())


def test_every_tool_of_the_reference_server_is_listed(server, command):
    ours = {each.name: each for each in server.tools()}
    theirs = _listed_by_the_sdk(command)
    assert len(theirs) >= 10
    assert sorted(ours) == sorted(each["name"] for each in theirs)
    for listed in theirs:
        assert ours[listed["name"]].description == listed.get("description", "")
        assert ours[listed["name"]].input_schema == listed["inputSchema"]
    assert {"echo", "get-sum", "get-tiny-image"} <= set(ours)


def test_reference_tools_called_from_an_agent_run_reach_the_models_next_request(server):
    calls = [
        {"id": "c1", "name": "get-sum", "arguments": {"a": 2, "b": 3}},
        {"id": "c2", "name": "echo", "arguments": {"message": "hello there"}},
    ]
    model = ScriptedModel({"m": [{"tool_calls": calls}, lambda request: {"content": " / ".join(tool_messages(request))}]})
    rt = Runtime({"helper": {"does": "uses the reference server", "tools": server.tools()}}, generate=model, model="m")
    try:
        result = rt.run_agent("helper", "add and echo")
    finally:
        rt.close(rt.root)
    assert result.status == "done"
    assert tool_messages(model.requests[1]) == ["The sum of 2 and 3 is 5.", "Echo: hello there"]
    assert {each["function"]["name"] for each in model.requests[0]["tools"]} >= {"get-sum", "echo"}


def test_an_image_from_the_reference_server_is_a_placeholder_with_the_item_in_metadata(server):
    result = Toolkit(server.tools()).execute("get-tiny-image", {})
    assert "[image: image/png]" in result.output
    images = [item for item in result.metadata["content"] if item["type"] == "image"]
    assert images and images[0]["mimeType"] == "image/png" and images[0]["data"]


def test_structured_content_from_the_reference_server_is_in_metadata(server):
    result = Toolkit(server.tools()).execute("get-structured-content", {"location": "Chicago"})
    assert not result.is_error
    assert set(result.metadata["structured"]) >= {"temperature", "conditions"}


def test_closing_the_reference_server_leaves_no_process(server):
    server.tools()
    pid = server.pid
    server.close()
    assert pid is not None and process_gone(pid)
