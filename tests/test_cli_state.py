"""The command line on a stored tree: the printed follow-up commands carry the connection
options, a failed answer is tried again with ``toolnexus retry`` (the approved tool runs
once), ``prune`` and ``backup`` (CONTRACT §11)."""

from __future__ import annotations

import re
import shlex
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

TOOLS = '''
import os
from toolnexus import ToolContext, make_request, suspend, tool

@tool
def deploy(service: str, ctx: ToolContext):
    """Deploy a service; needs approval."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Deploy {service}?"))
    with open(os.path.join(os.path.dirname(__file__), "deployed.txt"), "a") as out:
        out.write(service + "\\n")
    return f"deployed {service}"
'''


def responder(body: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(body)
    if not results:
        return tool_call_completion(body, [("d1", "deploy", {"service": "api"})])
    return text_completion(body, "outcome: " + results[-1])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolnexus", *args], capture_output=True, text=True, timeout=120)


def dead_url() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def ops(tmp_path: Path) -> Any:
    (tmp_path / "ops_tools.py").write_text(TOOLS)
    team = tmp_path / "ops.toml"
    team.write_text('entry = "ops"\n[connection]\nmodel = "m"\nretries = 0\n[agents.ops]\ndoes = "Deploys"\ntools = ["ops_tools:deploy"]\n')
    with ScriptedLLMServer(responder) as server:
        yield team, server.base_url, tmp_path / "deployed.txt"


def printed_command(out: str, verb: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.strip().startswith(f"toolnexus {verb} "))
    return shlex.split(line.split("   (")[0])


def test_a_failed_answer_prints_a_retry_that_finishes_the_run_and_the_approved_tool_runs_once(ops, tmp_path):
    team, url, deployed = ops
    state = str(tmp_path / "runs.db")
    ran = cli("run", str(team), "ship it", "--state", state, "--no-input", "--no-tree", "--base-url", url)
    assert ran.returncode == 2, ran.stderr
    answer = printed_command(ran.stdout, "answer")
    assert answer[answer.index("--base-url") + 1] == url  # the printed command carries the options

    args = answer[1:]
    args[args.index("--base-url") + 1] = dead_url()  # the model is down while the answer comes
    failed = cli(*args, "--yes", "--no-tree")
    assert failed.returncode == 1
    assert "connection refused" in failed.stderr
    assert deployed.read_text() == "api\n"  # the approved tool ran before the model call failed
    retry = printed_command(failed.stdout, "retry")
    retry[retry.index("--base-url") + 1] = url  # the model is back

    finished = cli(*retry[1:], "--no-tree")
    assert finished.returncode == 0, finished.stderr
    assert "outcome: deployed api" in finished.stdout
    assert deployed.read_text() == "api\n"  # exactly once overall


def test_prune_and_backup_on_the_command_line(ops, tmp_path):
    team, url, _ = ops
    state = str(tmp_path / "runs.db")
    for _ in range(3):
        assert cli("run", str(team), "ship it", "--state", state, "--yes", "--no-tree", "--base-url", url).returncode == 0
    copy = tmp_path / "copy.db"
    backed = cli("backup", "--state", state, str(copy))
    assert backed.returncode == 0, backed.stderr
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT count(*) FROM tn_handles WHERE state = 'closed'").fetchone()[0] == 3
    assert cli("prune", "--state", state, "--older-than", "1h").stdout.startswith("pruned 0 ")
    pruned = cli("prune", "--state", state, "--older-than", "0s")
    assert re.match(r"pruned 3 closed handle\(s\)", pruned.stdout), pruned.stderr
    assert cli("backup", "--state", state, str(copy)).returncode == 1  # never over an existing file


def test_ctrl_c_during_a_run_exits_130(tmp_path):
    import signal
    import threading

    from toolnexus.testing import ScriptedLLMServer as Server

    arrived, released = threading.Event(), threading.Event()

    def slow(body: dict[str, Any]) -> dict[str, Any]:
        arrived.set()  # the scenario: a model call that is in flight when the user presses Ctrl-C
        released.wait(30)
        return text_completion(body, "late")

    with Server(slow) as server:
        team = tmp_path / "slow.toml"
        team.write_text(f'entry = "a"\n[connection]\nbase_url = "{server.base_url}"\nmodel = "m"\n[agents.a]\ndoes = "waits"\n')
        # SIGINT as a terminal delivers it, even where the test itself was started with it
        # ignored (a background job of a non-interactive shell): Python keeps an ignored one
        default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
        proc = subprocess.Popen(
            [sys.executable, "-m", "toolnexus", "run", str(team), "hi", "--no-tree"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint
        )
        try:
            assert arrived.wait(30)  # the run is under way
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            released.set()
    assert proc.returncode == 130, err
    assert "interrupted" in err
