"""Runtime(dispatcher=...): turns committed as queued in the state, one message each, run by
whichever runtime claims them. A dispatcher that keeps its messages in a list stands in for
the broker here; test_celery.py runs the same path through real Celery workers."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from _helpers import Asker, asker_step, call, task, text
from conftest import run_in_thread
from toolnexus import AgentDef, Budget, DispatchError, Runtime, Tool, make_answer
from toolnexus.dispatch import Dispatcher, run_turn
from toolnexus.testing import ScriptedModel, tool_messages


class Outbox:
    """A dispatcher whose messages wait in a list; ``down`` makes sending fail."""

    resend_after_s = 0.0

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, int, int]] = []
        self.down = False
        self._lock = threading.Lock()

    def send(self, runtime_id: str, handle_id: str, serial: int, segment: int) -> None:
        with self._lock:
            if self.down:
                raise DispatchError("the broker is down")
            self.sent.append((runtime_id, handle_id, serial, segment))

    def deliver(self, rt: Runtime) -> list[bool]:
        """Run every message so far on ``rt``, as a worker would; whether each ran a turn."""
        with self._lock:
            batch, self.sent = self.sent, []
        return [run_turn(rt, *message) for message in batch]


def registry() -> dict[str, AgentDef]:
    return {
        "boss": AgentDef("boss", "delegates", model="m-boss", team=("helper",), budget=Budget(max_concurrent=1)),
        "helper": AgentDef("helper", "helps", model="m-helper"),
    }


def model() -> ScriptedModel:
    def boss(request: dict[str, Any]) -> dict[str, Any]:
        found = tool_messages(request)
        return text(f"boss: {found[-1]}") if found else {"tool_calls": [task("c1", "helper", "help")]}

    return ScriptedModel({"m-boss": boss, "m-helper": [text("helped")]})


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


@pytest.fixture
def state(tmp_path: Path) -> str:
    return str(tmp_path / "tree.db")


def runtime(state: str, outbox: Outbox, **options: Any) -> Runtime:
    return Runtime(registry(), generate=model(), state=state, dispatcher=outbox, lease=60, **options)


def test_an_outbox_is_a_dispatcher():
    assert isinstance(Outbox(), Dispatcher)


def test_wake_commits_the_turn_as_queued_and_sends_one_message(state, outbox):
    with runtime(state, outbox) as rt:
        helper = rt.spawn(rt.root, "helper")
        rt.wake(helper, "hi")
        assert outbox.sent == [("default", helper.id, 1, 0)]
        assert rt.inspect(helper).state == "running"
        assert rt.wait(helper, timeout=0).status == "timeout"  # nobody runs it in this process
        with runtime(state, outbox) as worker:
            assert outbox.deliver(worker) == [True]
        assert rt.wait(helper, timeout=5).text == "helped"
        assert rt.transitions(helper) == ["idle\u2192running", "running\u2192idle"]


def test_a_message_for_a_claimed_or_finished_turn_does_nothing(state, outbox):
    with runtime(state, outbox) as rt, runtime(state, outbox) as worker:
        helper = rt.spawn(rt.root, "helper")
        rt.wake(helper, "hi")
        message = outbox.sent[0]
        assert outbox.deliver(worker) == [True]
        assert run_turn(worker, *message) is False
        assert run_turn(worker, "another-tree", *message[1:]) is False
        assert rt.inspect(helper).turns == 1


def test_a_parent_waiting_on_a_child_nobody_claimed_runs_it_itself(state, outbox):
    with runtime(state, outbox) as rt:
        boss = rt.spawn(rt.root, "boss")
        rt.wake(boss, "go")
        with runtime(state, outbox) as worker:
            # One delivery runs the boss; its task call finds the helper unclaimed and runs it.
            assert run_in_thread(lambda: outbox.deliver(worker)) == [True]
            assert outbox.deliver(worker) == [False]  # the helper's own message came too late
        assert rt.wait(boss, timeout=5).text == "boss: helped"


def test_a_wake_while_the_broker_is_down_commits_and_the_sweep_sends_it_later(state, outbox, caplog):
    with runtime(state, outbox) as rt:
        helper = rt.spawn(rt.root, "helper")
        outbox.down = True
        rt.wake(helper, "hi")  # no exception: the turn is committed as queued
        assert outbox.sent == [] and rt.inspect(helper).state == "running"
        assert "not sent" in caplog.text
        outbox.down = False
        rt._scheduler.on_beat()  # what the heartbeat does every third of a lease
        assert outbox.sent == [("default", helper.id, 1, 0)]


def test_interrupting_a_queued_turn_frees_its_slot_for_the_next_sibling(state, outbox):
    with runtime(state, outbox) as rt:
        boss = rt.spawn(rt.root, "boss")  # max_concurrent=1
        first, second = rt.spawn(boss, "helper"), rt.spawn(boss, "helper")
        rt.wake(first, "one")
        rt.wake(second, "two")  # waits for the slot
        assert [m[1] for m in outbox.sent] == [first.id]
        rt.interrupt(first)
        assert rt.wait(first, timeout=0).status == "interrupted"
        assert [m[1] for m in outbox.sent] == [first.id, second.id]
        with runtime(state, outbox) as worker:
            assert outbox.deliver(worker) == [False, True]
        assert rt.wait(second, timeout=5).text == "helped"


def test_resume_queues_every_turn_of_the_path_and_a_worker_finishes_them(state, outbox):
    team = {
        "lead": AgentDef("lead", "relays", model="m-lead", team=("asker",)),
        "asker": AgentDef("asker", "asks", model="m-asker", tools=[Asker().tool()]),
    }

    def lead(request: dict[str, Any]) -> dict[str, Any]:
        found = tool_messages(request)
        return text(f"lead: {found[-1]}") if found else {"tool_calls": [task("c1", "asker", "ask")]}

    scripted = ScriptedModel({"m-lead": lead, "m-asker": asker_step})
    with Runtime(team, generate=scripted, state=state, dispatcher=outbox, lease=60) as rt:
        lead_handle = rt.spawn(rt.root, "lead")
        rt.wake(lead_handle, "go")
        with Runtime(team, generate=scripted, state=state, dispatcher=outbox, lease=60) as worker:
            run_in_thread(lambda: outbox.deliver(worker))
            pending = rt.wait(lead_handle, timeout=5)
            assert pending.status == "pending"
            assert outbox.deliver(worker) == [False]  # the asker's own message, too late
            rt.resume(make_answer(pending.pending.id, True))
            assert sorted(m[1] for m in outbox.sent) == sorted([lead_handle.id, f"{lead_handle.id}/asker.1"])
            run_in_thread(lambda: outbox.deliver(worker))
        done = rt.wait(lead_handle, timeout=5)
        assert done.status == "done" and done.text.startswith("lead: ")
        arrow = "\u2192"
        expected = ["idle", "running", "suspended", "idle", "running", "idle", "closed"]
        assert rt.transitions(f"{lead_handle.id}/asker.1") == [f"{a}{arrow}{b}" for a, b in zip(expected, expected[1:])]


def test_a_dispatched_turn_runs_its_plain_tool_calls_concurrently(state, outbox):
    meet = threading.Barrier(2, timeout=5)  # each call returns only once both are running

    def rendezvous(args: dict[str, Any], ctx: Any) -> str:
        meet.wait()
        return "met"

    team = {"pair": AgentDef("pair", "calls two tools", model="m-pair", tools=[Tool("meet", "meets", None, rendezvous)])}

    def pair(request: dict[str, Any]) -> dict[str, Any]:
        found = tool_messages(request)
        return text(",".join(found)) if found else {"tool_calls": [call("a", "meet"), call("b", "meet")]}

    with Runtime(team, generate=ScriptedModel({"m-pair": pair}), state=state, dispatcher=outbox, lease=60) as rt:
        handle = rt.spawn(rt.root, "pair")
        rt.wake(handle, "go")
        assert run_in_thread(lambda: outbox.deliver(rt)) == [True]
        assert rt.wait(handle, timeout=5).text == "met,met"
