"""The handle state machine and the exact transitions the runtime records (CONTRACT §7D)."""

from __future__ import annotations

import threading

import pytest

from _helpers import HANG, Asker, Gate, asker_step, spawn_pending, text
from toolnexus import AgentDef, Budget, Runtime, UnknownRequest, make_answer
from toolnexus._team.handle import Handle, HandleRecord, IllegalTransition
from toolnexus._stores.memory import MemoryTree
from toolnexus.testing import ScriptedModel

ARROW = "\u2192"


def record_handle():
    return Handle(HandleRecord(id="root/x.1", name="x", parent="root", depth=1, budget=Budget()), None, MemoryTree())


def walk(handle, *states):
    for state in states:
        with handle.lock:
            handle.move(state)


def arrows(*pairs):
    return [f"{a}{ARROW}{b}" for a, b in pairs]


# --- the state machine on a bare record ------------------------------------------------------------


def test_new_handle_record_starts_idle_with_no_transitions():
    handle = record_handle()
    assert handle.record.state == "idle"
    assert handle.record.transitions == []


def test_legal_moves_follow_the_state_machine():
    handle = record_handle()
    walk(handle, "running", "idle", "running", "suspended", "running", "suspended", "idle", "closed")
    assert handle.record.state == "closed"
    assert handle.record.transitions == arrows(
        ("idle", "running"),
        ("running", "idle"),
        ("idle", "running"),
        ("running", "suspended"),
        ("suspended", "running"),
        ("running", "suspended"),
        ("suspended", "idle"),
        ("idle", "closed"),
    )


def test_move_notifies_waiters_on_the_condition():
    handle = record_handle()
    seen = threading.Event()

    def waiter():
        with handle.lock:
            if handle.changed.wait_for(lambda: handle.record.state == "running", timeout=HANG):
                seen.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    walk(handle, "running")
    thread.join(HANG)
    assert seen.is_set()


ILLEGAL = [
    ((), "idle"),
    ((), "suspended"),
    (("running",), "running"),
    (("running",), "closed"),
    (("running", "suspended"), "suspended"),
    (("running", "suspended"), "closed"),
    (("closed",), "idle"),
    (("closed",), "running"),
    (("closed",), "suspended"),
    (("closed",), "closed"),
]


@pytest.mark.parametrize(("path", "target"), ILLEGAL, ids=lambda v: "-".join(v) if isinstance(v, tuple) else v)
def test_illegal_move_raises_illegal_transition(path, target):
    handle = record_handle()
    walk(handle, *path)
    before_state = handle.record.state
    before = list(handle.record.transitions)
    with pytest.raises(IllegalTransition, match=f"{before_state}{ARROW}{target}"):
        walk(handle, target)
    assert handle.record.state == before_state
    assert handle.record.transitions == before


# --- transitions recorded by the runtime ---------------------------------------------------------


@pytest.fixture
def setup():
    """A runtime with an echo agent, an asking agent and a gated (blocking) agent."""
    asker = Asker()
    gate = Gate(text("late"))
    model = ScriptedModel({"echo": lambda r: text("ok"), "asker": asker_step, "gated": gate})
    registry = {
        "echo": AgentDef("echo", "Echoes.", model="echo"),
        "asker": AgentDef("asker", "Asks.", model="asker", tools=[asker.tool()]),
        "gated": AgentDef("gated", "Blocks.", model="gated"),
    }
    rt = Runtime(registry, generate=model)

    class Setup:
        pass

    s = Setup()
    s.rt, s.asker, s.entered, s.release = rt, asker, gate.entered, gate.release
    yield s
    gate.release.set()
    rt.close(rt.root)


def test_transitions_of_a_simple_run(setup):
    rt = setup.rt
    h = rt.spawn(rt.root, "echo")
    rt.wake(h, "hi")
    assert rt.wait(h, timeout=HANG).status == "done"
    assert rt.transitions(h) == arrows(("idle", "running"), ("running", "idle"))
    rt.wake(h, "again")
    rt.wait(h, timeout=HANG)
    assert rt.transitions(h) == arrows(("idle", "running"), ("running", "idle")) * 2


def test_state_is_running_during_a_turn(setup):
    rt = setup.rt
    h = rt.spawn(rt.root, "gated")
    rt.wake(h, "go")
    assert rt.inspect(h).state == "running"  # the flip happens inside wake
    assert setup.entered.wait(HANG)
    assert rt.inspect(h).state == "running"
    setup.release.set()
    assert rt.wait(h, timeout=HANG).text == "late"
    assert rt.inspect(h).state == "idle"


def test_transitions_of_a_suspension_and_resume(setup):
    rt = setup.rt
    h = spawn_pending(rt)
    assert rt.inspect(h).state == "suspended"
    assert rt.transitions(h) == arrows(("idle", "running"), ("running", "suspended"))
    rt.resume(make_answer(setup.asker.requests[0].id, True, data="yes"))
    result = rt.wait(h, timeout=HANG)
    assert result.status == "done"
    assert result.text == "finished:approved:yes"
    assert rt.transitions(h) == arrows(
        ("idle", "running"), ("running", "suspended"), ("suspended", "idle"), ("idle", "running"), ("running", "idle")
    )


def test_transitions_of_an_interrupt_of_a_running_turn(setup):
    rt = setup.rt
    h = rt.spawn(rt.root, "gated")
    rt.wake(h, "go")
    assert setup.entered.wait(HANG)
    rt.interrupt(h)
    assert rt.inspect(h).state == "idle"
    assert rt.wait(h).status == "interrupted"
    assert rt.transitions(h) == arrows(("idle", "running"), ("running", "idle"))
    setup.release.set()
    rt.close(h)
    assert rt.transitions(h) == arrows(("idle", "running"), ("running", "idle"), ("idle", "closed"))


def test_transitions_of_an_interrupt_of_a_suspended_handle(setup):
    rt = setup.rt
    h = spawn_pending(rt)
    rt.interrupt(h)
    assert rt.inspect(h).state == "idle"
    assert rt.inspect(h).pending is None
    assert rt.transitions(h) == arrows(("idle", "running"), ("running", "suspended"), ("suspended", "idle"))
    with pytest.raises(UnknownRequest):
        rt.resume(make_answer(setup.asker.requests[0].id, True))


def test_transitions_of_closing_a_suspended_handle(setup):
    rt = setup.rt
    h = spawn_pending(rt)
    rt.close(h)
    assert rt.inspect(h).state == "closed"
    assert rt.transitions(h) == arrows(
        ("idle", "running"), ("running", "suspended"), ("suspended", "idle"), ("idle", "closed")
    )


def test_transitions_of_closing_a_never_run_handle(setup):
    rt = setup.rt
    h = rt.spawn(rt.root, "echo")
    rt.close(h)
    assert rt.transitions(h) == arrows(("idle", "closed"))
    assert rt.transitions(rt.root) == []


def test_closing_the_root_records_its_only_transition(setup):
    rt = setup.rt
    rt.close(rt.root)
    assert rt.transitions(rt.root) == arrows(("idle", "closed"))
