"""A resume asks no model twice, and a failed turn can be tried again (CONTRACT §7D
"Suspension across agents", "goes further" item 6, §11 "Crash safety, tightened").

The lead's model writes a different ``task`` prompt on every call, as a real model at a
high temperature does: re-asking it after an approval would spawn a second writer, ask for
a second approval and publish twice. It must be asked once more only, for its next step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import _crash_team as team
from conftest import run_in_thread
from toolnexus import Budget, ToolnexusError, make_answer

SCRIPT = str(Path(__file__).resolve().parent / "_crash_team.py")


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def where(request: Any, tmp_path: Path) -> str | None:
    """Where the tree lives: in memory (``None``), a SQLite file, or the test PostgreSQL."""
    if request.param == "memory":
        return None
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    from _services import service_url

    return service_url("postgresql")


@pytest.fixture
def paths(tmp_path: Path) -> Any:
    class Paths:
        effects = str(tmp_path / "effects.txt")
        calls = str(tmp_path / "calls.txt")
        down = str(tmp_path / "model-down")
        runtime_id = f"c-{uuid.uuid4().hex[:10]}"

    return Paths()


def writers(rt: Any, lead_id: str) -> list[str]:
    return rt.inspect(lead_id).children


def test_a_resume_asks_the_leads_model_only_for_its_next_step(where, paths):
    rt = team.writing_runtime(where, paths.runtime_id, paths.effects, paths.calls)
    try:
        pending = run_in_thread(lambda: rt.run_agent("lead", "write and publish the launch note"))
        assert pending.status == "pending"
        assert team.lines(paths.calls) == ["lead", "writer"]
        rt.resume(make_answer(pending.pending.id, True))
        final = run_in_thread(lambda: rt.wait(pending.handle_id))
        assert final.status == "done" and final.text.startswith("lead: the note is out")
        assert team.lines(paths.calls) == ["lead", "writer", "writer", "lead"]  # the lead: one step more, no replay
        assert team.lines(paths.effects) == ["published launch"]
        assert len(writers(rt, pending.handle_id)) == 1
        assert final.turns == 2  # the step that delegated counted once, with the one after it
    finally:
        rt.release() if where else rt.close(rt.root)


def test_a_resume_in_another_process_asks_no_model_again_and_reattaches(paths, tmp_path):
    state = str(tmp_path / "state.db")
    out = subprocess.run([sys.executable, SCRIPT, "pending", state, paths.runtime_id, paths.effects, paths.calls], capture_output=True, text=True, timeout=60)
    started = json.loads(out.stdout.strip().splitlines()[-1])
    assert started["status"] == "pending", out.stderr
    rt = team.writing_runtime(state, paths.runtime_id, paths.effects, paths.calls)
    try:
        rt.resume(make_answer(started["pending"]["id"], True))
        final = run_in_thread(lambda: rt.wait(started["handle"]))
        assert final.status == "done"
        assert team.lines(paths.calls) == ["lead", "writer", "writer", "lead"]
        assert team.lines(paths.effects) == ["published launch"]
        assert len(writers(rt, started["handle"])) == 1
        assert [e["event"] for e in rt.events()].count("reattach") == 1
    finally:
        rt.release()


def test_a_resumed_turn_counts_its_steps_once_against_max_turns(where, paths):
    rt = team.writing_runtime(where, paths.runtime_id, paths.effects, paths.calls, lead_budget=Budget(max_turns=1))
    try:
        pending = run_in_thread(lambda: rt.run_agent("lead", "write and publish"))
        rt.resume(make_answer(pending.pending.id, True))
        final = run_in_thread(lambda: rt.wait(pending.handle_id))
        assert final.status == "incomplete" and final.limit == "maxTurns"
        assert final.turns == 1
        assert team.lines(paths.calls).count("lead") == 1
        assert team.lines(paths.effects) == ["published launch"]  # the approved call itself ran
    finally:
        rt.release() if where else rt.close(rt.root)


def test_a_resume_whose_continuation_fails_keeps_the_answer_and_retry_finishes_it(where, paths):
    rt = team.writing_runtime(where, paths.runtime_id, paths.effects, paths.calls, down=paths.down)
    try:
        pending = run_in_thread(lambda: rt.run_agent("lead", "write and publish"))
        Path(paths.down).touch()  # the model server goes down before the answer comes
        rt.resume(make_answer(pending.pending.id, True))
        failed = run_in_thread(lambda: rt.wait(pending.handle_id))
        assert failed.status == "error" and "down" in failed.text
        assert team.lines(paths.effects) == ["published launch"]  # the approved tool ran before the model call failed
        os.remove(paths.down)
        rt.retry(pending.handle_id)
        final = run_in_thread(lambda: rt.wait(pending.handle_id))
        assert final.status == "done"
        assert team.lines(paths.effects) == ["published launch"]  # exactly once overall
        assert len(writers(rt, pending.handle_id)) == 1
        assert team.lines(paths.calls).count("lead") == 2  # before the approval, and the step after it
    finally:
        rt.release() if where else rt.close(rt.root)


def test_retry_of_a_handle_whose_last_turn_did_not_fail_is_refused(paths):
    rt = team.writing_runtime(None, paths.runtime_id, paths.effects, paths.calls)
    try:
        pending = rt.run_agent("lead", "write and publish")
        with pytest.raises(ToolnexusError, match="nothing to retry"):
            rt.retry(pending.handle_id)
    finally:
        rt.close(rt.root)


def test_a_fresh_wake_supersedes_a_failed_turn(paths):
    rt = team.writing_runtime(None, paths.runtime_id, paths.effects, paths.calls, down=paths.down)
    try:
        Path(paths.down).touch()
        lead = rt.spawn(rt.root, "lead")
        rt.wake(lead, "write")
        assert run_in_thread(lambda: rt.wait(lead)).status == "error"
        rt.wake(lead, "write again")  # a new turn: the failed one will not be tried again
        assert run_in_thread(lambda: rt.wait(lead)).status == "error"
        with pytest.raises(ToolnexusError):
            rt.close(lead)
            rt.retry(lead)
    finally:
        rt.close(rt.root)
