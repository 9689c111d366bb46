"""Crash safety, tightened (CONTRACT §11): every step one commit, journal keys exact, ids
that cannot be ids, a newer schema refused before it is touched, small row bodies, kills at
every gap of a ``task`` call and at random."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import _crash_team as team
from conftest import run_in_thread
from toolnexus import AgentDef, ConfigError, Runtime, Tool, UnknownHandle, UnknownRequest, make_answer, make_request, suspend
from toolnexus.state import SQLiteState
from toolnexus.testing import ScriptedModel, tool_messages

SCRIPT = str(Path(__file__).resolve().parent / "_crash_team.py")


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request: Any, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    from _services import service_url

    return service_url("postgresql")


def run_script(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout)


def recovered_lead(state: str, runtime_id: str, effects: str) -> tuple[Any, list[str]]:
    """Open the tree in this process (recovering what the dead one left), wait for the
    lead; its result and the lead's children."""
    rt = team.charging_runtime(state, runtime_id, effects)
    try:
        result = run_in_thread(lambda: rt.wait("root/lead.1", timeout=30), timeout=40)
        return result, rt.inspect("root/lead.1").children
    finally:
        rt.release()


# --- one task call, one commit -----------------------------------------------------------------------


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_at_either_side_of_a_task_calls_commit_leaves_one_child_and_the_lead_finishes(state, tmp_path, when):
    runtime_id, effects = f"k-{uuid.uuid4().hex[:10]}", str(tmp_path / "effects.txt")
    killed = run_script("die-in-task", state, runtime_id, effects, when)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    result, children = recovered_lead(state, runtime_id, effects)
    assert result.status == "done", result.text
    assert children == ["root/lead.1/worker.1"]  # never a second child
    assert len(team.lines(effects)) == 1  # the charge ran once


@pytest.mark.parametrize("trials", [pytest.param(4, id="4"), pytest.param(30, id="30", marks=pytest.mark.slow)])
def test_a_random_kill_of_a_two_agent_team_never_gives_a_second_child_or_a_second_charge(state, tmp_path, trials):
    """Random SIGKILLs (30 per store with ``-m slow``); ``benchmarks/crash_loop.py`` runs hundreds."""
    rng = random.Random(7)
    for trial in range(trials):
        runtime_id, effects = f"r-{uuid.uuid4().hex[:10]}", str(tmp_path / f"effects-{trial}.txt")
        proc = subprocess.Popen([sys.executable, SCRIPT, "charge", state, runtime_id, effects, "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # the lead is woken: the run takes about 0.25 s from here
        time.sleep(rng.uniform(0.0, 0.3))  # the scenario: the kill lands anywhere in the run
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        rt = team.charging_runtime(state, runtime_id, effects)
        try:
            if not rt.inspect(rt.root).children:
                continue  # killed before the lead was spawned: nothing to recover
            result = run_in_thread(lambda: rt.wait("root/lead.1", timeout=30), timeout=40)
            assert result.status == "done", (trial, result.text)
            assert len(rt.inspect("root/lead.1").children) <= 1
            assert len(team.lines(effects)) <= 1
        finally:
            rt.release()


# --- journal keys, ids, schema, row size ----------------------------------------------------------------


def test_a_model_that_reuses_a_call_id_in_a_later_step_gets_each_call_run(tmp_path):
    ran: list[int] = []

    def note(args: dict[str, Any], ctx: Any) -> Any:
        ran.append(args["n"])
        return f"noted {args['n']}"

    def ask(args: dict[str, Any], ctx: Any) -> Any:
        return "approved" if ctx.answer is not None else suspend(make_request("approval", "go on?"))

    def model(request: dict[str, Any]) -> dict[str, Any]:
        results = tool_messages(request)
        if len(results) < 2:  # two steps, both with the call id "c1"
            return {"tool_calls": [{"id": "c1", "name": "note", "arguments": {"n": len(results) + 1}}]}
        if len(results) == 2:
            return {"tool_calls": [{"id": "c2", "name": "ask", "arguments": {}}]}
        return {"content": " / ".join(results)}

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    registry = {"a": AgentDef("a", "notes", tools=[Tool("note", "note", schema, note), Tool("ask", "ask", None, ask)])}
    rt = Runtime(registry, generate=model, state=str(tmp_path / "state.db"))
    try:
        pending = run_in_thread(lambda: rt.run_agent("a", "note twice"))
        rt.resume(make_answer(pending.pending.id, True))  # the turn replays from its journal
        final = run_in_thread(lambda: rt.wait(pending.handle_id))
        assert final.text == "noted 1 / noted 2 / approved"
        assert ran == [1, 2]  # each step's own call, each run once
    finally:
        rt.release()


BAD_IDS = ["root/\x00x", "root/\ud800", "r" * (1 << 20), 42]


@pytest.mark.parametrize("where", ["memory", "sqlite"])
@pytest.mark.parametrize("bad", BAD_IDS, ids=["nul", "lone-surrogate", "1MB", "not-a-string"])
def test_an_id_that_cannot_be_an_id_is_unknown_to_every_verb(tmp_path, where, bad):
    options = {"state": str(tmp_path / "state.db")} if where == "sqlite" else {}
    rt = Runtime({"a": AgentDef("a", "answers")}, generate=lambda request: {"content": "hi"}, **options)
    try:
        verbs = [rt.inspect, rt.transitions, rt.wait, rt.interrupt, rt.close, rt.retry, rt.recover, lambda h: rt.post(h, "x"), lambda h: rt.wake(h, "x")]
        for verb in verbs:
            with pytest.raises(UnknownHandle):
                verb(bad)
        with pytest.raises(UnknownRequest):
            rt.resume(make_answer(bad, True))  # type: ignore[arg-type]
    finally:
        rt.release() if where == "sqlite" else rt.close(rt.root)


def test_a_store_written_by_a_newer_version_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "newer.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE tn_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO tn_meta VALUES ('schema_version', '99')")
    with pytest.raises(ConfigError, match="newer toolnexus"):
        SQLiteState(path)
    with sqlite3.connect(path) as conn:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert tables == ["tn_meta"]


def test_a_resumed_turn_with_a_20_kb_prompt_writes_small_row_bodies(tmp_path):
    written: list[int] = []
    store = SQLiteState(tmp_path / "state.db")
    plain = store.execute

    def counting(sql: str, params: Any = ()) -> Any:
        if sql.startswith("INSERT INTO tn_handles") and params[1] == "root/a.1":
            written.append(len(params[8].encode()))
        return plain(sql, params)

    store.execute = counting  # type: ignore[method-assign]

    def ask(args: dict[str, Any], ctx: Any) -> Any:
        return "approved" if ctx.answer is not None else suspend(make_request("approval", "go on?"))

    def model(request: dict[str, Any]) -> dict[str, Any]:
        return {"content": "done"} if tool_messages(request) else {"tool_calls": [{"id": "c1", "name": "ask", "arguments": {}}]}

    rt = Runtime({"a": AgentDef("a", "asks", tools=[Tool("ask", "ask", None, ask)])}, generate=model, state=store)
    try:
        pending = rt.run_agent("a", "x" * 20_000)
        rt.resume(make_answer(pending.pending.id, True))
        assert rt.wait(pending.handle_id).status == "done"
    finally:
        rt.release()
        store.close()
    assert sum(written) < 20_000  # the prompt is written once, to the journal, not into the row
    assert max(written) < 2_000


# --- listing and pruning -----------------------------------------------------------------------------------


def echo_runtime(tmp_path: Path, **options: Any) -> Runtime:
    model = ScriptedModel({"m": lambda request: {"content": "echo"}})
    return Runtime({"echo": AgentDef("echo", "echoes", model="m")}, generate=model, state=str(tmp_path / "state.db"), **options)


def test_handles_lists_the_live_ones_and_the_most_recent_closed_ones(tmp_path):
    rt = echo_runtime(tmp_path, keep_closed=3)
    try:
        ids = [rt.run_agent("echo", f"n{n}").handle_id for n in range(8)]
        live = rt.spawn(rt.root, "echo")
        assert [view.id for view in rt.handles()] == ["root", *ids[-3:], live.id]
        assert rt.inspect(ids[0]).state == "closed"  # older ones stay readable by id
    finally:
        rt.release()


def test_prune_removes_old_closed_handles_and_nothing_live(tmp_path):
    rt = echo_runtime(tmp_path)
    try:
        old = [rt.run_agent("echo", f"n{n}").handle_id for n in range(5)]
        live = rt.spawn(rt.root, "echo")
        assert rt.prune(3600) == 0  # nothing is an hour old
        assert rt.prune(0) == 5
        with pytest.raises(UnknownHandle):
            rt.inspect(old[0])
        assert rt.inspect(live.id).state == "idle"
        assert [view.id for view in rt.handles()] == ["root", live.id]
        assert all(event["handle"] not in old for event in rt.events())
        assert rt.run_agent("echo", "again").handle_id == "root/echo.7"  # ids are never reused
    finally:
        rt.release()


def test_prune_in_memory_lets_old_closed_handles_go(tmp_path):
    rt = Runtime({"echo": AgentDef("echo", "echoes")}, generate=lambda request: {"content": "echo"})
    try:
        old = rt.run_agent("echo", "n").handle_id
        assert rt.prune(0) == 1
        with pytest.raises(UnknownHandle):
            rt.inspect(old)
    finally:
        rt.close(rt.root)


# --- one clock for a store shared by many hosts --------------------------------------------------------------


def test_on_postgresql_a_process_whose_clock_runs_60_s_ahead_takes_no_live_turn_over(tmp_path):
    from _services import service_url

    url = service_url("postgresql")
    runtime_id, effects = f"s-{uuid.uuid4().hex[:10]}", str(tmp_path / "effects.txt")
    release = threading.Event()

    def hold(args: dict[str, Any], ctx: Any) -> Any:
        release.wait(60)  # the live owner's turn runs while the other process watches
        return "held"

    def model(request: dict[str, Any]) -> dict[str, Any]:
        return {"content": "finished"} if tool_messages(request) else {"tool_calls": [{"id": "c1", "name": "hold", "arguments": {}}]}

    registry = {**team.charging_registry(effects), "slow": AgentDef("slow", "holds", model="m-slow", tools=[Tool("hold", "hold", None, hold)])}
    rt = Runtime(registry, generate=ScriptedModel({"m-slow": model}), state=url, runtime_id=runtime_id, lease=1.5)
    try:
        handle = rt.spawn(rt.root, "slow")
        rt.wake(handle, "hold on")
        env = {**os.environ, "TOOLNEXUS_TEST_CLOCK_SKEW": "60"}
        out = subprocess.run([sys.executable, SCRIPT, "watch", url, runtime_id, effects, "3", "1.5"], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.strip().splitlines()[-1])["recovered"] == []
        release.set()
        assert run_in_thread(lambda: rt.wait(handle, timeout=20)).text == "finished"
    finally:
        release.set()
        rt.release()
