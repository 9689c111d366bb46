"""The three subagent fixtures (/work/shared/fixtures) as tests: fan-out, budgets, lifecycle (CONTRACT §7D)."""

from __future__ import annotations

import re
import threading

import pytest

from conftest import run_in_thread
from toolnexus import AgentDef, Budget, HandleClosed, InboxFull, Runtime, SpawnError, Tool
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages

USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}
ARROW = "\u2192"
FANOUT_CHILDREN = ["root/coordinator.1/explore.1", "root/coordinator.1/explore.2"]
NUMBERED_ITEM = re.compile(r"^\d+\. \[from: [^,\]]+, channel: [^\]]+\] ", re.MULTILINE)


def lookup_tool() -> Tool:
    """The fixtures' ``lookup``: returns ``data(<q>)``."""
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    return Tool("lookup", "look something up", schema, lambda args, ctx: f"data({args.get('q')})")


def coordinator_step(request):
    """m-coordinator: two task calls, then a synthesis of the tool messages."""
    results = tool_messages(request)
    if not results:
        return {
            "tool_calls": [
                {"name": "task", "arguments": {"agent": "explore", "prompt": "find A"}},
                {"name": "task", "arguments": {"agent": "explore", "prompt": "find B"}},
            ]
        }
    return {"content": "synthesis: " + " + ".join(results)}


def explore_step(before_lookup=None):
    """m-explore: one lookup, then ``found:<first tool msg>``; ``before_lookup`` runs first."""

    def step(request):
        results = tool_messages(request)
        if not results:
            if before_lookup is not None:
                before_lookup()
            return {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}
        return {"content": "found:" + results[0]}

    return step


def loop_step(request):
    """m-loop: always another lookup."""
    return {"tool_calls": [{"name": "lookup", "arguments": {"q": "again"}}]}


def peer_step(request):
    """m-peer: counts the numbered inbox items in the last user message."""
    return {"content": f"processed {len(NUMBERED_ITEM.findall(last_user_text(request)))} items"}


def registry(**overrides):
    defs = {
        "coordinator": AgentDef("coordinator", "splits and delegates", model="m-coordinator", team=["explore"]),
        "explore": AgentDef("explore", "read-only research", model="m-explore", tools=[lookup_tool()]),
        "looper": AgentDef("looper", "never finishes", model="m-loop", tools=[lookup_tool()]),
        "peer": AgentDef("peer", "team member", model="m-peer"),
        "slow": AgentDef("slow", "slow worker", model="m-slow"),
    }
    defs.update(overrides)
    return defs


def scripted(**extra):
    scripts = {"m-coordinator": coordinator_step, "m-explore": explore_step(), "m-loop": loop_step, "m-peer": peer_step}
    scripts.update(extra)
    return ScriptedModel(scripts, usage=USAGE)


def run_entry(rt, name, prompt):
    handle = rt.spawn(rt.root, name)
    rt.wake(handle, prompt)
    return handle, rt.wait(handle)


# --- subagent-fanout ----------------------------------------------------------------------


@pytest.fixture
def fanout():
    """The fan-out run, with both children's first model call meeting at a barrier."""
    barrier = threading.Barrier(2, timeout=5)
    model = scripted(**{"m-explore": explore_step(before_lookup=barrier.wait)})
    rt = Runtime(registry(), generate=model)
    handle, result = run_in_thread(lambda: run_entry(rt, "coordinator", "answer using two lookups"))
    yield rt, model, handle, result
    rt.close(rt.root)


def test_fanout_finishes_done(fanout):
    _, _, _, result = fanout
    assert result.status == "done"


def test_fanout_text_holds_both_child_answers(fanout):
    _, _, _, result = fanout
    assert "found:data(x)" in result.text
    assert result.text.count("found:") == 2


def test_fanout_parent_takes_two_turns(fanout):
    rt, _, handle, result = fanout
    assert result.turns == 2
    assert rt.inspect(handle).turns == 2


def test_fanout_child_ids_are_deterministic(fanout):
    rt, _, handle, _ = fanout
    assert handle.id == "root/coordinator.1"
    assert sorted(rt.inspect(handle).children) == FANOUT_CHILDREN
    assert [view.id for view in rt.handles()] == ["root", "root/coordinator.1", *rt.inspect(handle).children]


def test_fanout_children_run_concurrently(fanout):
    _, model, _, _ = fanout
    assert model.peak_concurrency >= 2


def test_fanout_parent_usage_total_is_240(fanout):
    rt, _, handle, result = fanout
    assert rt.inspect(handle).tokens == 240
    assert result.total_tokens == 240


def test_fanout_children_closed_after_task(fanout):
    rt, _, _, _ = fanout
    assert [rt.inspect(child).state for child in FANOUT_CHILDREN] == ["closed", "closed"]


def test_fanout_transitions(fanout):
    rt, _, handle, _ = fanout
    assert rt.transitions(handle) == [f"idle{ARROW}running", f"running{ARROW}idle"]
    for child in FANOUT_CHILDREN:
        assert rt.transitions(child) == [f"idle{ARROW}running", f"running{ARROW}idle", f"idle{ARROW}closed"]


def test_fanout_parent_transcript_gains_two_tool_messages(fanout):
    rt, _, handle, _ = fanout
    messages = rt.conversation_store.get(handle.id)
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["found:data(x)", "found:data(x)"]


@pytest.mark.parametrize("workers", [1, 2])
def test_fanout_does_not_deadlock_on_a_tiny_pool(workers):
    rt = Runtime(registry(), generate=scripted(), max_workers=workers)
    try:
        _, result = run_in_thread(lambda: run_entry(rt, "coordinator", "answer using two lookups"))
        assert result.status == "done"
        assert result.text.count("found:data(x)") == 2
    finally:
        run_in_thread(lambda: rt.close(rt.root))


def tree_step(request):
    """A fan-out of 2 down to depth 3: the prompt's length is the level."""
    prompt = request["messages"][1]["content"]
    results = tool_messages(request)
    if len(prompt) >= 3:
        return {"content": "leaf"}
    if results:
        return {"content": "(" + ",".join(results) + ")"}
    return {"tool_calls": [{"name": "task", "arguments": {"agent": "fan", "prompt": prompt + suffix}} for suffix in "ab"]}


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_delegation_tree_does_not_deadlock_whatever_the_pool_size(workers):
    defs = {"fan": AgentDef("fan", "fans out", model="m-fan", soul="fan", team=["fan"])}
    rt = Runtime(defs, generate=ScriptedModel({"m-fan": tree_step}, usage=USAGE), max_workers=workers)
    try:
        _, result = run_in_thread(lambda: run_entry(rt, "fan", "L"))
        assert result.status == "done"
        assert result.text == "((leaf,leaf),(leaf,leaf))"
        assert len(rt.handles()) == 1 + 1 + 2 + 4
        assert rt.inspect(rt.root).tokens == 40 * (2 + 2 * 2 + 4)
    finally:
        run_in_thread(lambda: rt.close(rt.root))


# --- subagent-budgets ---------------------------------------------------------------------


@pytest.fixture
def budget_rt():
    rt = Runtime(registry(), generate=scripted())
    yield rt
    rt.close(rt.root)


def budget_tree(rt):
    coordinator = rt.spawn(rt.root, "coordinator", Budget(max_tokens=100, max_children=2))
    first = rt.spawn(coordinator, "explore", Budget(max_tokens=500))
    second = rt.spawn(coordinator, "explore")
    return coordinator, first, second


def wake_wait(rt, handle, prompt):
    rt.wake(handle, prompt)
    return rt.wait(handle)


def test_budgets_carve_is_min_of_own_and_parent_remaining(budget_rt):
    _, first, _ = budget_tree(budget_rt)
    assert first.id == "root/coordinator.1/explore.1"
    assert budget_rt.budget(first).max_tokens == 100


def test_budgets_max_children_refuses_third_child(budget_rt):
    coordinator, _, _ = budget_tree(budget_rt)
    with pytest.raises(SpawnError, match="maxChildren"):
        budget_rt.spawn(coordinator, "explore")
    assert len(budget_rt.inspect(coordinator).children) == 2


def test_budgets_first_child_done_rolls_up_into_parent_pool(budget_rt):
    coordinator, first, _ = budget_tree(budget_rt)
    result = run_in_thread(lambda: wake_wait(budget_rt, first, "go"))
    assert result.status == "done"
    assert 100 - budget_rt.inspect(coordinator).tokens == 20


def test_budgets_second_child_admitted_while_pool_positive(budget_rt):
    _, first, second = budget_tree(budget_rt)
    run_in_thread(lambda: wake_wait(budget_rt, first, "go"))
    result = run_in_thread(lambda: wake_wait(budget_rt, second, "go"))
    assert result.status == "done"


def test_budgets_live_chain_walk_refuses_once_pool_is_spent(budget_rt):
    _, first, second = budget_tree(budget_rt)
    run_in_thread(lambda: wake_wait(budget_rt, first, "go"))
    run_in_thread(lambda: wake_wait(budget_rt, second, "go"))
    result = run_in_thread(lambda: wake_wait(budget_rt, second, "again"))
    assert result.status == "incomplete"
    assert "budget exhausted" in result.text
    assert result.limit == "maxTokens"


def test_budgets_max_turns_cap_is_loud(budget_rt):
    looper = budget_rt.spawn(budget_rt.root, "looper", Budget(max_turns=3))
    result = run_in_thread(lambda: wake_wait(budget_rt, looper, "loop forever"))
    assert looper.id == "root/looper.1"
    assert result.status == "incomplete"
    assert result.limit == "maxTurns"
    assert budget_rt.inspect(looper).turns == 3


# --- subagent-lifecycle -------------------------------------------------------------------


def drained_peer():
    """coalescedDrain: a peer under the coordinator, with 2 posts and 3 ticks waiting."""
    seen = []

    def step(request):
        seen.append(last_user_text(request))
        return peer_step(request)

    model = scripted(**{"m-peer": step})
    rt = Runtime(registry(), generate=model)
    coordinator = rt.spawn(rt.root, "coordinator")
    peer = rt.spawn(coordinator, "peer")
    rt.post(peer, "update 1", sender=coordinator.id, channel="peer")
    rt.post(peer, "webhook payload", sender="external", channel="external")
    for _ in range(3):
        rt.post(peer, "tick", sender="clock", channel="timer")
    rt.wake(peer)
    result = run_in_thread(lambda: rt.wait(peer))
    return rt, peer, result, seen


def test_coalesced_drain_takes_whole_inbox_in_one_turn():
    rt, peer, result, seen = drained_peer()
    try:
        assert result.status == "done"
        assert result.turns == 1
        assert len(seen) == 1
        assert rt.inspect(peer).inbox == 0
        assert rt.inspect(peer).turns == 1
    finally:
        rt.close(rt.root)


def test_coalesced_drain_renders_provenance_and_collapses_ticks():
    rt, _, result, seen = drained_peer()
    rt.close(rt.root)
    text = seen[0]
    assert NUMBERED_ITEM.findall(text) and len(NUMBERED_ITEM.findall(text)) == 3
    assert "1. [from: root/coordinator.1, channel: peer] update 1" in text
    assert "[from: external, channel: external] webhook payload" in text
    assert "[from: clock, channel: timer] tick \u00d73" in text
    assert result.text == "processed 3 items"


def test_coalesced_drain_fences_untrusted_items_after_trusted_ones():
    rt, _, _, seen = drained_peer()
    rt.close(rt.root)
    lines = seen[0].splitlines()
    heading = next(i for i, line in enumerate(lines) if "untrusted" in line and not NUMBERED_ITEM.match(line))
    trusted = [line for line in lines[:heading] if NUMBERED_ITEM.match(line)]
    untrusted = [line for line in lines[heading + 1 :] if NUMBERED_ITEM.match(line)]
    assert trusted == ["1. [from: root/coordinator.1, channel: peer] update 1"]
    assert untrusted == [
        "2. [from: external, channel: external] webhook payload",
        "3. [from: clock, channel: timer] tick \u00d73",
    ]


def test_inbox_gate_rejects_loudly_past_cap():
    rt = Runtime(registry(), generate=scripted(), inbox_cap=2)
    try:
        peer = rt.spawn(rt.root, "peer")
        rt.post(peer, "1")
        rt.post(peer, "2")
        with pytest.raises(InboxFull, match="inbox full"):
            rt.post(peer, "3")
        assert rt.inspect(peer).inbox == 2
        assert any(e["event"] == "post_rejected" and e["handle"] == peer.id for e in rt.events())
    finally:
        rt.close(rt.root)


def watch_queued_wakes(rt):
    """An Event set when a wake is queued (a seam on the private event log, so the test
    need not race the queueing)."""
    queued = threading.Event()
    log_event = rt._tree.event

    def event(kind, handle_id, **fields):
        log_event(kind, handle_id, **fields)
        if kind == "wake_queued":
            queued.set()

    rt._tree.event = event
    return queued


def test_concurrency_gate_queues_then_dequeues_child_wake():
    holder = {}
    first = threading.Lock()

    def hold_first_child():
        # The first child to run waits until its sibling's wake has been queued.
        if first.acquire(blocking=False):
            assert holder["queued"].wait(5)

    model = scripted(**{"m-explore": explore_step(before_lookup=hold_first_child)})
    defs = registry(coordinator=AgentDef("coordinator", "splits and delegates", model="m-coordinator", team=["explore"], budget=Budget(max_concurrent=1)))
    rt = Runtime(defs, generate=model)
    holder["queued"] = watch_queued_wakes(rt)
    try:
        _, result = run_in_thread(lambda: run_entry(rt, "coordinator", "go"))
        assert result.status == "done"
        assert result.text.count("found:data(x)") == 2
        events = rt.events()
        queued = [e["handle"] for e in events if e["event"] == "wake_queued"]
        dequeued = [e["handle"] for e in events if e["event"] == "wake_dequeued"]
        assert len(queued) == 1 and queued[0] in FANOUT_CHILDREN
        assert dequeued == queued
        assert model.peak_concurrency == 1
    finally:
        rt.close(rt.root)


def test_turn_gate_serialises_model_calls_without_deadlock():
    model = scripted()
    rt = Runtime(registry(), generate=model, max_concurrent_turns=1)
    try:
        _, result = run_in_thread(lambda: run_entry(rt, "coordinator", "go"))
        assert result.status == "done"
        assert result.text.count("found:data(x)") == 2
        assert model.peak_concurrency == 1
    finally:
        rt.close(rt.root)


def test_interrupt_aborts_turn_and_restores_inbox():
    entered, release = threading.Event(), threading.Event()

    def slow(request):
        entered.set()
        release.wait(5)
        return {"content": "slow-done"}

    rt = Runtime(registry(), generate=scripted(**{"m-slow": slow}))
    waiter_result = {}
    try:
        handle = rt.spawn(rt.root, "slow")
        rt.post(handle, "for later")
        rt.wake(handle, "work slowly")
        waiter = threading.Thread(target=lambda: waiter_result.setdefault("r", rt.wait(handle)), daemon=True)
        waiter.start()
        assert entered.wait(5)
        assert rt.inspect(handle).state == "running"
        assert rt.inspect(handle).inbox == 0
        rt.interrupt(handle)
        waiter.join(5)
        assert waiter_result["r"].status == "interrupted"
        assert rt.wait(handle).status == "interrupted"
        view = rt.inspect(handle)
        assert view.state == "idle"
        assert view.inbox == 1
        assert rt.transitions(handle) == [f"idle{ARROW}running", f"running{ARROW}idle"]
    finally:
        release.set()
        rt.close(rt.root)


@pytest.fixture
def cascade():
    """closeCascade: coordinator -> peer -> peer spawned by hand, then ``close(rt.root)``."""
    closed = []
    on_close = lambda handle, reason: closed.append(handle.id)  # noqa: E731
    defs = registry(
        coordinator=AgentDef("coordinator", "splits and delegates", model="m-coordinator", team=["explore"], on_close=on_close),
        peer=AgentDef("peer", "team member", model="m-peer", on_close=on_close),
    )
    rt = Runtime(defs, generate=scripted())
    coordinator = rt.spawn(rt.root, "coordinator")
    child = rt.spawn(coordinator, "peer")
    grandchild = rt.spawn(child, "peer")
    run_in_thread(lambda: rt.close(rt.root))
    return rt, closed, (coordinator, child, grandchild)


def test_close_cascade_calls_on_close_leaf_first(cascade):
    _, closed, (coordinator, child, grandchild) = cascade
    assert closed == [grandchild.id, child.id, coordinator.id]
    assert closed == ["root/coordinator.1/peer.1/peer.1", "root/coordinator.1/peer.1", "root/coordinator.1"]


def test_close_cascade_leaves_every_handle_closed(cascade):
    rt, _, handles = cascade
    assert {view.state for view in rt.handles()} == {"closed"}
    assert all(rt.transitions(h) == [f"idle{ARROW}closed"] for h in handles)


def test_close_cascade_rejects_a_late_post(cascade):
    rt, _, (_, child, _) = cascade
    with pytest.raises(HandleClosed, match="closed"):
        rt.post(child, "late")
    assert any(e["event"] == "post_rejected" and e["handle"] == child.id for e in rt.events())
