"""SIGKILL in the middle of a turn: a new process opens the tree and finishes it, running
nothing twice (CONTRACT §11 "Nothing run twice", "In-doubt tool calls"). Both stores."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

import _durable_team as team
from _durable_team import files, state  # noqa: F401 - fixtures
from conftest import run_in_thread
from toolnexus import Runtime, make_answer

SCRIPT = str(Path(__file__).resolve().parent / "_durable_team.py")
FINAL = "lead: worker: charged A-1"




def crash(state, files, point: str, retry: str = "never") -> None:
    """Run the lead→worker team in a child process that SIGKILLs itself at ``point``."""
    done = subprocess.run(
        [sys.executable, SCRIPT, "crash", state, files.runtime_id, files.effects, files.calls, point, retry],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr)


def recovered(state, files, retry: str = "never", **options) -> Runtime:
    return team.crash_runtime(state, files.runtime_id, files.effects, files.calls, retry, **options)


@contextlib.contextmanager
def after_crash(state, files, point: str, retry: str = "never", **options) -> Iterator[Runtime]:
    """Crash the run at ``point`` in a child process; a new runtime here, released after."""
    crash(state, files, point, retry)
    rt = recovered(state, files, retry, **options)
    try:
        yield rt
    finally:
        rt.release()


def finish(rt: Runtime):
    return run_in_thread(lambda: rt.wait("root/lead.1", timeout=30), timeout=40)


def uninterrupted_ledgers(tmp_path) -> list[tuple[str, int, int, int]]:
    return uninterrupted(tmp_path)[0]


def uninterrupted(tmp_path) -> tuple[list[tuple[str, int, int, int]], dict[str, float | None], float | None]:
    """The uninterrupted run's ledgers, each handle's cost and the lead's result cost."""
    rt = team.crash_runtime(str(tmp_path / "reference.db"), "reference", str(tmp_path / "ref-effects.txt"), None)
    try:
        lead = rt.spawn(rt.root, "lead")
        rt.wake(lead, "charge order A-1")
        result = finish(rt)
        assert result.text == FINAL
        return ledgers(rt), costs(rt), result.cost
    finally:
        rt.release()


def ledgers(rt: Runtime) -> list[tuple[str, int, int, int]]:
    return [(v.id, v.turns, v.tokens, v.tool_calls) for v in rt.handles()]


def costs(rt: Runtime) -> dict[str, float | None]:
    return {v.id: v.cost for v in rt.handles()}


@pytest.mark.parametrize("point", ["lead-after-reply", "worker-after-reply", "worker-second-call"])
def test_a_killed_turn_is_finished_by_a_new_process_without_repeating_a_step(state, files, tmp_path, point):
    crash(state, files, point)
    before = Counter(team.lines(files.calls))
    rt = recovered(state, files)
    try:
        result = finish(rt)
        assert (result.status, result.text) == ("done", FINAL)
        calls = Counter(team.lines(files.calls))
        # each model reply was asked once: the recorded ones were served from the journal
        assert calls == Counter({"lead": 2, "worker": 2}), (before, calls)
        assert len(team.lines(files.effects)) == 1  # the tool ran once
        assert rt.inspect("root/lead.1").children == ["root/lead.1/worker.1"]  # no second child
        reference, reference_costs, reference_cost = uninterrupted(tmp_path)
        assert ledgers(rt) == reference
        # a recorded reply was charged once, before the crash: the money matches too
        assert costs(rt) == pytest.approx(reference_costs) and None not in reference_costs.values()
        assert result.cost == pytest.approx(reference_cost)
        assert any(e["event"] == "recovered" for e in rt.events())
    finally:
        rt.release()


def test_a_tool_in_doubt_with_retry_never_is_not_run_again(state, files):
    with after_crash(state, files, "tool-after-effect", retry="never") as rt:
        result = finish(rt)
        assert result.status == "done"
        assert "in doubt" in result.text
        assert len(team.lines(files.effects)) == 1
        assert rt.inspect("root/lead.1").children == ["root/lead.1/worker.1"]


def test_a_tool_in_doubt_with_retry_safe_runs_again_with_the_same_idempotency_key(state, files, tmp_path):
    with after_crash(state, files, "tool-after-effect", retry="safe") as rt:
        result = finish(rt)
        assert (result.status, result.text) == ("done", FINAL)
        effects = team.lines(files.effects)
        assert len(effects) == 2 and len({line.split()[0] for line in effects}) == 1  # one key: the system dedups it
        assert ledgers(rt) == uninterrupted_ledgers(tmp_path)


def test_a_tool_in_doubt_with_retry_ask_suspends_and_an_ok_runs_it_again(state, files):
    with after_crash(state, files, "tool-after-effect", retry="ask") as rt:
        pending = finish(rt)
        assert pending.status == "pending"
        assert pending.pending.kind == "retry" and "charge" in pending.pending.prompt
        assert pending.pending.data["tool"] == "charge"
        rt.resume(make_answer(pending.pending.id, True))
        result = finish(rt)
        assert (result.status, result.text) == ("done", FINAL)
        effects = team.lines(files.effects)
        assert len(effects) == 2 and len({line.split()[0] for line in effects}) == 1


def test_a_tool_in_doubt_with_retry_ask_declined_gets_the_in_doubt_error(state, files):
    with after_crash(state, files, "tool-after-effect", retry="ask") as rt:
        pending = finish(rt)
        rt.resume(make_answer(pending.pending.id, False))
        result = finish(rt)
        assert result.status == "done" and "in doubt" in result.text
        assert len(team.lines(files.effects)) == 1


def test_a_call_killed_before_its_effect_is_still_in_doubt(state, files):
    with after_crash(state, files, "tool-before-effect", retry="never") as rt:
        assert "in doubt" in finish(rt).text
        assert team.lines(files.effects) == []


def test_recover_interrupt_ends_the_orphaned_turns_interrupted(state, files):
    with after_crash(state, files, "worker-after-reply", recover="interrupt") as rt:
        assert rt.wait("root/lead.1", timeout=10).status == "interrupted"
        assert {v.state for v in rt.handles()[1:]} == {"idle"}
        assert team.lines(files.effects) == []


def test_recover_leave_waits_for_rt_recover(state, files):
    with after_crash(state, files, "worker-after-reply", recover="leave") as rt:
        assert rt.inspect("root/lead.1").state == "running"
        assert rt.wait("root/lead.1", timeout=0.3).status == "timeout"
        assert rt.recover("root/lead.1/worker.1") and rt.recover("root/lead.1")
        assert finish(rt).text == FINAL
        assert not rt.recover("root/lead.1")
