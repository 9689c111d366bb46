"""Bounded memory: at most ``keep_closed`` closed handles and 10,000 events stay in memory
(CONTRACT §11 "Bounded memory"); with a state, dropped handles stay readable from it."""

from __future__ import annotations

import pytest

import _durable_team as team
from toolnexus import AgentDef, ConfigError, Runtime, UnknownHandle
from toolnexus.testing import ScriptedModel, tool_messages
from toolnexus._stores.memory import MAX_EVENTS


def echo_runtime(**options) -> Runtime:
    return Runtime(team.registry(), generate=team.model(), **options)


def test_only_the_newest_closed_handles_stay_in_memory():
    rt = echo_runtime(keep_closed=3)
    try:
        ids = [rt.run_agent("echo", f"hello {n}").handle_id for n in range(6)]
        with pytest.raises(UnknownHandle):
            rt.inspect(ids[0])
        assert [rt.inspect(h).state for h in ids[3:]] == ["closed"] * 3
        assert rt.inspect(rt.root).children == ids[3:]
        assert [v.id for v in rt.handles()] == ["root", *ids[3:]]
        assert rt.conversation_store.get(ids[0]) is None  # its transcript left with it
        assert rt.conversation_store.get(ids[5]) is not None
    finally:
        rt.close(rt.root)


def test_live_handles_are_never_dropped():
    rt = echo_runtime(keep_closed=0)
    try:
        idle = rt.spawn(rt.root, "echo")
        for n in range(3):
            rt.run_agent("echo", f"hello {n}")
        assert rt.inspect(idle).state == "idle"
        assert [v.id for v in rt.handles()] == ["root", idle.id]
    finally:
        rt.close(rt.root)


def test_a_task_child_stays_while_its_parent_turn_may_reattach():
    def boss(request):
        done = tool_messages(request)
        if len(done) < 2:  # the same delegation twice in one turn: the second reattaches
            return {"tool_calls": [{"id": f"t{len(done)}", "name": "task", "arguments": {"agent": "echo", "prompt": "same"}}]}
        return {"content": " / ".join(done)}

    registry = {"boss": AgentDef("boss", "delegates", model="m-boss", team=("echo",)), "echo": team.registry()["echo"]}
    model = ScriptedModel({"m-boss": boss, "m-echo": lambda request: {"content": "echoed"}})
    rt = Runtime(registry, generate=model, keep_closed=0)
    try:
        result = rt.run_agent("boss", "go")
        assert result.text == "echoed / echoed"
        reattached = [e for e in rt.events() if e["event"] == "reattach"]
        assert [(e["handle"], e["state"]) for e in reattached] == [("root/boss.1/echo.1", "closed")]
        with pytest.raises(UnknownHandle):  # once the boss closed, both left memory
            rt.inspect("root/boss.1/echo.1")
    finally:
        rt.close(rt.root)


def test_events_in_memory_are_capped_oldest_first():
    rt = echo_runtime(keep_closed=0)
    try:
        for n in range(MAX_EVENTS // 2 + 10):  # a spawn and a close event each
            rt.run_agent("echo", "hi")
        events = rt.events()
        assert len(events) == MAX_EVENTS
        assert events[-1]["event"] == "close"
        assert events[0]["handle"] != "root/echo.1"
    finally:
        rt.close(rt.root)


def test_with_a_state_dropped_handles_stay_readable_by_id_and_handles_lists_the_recent_ones(tmp_path):
    rt = echo_runtime(keep_closed=1, state=str(tmp_path / "state.db"))
    try:
        ids = [rt.run_agent("echo", f"hello {n}").handle_id for n in range(4)]
        assert rt.inspect(ids[0]).state == "closed"
        assert [v.id for v in rt.handles()] == ["root", ids[-1]]  # live ones, and keep_closed closed ones
        assert len([e for e in rt.events() if e["event"] == "spawn"]) == 4
    finally:
        rt.release()


def test_keep_closed_must_not_be_negative():
    with pytest.raises(ConfigError, match="keep_closed"):
        echo_runtime(keep_closed=-1)


def test_a_finished_agent_run_leaves_no_garbage_for_the_cycle_collector():
    import gc

    from _helpers import calls, task, text
    from toolnexus import agent

    def boss(request):
        found = tool_messages(request)
        return text(" ".join(found)) if found else calls(task("t1", "kid", "a"), task("t2", "kid", "b"))

    kid = agent("kid", does="Answers", model="kid")
    lead = agent("lead", does="Delegates twice", model="lead", team=[kid])
    model = ScriptedModel({"kid": lambda request: text("ok"), "lead": boss})
    try:
        assert lead.run("go", generate=model).text == "ok ok"  # warm: the pool's threads start once
        gc.collect()
        gc.disable()
        try:
            gc.set_debug(gc.DEBUG_SAVEALL)
            result = lead.run("go", generate=model)
            assert result.text == "ok ok"
            del result  # the last reference to the closed runtime
            gc.collect()
            left = [type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("toolnexus")]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert left == []  # reference counting freed the whole tree
    finally:
        lead.close()
