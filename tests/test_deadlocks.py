"""The threading model: blocked parents never starve their children of workers (CONTRACT §7D).

Every scenario runs under ``run_in_thread`` so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import threading

import pytest

from _helpers import HANG, task
from conftest import run_in_thread
from toolnexus import AgentDef, Budget, Runtime
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages

FAN_OUT = 6


# --- a delegation chain --------------------------------------------------------------------------------


CHAIN = 16


def chain_registry(depth):
    registry = {}
    for level in range(depth):
        team = [f"lvl{level + 1}"] if level + 1 < depth else []
        registry[f"lvl{level}"] = AgentDef(f"lvl{level}", f"Level {level}.", model=f"lvl{level}", team=team, budget=Budget(max_depth=20))
    return registry


def chain_model(depth):
    def step_for(level):
        def step(request):
            found = tool_messages(request)
            if level + 1 == depth:
                return {"content": "leaf"}
            if not found:
                return {"tool_calls": [task(f"c{level}", f"lvl{level + 1}", f"go {level + 1}")]}
            return {"content": f"L{level}({found[0]})"}

        return step

    return ScriptedModel({f"lvl{level}": step_for(level) for level in range(depth)})


def expected_chain_text(depth):
    text = "leaf"
    for level in range(depth - 2, -1, -1):
        text = f"L{level}({text})"
    return text


def run_top(rt, name, prompt, via):
    """Run agent ``name``: from the scenario thread (``run_agent``) or on a worker (``wake``)."""
    if via == "run_agent":
        return run_in_thread(lambda: rt.run_agent(name, prompt), HANG)

    def woken():
        top = rt.spawn(rt.root, name)
        rt.wake(top, prompt)
        return rt.wait(top, timeout=HANG)

    return run_in_thread(woken, HANG)


@pytest.mark.parametrize(
    ("workers", "via"),
    [(2, "run_agent"), (1, "run_agent"), (2, "wake"), (1, "wake"), (1, "wake")],
    ids=["w2-run", "w1-run", "w2-wake", "w1-wake-a", "w1-wake-b"],
)
def test_delegation_chain_of_depth_16_finishes(workers, via):
    rt = Runtime(chain_registry(CHAIN), generate=chain_model(CHAIN), max_workers=workers)
    try:
        result = run_top(rt, "lvl0", "start", via)
        assert result.status == "done"
        assert result.text == expected_chain_text(CHAIN)
        deepest = [v for v in rt.handles() if v.name == f"lvl{CHAIN - 1}"]
        assert len(deepest) == 1
        assert deepest[0].id.count("/") == CHAIN
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


# --- trees -------------------------------------------------------------------------------------


def tree_registry(levels, budget=None):
    """Agents n1..n<levels>; each n<i> delegates to n<i+1>; the last one is a leaf."""
    registry = {}
    for level in range(1, levels + 1):
        team = [f"n{level + 1}"] if level < levels else []
        registry[f"n{level}"] = AgentDef(f"n{level}", f"Node level {level}.", model=f"n{level}", team=team, budget=budget)
    return registry


def tree_model(levels, fan_out=FAN_OUT):
    """Each parent issues ``fan_out`` task calls in one turn (distinct prompts) and sums the leaves."""

    def step_for(level):
        def step(request):
            if level == levels:
                return {"content": "1"}
            found = tool_messages(request)
            if not found:
                prompt = last_user_text(request)
                return {
                    "tool_calls": [task(f"t{k}", f"n{level + 1}", f"{prompt}.{k}") for k in range(fan_out)]
                }
            return {"content": str(sum(int(text) for text in found))}

        return step

    return ScriptedModel({f"n{level}": step_for(level) for level in range(1, levels + 1)})


def run_tree(rt, prompt="p", via="run_agent"):
    return run_top(rt, "n1", prompt, via)


@pytest.mark.parametrize(
    ("workers", "via"),
    [(2, "run_agent"), (2, "wake"), (2, "run_agent"), (2, "wake"), (1, "run_agent"), (1, "wake")],
    ids=["w2-run-a", "w2-wake-a", "w2-run-b", "w2-wake-b", "w1-run", "w1-wake"],
)
def test_tree_of_depth_3_and_fan_out_6_finishes_on_few_workers(workers, via):
    # n1 at depth 1 fans out to 6 n2 (depth 2), each to 6 n3 (depth 3), each to 6 n4 (depth 4).
    levels = 4
    model = tree_model(levels)
    rt = Runtime(tree_registry(levels, Budget(max_depth=4)), generate=model, max_workers=workers)
    try:
        result = run_tree(rt, via=via)
        assert result.status == "done"
        assert result.text == str(FAN_OUT ** (levels - 1))
        assert model.calls[f"n{levels}"] == FAN_OUT ** (levels - 1)  # every leaf ran exactly once
        assert len(rt.handles()) == 1 + sum(FAN_OUT**i for i in range(levels))
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


@pytest.mark.parametrize(
    ("workers", "via"),
    [(1, "run_agent"), (1, "wake"), (2, "run_agent"), (2, "wake"), (1, "wake")],
    ids=["w1-run", "w1-wake-a", "w2-run", "w2-wake", "w1-wake-b"],
)
def test_fan_out_with_max_concurrent_1_finishes(workers, via):
    registry = {
        "n1": AgentDef("n1", "Parent.", model="n1", team=["n2"], budget=Budget(max_concurrent=1)),
        "n2": AgentDef("n2", "Leaf.", model="n2"),
    }
    model = tree_model(2)
    rt = Runtime(registry, generate=model, max_workers=workers)
    try:
        result = run_tree(rt, via=via)
        assert result.status == "done"
        assert result.text == str(FAN_OUT)
        assert model.calls["n2"] == FAN_OUT
        # one child model call at a time: the parent's own calls never overlap its children's
        assert model.peak_concurrency == 1
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


@pytest.mark.parametrize(("workers", "via"), [(None, "run_agent"), (None, "wake"), (1, "wake"), (2, "wake")])
def test_max_concurrent_turns_1_with_a_depth_3_tree_finishes(workers, via):
    levels = 3
    model = tree_model(levels)
    rt = Runtime(tree_registry(levels), generate=model, max_concurrent_turns=1, max_workers=workers)
    try:
        result = run_tree(rt, via=via)
        assert result.status == "done"
        assert result.text == str(FAN_OUT ** (levels - 1))
        assert model.peak_concurrency == 1
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


def test_close_of_root_leaves_no_toolnexus_thread_alive():
    before = set(threading.enumerate())
    levels = 3
    rt = Runtime(tree_registry(levels), generate=tree_model(levels), max_workers=4)
    result = run_tree(rt)
    assert result.status == "done"
    started = [t for t in threading.enumerate() if t.name.startswith("toolnexus") and t not in before]
    assert started, "the tree ran on the runtime's worker threads"
    run_in_thread(lambda: rt.close(rt.root), HANG)
    alive = [t.name for t in threading.enumerate() if t.name.startswith("toolnexus") and t not in before]
    assert alive == []


def test_twenty_threads_running_agents_concurrently_get_their_own_texts():
    count = 20
    model = ScriptedModel({"echo": lambda request: {"content": "echo:" + last_user_text(request)}})
    rt = Runtime({"echo": AgentDef("echo", "Echoes.", model="echo")}, generate=model, max_workers=4)
    barrier = threading.Barrier(count)
    results = [None] * count
    errors = []

    def worker(index):
        try:
            barrier.wait(HANG)
            results[index] = rt.run_agent("echo", f"prompt-{index}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    def scenario():
        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(HANG)
        return [thread.is_alive() for thread in threads]

    try:
        alive = run_in_thread(scenario, HANG + 2)
        assert not any(alive)
        assert errors == []
        assert [r.text for r in results] == [f"echo:prompt-{i}" for i in range(count)]
        assert all(r.status == "done" for r in results)
        ids = {r.handle_id for r in results}
        assert len(ids) == count
        for r in results:
            saved = rt.conversation_store.get(r.handle_id)
            assert [m["content"] for m in saved] == [r.text.removeprefix("echo:"), r.text]
        assert model.calls["echo"] == count
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


# --- host verbs used from inside a tool ----------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_a_tool_that_spawns_wakes_and_waits_finishes_on_a_small_pool(workers):
    from toolnexus import Tool

    holder = {}

    def consult(args, ctx):
        rt = holder["rt"]
        helper = rt.spawn(rt.root, "helper")
        rt.wake(helper, "help")
        return rt.wait(helper, timeout=HANG).text

    registry = {
        "boss": AgentDef("boss", "Uses a tool that runs another agent.", model="boss", tools=[Tool("consult", "", None, consult)]),
        "helper": AgentDef("helper", "Helps.", model="helper"),
    }
    model = ScriptedModel(
        {
            "boss": [{"tool_calls": [{"id": "c1", "name": "consult", "arguments": {}}]}, lambda r: {"content": f"boss: {tool_messages(r)[0]}"}],
            "helper": [{"content": "helped"}],
        }
    )
    rt = holder["rt"] = Runtime(registry, generate=model, max_workers=workers)
    try:
        result = run_in_thread(lambda: rt.run_agent("boss", "go"), timeout=HANG)
    finally:
        rt.close(rt.root)
    assert (result.status, result.text) == ("done", "boss: helped")
