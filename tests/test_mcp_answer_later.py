"""A server's question answered by a person later, in another process (CONTRACT §18b "MRTR
⇒ suspension", §11): the run is left pending in a SQLite state, and a second process answers
it — ``toolnexus answer`` or ``Runtime.resume`` — sending the retry to the SDK's server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from _mcp import HERE, sdk_http_server
from _mcp_asking_team import runtime
from test_cli_state import cli, printed_command
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages


def responder(body):
    results = tool_messages(body)
    if not results:
        return tool_call_completion(body, [("c1", "confirm", {"action": "deploy api"})])
    return text_completion(body, "outcome: " + results[-1])


@pytest.fixture
def team(tmp_path: Path):
    """A team file whose agent has the SDK's stateless HTTP server; its model endpoint."""
    with sdk_http_server("http-json") as url, ScriptedLLMServer(responder) as model:
        path = tmp_path / "ops.toml"
        path.write_text(
            f'entry = "ops"\n[connection]\nmodel = "m"\nretries = 0\n'
            f'[agents.ops]\ndoes = "Deploys"\n[agents.ops.mcp.sdk]\nurl = "{url}"\n'
        )
        yield path, model.base_url


def test_a_question_left_pending_by_one_command_is_answered_with_its_fields_by_another(team, tmp_path):
    path, base_url = team
    state = str(tmp_path / "runs.db")
    ran = cli("run", str(path), "deploy the api", "--state", state, "--no-input", "--no-tree", "--base-url", base_url)
    assert ran.returncode == 2, ran.stderr
    assert "kind:   mcp_input" in ran.stdout and "prompt: Approve deploy api?" in ran.stdout
    assert "fields: approve: boolean (required), note: string" in ran.stdout
    command = printed_command(ran.stdout, "answer")
    answered = cli(*command[1:], "--yes", "--data", '{"approve": true, "note": "after lunch"}', "--no-tree", "--json")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["text"] == "outcome: deploy api: approve=True note=after lunch"


def test_a_no_from_the_command_line_is_sent_to_the_server_as_a_decline(team, tmp_path):
    path, base_url = team
    state = str(tmp_path / "runs.db")
    ran = cli("run", str(path), "deploy the api", "--state", state, "--no-input", "--no-tree", "--base-url", base_url)
    command = [part for part in printed_command(ran.stdout, "answer") if part != "--yes"]
    answered = cli(*command[1:], "--no", "--no-tree", "--json")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["text"] == "outcome: deploy api: decline"


def resumed_elsewhere(state: str, handle: str, request_id: str, *decision: str) -> dict:
    script = [sys.executable, str(HERE / "_mcp_asking_team.py"), "resume", state, handle, request_id, *decision]
    done = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_teammates_question_is_declined_by_runtime_resume_in_another_process(tmp_path):
    state = str(tmp_path / "team.db")
    rt = runtime(state)
    try:
        lead = rt.spawn(rt.root, "lead")
        rt.wake(lead, "release v2")
        pending = rt.wait(lead, timeout=60)
        assert pending.status == "pending" and pending.pending.kind == "mcp_input"
        assert pending.pending.data["tool"] == "confirm" and pending.pending.data["requestState"]
    finally:
        rt.release()  # this process lets go: its MCP server process ends with it
    # Another process, with another process of the server: the Request is all the retry needs.
    declined = resumed_elsewhere(state, lead.id, pending.pending.id, "no")
    assert declined == {"status": "done", "text": "lead: release v2: decline"}  # the server was told, and went on
