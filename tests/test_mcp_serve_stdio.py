"""``toolnexus mcp serve TEAM.toml``: a team served over stdio, driven by the official SDK's
client (``mcp`` 2.3.0) in both of its modes (CONTRACT §18b "stdio")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from _sdk_client import sdk_client, texts
from _teamfiles import APPROVAL_TOOLS, write_team
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

def responder(body):
    results = tool_messages(body)
    if not results:
        return tool_call_completion(body, [("d1", "deploy", {"service": "api"})])
    return text_completion(body, "outcome: " + results[-1])


@pytest.fixture(scope="module")
def command(tmp_path_factory):
    """The command that serves the team (its model a scripted server)."""
    folder: Path = tmp_path_factory.mktemp("served")
    agents = {"ops": {"does": "Deploys services", "tools": ["ops_tools:deploy"]}}
    team = write_team(folder, "ops", agents, tools=("ops_tools", APPROVAL_TOOLS))
    with ScriptedLLMServer(responder) as model:
        start = f"import sys; sys.path.insert(0, {str(folder)!r}); from toolnexus.cli import main; sys.exit(main())"
        yield [sys.executable, "-c", start, "mcp", "serve", str(team), "--base-url", model.base_url]


def test_the_sdks_client_lists_the_team_as_one_tool_and_its_question_is_answered_through_the_retry(command):
    asked: list = []

    async def steps(client):
        listed = await client.list_tools()
        result = await client.call_tool("ops", {"prompt": "deploy the api"})
        return client.protocol_version, client.server_info, listed.tools, result

    version, info, tools, result = sdk_client(command, steps, answer={"action": "accept", "content": {"approve": True}}, asked=asked)
    assert version == "2026-07-28" and info.name == "ops"
    assert [(tool.name, tool.description, tool.input_schema["required"]) for tool in tools] == [("ops", "Deploys services", ["prompt"])]
    assert asked == ["Deploy api to production?"]
    assert not result.is_error and texts(result) == "outcome: deployed api"


def test_a_decline_from_the_sdks_client_is_not_run(command):
    async def steps(client):
        return await client.call_tool("ops", {"prompt": "deploy the api"})

    result = sdk_client(command, steps, answer={"action": "decline"})
    assert texts(result) == "outcome: declined: Deploy api to production?"


def test_the_sdks_legacy_mode_is_served_and_a_question_says_pending(command):
    async def steps(client):
        listed = await client.list_tools()
        return client.protocol_version, listed.tools, await client.call_tool("ops", {"prompt": "deploy the api"})

    version, tools, result = sdk_client(command, steps, mode="legacy")
    assert version == "2025-11-25" and [tool.name for tool in tools] == ["ops"]
    assert result.is_error and texts(result) == "pending: Deploy api to production?"


def test_a_line_that_is_not_json_is_a_parse_error_and_the_end_of_input_ends_the_command_with_0(command):
    discover = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    done = subprocess.run(command, input=f"not json\n{json.dumps(discover)}\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    replies = [json.loads(line) for line in done.stdout.splitlines()]  # stdout carries messages only
    assert {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}} in replies
    assert [each["result"]["tools"][0]["name"] for each in replies if each.get("id") == 2] == ["ops"]
