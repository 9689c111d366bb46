"""The ``toolnexus`` command: demo, run TEAM.toml, --version; and the example scripts."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import toolnexus
from _console import FakeTTY
from _teamfiles import APPROVAL_TOOLS
from toolnexus import AgentDef, Runtime
from toolnexus.cli.commands import Approver, LiveTree, TeamFileError, load_team, main, tree_lines
from toolnexus.data import HandleView, make_request
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TIMEOUT = 60


def toolnexus_cmd(*args: str, input: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolnexus", *args],
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
    )


# --- demo ----------------------------------------------------------------------------------


def test_demo_yes_piped_shows_tree_and_final_text() -> None:
    proc = toolnexus_cmd("demo", "--yes")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b" not in out  # piped: plain lines, no escape codes
    assert "root/coordinator.1" in out
    assert re.search(r"root/coordinator\.1/researcher\.\d", out)
    assert re.search(r"root/coordinator\.1/writer\.\d", out)
    assert "Approve? [y/n] y" in out
    assert "Launch note ready." in out and "published 'toolnexus 0.1 is out'" in out
    assert "not published" not in out
    assert "total tokens: 900" in out  # the resume asks the coordinator's model nothing again
    final_tree = out.split("final tree:")[1]
    assert "root/coordinator.1" in final_tree and "closed" in final_tree
    assert not re.search(r"^root ", out, re.M)  # the tree shows the run, not the idle root above it
    # the tree as the run stops for the question: the writer waits, and so does its lead
    assert "suspended" in out.split("Approve?")[0].split("researcher.1 > Found")[-1]


def test_demo_shows_each_delegation_tool_call_and_text_as_it_happens() -> None:
    out = toolnexus_cmd("demo", "--yes", "--delay", "0.02").stdout
    before, after = out.split("Approve? [y/n] y")
    delegations = [
        'coordinator.1: task(agent="researcher", prompt="Find three facts about toolnexus for a launch note.")',
        "coordinator.1: task(agent=\"writer\", prompt=\"Draft and publish a launch note titled "
        "'toolnexus 0.1 is out'.\")",
    ]
    searched = '  researcher.1: search(query="toolnexus task tool budgets")'
    for line in [*delegations, searched, "  researcher.1 > Found: "]:
        assert line in before, (line, out)
    assert re.search(r"\n  writer\.2: waits for an answer \(approval\): Publish the note", before)
    assert before.index(delegations[0]) < before.index(searched) < before.index("researcher.1: search ->")
    assert "  writer.2: publish -> published 'toolnexus 0.1 is out' (9 words)" in after  # after the answer
    assert "coordinator.1 > Launch note ready." in after
    assert after.index("writer.2: publish ->") < after.index("coordinator.1: task -> Draft written")


def test_demo_without_the_tree_prints_no_tree_but_what_the_team_does() -> None:
    proc = toolnexus_cmd("demo", "--yes", "--no-tree", "--delay", "0.02")
    assert proc.returncode == 0, proc.stderr
    assert "final tree:" not in proc.stdout and "root/coordinator.1   " not in proc.stdout  # no tree line
    assert 'coordinator.1: task(agent="researcher"' in proc.stdout and "total tokens: 900" in proc.stdout


def test_demo_no_declines() -> None:
    proc = toolnexus_cmd("demo", "--no", "--delay", "0.02")
    assert proc.returncode == 0, proc.stderr
    assert "Approve? [y/n] n" in proc.stdout
    assert "not published (declined:" in proc.stdout


@pytest.mark.parametrize(("stdin", "published"), [("y\n", True), ("no\n", False), ("", False)])
def test_demo_reads_the_answer_from_piped_stdin(stdin: str, published: bool) -> None:
    proc = toolnexus_cmd("demo", "--delay", "0.02", input=stdin)
    assert proc.returncode == 0, proc.stderr
    assert ("Draft written and published" in proc.stdout) is published
    if not stdin:
        assert "(no answer: declined)" in proc.stdout


def test_a_reader_that_goes_away_early_gets_no_traceback_and_no_noise() -> None:
    shell = f"{sys.executable} -m toolnexus demo --yes | head -3"
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 3
    assert proc.stderr == ""  # no traceback, no "Exception ignored"


@pytest.mark.parametrize("command", [["demo", "--yes", "--delay", "0"], ["--help"], ["--version"], ["run", "missing.toml", "x"]])
def test_every_command_whose_output_is_closed_ends_quietly(command: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "toolnexus", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # closed before the command writes anything
    err = proc.stderr.read()
    assert proc.wait(timeout=TIMEOUT) in (0, 1, 141)
    assert "Traceback" not in err and "Exception ignored" not in err


def test_version() -> None:
    proc = toolnexus_cmd("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"toolnexus {toolnexus.__version__}"


def test_no_command_prints_usage() -> None:
    proc = toolnexus_cmd()
    assert proc.returncode == 2
    assert "usage: toolnexus" in proc.stderr and "demo" in proc.stderr


# --- run TEAM.toml ---------------------------------------------------------------------------


def team_responder(body: dict[str, Any]) -> dict[str, Any]:
    """Coordinator (has ``task``): delegate twice, then combine; others: one line of notes."""
    tools = [t["function"]["name"] for t in body.get("tools", [])]
    results = tool_messages(body)
    if "task" in tools and not results:
        return tool_call_completion(body, [("c1", "task", {"agent": "researcher", "prompt": "facts"}), ("c2", "task", {"agent": "writer", "prompt": "prose"})])
    if results:
        return text_completion(body, "final: " + " | ".join(results))
    return text_completion(body, "notes on " + body["messages"][-1]["content"])


TEAM_TOML = """\
entry = "coordinator"

[connection]
base_url = "{base_url}"
model = "file-model"

[agents.coordinator]
does = "Coordinates"
soul = "You coordinate."
team = ["researcher", "writer"]

[agents.coordinator.budget]
max_tokens = 1000

[agents.researcher]
does = "Researches"

[agents.writer]
does = "Writes"
model = "writer-model"
"""


@pytest.fixture
def server() -> Any:
    with ScriptedLLMServer(team_responder) as srv:
        yield srv


def test_run_team_file_against_a_local_server(tmp_path: Path, server: ScriptedLLMServer) -> None:
    team = tmp_path / "team.toml"
    team.write_text(TEAM_TOML.format(base_url=server.base_url))
    proc = toolnexus_cmd("run", str(team), "hello")
    assert proc.returncode == 0, proc.stderr
    assert "final: notes on facts | notes on prose" in proc.stdout
    assert re.search(r"root/coordinator\.1/researcher\.\d", proc.stdout)
    assert "total tokens: 60" in proc.stdout
    assert server.requests_seen == 4


def test_run_json_prints_the_agent_result(tmp_path: Path, server: ScriptedLLMServer) -> None:
    team = tmp_path / "team.toml"
    team.write_text(TEAM_TOML.format(base_url="http://127.0.0.1:9/unused"))
    proc = toolnexus_cmd("run", str(team), "hello", "--json", "--base-url", server.base_url, "--model", "flag-model")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "done"
    assert result["text"] == "final: notes on facts | notes on prose"
    assert result["handle_id"] == "root/coordinator.1"
    # what the team does goes to stderr with --json, the text as the model streams it
    assert 'coordinator.1: task(agent="researcher", prompt="facts")' in proc.stderr
    assert "coordinator.1 > final: notes on facts | notes on prose" in proc.stderr
    assert server.last_body is not None and server.last_body["model"] == "flag-model"


def test_the_sample_team_file_runs(server: ScriptedLLMServer) -> None:
    proc = toolnexus_cmd("run", str(EXAMPLES / "team.toml"), "a note about threads", "--json", "--base-url", server.base_url)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "done"


def approval_responder(body: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(body)
    if not results:
        return tool_call_completion(body, [("d1", "deploy", {"service": "api"})])
    return text_completion(body, "outcome: " + results[-1])


@pytest.fixture
def approval_team(tmp_path: Path) -> Any:
    (tmp_path / "ops_tools.py").write_text(APPROVAL_TOOLS)
    with ScriptedLLMServer(approval_responder) as srv:
        team = tmp_path / "ops.toml"
        team.write_text(f'entry = "ops"\n[connection]\nbase_url = "{srv.base_url}"\nmodel = "m"\n[agents.ops]\ndoes = "Deploys"\ntools = ["ops_tools:deploy"]\n')
        yield team


@pytest.mark.parametrize(("answer", "outcome"), [("y\n", "outcome: deployed api"), ("n\n", "outcome: declined: Deploy api to production?")])
def test_run_pending_answered_through_stdin(approval_team: Path, answer: str, outcome: str) -> None:
    proc = toolnexus_cmd("run", str(approval_team), "ship it", "--json", input=answer)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["text"] == outcome
    assert "Deploy api to production?" in proc.stderr and "Approve? [y/n]" in proc.stderr


def test_run_no_input_stops_pending_with_exit_2(approval_team: Path) -> None:
    proc = toolnexus_cmd("run", str(approval_team), "ship it", "--json", "--no-input")
    assert proc.returncode == 2, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "pending"
    assert result["pending"]["kind"] == "approval" and result["pending"]["data"]["path"] == ["root", "ops.1"]


def test_run_incomplete_exits_2(tmp_path: Path, server: ScriptedLLMServer) -> None:
    team = tmp_path / "team.toml"
    team.write_text(TEAM_TOML.format(base_url=server.base_url).replace("max_tokens = 1000", "max_turns = 1"))
    proc = toolnexus_cmd("run", str(team), "hello", "--json")
    assert proc.returncode == 2, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "incomplete" and result["limit"] == "maxTurns"


def test_run_model_failure_exits_1(tmp_path: Path) -> None:
    def broken(body: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("model is down")

    with ScriptedLLMServer(broken) as srv:
        team = tmp_path / "team.toml"
        team.write_text(f'[connection]\nbase_url = "{srv.base_url}"\nmodel = "m"\nretries = 0\n[agents.solo]\ndoes = "Answers"\n')
        proc = toolnexus_cmd("run", str(team), "hello", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["status"] == "error"
    assert "the run failed" in proc.stderr


def test_a_refused_connection_hints_at_the_command_s_own_option(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[connection]\nmodel = "m"\nretries = 0\n[agents.solo]\ndoes = "Answers"\n')
    proc = toolnexus_cmd("run", str(team), "hello", "--base-url", "http://127.0.0.1:9/v1", "--no-tree")
    assert proc.returncode == 1
    assert "connection refused (is a model server listening there? give --base-url URL" in proc.stderr
    assert "base_url=" not in proc.stdout + proc.stderr and "generate=" not in proc.stdout + proc.stderr


def test_bad_toml_names_file_and_line(tmp_path: Path) -> None:
    team = tmp_path / "broken_team.toml"
    team.write_text('entry = "a"\n[agents.a]\ndoes = \n')
    proc = toolnexus_cmd("run", str(team), "hello")
    assert proc.returncode == 1
    assert "broken_team.toml" in proc.stderr
    assert "line 3" in proc.stderr and "invalid TOML" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "text",
    ["x = " + "[" * 100_000, "x = " + "{a = " * 100_000, '[connection]\nrequest_params = { x = ' + "[" * 990 + "]" * 990 + " }\n"],
    ids=["arrays-100000", "inline-tables-100000", "request-params-990"],
)
def test_a_team_file_nested_too_deeply_is_one_line_of_error(tmp_path: Path, text: str) -> None:
    team = tmp_path / "deep.toml"
    team.write_text(text)
    proc = toolnexus_cmd("run", str(team), "hello")
    assert proc.returncode == 1
    assert proc.stderr == f"toolnexus: error: {team}: arrays or tables nested too deeply to read\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[agents.a]\ndoes = "x"\nsould = "typo"\n', "unknown key(s) sould"),
        ('entry = "a"\nbogus = 1\n[agents.a]\ndoes = "x"\n', "unknown key(s) bogus"),
        ('[agents.a]\ndoes = "x"\nteam = ["ghost"]\n', "team member 'ghost' is not defined"),
        ('entry = "nobody"\n[agents.a]\ndoes = "x"\n', "entry 'nobody' is not defined"),
        ('[agents.a]\ndoes = "x"\n[agents.a.budget]\nmax_tokenz = 5\n', "unknown key(s) max_tokenz"),
        ('[agents.a]\ndoes = "x"\n[agents.a.budget]\nmax_tokens = "many"\n', "max_tokens must be a whole number"),
        ('[agents.a]\nsoul = "no does"\n', '"does"'),
        ('[agents.a]\ndoes = "x"\ntools = ["no_such_module:thing"]\n', "cannot load tool 'no_such_module:thing'"),
        ('[agents.a]\ndoes = "x"\n[agents.b]\ndoes = "y"\n', "entry ="),
        ('entry = "a"\n', "no agents"),
    ],
)
def test_team_file_problems_are_clear(tmp_path: Path, text: str, expected: str) -> None:
    team = tmp_path / "team.toml"
    team.write_text(text)
    with pytest.raises(TeamFileError) as caught:
        load_team(str(team))
    assert str(team) in str(caught.value) and expected in str(caught.value)


def test_unknown_agent_and_missing_file_exit_1(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[agents.a]\ndoes = "x"\nteam = ["ghost"]\n')
    proc = toolnexus_cmd("run", str(team), "hello", "--base-url", "http://127.0.0.1:9", "--model", "m")
    assert proc.returncode == 1 and "ghost" in proc.stderr
    proc = toolnexus_cmd("run", str(tmp_path / "missing.toml"), "hello")
    assert proc.returncode == 1 and "missing.toml" in proc.stderr


def test_run_needs_an_endpoint(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text('[agents.a]\ndoes = "x"\n')
    assert main(["run", str(team), "hello", "--model", "m"]) == 1


def test_load_team_builds_agent_defs(tmp_path: Path) -> None:
    team = tmp_path / "team.toml"
    team.write_text(TEAM_TOML.format(base_url="http://x/v1"))
    loaded = load_team(str(team))
    assert loaded.entry == "coordinator"
    assert loaded.connection == {"base_url": "http://x/v1", "model": "file-model"}
    coordinator = loaded.registry["coordinator"]
    assert coordinator.team == ("researcher", "writer") and coordinator.soul == "You coordinate."
    assert coordinator.budget is not None and coordinator.budget.max_tokens == 1000
    assert loaded.registry["writer"].model == "writer-model"
    assert loaded.registry["researcher"].model == "inherit"


# --- the pieces, in process ------------------------------------------------------------------


def test_tree_lines_indent_by_depth() -> None:
    views = [
        HandleView(id="root", name="root", state="idle", parent=None, children=["root/a.1"], turns=0, tokens=30, tool_calls=0, inbox=0),
        HandleView(id="root/a.1", name="a", state="running", parent="root", children=[], turns=2, tokens=30, tool_calls=1, inbox=0),
    ]
    lines = tree_lines(views)
    assert lines[0].startswith("root ") and lines[1].startswith("  root/a.1 ")
    assert "running" in lines[1] and "turns  2" in lines[1] and "tokens     30" in lines[1]


@pytest.mark.parametrize("tty", [False, True])
def test_live_tree_draws_changes_and_its_thread_ends(tty: bool) -> None:
    import threading

    rt = Runtime({"a": AgentDef("a", "does a")}, generate=lambda request: {"content": "hi"})
    stream: io.StringIO = FakeTTY() if tty else io.StringIO()
    try:
        with LiveTree(rt, stream) as tree:
            assert (tree._thread is not None) is tty  # piped, the tree is printed on a pause only
            rt.spawn(rt.root, "a")
            tree.pause()
        assert not any(t.name.startswith("toolnexus-tree") for t in threading.enumerate())
    finally:
        rt.close(rt.root)
    text = stream.getvalue()
    assert "root/a.1" in text
    assert ("\x1b[" in text) is tty


def test_live_tree_on_a_terminal_shows_the_text_a_running_handle_s_model_wrote() -> None:
    import threading

    from toolnexus import Tool

    gate = threading.Event()

    def model(request: dict[str, Any]) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in request["messages"]):
            return {"content": "all done"}
        return {"content": "Let me look that up", "tool_calls": [{"id": "c1", "name": "wait", "arguments": {}}]}

    wait = Tool("wait", "waits", None, lambda args, ctx: "ok" if gate.wait(10) else "late")
    rt = Runtime({"a": AgentDef("a", "does a", tools=[wait])}, generate=model)
    terminal = FakeTTY()
    try:
        with LiveTree(rt, terminal):
            handle = rt.spawn(rt.root, "a")
            rt.wake(handle, "go")
            assert terminal.wait_for("> Let me look that up", timeout=10), terminal.getvalue()
            gate.set()
            assert rt.wait(handle, timeout=10).text == "all done"
        assert not any(t.name.startswith("toolnexus-tree") for t in threading.enumerate())
    finally:
        gate.set()
        rt.close(rt.root)


def test_approver_decisions() -> None:
    request = make_request("approval", "Go?", data={"path": ["root", "x.1"]})
    out = io.StringIO()
    assert Approver(True, io.StringIO(), out)(request).ok is True
    assert "from root/x.1" in out.getvalue() and "Go?" in out.getvalue()
    declined = Approver(False, io.StringIO(), io.StringIO())(request)
    assert declined.ok is False and declined.reason == "declined" and declined.id == request.id
    assert Approver(None, io.StringIO("Y\n"), io.StringIO())(request).ok is True
    assert Approver(None, io.StringIO(""), io.StringIO())(request).ok is False
    terminal = FakeTTY("what\nyes\n")
    prompts = io.StringIO()
    assert Approver(None, terminal, prompts)(request).ok is True
    assert "please answer y or n" in prompts.getvalue()


# --- the sample team file ------------------------------------------------------------------


def test_the_sample_team_file_loads() -> None:
    team = load_team(str(EXAMPLES / "team.toml"))
    assert team.entry == "coordinator" and set(team.registry) == {"coordinator", "researcher", "writer"}


# --- durable runs: run --state, answer, show ---------------------------------------------------


def test_run_with_state_leaves_a_pending_run_and_answer_finishes_it_in_a_new_process(approval_team: Path, tmp_path: Path) -> None:
    state = str(tmp_path / "runs.db")
    proc = toolnexus_cmd("run", str(approval_team), "ship it", "--state", state, "--no-input", "--no-tree")
    assert proc.returncode == 2, proc.stderr
    request_id = re.search(r"id:\s+(req_\w+)", proc.stdout).group(1)
    assert "kind:   approval" in proc.stdout and "prompt: Deploy api to production?" in proc.stdout
    assert f"toolnexus answer {approval_team} {request_id} --state {state} --yes" in proc.stdout

    shown = toolnexus_cmd("show", "--state", state)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"root/ops\.1\s+suspended", shown.stdout)
    assert "open requests: 1" in shown.stdout and request_id in shown.stdout

    answered = toolnexus_cmd("answer", str(approval_team), request_id, "--state", state, "--yes", "--json", "--no-tree")
    assert answered.returncode == 0, answered.stderr
    result = json.loads(answered.stdout)
    assert (result["status"], result["text"]) == ("done", "outcome: deployed api")

    again = toolnexus_cmd("answer", str(approval_team), request_id, "--state", state, "--yes")
    assert again.returncode == 1
    assert "no run" in again.stderr and request_id in again.stderr
    final = toolnexus_cmd("show", "--state", state)
    assert re.search(r"root/ops\.1\s+closed", final.stdout) and "open requests: 0" in final.stdout


def test_answer_no_declines_the_stored_request(approval_team: Path, tmp_path: Path) -> None:
    state = str(tmp_path / "runs.db")
    proc = toolnexus_cmd("run", str(approval_team), "ship it", "--state", state, "--no-input", "--json", "--no-tree")
    assert proc.returncode == 2, proc.stderr
    request_id = json.loads(proc.stdout)["pending"]["id"]
    assert "toolnexus answer" in proc.stderr  # with --json the hint goes to stderr
    answered = toolnexus_cmd("answer", str(approval_team), request_id, "--state", state, "--no", "--json", "--no-tree")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["text"] == "outcome: declined: Deploy api to production?"


def test_a_team_file_names_its_state(approval_team: Path) -> None:
    approval_team.write_text(approval_team.read_text() + '[state]\npath = "ops-runs.db"\n')
    proc = toolnexus_cmd("run", str(approval_team), "ship it", "--no-input", "--json", "--no-tree")
    assert proc.returncode == 2, proc.stderr
    assert (approval_team.parent / "ops-runs.db").exists()
    request_id = json.loads(proc.stdout)["pending"]["id"]
    answered = toolnexus_cmd("answer", str(approval_team), request_id, "--yes", "--json", "--no-tree")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["status"] == "done"


def test_show_of_a_state_without_the_tree_says_so(tmp_path: Path) -> None:
    from toolnexus.state import SQLiteState

    SQLiteState(tmp_path / "empty.db").close()
    proc = toolnexus_cmd("show", "--state", str(tmp_path / "empty.db"), "--runtime-id", "nothing")
    assert proc.returncode == 2
    assert "no tree 'nothing'" in proc.stdout


@pytest.mark.parametrize("command", [["show"], ["prune", "--older-than", "1d"], ["backup", "copy.db"]])
def test_a_state_file_that_does_not_exist_is_an_error_and_is_not_created(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "typo.db"
    proc = toolnexus_cmd(command[0], "--state", str(missing), *command[1:])
    assert proc.returncode == 1
    assert "no state file" in proc.stderr and str(missing) in proc.stderr
    assert not missing.exists()
