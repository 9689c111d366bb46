"""Worker threads kept across runs: ``Agent.run`` and ``Runtime(pool=...)`` borrow a
``WorkerPool`` instead of starting and ending threads every time. Closing a runtime waits
for the work it gave the pool; the pool's threads end when the pool (or the agent) closes."""

from __future__ import annotations

import gc
import logging
import threading

import pytest

from _helpers import EMPTY_SCHEMA, HANG, call, calls, task, text
from conftest import run_in_thread
from test_deadlocks import FAN_OUT, tree_model, tree_registry
from toolnexus import AgentDef, Budget, ConfigError, Runtime, Tool, WorkerPool, agent, tool
from toolnexus.testing import ScriptedModel, tool_messages


NOOP = Tool("noop", "No-op.", EMPTY_SCHEMA, lambda args, ctx: "ok")


def two_noops(request):
    """A model that calls ``noop`` twice in one turn, then answers."""
    return text("done") if tool_messages(request) else calls(call("c1", "noop"), call("c2", "noop"))


def alive_since(before, prefix="toolnexus"):
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t not in before and t.is_alive()]


def two_concurrent_calls(seen):
    """An agent whose one turn makes two ``where`` calls that meet at a barrier: they can
    only both finish if they run at the same time. Each records its thread in ``seen``."""
    barrier = threading.Barrier(2, timeout=HANG)

    @tool
    def where() -> str:
        """Say where this runs."""
        seen.append(threading.current_thread())
        barrier.wait()
        return "here"

    def model(request):
        return text("both") if tool_messages(request) else calls(call("c1", "where"), call("c2", "where"))

    return agent("pair", does="Calls twice", tools=[where]), model


def run(an_agent, model, **options):
    """One ``an_agent.run`` from a scenario thread, failing instead of hanging."""
    return run_in_thread(lambda: an_agent.run("go", generate=model, **options), HANG)


def test_agent_runs_reuse_the_worker_threads_of_the_first_run():
    seen = []
    pair, model = two_concurrent_calls(seen)
    try:
        first = run(pair, model)
        workers_after_first = {t for t in seen if t is not threading.current_thread()}
        seen.clear()
        second = run(pair, model)
        assert first.status == second.status == "done"
        workers_of_second = {t for t in seen if t.name.startswith("toolnexus")}
        assert workers_of_second and workers_of_second <= workers_after_first
    finally:
        pair.close()


def test_agent_close_ends_the_worker_threads_it_kept():
    before = set(threading.enumerate())
    pair, model = two_concurrent_calls([])
    assert run(pair, model).status == "done"
    assert alive_since(before), "the run's worker is kept for the next run"
    run_in_thread(pair.close, HANG)
    assert alive_since(before) == []


def test_an_agent_runs_again_after_close_on_new_threads():
    pair, model = two_concurrent_calls([])
    try:
        run(pair, model)
        pair.close()
        assert run(pair, model).status == "done"
    finally:
        pair.close()


def test_a_dropped_agent_lets_its_worker_threads_end():
    before = set(threading.enumerate())
    pair, model = two_concurrent_calls([])
    assert run(pair, model).status == "done"
    started = alive_since(before)
    assert started
    del pair
    gc.collect()
    for thread in started:
        thread.join(HANG)
    assert alive_since(before) == []


def test_an_inline_run_of_an_agent_starts_no_thread():
    before = set(threading.enumerate())
    solo = agent("solo", does="Calls twice", tools=[NOOP])
    try:
        assert solo.run("go", generate=ScriptedModel({"default": two_noops}), inline=True).status == "done"
        assert alive_since(before) == []
    finally:
        solo.close()


def test_runs_with_different_max_workers_get_pools_of_their_own_sizes():
    pair, model = two_concurrent_calls([])
    try:
        for workers in (2, 3):
            result = run(pair, model, max_workers=workers)
            assert result.runtime is not None and result.status == "done"
        assert sorted(pool.max_workers for pool in pair._kept._pools.values()) == [2, 3]
    finally:
        pair.close()


def test_pool_and_max_workers_together_are_a_config_error():
    with WorkerPool(2) as pool, pytest.raises(ConfigError, match="max_workers= or pool="):
        Runtime({"a": AgentDef("a", "does a")}, generate=lambda request: text("hi"), pool=pool, max_workers=2)


def test_a_pool_needs_at_least_one_worker():
    with pytest.raises(ConfigError, match="max_workers must be 1 or more"):
        WorkerPool(0)


# --- runtimes sharing one pool -------------------------------------------------------------------


def blocking_registry():
    return {"slow": AgentDef("slow", "Blocks until released.", model="slow", tools=[])}


def test_closing_a_runtime_does_not_wait_for_another_runtimes_work_on_the_shared_pool():
    release = threading.Event()
    entered = threading.Event()

    def blocked(request):
        entered.set()
        release.wait(HANG)
        return text("released")

    with WorkerPool(4) as pool:
        busy = Runtime(blocking_registry(), generate=ScriptedModel({"slow": blocked}), pool=pool)
        idle = Runtime(blocking_registry(), generate=lambda request: text("hi"), pool=pool)
        try:
            h = busy.spawn(busy.root, "slow")
            busy.wake(h, "go")  # on a pool thread
            assert entered.wait(HANG)
            run_in_thread(lambda: idle.close(idle.root), 2.0)  # not held up by busy's turn
            release.set()
            assert busy.wait(h, timeout=HANG).text == "released"
        finally:
            release.set()
            run_in_thread(lambda: busy.close(busy.root), HANG)
        assert pool.has_threads, "closing the runtimes leaves the pool's threads to the pool"


def test_closing_a_runtime_waits_for_the_work_it_gave_the_pool():
    finished = threading.Event()
    entered = threading.Event()

    def slow_tool_model(request):
        return text("done") if tool_messages(request) else calls(call("c1", "slow"))

    def slow(args, ctx):
        entered.set()
        ctx.cancelled.wait(HANG)  # ends when the close interrupts the turn
        finished.set()
        return "stopped"

    registry = {"a": AgentDef("a", "Runs a slow tool.", model="a", tools=[Tool("slow", "Slow.", EMPTY_SCHEMA, slow)])}
    with WorkerPool(2) as pool:
        rt = Runtime(registry, generate=ScriptedModel({"a": slow_tool_model}), pool=pool, shutdown_timeout=0.05)
        h = rt.spawn(rt.root, "a")
        rt.wake(h, "go")
        assert entered.wait(HANG)
        run_in_thread(lambda: rt.close(rt.root), HANG)
        assert finished.is_set(), "close returned only after the turn on the pool had ended"


def test_close_names_the_pool_threads_still_running_its_work_after_the_grace(caplog):
    stop = threading.Event()
    entered = threading.Event()

    def stubborn(args, ctx):
        entered.set()
        stop.wait(HANG)  # ignores ctx.cancelled
        return "late"

    registry = {"a": AgentDef("a", "Runs a stubborn tool.", model="a", tools=[Tool("stubborn", "Stubborn.", EMPTY_SCHEMA, stubborn)])}
    model = ScriptedModel({"a": lambda request: text("done") if tool_messages(request) else calls(call("c1", "stubborn"))})
    with WorkerPool(2, thread_name_prefix="lent-test") as pool:
        rt = Runtime(registry, generate=model, pool=pool, shutdown_timeout=0.05)
        try:
            h = rt.spawn(rt.root, "a")
            rt.wake(h, "go")
            assert entered.wait(HANG)
            with caplog.at_level(logging.WARNING, logger="toolnexus"):
                run_in_thread(lambda: rt.close(rt.root), HANG)
            assert any("still running" in r.getMessage() and "lent-test" in r.getMessage() for r in caplog.records)
        finally:
            stop.set()


def test_a_runtime_on_a_closed_pool_runs_its_turns_and_tools_on_the_waiting_thread():
    pool = WorkerPool(2)
    pool.close()
    before = set(threading.enumerate())
    ran_on = []

    def where(args, ctx):
        ran_on.append(threading.current_thread())
        return "ok"

    registry = {"a": AgentDef("a", "Calls twice.", model="a", tools=[Tool("noop", "No-op.", EMPTY_SCHEMA, where)])}
    rt = Runtime(registry, generate=ScriptedModel({"a": two_noops}), pool=pool)
    try:
        waiter = []
        result = run_in_thread(lambda: (waiter.append(threading.current_thread()), rt.run_agent("a", "go"))[1], HANG)
        assert result.status == "done"
        assert ran_on == waiter * 2
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)
    assert alive_since(before) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_two_runtimes_sharing_a_small_pool_run_fan_out_trees_without_deadlock(workers):
    levels = 3
    with WorkerPool(workers) as pool:
        runtimes = [Runtime(tree_registry(levels, Budget(max_depth=4)), generate=tree_model(levels), pool=pool) for _ in range(2)]
        results = []

        def run(rt):
            results.append(rt.run_agent("n1", "p"))

        threads = [threading.Thread(target=run, args=(rt,)) for rt in runtimes]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(HANG)
            assert not any(thread.is_alive() for thread in threads), "deadlocked"
            assert [r.text for r in results] == [str(FAN_OUT ** (levels - 1))] * 2
        finally:
            for rt in runtimes:
                run_in_thread(lambda rt=rt: rt.close(rt.root), HANG)


def test_task_children_of_one_turn_still_run_concurrently_on_a_kept_pool():
    barrier = threading.Barrier(2, timeout=HANG)

    def child(request):
        barrier.wait()  # both children must be running at once
        return text("met")

    def boss(request):
        found = tool_messages(request)
        return text(" ".join(found)) if found else calls(task("t1", "kid", "a"), task("t2", "kid", "b"))

    kid = agent("kid", does="Meets its sibling", model="kid")
    lead = agent("lead", does="Delegates twice", model="lead", team=[kid])
    model = ScriptedModel({"kid": child, "lead": boss})
    try:
        for _ in range(2):
            barrier.reset()
            assert run_in_thread(lambda: lead.run("go", generate=model), HANG).text == "met met"
    finally:
        lead.close()


def test_closing_a_pool_while_runtimes_hand_it_work_neither_hangs_nor_loses_a_call():
    registry = {"a": AgentDef("a", "Calls four times.", model="a", tools=[NOOP])}
    four = calls(*(call(f"c{i}", "noop") for i in range(4)))
    model = ScriptedModel({"a": lambda request: text(str(len(tool_messages(request)))) if tool_messages(request) else four})
    for _ in range(20):
        pool = WorkerPool(1)  # the calls queue up: closing cancels queued work as runs submit more
        texts = []

        def runs(pool=pool, texts=texts):
            for _ in range(5):
                rt = Runtime(registry, generate=model, pool=pool)
                try:
                    texts.append(rt.run_agent("a", "go").text)
                finally:
                    rt.close(rt.root)

        runner = threading.Thread(target=runs)
        runner.start()
        run_in_thread(pool.close, HANG)
        runner.join(HANG)
        assert not runner.is_alive(), "a submit and a close deadlocked"
        assert texts == ["4"] * 5
