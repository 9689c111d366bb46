"""Budgets: the carve, the spawn refusals, and limits that stop a turn (CONTRACT §7D Budgets, edition item 2)."""

from __future__ import annotations

import threading

import pytest

from conftest import run_in_thread
from toolnexus import AgentDef, Budget, Runtime, SpawnError, Tool
from toolnexus.testing import ScriptedModel, tool_messages

USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}


def lookup_tool(on_call=None):
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}

    def execute(args, ctx):
        if on_call is not None:
            on_call()
        return f"data({args.get('q')})"

    return Tool("lookup", "look something up", schema, execute)


def lookups(n):
    return {"tool_calls": [{"name": "lookup", "arguments": {"q": str(i)}} for i in range(n)]}


def two_lookups_then_text(request):
    return {"content": "done"} if tool_messages(request) else lookups(2)


def registry(*, tool=None, **defs):
    tool = tool or lookup_tool()
    base = {
        "spender": AgentDef("spender", "spends", model="m-spend", tools=[tool]),
        "looper": AgentDef("looper", "never finishes", model="m-loop", tools=[tool]),
        "a": AgentDef("a", "link", model="m-idle"),
        "deep": AgentDef("deep", "goes deep", model="m-idle", budget=Budget(max_depth=5)),
    }
    base.update(defs)
    return base


def model(**extra):
    scripts = {"m-spend": two_lookups_then_text, "m-loop": lookups(1), "m-idle": {"content": "ok"}, **extra}
    return ScriptedModel(scripts, usage=USAGE)


@pytest.fixture
def rt():
    runtime = Runtime(registry(), generate=model())
    yield runtime
    runtime.close(runtime.root)


def wake_wait(rt, handle, prompt="go"):
    rt.wake(handle, prompt)
    return run_in_thread(lambda: rt.wait(handle))


# --- the carve ------------------------------------------------------------------------------


@pytest.fixture
def spent_parent(rt):
    """A parent with 100 tokens / 10 tool calls that has spent 80 tokens and 2 calls."""
    parent = rt.spawn(rt.root, "spender", Budget(max_tokens=100, max_tool_calls=10))
    assert wake_wait(rt, parent).status == "done"
    view = rt.inspect(parent)
    assert (view.tokens, view.tool_calls) == (80, 2)
    return parent


@pytest.mark.parametrize(
    ("own", "carved"),
    [
        (Budget(max_tokens=500, max_tool_calls=50), (20, 8)),
        (Budget(max_tokens=10, max_tool_calls=3), (10, 3)),
        (None, (20, 8)),
    ],
    ids=["takes_parent_remaining_when_smaller", "keeps_own_budget_when_smaller", "of_unset_own_budget_is_parent_remaining"],
)
def test_carve(rt, spent_parent, own, carved):
    """A child's budget is the smaller of its own and what the parent has left (20 tokens, 8 calls)."""
    child = rt.spawn(spent_parent, "a", own)
    assert (rt.budget(child).max_tokens, rt.budget(child).max_tool_calls) == carved


def test_carve_uses_the_defs_budget():
    registry_rt = Runtime(registry(a=AgentDef("a", "link", model="m-idle", budget=Budget(max_tokens=30))), generate=model())
    try:
        parent = registry_rt.spawn(registry_rt.root, "spender", Budget(max_tokens=100))
        assert registry_rt.budget(registry_rt.spawn(parent, "a")).max_tokens == 30
        assert registry_rt.budget(registry_rt.spawn(parent, "a", Budget(max_tokens=70))).max_tokens == 70
    finally:
        registry_rt.close(registry_rt.root)


# --- spawn refusals ---------------------------------------------------------------------------


def test_default_max_depth_allows_three_levels_below_root(rt):
    first = rt.spawn(rt.root, "a")
    second = rt.spawn(first, "a")
    third = rt.spawn(second, "a")
    assert third.id == "root/a.1/a.1/a.1"
    with pytest.raises(SpawnError, match="maxDepth"):
        rt.spawn(third, "a")
    assert rt.inspect(third).children == []


def test_def_max_depth_lets_deeper_spawns_through(rt):
    handle = rt.spawn(rt.root, "deep")
    for _ in range(4):
        handle = rt.spawn(handle, "deep")
    assert handle.id.count("/") == 5
    with pytest.raises(SpawnError, match="maxDepth"):
        rt.spawn(handle, "deep")


def test_unknown_agent_is_refused(rt):
    with pytest.raises(SpawnError, match="unknown agent"):
        rt.spawn(rt.root, "nobody")
    assert [view.id for view in rt.handles()] == ["root"]


def test_spawn_under_an_exhausted_ancestor_is_refused(rt):
    parent = rt.spawn(rt.root, "spender", Budget(max_tokens=80))
    child = rt.spawn(parent, "a")
    assert wake_wait(rt, parent).status == "done"
    with pytest.raises(SpawnError, match="budget exhausted"):
        rt.spawn(child, "a")
    with pytest.raises(SpawnError, match="budget exhausted"):
        rt.spawn(parent, "a")


def test_wake_under_an_exhausted_ancestor_is_incomplete(rt):
    parent = rt.spawn(rt.root, "spender", Budget(max_tokens=80))
    child = rt.spawn(parent, "spender")
    assert wake_wait(rt, parent).status == "done"
    result = wake_wait(rt, child)
    assert (result.status, result.limit) == ("incomplete", "maxTokens")
    assert "budget exhausted" in result.text
    assert rt.inspect(child).turns == 0


# --- a turn cannot run past its own budget ------------------------------------------------------


def test_token_pool_stops_the_turn_after_one_overshooting_call(rt):
    handle = rt.spawn(rt.root, "looper", Budget(max_tokens=50))
    result = wake_wait(rt, handle)
    assert (result.status, result.limit) == ("incomplete", "maxTokens")
    assert "budget exhausted" in result.text
    assert result.turns == 2
    assert rt.inspect(handle).tokens == 80  # 50 plus at most the call in flight


def test_token_pool_of_a_task_child_stops_its_own_turn():
    def boss(request):
        results = tool_messages(request)
        if results:
            return {"content": "boss: " + results[0]}
        return {"tool_calls": [{"name": "task", "arguments": {"agent": "looper", "prompt": "go"}}]}

    defs = registry(
        boss=AgentDef("boss", "delegates", model="m-boss", team=["looper"]),
        looper=AgentDef("looper", "never finishes", model="m-loop", tools=[lookup_tool()], budget=Budget(max_tokens=50)),
    )
    scripted = model(**{"m-boss": boss})
    rt = Runtime(defs, generate=scripted)
    try:
        handle = rt.spawn(rt.root, "boss")
        result = wake_wait(rt, handle)
        assert result.status == "done"
        assert result.text.startswith("boss: [incomplete]")
        assert "budget exhausted" in result.text
        assert scripted.calls["m-loop"] == 2
    finally:
        rt.close(rt.root)


def test_tool_call_pool_stops_the_turn(rt):
    handle = rt.spawn(rt.root, "looper", Budget(max_tool_calls=3))
    result = wake_wait(rt, handle)
    assert (result.status, result.limit) == ("incomplete", "maxToolCalls")
    assert "budget exhausted" in result.text
    assert result.turns == 3
    assert rt.inspect(handle).tool_calls == 3


def test_tool_call_pool_overshoots_by_at_most_one_turns_calls():
    runtime = Runtime(registry(), generate=ScriptedModel({"m-loop": lookups(2)}, usage=USAGE))
    try:
        handle = runtime.spawn(runtime.root, "looper", Budget(max_tool_calls=3))
        result = wake_wait(runtime, handle)
        assert (result.status, result.limit) == ("incomplete", "maxToolCalls")
        assert result.turns == 2
        assert runtime.inspect(handle).tool_calls == 4
    finally:
        runtime.close(runtime.root)


class FakeClock:
    """An injected clock (seconds) that only the tool moves: no sleeping."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = 1000.0

    def __call__(self):
        with self.lock:
            return self.now

    def advance(self, seconds):
        with self.lock:
            self.now += seconds


def test_wall_clock_limit_uses_the_injected_clock():
    clock = FakeClock()
    defs = registry(tool=lookup_tool(on_call=lambda: clock.advance(1.0)))
    runtime = Runtime(defs, generate=model(), clock=clock)
    try:
        handle = runtime.spawn(runtime.root, "looper", Budget(max_wall=1.5))
        result = wake_wait(runtime, handle)
        assert (result.status, result.limit) == ("incomplete", "maxWallMs")
        assert result.turns == 2
    finally:
        runtime.close(runtime.root)


def test_default_max_turns_is_six(rt):
    handle = rt.spawn(rt.root, "looper")
    assert rt.budget(handle).max_turns is None
    result = wake_wait(rt, handle)
    assert (result.status, result.limit) == ("incomplete", "maxTurns")
    assert result.turns == 6
    assert rt.inspect(handle).turns == 6


def test_explicit_max_turns_caps_the_turn(rt):
    handle = rt.spawn(rt.root, "looper", Budget(max_turns=2))
    result = wake_wait(rt, handle)
    assert (result.status, result.limit, result.turns) == ("incomplete", "maxTurns", 2)


def test_transcript_is_kept_after_a_limit(rt):
    handle = rt.spawn(rt.root, "looper", Budget(max_turns=3))
    wake_wait(rt, handle, "loop forever")
    messages = rt.conversation_store.get(handle.id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    assert messages[0]["content"] == "loop forever"
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["data(0)"] * 3


def test_transcript_is_kept_after_a_token_limit(rt):
    handle = rt.spawn(rt.root, "looper", Budget(max_tokens=50))
    wake_wait(rt, handle)
    assert [m["role"] for m in rt.conversation_store.get(handle.id)] == ["user", "assistant", "tool", "assistant", "tool"]


def test_limits_are_results_not_exceptions(rt):
    for budget in (Budget(max_turns=1), Budget(max_tokens=1), Budget(max_tool_calls=1)):
        handle = rt.spawn(rt.root, "looper", budget)
        result = wake_wait(rt, handle)
        assert result.status == "incomplete"
        assert not result.is_error
        assert rt.inspect(handle).state == "idle"
