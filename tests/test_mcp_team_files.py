"""``[agents.NAME.mcp.SERVER]`` in team files: the agent gets the server's tools, and the
command line closes the servers when it exits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from _mcp import HERE, children, process_gone, raw_command, sdk_stdio_command
from toolnexus.cli.commands import TeamFileError, load_team, main
from toolnexus.testing import ScriptedLLMServer, responder_by_model, tool_messages


def write_team(folder: Path, text: str) -> Path:
    team = folder / "team.toml"
    team.write_text(text)
    return team


def _toml_list(items: list[str]) -> str:
    return json.dumps(items)  # a JSON array of strings is a TOML array


def test_an_agent_gets_the_tools_of_its_mcp_servers(tmp_path):
    team_file = write_team(tmp_path, f'[agents.calc]\ndoes = "Adds"\n[agents.calc.mcp.sdk]\ncommand = {_toml_list(sdk_stdio_command())}\ntimeout = 20\n')
    team = load_team(str(team_file))
    try:
        names = {each.name for each in team.registry["calc"].tools}
        assert {"add", "echo", "slow"} <= names
        assert [server.name for server in team.servers] == ["sdk"]
    finally:
        team.close()


def test_a_stdio_server_gets_env_and_runs_in_cwd_relative_to_the_team_file(tmp_path):
    (tmp_path / "work").mkdir()
    command = [sys.executable, str(HERE / "_mcp_raw_server.py")]
    team_file = write_team(tmp_path, f'[agents.a]\ndoes = "x"\n[agents.a.mcp.raw]\ncommand = {_toml_list(command)}\ncwd = "work"\nenv = {{ RAW_SETTING = "on" }}\n')
    team = load_team(str(team_file))
    try:
        (server,) = team.servers
        assert "RAW_SETTING" in json.loads(server.call("env", {}).output)
    finally:
        team.close()


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('url = "http://127.0.0.1:9/mcp"\ncommand = ["x"]', "one of them"),
        ("timeout = 5", "one of them"),
        ('command = "npx server"', "command must be a list of strings"),
        ('command = ["x"]\nheaders = { A = "b" }', "unknown key(s) headers"),
        ('url = "ftp://example.invalid"', "http:// or https://"),
        ('command = ["x"]\ntimeout = 0', "timeout must be"),
        ('command = ["x"]\nmax_message_bytes = 0', "max_message_bytes must be a positive integer"),
        ('url = "http://127.0.0.1:9/mcp"\nmax_message_bytes = "8MiB"', "max_message_bytes must be a positive integer"),
    ],
)
def test_an_mcp_table_it_cannot_mean_is_refused(tmp_path, table, expected):
    team_file = write_team(tmp_path, f'[agents.a]\ndoes = "x"\n[agents.a.mcp.s]\n{table}\n')
    with pytest.raises(TeamFileError, match=r"\[agents\.a\.mcp\.s\]") as caught:
        load_team(str(team_file))
    assert expected in str(caught.value)


def test_a_server_that_fails_to_start_is_a_team_file_error_and_the_others_are_closed(tmp_path):
    good = _toml_list(raw_command())
    team_file = write_team(tmp_path, f'[agents.a]\ndoes = "x"\n[agents.a.mcp.first]\ncommand = {good}\n[agents.a.mcp.second]\ncommand = ["/nonexistent/server"]\n')
    before = children()
    with pytest.raises(TeamFileError, match=r"\[agents\.a\.mcp\.second\].*cannot start"):
        load_team(str(team_file))
    assert children() <= before  # the first server, started, was closed again


def test_the_command_line_closes_the_mcp_servers_when_it_exits(tmp_path, capsys):
    script = responder_by_model({"m": [{"calls": [("c1", "pid", {})]}, lambda body: _final(body)]})
    with ScriptedLLMServer(script) as llm:
        team_file = write_team(
            tmp_path,
            f'[connection]\nbase_url = "{llm.base_url}"\nmodel = "m"\n[agents.a]\ndoes = "x"\n[agents.a.mcp.sdk]\ncommand = {_toml_list(sdk_stdio_command())}\n',
        )
        assert main(["run", str(team_file), "which pid?", "--no-tree", "--no-input"]) == 0
    out = capsys.readouterr().out
    pid = int(out.split("server pid ")[1].split()[0])
    assert process_gone(pid)


def _final(body: dict) -> dict:
    from toolnexus.testing import text_completion

    return text_completion(body, f"server pid {tool_messages(body)[-1]}")
