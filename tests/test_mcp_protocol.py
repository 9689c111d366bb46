"""The protocol's corners, against a small stdio server written to the wire format: pages,
a list that changes, the server's own requests, versions, every kind of content."""

from __future__ import annotations

import json
import sys

import pytest

from _mcp import raw_command
from toolnexus import ConfigError, Toolkit
from toolnexus import mcp
from toolnexus.mcp import MCPError


@pytest.fixture
def server(closing):
    return closing(mcp.stdio(raw_command("--pages", "3"), name="raw"))


def test_tools_come_from_every_page_of_the_list(server):
    names = [each.name for each in server.tools()]
    assert names[:6] == [f"tool_{n}" for n in range(6)]
    assert {"ask_back", "media", "change", "env", "broken"} <= set(names)


def test_a_tool_name_is_sanitised_and_the_call_uses_the_servers_name(server):
    toolkit = Toolkit(server.tools())
    assert "ask_back" in toolkit.tool_names()
    assert not toolkit.execute("ask_back", {}).is_error


def test_the_list_is_cached_until_the_server_says_it_changed(server):
    first = server.tools()
    assert [each.name for each in server.tools()] == [each.name for each in first]
    assert "added_later" not in {each.name for each in first}
    assert server.call("change", {}).output == "changed"
    assert "added_later" in {each.name for each in server.tools()}


def test_the_servers_ping_is_answered_and_its_other_requests_refused(server):
    output = server.call("ask.back", {}).output
    assert "ping answered {}" in output
    assert '"code": -32601' in output and "sampling/createMessage" in output


def test_notifications_and_stray_lines_before_a_reply_are_passed_over(server):
    assert server.call("tool_1", {"x": 1}).output == "tool_1 ran"


def test_content_other_than_text_is_a_placeholder_kept_whole_in_metadata(server):
    result = server.call("media", {})
    assert result.output.split("\n") == ["first", "[image: image/png]", "[audio: audio/wav]", "[resource link: file:///notes.txt]", "[resource: file:///a.txt]", "last"]
    assert result.is_error
    assert [item["type"] for item in result.metadata["content"]] == ["image", "audio", "resource_link", "resource"]
    assert result.metadata["structured"] == {"n": 1}


def test_a_json_rpc_error_reply_is_an_error_result_naming_the_server_and_the_error(server):
    result = server.call("broken", {})
    assert result.is_error
    assert "mcp server raw" in result.output and "-32000" in result.output and "the broken tool is broken" in result.output


def test_a_server_gets_env_but_not_the_rest_of_this_processs_environment(closing, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-servers")
    server = closing(mcp.stdio(raw_command(), env={"SERVER_SETTING": "1"}))
    seen = json.loads(server.call("env", {}).output)
    assert "SERVER_SETTING" in seen and "PATH" in seen
    assert "OPENAI_API_KEY" not in seen


@pytest.mark.parametrize("version", ["2025-03-26", "2024-11-05"])
def test_an_older_version_the_client_knows_is_agreed_to(closing, version):
    server = closing(mcp.stdio(raw_command("--version", version)))
    server.tools()
    assert server.protocol_version == version


def test_a_version_the_client_does_not_know_is_an_error_naming_both(closing):
    server = closing(mcp.stdio(raw_command("--version", "1999-01-01")))
    with pytest.raises(MCPError, match="1999-01-01.*2025-06-18"):
        server.tools()
    assert server.pid is None  # the process was not kept


def test_a_command_that_cannot_start_is_an_error_naming_it(closing):
    server = closing(mcp.stdio(["/nonexistent/mcp-server"]))
    with pytest.raises(MCPError, match="cannot start '/nonexistent/mcp-server'"):
        server.tools()
    assert "cannot start" in server.call("x", {}).output


def test_a_server_that_exits_before_the_handshake_names_its_exit_code_and_stderr(closing):
    server = closing(mcp.stdio([sys.executable, "-c", "import sys; sys.stderr.write('no config found\\n'); sys.exit(7)"]))
    with pytest.raises(MCPError, match="exited with code 7.*no config found"):
        server.tools()


@pytest.mark.parametrize("bad", [[], "", 0, -1.5])
def test_a_server_definition_it_cannot_mean_is_refused(bad):
    with pytest.raises(ConfigError):
        if isinstance(bad, list) or isinstance(bad, str):
            mcp.stdio(bad)
        else:
            mcp.stdio(raw_command(), timeout=bad)
