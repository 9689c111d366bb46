"""Housekeeping never loses live work (CONTRACT §11 "Housekeeping and interrupted commands"):
``prune`` deletes whole finished runs only, and a pending run whose teammates finished
resumes after ``prune(0)`` (Python or the command line) from a fresh process, asking no
model again for what it recorded."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

from _teamfiles import APPROVAL_TOOLS, write_team
from toolnexus import ConfigError, Runtime, UnknownHandle, make_answer
from toolnexus.cli.teamfile import load_team
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

TEAM = {
    "coordinator": {"does": "coordinates", "model": "m-coord", "team": ["researcher"], "tools": ["housekeeping_tools:deploy"]},
    "researcher": {"does": "researches", "model": "m-res"},
}


class Models:
    """The scripted endpoint of the team: every reply follows from what the agent has seen
    (so a replay asks the same things), and every call is counted by model and prompt.

    The coordinator delegates ``find <prompt>`` to the researcher, then: on ``publish``,
    deploys what it found (a person approves it first); on ``fail``, its model is down while
    ``down`` is set; with ``hang``, its call waits (``arrived`` set) until ``released``.
    """

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.down, self.arrived, self.released = threading.Event(), threading.Event(), threading.Event()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user").split()[-1]
        with self._lock:
            self.calls[(body["model"], prompt)] += 1
        results = tool_messages(body)
        if body["model"] == "m-res":
            return text_completion(body, f"facts on {prompt}")
        if not results:
            return tool_call_completion(body, [("t1", "task", {"agent": "researcher", "prompt": f"find {prompt}"})])
        if len(results) == 1 and prompt == "fail" and self.down.is_set():
            raise RuntimeError("the model is down")
        if len(results) == 1 and prompt == "hang" and not self.released.is_set():
            self.arrived.set()
            self.released.wait(30)
        if len(results) == 1 and prompt == "publish":
            return tool_call_completion(body, [("p1", "deploy", {"service": results[0].replace(" ", "-")})])
        return text_completion(body, "final: " + results[-1])

    def asked(self, prompt: str) -> dict[str, int]:
        """How often each model was asked for the run on ``prompt``."""
        return {model: count for (model, seen), count in self.calls.items() if seen == prompt}


@pytest.fixture
def team(tmp_path: Path) -> Iterator[tuple[Path, ScriptedLLMServer, Models]]:
    path = write_team(tmp_path, "coordinator", TEAM, tools=("housekeeping_tools", APPROVAL_TOOLS))
    models = Models()
    with ScriptedLLMServer(models) as server:
        try:
            yield path, server, models
        finally:
            models.released.set()


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def where(request: Any, tmp_path: Path) -> Iterator[str | None]:
    """Where the runs are kept: in memory, a SQLite file, or a PostgreSQL database of the
    test's own (the command line keeps its runs in the tree ``default``)."""
    if request.param == "memory":
        yield None
    elif request.param == "sqlite":
        yield str(tmp_path / "runs.db")
    else:
        yield from fresh_database()


def fresh_database() -> Iterator[str]:
    from _services import service_url

    url = service_url("postgresql")
    import psycopg

    name = f"tn_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolnexus", *args], capture_output=True, text=True, timeout=120)


def runtime(team_file: Path, server: ScriptedLLMServer, state: str | None) -> Runtime:
    options: dict[str, Any] = {"state": state} if state else {}
    return Runtime(load_team(str(team_file)).registry, base_url=server.base_url, model="m", retries=0, **options)


def make_runs(rt: Runtime, models: Models) -> dict[str, str]:
    """One run of each kind, by what it is: closed, pending (its researcher finished),
    idle (finished, not closed), failed and interrupted (each kept for a retry)."""
    runs = {"closed": rt.run_agent("coordinator", "research").handle_id}
    pending = rt.run_agent("coordinator", "publish")
    assert pending.status == "pending", pending
    runs["pending"] = pending.handle_id
    models.down.set()  # for the run on "fail"
    for kind, prompt in (("idle", "idle"), ("failed", "fail")):
        handle = rt.spawn(rt.root, "coordinator")
        rt.wake(handle, prompt)
        assert rt.wait(handle, timeout=30).status == ("done" if kind == "idle" else "error")
        runs[kind] = handle.id
    models.down.clear()
    handle = rt.spawn(rt.root, "coordinator")
    rt.wake(handle, "hang")
    assert models.arrived.wait(30)  # its second model call is in flight
    rt.interrupt(handle, retryable=True)
    assert rt.wait(handle, timeout=30).status == "interrupted"
    models.released.set()
    runs["interrupted"] = handle.id
    return runs


def run_handles(rt: Runtime, top: str) -> list[str]:
    view = rt.inspect(top)
    return [top, *(handle for child in view.children for handle in run_handles(rt, child))]


def rows_of(state: str, handle_ids: list[str]) -> dict[str, int]:
    """How many rows each table keeps for these handles (events, journal, transcripts...)."""
    tables = {"tn_handles": "id", "tn_journal": "handle_id", "tn_messages": "conversation_id", "tn_requests": "handle_id"}
    tables["tn_stream"] = "handle_id"
    marks = ", ".join("?" for _ in handle_ids)
    queries = {table: f"SELECT count(*) FROM {table} WHERE {column} IN ({marks})" for table, column in tables.items()}
    if state.startswith("postgresql"):
        import psycopg

        with psycopg.connect(state) as conn:
            conn.execute("SET search_path TO toolnexus")
            return {table: conn.execute(sql.replace("?", "%s"), handle_ids).fetchone()[0] for table, sql in queries.items()}
    with sqlite3.connect(state) as conn:
        return {table: conn.execute(sql, handle_ids).fetchone()[0] for table, sql in queries.items()}


@pytest.mark.parametrize("pruner", ["python", "cli"])
def test_prune_deletes_only_finished_runs_and_a_pending_run_resumes_after_it_asking_no_model_again(team, where, pruner):
    team_file, server, models = team
    if where is None and pruner == "cli":
        pytest.skip("the command line prunes a state")
    rt = runtime(team_file, server, where)
    runs = make_runs(rt, models)
    kept = {kind: run_handles(rt, top) for kind, top in runs.items() if kind != "closed"}
    assert len(kept["pending"]) == 2 and rt.inspect(kept["pending"][1]).state == "closed"  # its researcher finished
    kept_ids = [handle for handles in kept.values() for handle in handles]
    rows = rows_of(where, kept_ids) if where else None
    if pruner == "python":
        assert rt.prune(3600) == 0  # nothing is an hour old
        assert rt.prune(0) == 2  # the closed run: its coordinator and its researcher
    else:  # in another process, while no runtime holds the tree
        rt.release()
        pruned = cli("prune", "--state", where, "--older-than", "0s")
        assert re.match(r"pruned 2 closed handle\(s\)", pruned.stdout), pruned.stderr
        rt = runtime(team_file, server, where)
    with pytest.raises(UnknownHandle):
        rt.inspect(runs["closed"])
    for kind, handles in kept.items():
        assert run_handles(rt, runs[kind]) == handles, kind  # every handle of a run still open is kept
    if where:
        assert rows_of(where, kept_ids) == rows  # and every row of it: journal, transcripts, requests, events
    asked = models.asked("publish")
    request_id = rt.open_requests()[0].id
    if where:  # a fresh process answers the pending run
        rt.release()
        answered = cli("answer", str(team_file), request_id, "--state", where, "--yes", "--json", "--no-tree", "--base-url", server.base_url)
        assert answered.returncode == 0, answered.stderr
        assert json.loads(answered.stdout)["text"] == "final: deployed facts-on-publish"
    else:
        rt.resume(make_answer(request_id, True))
        assert rt.wait(runs["pending"], timeout=30).text == "final: deployed facts-on-publish"
        rt.close(rt.root)
    # Only the coordinator's last step was asked: its recorded replies, and the finished
    # researcher (reattached by the replayed task call), were not asked again.
    assert models.asked("publish") == {"m-coord": asked["m-coord"] + 1, "m-res": asked["m-res"]}


def test_prune_then_retry_continues_a_failed_and_an_interrupted_run_from_their_journals(team, tmp_path):
    team_file, server, models = team
    state = str(tmp_path / "runs.db")
    rt = runtime(team_file, server, state)
    try:
        runs = make_runs(rt, models)
    finally:
        rt.release()
    assert cli("prune", "--state", state, "--older-than", "0s").returncode == 0
    shown = cli("show", "--state", state).stdout
    assert re.search(rf"{re.escape(runs['failed'])}\s+error", shown) and re.search(rf"{re.escape(runs['interrupted'])}\s+interrupted", shown)
    for kind, prompt in (("failed", "fail"), ("interrupted", "hang")):
        asked = models.asked(prompt)
        retried = cli("retry", str(team_file), runs[kind], "--state", state, "--json", "--no-tree", "--base-url", server.base_url)
        assert retried.returncode == 0, retried.stderr
        assert json.loads(retried.stdout)["text"] == f"final: facts on {prompt}"
        assert models.asked(prompt) == {"m-coord": asked["m-coord"] + 1, "m-res": asked["m-res"]}, kind


@pytest.mark.parametrize("age", [-1, -0.001, math.nan, math.inf, -math.inf, "7d", True])
def test_prune_of_a_negative_or_non_finite_age_is_a_config_error(age):
    rt = Runtime({}, generate=lambda request: {"content": "x"})
    try:
        with pytest.raises(ConfigError):
            rt.prune(age)
    finally:
        rt.close(rt.root)


@pytest.mark.parametrize("age", ["-1s", "nan", "inf", "1" * 400, "7x"])
def test_the_command_line_refuses_an_age_that_is_not_a_duration(tmp_path, age):
    from toolnexus.state import SQLiteState

    SQLiteState(tmp_path / "runs.db").close()
    refused = cli("prune", "--state", str(tmp_path / "runs.db"), f"--older-than={age}")
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
