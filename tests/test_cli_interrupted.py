"""Interrupted commands are honest (CONTRACT §11 "Housekeeping and interrupted commands"):
Ctrl-C ends the command's run ``interrupted`` in the state and prints the ``retry`` that
continues it from its journal; a later ``run`` starts its own run and takes over nobody
else's; ``show`` lists the open runs and only the latest closed ones."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

from _teamfiles import write_team
from toolnexus import AgentDef, Runtime
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

TOOLS = '''
import os
import socket
from toolnexus import ToolContext, tool

def note(line):
    with open(os.path.join(os.path.dirname(__file__), "effects.txt"), "a") as out:
        out.write(line + "\\n")

@tool
def deploy(service: str) -> str:
    """Deploy a service."""
    note("deployed " + service)
    return "deployed " + service

@tool(retry="safe")
def fetch(url: str, ctx: ToolContext) -> str:
    """Fetch a page; slow while the test holds its gate."""
    port = os.environ.get("FETCH_GATE_PORT")
    if port:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as gate:
            gate.sendall(b"started\\n")  # the test knows the call is in flight
            if ctx.cancelled.wait(30):  # a well-behaved tool ends when its turn is interrupted
                return "cancelled"
    note("fetched " + url)
    return "page of " + url
'''

TEAM = {
    "lead": {"does": "leads", "model": "m-lead", "team": ["researcher"], "tools": ["interrupted_tools:deploy"]},
    "researcher": {"does": "researches", "model": "m-res", "tools": ["interrupted_tools:fetch"]},
}


class Models:
    """The team's endpoint, counting calls by model and prompt. The lead deploys, then
    delegates ``find <prompt>``, then answers; the researcher fetches a page (``tool``) or
    answers at once. With ``hold="model"``, the researcher's first call waits (``arrived``
    set) until ``released``: the call in flight when Ctrl-C comes."""

    def __init__(self, hold: str | None = None) -> None:
        self.hold = hold
        self.calls: Counter[tuple[str, str]] = Counter()
        self.arrived, self.released = threading.Event(), threading.Event()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        model, results = body["model"], tool_messages(body)
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user").split()[-1]
        with self._lock:
            self.calls[(model, prompt)] += 1
        if model == "m-res":
            if not results and self.hold == "model" and not self.released.is_set():
                self.arrived.set()
                self.released.wait(30)
            if not results and self.hold == "tool":
                return tool_call_completion(body, [("f1", "fetch", {"url": f"https://example.invalid/{prompt}"})])
            return text_completion(body, f"facts on {prompt}" + (f" from {results[-1]}" if results else ""))
        if not results:
            return tool_call_completion(body, [("d1", "deploy", {"service": prompt})])
        if len(results) == 1:
            return tool_call_completion(body, [("t1", "task", {"agent": "researcher", "prompt": f"find {prompt}"})])
        return text_completion(body, "final: " + results[-1])

    def asked(self, prompt: str) -> dict[str, int]:
        return {model: count for (model, seen), count in self.calls.items() if seen == prompt}


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Any]:
    team_file = write_team(tmp_path, "lead", TEAM, tools=("interrupted_tools", TOOLS))

    class Team:
        path = str(team_file)
        state = str(tmp_path / "runs.db")
        effects = tmp_path / "effects.txt"
        models = Models()

        def effect_lines(self) -> list[str]:
            return self.effects.read_text().splitlines() if self.effects.exists() else []

    with ScriptedLLMServer(Team.models) as server:
        Team.url = server.base_url
        try:
            yield Team()
        finally:
            Team.models.released.set()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolnexus", *args], capture_output=True, text=True, timeout=120)


def started(team: Any, prompt: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    # SIGINT as a terminal delivers it, even where the test itself was started with it
    # ignored (a background job of a non-interactive shell): Python keeps an ignored one
    return subprocess.Popen(
        [sys.executable, "-m", "toolnexus", "run", team.path, prompt, "--state", team.state, "--no-tree", "--base-url", team.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def stopped(proc: subprocess.Popen[str], how: int = signal.SIGINT) -> tuple[str, str]:
    proc.send_signal(how)
    return proc.communicate(timeout=60)


def printed_command(out: str, verb: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.strip().startswith(f"toolnexus {verb} "))
    return shlex.split(line.split("   (")[0])


def run_with_model_in_flight(team: Any, prompt: str, how: int = signal.SIGINT) -> tuple[int, str, str]:
    team.models.hold, team.models.arrived, team.models.released = "model", threading.Event(), threading.Event()
    proc = started(team, prompt)
    try:
        assert team.models.arrived.wait(30)  # the researcher's model call is in flight
        out, err = stopped(proc, how)
    finally:
        team.models.released.set()
    return proc.returncode, out, err


@pytest.mark.parametrize("in_flight", ["model", "tool"])
def test_ctrl_c_leaves_the_run_interrupted_and_retry_continues_it_without_asking_again(team, in_flight):
    if in_flight == "model":
        code, out, err = run_with_model_in_flight(team, "alpha")
    else:
        team.models.hold = "tool"
        with socket.create_server(("127.0.0.1", 0)) as gate:
            gate.settimeout(30)
            proc = started(team, "alpha", {"FETCH_GATE_PORT": str(gate.getsockname()[1])})
            connection, _ = gate.accept()
            with connection:
                assert connection.makefile().readline() == "started\n"  # the tool is in flight
                out, err = stopped(proc)
        code = proc.returncode
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err
    retry = printed_command(out, "retry")
    assert retry[:4] == ["toolnexus", "retry", team.path, "root/lead.1"] and team.url in retry

    shown = cli("show", "--state", team.state).stdout
    assert re.search(r"root/lead\.1\s+interrupted", shown), shown
    assert "running" not in shown
    assert team.models.asked("alpha") == {"m-lead": 2, "m-res": 1}
    assert team.effect_lines() == ["deployed alpha"]

    retried = cli(*retry[1:], "--no-tree")
    assert retried.returncode == 0, retried.stderr
    # The lead's two recorded replies and its finished deploy are not asked or run again;
    # the researcher goes on from its own journal (a tool cut off in flight is in doubt:
    # this one is safe to run again).
    if in_flight == "model":
        assert "final: facts on alpha" in retried.stdout
        assert team.models.asked("alpha") == {"m-lead": 3, "m-res": 2}
        assert team.effect_lines() == ["deployed alpha"]
    else:
        assert "final: facts on alpha from page of https://example.invalid/alpha" in retried.stdout
        assert team.models.asked("alpha") == {"m-lead": 3, "m-res": 2}
        assert team.effect_lines() == ["deployed alpha", "fetched https://example.invalid/alpha"]
    assert re.search(r"root/lead\.1\s+closed", cli("show", "--state", team.state).stdout)


def test_a_later_run_starts_its_own_run_and_takes_over_no_other(team):
    code, _, _ = run_with_model_in_flight(team, "alpha")  # root/lead.1: interrupted
    assert code == 130
    code, _, _ = run_with_model_in_flight(team, "beta", signal.SIGKILL)  # root/lead.2: its process died mid-turn
    assert code == -signal.SIGKILL
    shown = cli("show", "--state", team.state).stdout
    assert re.search(r"root/lead\.1\s+interrupted", shown) and re.search(r"root/lead\.2\s+orphaned", shown), shown
    asked = {prompt: team.models.asked(prompt) for prompt in ("alpha", "beta")}

    team.models.hold = None
    later = cli("run", team.path, "gamma", "--state", team.state, "--base-url", team.url)
    assert later.returncode == 0, later.stderr
    assert "final: facts on gamma" in later.stdout
    assert "root/lead.3" in later.stdout
    assert "root/lead.1" not in later.stdout and "root/lead.2" not in later.stdout  # its trees show its own run only
    assert {prompt: team.models.asked(prompt) for prompt in ("alpha", "beta")} == asked  # nobody else's run went on
    shown = cli("show", "--state", team.state).stdout
    assert re.search(r"root/lead\.1\s+interrupted", shown) and re.search(r"root/lead\.2\s+orphaned", shown), shown

    # retry touches the run it names: the orphaned one goes on from its journal
    recovered = cli("retry", team.path, "root/lead.2", "--state", team.state, "--no-tree", "--base-url", team.url)
    assert recovered.returncode == 0, recovered.stderr
    assert "final: facts on beta" in recovered.stdout
    assert team.models.asked("beta") == {"m-lead": asked["beta"]["m-lead"] + 1, "m-res": asked["beta"]["m-res"] + 1}
    assert team.models.asked("alpha") == asked["alpha"]
    assert re.search(r"root/lead\.1\s+interrupted", cli("show", "--state", team.state).stdout)
    assert team.effect_lines() == ["deployed alpha", "deployed beta", "deployed gamma"]


def test_show_lists_the_open_runs_and_the_20_latest_closed_ones_and_all_with_all(tmp_path):
    state = str(tmp_path / "runs.db")
    rt = Runtime({"echo": AgentDef("echo", "echoes")}, generate=lambda request: {"content": "echo"}, state=state)
    try:
        open_run = rt.spawn(rt.root, "echo").id  # the oldest run, still open
        closed = [rt.run_agent("echo", f"n{n}").handle_id for n in range(23)]
    finally:
        rt.release()
    shown = cli("show", "--state", state)
    assert shown.returncode == 0, shown.stderr
    listed = re.findall(r"root/echo\.\d+", shown.stdout)
    assert listed == [open_run, *closed[3:]]
    assert "3 older closed runs not shown: --all lists every run" in shown.stdout
    every = cli("show", "--state", state, "--all").stdout
    assert re.findall(r"root/echo\.\d+", every) == [open_run, *closed]
    assert "not shown" not in every
