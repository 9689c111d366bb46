"""The runtime's verbs: spawn, post, wake, wait, inspect and the read-only views (CONTRACT §7D)."""

from __future__ import annotations

import inspect
import threading

import pytest

from toolnexus import (
    AgentDef,
    HandleClosed,
    InboxFull,
    Runtime,
    SpawnError,
    Tool,
    ToolnexusError,
    UnknownHandle,
    make_answer,
)
from toolnexus._team.handle import Handle
from toolnexus.testing import USAGE, ScriptedModel, last_user_text, tool_messages

from _helpers import EMPTY_SCHEMA, HANG, Asker, Recorder, asker_runtime, asker_step, call, calls, gated_runtime, spawn_pending, task
from _helpers import text as reply
from conftest import run_in_thread


# --- helpers (shared ones in _helpers.py; the ``cleanup`` fixture is in conftest.py) -----------


def echo(request):
    return reply("echo:" + last_user_text(request))


def ping_tool():
    return Tool("ping", "Pings.", EMPTY_SCHEMA, lambda args, ctx: "pong")


def echo_runtime(cleanup, **options):
    model = ScriptedModel({"echo": echo})
    return cleanup.runtime({"echo": AgentDef("echo", "Echoes.", model="echo")}, generate=model, **options)


# --- spawn ---------------------------------------------------------------------------------


def test_spawn_ids_count_per_parent_and_are_deterministic():
    def build():
        registry = {"a": AgentDef("a", "A."), "b": AgentDef("b", "B.")}
        with Runtime(registry, generate=echo) as rt:
            a1 = rt.spawn(rt.root, "a")
            b2 = rt.spawn(rt.root, "b")
            a3 = rt.spawn(rt.root, "a")
            under_a1 = [rt.spawn(a1, "b"), rt.spawn(a1, "a")]
            under_b2 = rt.spawn(b2.id, "a")
            return [a1.id, b2.id, a3.id, *(h.id for h in under_a1), under_b2.id]

    first = build()
    assert first == ["root/a.1", "root/b.2", "root/a.3", "root/a.1/b.1", "root/a.1/a.2", "root/b.2/a.1"]
    assert build() == first


def test_spawned_handle_starts_idle_with_no_transitions(cleanup):
    rt = echo_runtime(cleanup)
    h = rt.spawn(rt.root, "echo")
    assert isinstance(h, Handle)
    view = rt.inspect(h)
    assert view.state == "idle"
    assert view.parent == "root"
    assert rt.transitions(h) == []
    assert rt.inspect(rt.root).children == [h.id]


def test_spawn_of_unknown_agent_raises_spawn_error_naming_it(cleanup):
    rt = echo_runtime(cleanup)
    with pytest.raises(SpawnError, match="unknown agent"):
        rt.spawn(rt.root, "nobody")
    assert rt.inspect(rt.root).children == []


def test_spawn_under_closed_parent_raises_spawn_error_closed(cleanup):
    rt = echo_runtime(cleanup)
    h = rt.spawn(rt.root, "echo")
    rt.close(h)
    with pytest.raises(SpawnError, match="closed"):
        rt.spawn(h, "echo")
    assert rt.inspect(h).children == []


# --- post ------------------------------------------------------------------------------------


def test_post_appends_to_inbox_without_state_change(cleanup):
    rt = echo_runtime(cleanup)
    h = rt.spawn(rt.root, "echo")
    rt.post(h, "one")
    rt.post(h, "two", sender="root", channel="note")
    view = rt.inspect(h)
    assert view.inbox == 2
    assert view.state == "idle"
    assert view.turns == 0
    assert rt.transitions(h) == []


def test_post_to_full_inbox_raises_inbox_full(cleanup):
    rt = echo_runtime(cleanup, inbox_cap=2)
    h = rt.spawn(rt.root, "echo")
    rt.post(h, "one")
    rt.post(h, "two")
    with pytest.raises(InboxFull, match="inbox full"):
        rt.post(h, "three")
    assert rt.inspect(h).inbox == 2
    rejected = [e for e in rt.events() if e["event"] == "post_rejected"]
    assert [e["handle"] for e in rejected] == [h.id]


def test_post_to_closed_handle_raises_handle_closed(cleanup):
    rt = echo_runtime(cleanup)
    h = rt.spawn(rt.root, "echo")
    rt.close(h)
    with pytest.raises(HandleClosed, match="closed"):
        rt.post(h, "late")
    assert rt.inspect(h).inbox == 0


def test_whole_inbox_enters_the_next_turn_as_one_block(cleanup):
    recorder = Recorder()
    rt = cleanup.runtime({"echo": AgentDef("echo", "Echoes.", model="echo")}, generate=ScriptedModel({"echo": recorder}))
    h = rt.spawn(rt.root, "echo")
    rt.post(h, "first note")
    rt.post(h, "second note", sender="root", channel="memo")
    rt.wake(h, "do it")
    assert rt.wait(h).status == "done"
    text = recorder.inputs[0]
    assert text.startswith("do it")
    assert "[from: root, channel: memo] second note" in text
    assert "[from: external, channel: external] first note" in text
    assert rt.inspect(h).inbox == 0


# --- handles and ids ---------------------------------------------------------------------------


def test_every_verb_accepts_handle_or_its_id(cleanup):
    rt = echo_runtime(cleanup)
    for ref in ("handle", "id"):
        parent = rt.spawn(rt.root if ref == "handle" else "root", "echo")
        h = parent if ref == "handle" else parent.id
        child = rt.spawn(h, "echo")
        rt.post(h, "note")
        assert rt.inspect(h).inbox == 1
        rt.wake(h, "hello")
        result = rt.wait(h, timeout=HANG)
        assert result.status == "done"
        assert result.handle_id == parent.id
        assert rt.transitions(h) == ["idle\u2192running", "running\u2192idle"]
        assert rt.budget(h) is not None
        rt.interrupt(h)
        rt.close(child if ref == "handle" else child.id)
        rt.close(h)
        assert rt.inspect(h).state == "closed"
        assert rt.inspect(child.id).state == "closed"


VERBS = {
    "spawn": lambda rt, ref: rt.spawn(ref, "echo"),
    "post": lambda rt, ref: rt.post(ref, "x"),
    "wake": lambda rt, ref: rt.wake(ref, "x"),
    "wait": lambda rt, ref: rt.wait(ref, timeout=0.01),
    "inspect": lambda rt, ref: rt.inspect(ref),
    "transitions": lambda rt, ref: rt.transitions(ref),
    "interrupt": lambda rt, ref: rt.interrupt(ref),
    "close": lambda rt, ref: rt.close(ref),
    "budget": lambda rt, ref: rt.budget(ref),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_unknown_handle_id_raises_unknown_handle(cleanup, verb):
    rt = echo_runtime(cleanup)
    rt.spawn(rt.root, "echo")
    with pytest.raises(UnknownHandle):
        VERBS[verb](rt, "root/echo.99")
    assert [v.id for v in rt.handles()] == ["root", "root/echo.1"]


# --- wake ----------------------------------------------------------------------------------------


def test_wake_on_running_handle_is_noop_and_post_waits_for_next_turn(cleanup):
    recorder = Recorder()
    gate = cleanup.gate(reply("first done"))
    seen = []

    def step(request):
        seen.append(last_user_text(request))
        return gate(request) if len(seen) == 1 else recorder(request)

    rt = cleanup.runtime({"echo": AgentDef("echo", "Echoes.", model="echo")}, generate=ScriptedModel({"echo": step}))
    h = rt.spawn(rt.root, "echo")
    rt.wake(h, "first")
    assert gate.entered.wait(HANG)
    rt.post(h, "later")
    rt.wake(h, "ignored")  # running: a no-op, the post waits
    assert rt.inspect(h).state == "running"
    assert rt.inspect(h).inbox == 1
    assert rt.transitions(h) == ["idle\u2192running"]
    gate.release.set()
    first = rt.wait(h, timeout=HANG)
    assert first.text == "first done"
    assert "later" not in seen[0]
    assert rt.inspect(h).inbox == 1  # untouched by the first turn

    rt.wake(h, "second")
    second = rt.wait(h, timeout=HANG)
    assert second.status == "done"
    assert len(seen) == 2
    assert seen[1].startswith("second")
    assert "later" in seen[1]
    assert all("ignored" not in text for text in seen)
    assert rt.inspect(h).inbox == 0


def test_wake_on_suspended_handle_is_noop(cleanup):
    asker = Asker()
    model = ScriptedModel({"asker": asker_step})
    rt = cleanup.runtime({"asker": AgentDef("asker", "Asks.", model="asker", tools=[asker.tool()])}, generate=model)
    h = rt.spawn(rt.root, "asker")
    rt.wake(h, "go")
    result = rt.wait(h, timeout=HANG)
    assert result.status == "pending"
    before = rt.transitions(h)
    rt.post(h, "note")
    rt.wake(h, "again")
    assert rt.inspect(h).state == "suspended"
    assert rt.transitions(h) == before
    assert model.calls == {"asker": 1}
    assert rt.wait(h).status == "pending"


def test_wake_of_root_is_refused(cleanup):
    rt = echo_runtime(cleanup)
    with pytest.raises(ToolnexusError, match="root"):
        rt.wake(rt.root, "x")


# --- wait ------------------------------------------------------------------------------------


def test_wait_with_timeout_on_running_handle_returns_timeout_and_keeps_running(cleanup):
    gate = cleanup.gate(reply("finally"))
    rt = gated_runtime(cleanup, gate)
    h = rt.spawn(rt.root, "slow")
    rt.wake(h, "go")
    assert gate.entered.wait(HANG)
    early = rt.wait(h, timeout=0.05)
    assert early.status == "timeout"
    assert early.handle_id == h.id
    assert rt.inspect(h).state == "running"
    gate.release.set()
    late = rt.wait(h, timeout=HANG)
    assert late.status == "done"
    assert late.text == "finally"
    assert rt.inspect(h).state == "idle"


def test_wait_on_settled_handle_returns_its_last_result(cleanup):
    rt = echo_runtime(cleanup)
    h = rt.spawn(rt.root, "echo")
    rt.wake(h, "one")
    first = rt.wait(h, timeout=HANG)
    assert first.text == "echo:one"
    assert rt.wait(h) == first
    assert rt.wait(h.id, timeout=0.01) == first
    rt.wake(h, "two")
    assert rt.wait(h, timeout=HANG).text == "echo:two"
    assert rt.wait(h).text == "echo:two"


def test_wait_on_never_run_handle_times_out(cleanup):
    rt = echo_runtime(cleanup)
    h = rt.spawn(rt.root, "echo")
    assert rt.wait(h, timeout=0.01).status == "timeout"


# --- inspect and the views -------------------------------------------------------------------------


def test_inspect_reports_every_field(cleanup):
    model = ScriptedModel(
        {
            "boss": [calls(task("t1", "worker", "w")), reply("boss done")],
            "worker": [calls(call("p1", "ping")), reply("worker done")],
        },
        usage=USAGE,
    )
    registry = {
        "boss": AgentDef("boss", "Leads.", model="boss", team=["worker"]),
        "worker": AgentDef("worker", "Works.", model="worker", tools=[ping_tool()]),
    }
    rt = cleanup.runtime(registry, generate=model)
    boss = rt.spawn(rt.root, "boss")
    rt.wake(boss, "go")
    assert rt.wait(boss, timeout=HANG).text == "boss done"
    extra = rt.spawn(boss, "worker")
    rt.post(boss, "x")
    rt.post(boss, "y")

    view = rt.inspect(boss)
    assert view.id == "root/boss.1"
    assert view.name == "boss"
    assert view.state == "idle"
    assert view.parent == "root"
    assert view.children == ["root/boss.1/worker.1", extra.id]
    assert extra.id == "root/boss.1/worker.2"
    assert view.turns == 2
    assert view.tokens == 4 * USAGE["total_tokens"]  # its own two calls plus the child's two
    assert view.tool_calls == 1
    assert view.inbox == 2
    assert view.pending is None

    worker = rt.inspect("root/boss.1/worker.1")
    assert worker.name == "worker"
    assert worker.parent == boss.id
    assert worker.turns == 2
    assert worker.tokens == 2 * USAGE["total_tokens"]
    assert worker.tool_calls == 1
    assert worker.state == "closed"  # a task child is closed once it settles
    assert rt.inspect(rt.root).tokens == 4 * USAGE["total_tokens"]


def test_inspect_shows_pending_request_of_suspended_handle(cleanup):
    asker = Asker()
    rt = asker_runtime(cleanup, asker)
    h = spawn_pending(rt)
    view = rt.inspect(h)
    assert view.state == "suspended"
    assert view.pending is not None
    assert view.pending.id == asker.requests[0].id
    assert view.pending.data["path"] == ["root", "asker.1"]


def test_handles_lists_root_first_then_preorder(cleanup):
    registry = {"a": AgentDef("a", "A."), "b": AgentDef("b", "B.")}
    rt = cleanup.runtime(registry, generate=echo)
    a1 = rt.spawn(rt.root, "a")
    b2 = rt.spawn(rt.root, "b")
    a1b1 = rt.spawn(a1, "b")
    rt.spawn(b2, "a")
    rt.spawn(a1b1, "a")
    rt.spawn(a1, "a")
    assert [v.id for v in rt.handles()] == [
        "root",
        "root/a.1",
        "root/a.1/b.1",
        "root/a.1/b.1/a.1",
        "root/a.1/a.2",
        "root/b.2",
        "root/b.2/a.1",
    ]
    assert rt.handles()[0].parent is None


def test_transitions_use_the_unicode_arrow(cleanup):
    rt = echo_runtime(cleanup)
    h = rt.spawn(rt.root, "echo")
    rt.wake(h, "hi")
    rt.wait(h, timeout=HANG)
    entries = rt.transitions(h)
    assert entries == ["idle\u2192running", "running\u2192idle"]
    assert all("\u2192" in entry and "->" not in entry for entry in entries)


def test_events_entries_have_event_and_handle(cleanup):
    rt = echo_runtime(cleanup, inbox_cap=1)
    h = rt.spawn(rt.root, "echo")
    rt.post(h, "a")
    with pytest.raises(InboxFull):
        rt.post(h, "b")
    rt.close(h)
    events = rt.events()
    assert events, "the runtime logs events"
    assert all("event" in e and "handle" in e for e in events)
    kinds = [(e["event"], e["handle"]) for e in events]
    assert ("spawn", h.id) in kinds
    assert ("post_rejected", h.id) in kinds
    assert ("close", h.id) in kinds
    assert kinds.index(("spawn", h.id)) < kinds.index(("close", h.id))


# --- the store -------------------------------------------------------------------------------


def test_handle_transcript_is_saved_in_the_store(cleanup):
    rt = echo_runtime(cleanup)
    h = rt.spawn(rt.root, "echo")
    assert rt.conversation_store.get(h.id) is None
    rt.wake(h, "hi")
    rt.wait(h, timeout=HANG)
    saved = rt.conversation_store.get(h.id)
    assert [m["role"] for m in saved] == ["user", "assistant"]
    assert saved[0]["content"] == "hi"
    assert saved[1]["content"] == "echo:hi"
    rt.wake(h, "again")
    rt.wait(h, timeout=HANG)
    assert [m["content"] for m in rt.conversation_store.get(h.id)] == ["hi", "echo:hi", "again", "echo:again"]


def test_host_can_seed_handle_history_through_the_store(cleanup):
    seen = []

    def step(request):
        seen.append([dict(m) for m in request["messages"]])
        return reply("hello Ada")

    rt = cleanup.runtime({"echo": AgentDef("echo", "Echoes.", model="echo")}, generate=ScriptedModel({"echo": step}))
    h = rt.spawn(rt.root, "echo")
    seed = [{"role": "user", "content": "my name is Ada"}, {"role": "assistant", "content": "noted"}]
    rt.conversation_store.save(h.id, seed)
    rt.wake(h, "who am I?")
    assert rt.wait(h, timeout=HANG).text == "hello Ada"
    assert seen[0][:2] == seed
    assert seen[0][2] == {"role": "user", "content": "who am I?"}
    saved = rt.conversation_store.get(h.id)
    assert saved[:2] == seed
    assert [m["content"] for m in saved[2:]] == ["who am I?", "hello Ada"]


def test_pending_turn_is_saved_as_it_was_before_the_turn(cleanup):
    asker = Asker()
    rt = asker_runtime(cleanup, asker)
    h = rt.spawn(rt.root, "asker")
    seed = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"}]
    rt.conversation_store.save(h.id, seed)
    rt.wake(h, "go")
    result = rt.wait(h, timeout=HANG)
    assert result.status == "pending"
    assert rt.conversation_store.get(h.id) == seed

    rt.resume(make_answer(asker.requests[0].id, True, data="yes"))
    done = rt.wait(h, timeout=HANG)
    assert done.status == "done"
    assert done.text == "finished:approved:yes"
    saved = rt.conversation_store.get(h.id)
    assert saved[:2] == seed
    assert saved[2] == {"role": "user", "content": "go"}
    assert saved[-1]["content"] == "finished:approved:yes"


# --- lifecycle callbacks, hooks and metrics -------------------------------------------------------


def test_on_spawn_is_called_with_the_new_handle(cleanup):
    spawned = []
    rt = cleanup.runtime({"echo": AgentDef("echo", "Echoes.", model="echo", on_spawn=spawned.append)}, generate=echo)
    h = rt.spawn(rt.root, "echo")
    assert spawned == [h]
    assert isinstance(spawned[0], Handle)
    assert spawned[0].id == "root/echo.1"


def two_agent_runtime(cleanup, registry_extra=None, **options):
    registry = {
        "plain": AgentDef("plain", "Plain.", model="m-plain"),
        **(registry_extra or {}),
    }
    scripts = {definition.model: echo for definition in registry.values()}
    return cleanup.runtime(registry, generate=ScriptedModel(scripts), **options)


def test_runtime_hooks_apply_to_every_agent(cleanup):
    seen = []
    rt = two_agent_runtime(
        cleanup,
        {"other": AgentDef("other", "Other.", model="m-other")},
        hooks={"before_llm": lambda **kw: seen.append(kw["model"])},
    )
    rt.run_agent("plain", "a")
    rt.run_agent("other", "b")
    assert seen == ["m-plain", "m-other"]


def test_def_hooks_replace_runtime_hooks_for_that_agent_only(cleanup):
    runtime_seen = []
    own_seen = []
    rt = two_agent_runtime(
        cleanup,
        {"custom": AgentDef("custom", "Custom.", model="m-custom", hooks={"after_llm": lambda **kw: own_seen.append(kw["model"])})},
        hooks={"before_llm": lambda **kw: runtime_seen.append(kw["model"]), "after_llm": lambda **kw: runtime_seen.append("after")},
    )
    rt.run_agent("custom", "a")
    rt.run_agent("plain", "b")
    assert own_seen == ["m-custom"]
    assert runtime_seen == ["m-plain", "after"]  # no runtime hook ran for "custom" (not merged)


def test_runtime_on_metric_applies_to_every_agent(cleanup):
    seen = []
    rt = two_agent_runtime(cleanup, {"other": AgentDef("other", "Other.", model="m-other")}, on_metric=seen.append)
    rt.run_agent("plain", "a")
    rt.run_agent("other", "b")
    assert [e["model"] for e in seen if e["event"] == "llm"] == ["m-plain", "m-other"]


def test_def_on_metric_replaces_runtime_on_metric_for_that_agent_only(cleanup):
    runtime_seen = []
    own_seen = []
    rt = two_agent_runtime(
        cleanup,
        {"custom": AgentDef("custom", "Custom.", model="m-custom", on_metric=own_seen.append)},
        on_metric=runtime_seen.append,
    )
    rt.run_agent("custom", "a")
    rt.run_agent("plain", "b")
    assert [e["model"] for e in own_seen if e["event"] == "llm"] == ["m-custom"]
    assert [e["model"] for e in runtime_seen if e["event"] == "llm"] == ["m-plain"]
    assert "m-custom" in rt.metrics()  # the runtime's Prometheus text still counts every agent


def test_def_hooks_and_on_metric_are_replaced_each_on_its_own(cleanup):
    runtime_hooks = []
    runtime_metrics = []
    own_hooks = []
    own_metrics = []
    rt = two_agent_runtime(
        cleanup,
        {
            "hooked": AgentDef("hooked", "Own hooks.", model="m-hooked", hooks={"before_llm": lambda **kw: own_hooks.append(kw["model"])}),
            "metered": AgentDef("metered", "Own metrics.", model="m-metered", on_metric=own_metrics.append),
        },
        hooks={"before_llm": lambda **kw: runtime_hooks.append(kw["model"])},
        on_metric=runtime_metrics.append,
    )
    rt.run_agent("hooked", "a")
    rt.run_agent("metered", "b")
    assert own_hooks == ["m-hooked"]
    assert runtime_hooks == ["m-metered"]  # "metered" set only on_metric: the runtime's hooks stay
    assert [e["model"] for e in own_metrics if e["event"] == "llm"] == ["m-metered"]
    assert [e["model"] for e in runtime_metrics if e["event"] == "llm"] == ["m-hooked"]


# --- errors ------------------------------------------------------------------------------------


def broken(request):
    raise RuntimeError("model exploded")


def test_failed_model_gives_error_result_and_no_exception_crosses_wait(cleanup):
    rt = cleanup.runtime({"bad": AgentDef("bad", "Breaks.", model="bad")}, generate=ScriptedModel({"bad": broken}))
    h = rt.spawn(rt.root, "bad")
    rt.wake(h, "go")
    result = rt.wait(h, timeout=HANG)
    assert result.status == "error"
    assert result.is_error is True
    assert "model exploded" in result.text
    assert rt.inspect(h).state == "idle"
    direct = rt.run_agent("bad", "again")
    assert direct.status == "error"
    assert direct.is_error is True


def test_failed_task_child_reaches_parent_as_error_tool_result(cleanup):
    seen = []

    def boss(request):
        found = tool_messages(request)
        if not found:
            return calls(task("t1", "bad", "try"))
        seen.extend(found)
        return reply("boss saw: " + found[0])

    registry = {
        "boss": AgentDef("boss", "Leads.", model="boss", team=["bad"]),
        "bad": AgentDef("bad", "Breaks.", model="bad"),
    }
    rt = cleanup.runtime(registry, generate=ScriptedModel({"boss": boss, "bad": broken}))
    result = run_in_thread(lambda: rt.run_agent("boss", "go"))
    assert result.status == "done"
    assert len(seen) == 1
    assert seen[0].startswith("[error]")
    assert "model exploded" in seen[0]


# --- context manager -------------------------------------------------------------------------------


def _runtime_threads(before):
    return [t for t in threading.enumerate() if t.name.startswith("toolnexus") and t not in before and t.is_alive()]


def test_runtime_as_context_manager_closes_everything():
    before = set(threading.enumerate())
    closed = []
    registry = {"echo": AgentDef("echo", "Echoes.", model="echo", on_close=lambda h, reason: closed.append(h.id))}
    with Runtime(registry, generate=ScriptedModel({"echo": echo})) as rt:
        ran = rt.spawn(rt.root, "echo")
        rt.wake(ran, "hi")
        assert rt.wait(ran, timeout=HANG).text == "echo:hi"
        idle = rt.spawn(rt.root, "echo")
        nested = rt.spawn(idle, "echo")
    assert {v.id: v.state for v in rt.handles()} == {
        "root": "closed",
        ran.id: "closed",
        idle.id: "closed",
        nested.id: "closed",
    }
    assert sorted(closed) == sorted([ran.id, idle.id, nested.id])
    assert _runtime_threads(before) == []


def test_wait_on_the_root_is_refused_rather_than_blocking_forever():
    from toolnexus import ToolnexusError

    rt = Runtime({"a": AgentDef("a", "x")}, generate=lambda r: {"content": "ok"})
    try:
        with pytest.raises(ToolnexusError, match="root"):
            rt.wait(rt.root)
    finally:
        rt.close(rt.root)


def test_run_agent_works_from_inside_a_running_asyncio_loop():
    import asyncio

    registry = {"lead": AgentDef("lead", "Delegates.", model="lead", team=["helper"]), "helper": AgentDef("helper", "Helps.", model="helper")}
    model = ScriptedModel(
        {
            "lead": [
                {"tool_calls": [{"id": "c1", "name": "task", "arguments": {"agent": "helper", "prompt": "help"}}]},
                lambda r: {"content": f"lead: {tool_messages(r)[0]}"},
            ],
            "helper": [{"content": "helped"}],
        }
    )

    async def inside_a_loop():
        with Runtime(registry, generate=model) as rt:
            return rt.run_agent("lead", "go")

    result = asyncio.run(inside_a_loop())
    assert (result.status, result.text) == ("done", "lead: helped")


def test_a_tool_raising_system_exit_still_settles_the_turn_for_its_waiters():
    from toolnexus import Tool

    def bail(args, ctx):
        raise SystemExit(3)

    registry = {"a": AgentDef("a", "Exits.", model="a", tools=[Tool("bail", "", None, bail)])}
    model = ScriptedModel({"a": [{"tool_calls": [{"id": "c1", "name": "bail", "arguments": {}}]}, {"content": "unreachable"}]})
    with Runtime(registry, generate=model) as rt:
        h = rt.spawn(rt.root, "a")
        rt.wake(h, "go")
        result = rt.wait(h, timeout=10)
        assert (result.status, result.is_error) == ("error", True)
        assert rt.inspect(h).state == "idle"


# --- the public surface -------------------------------------------------------------------------

#: The verbs and views the guides teach (docs/guides/teams.md, streaming.md, durable.md).
DOCUMENTED = {
    "root", "spawn", "post", "wake", "wait", "interrupt", "close", "resume", "retry", "run_agent", "agent_tool",
    "stream", "stream_agent", "inspect", "handles", "transitions", "events", "open_requests", "budget", "definition",
    "metrics", "conversation_store", "inline", "prune", "recover", "release", "replay", "fork",
}


def test_runtime_shows_exactly_the_documented_verbs_and_views(cleanup):
    rt = cleanup.runtime({"echo": AgentDef("echo", "Echoes.", model="echo")}, generate=ScriptedModel({"echo": echo}))
    assert {name for name in dir(rt) if not name.startswith("_")} == DOCUMENTED


@pytest.mark.parametrize("name", sorted(DOCUMENTED - {"root"}))
def test_every_public_verb_and_view_says_what_it_takes_gives_and_raises(name):
    doc = getattr(Runtime, name).__doc__ or ""
    assert doc.strip(), f"Runtime.{name} has no docstring"
    member = getattr(Runtime, name)
    if callable(member):
        params = [p for p in inspect.signature(member).parameters if p != "self"]
        assert not params or "Args:" in doc, f"Runtime.{name} does not describe its arguments"
        returns = inspect.signature(member).return_annotation not in (None, "None")
        assert not returns or "Returns:" in doc, f"Runtime.{name} does not say what it returns"
