"""Inline execution, ``around_tool`` and ``timeout=`` (CONTRACT §15): runs that stay on the
caller's thread, a context around every tool call, and runs that end when time is up."""

from __future__ import annotations

import contextlib
import threading
import time

from _helpers import EMPTY_SCHEMA, HANG, Asker, asker_step, call, calls, task, text
from conftest import run_in_thread
from toolnexus import AgentDef, Budget, Client, Runtime, Tool, Toolkit, agent, make_answer
from toolnexus.testing import ScriptedModel, tool_messages

PROMPT = 2.0  # "promptly" on a loaded 2-core machine, far below HANG


class ThreadLog:
    """Records which thread ran each model call and each tool call, and whether tool calls overlapped."""

    def __init__(self):
        self.lock = threading.Lock()
        self.model_threads = []
        self.tool_threads = []
        self.running = 0
        self.overlapped = False

    def model(self, step):
        def generate(request):
            with self.lock:
                self.model_threads.append(threading.get_ident())
            return step(request)

        return generate

    def tool(self, name, output="ok", pause=None):
        def execute(args, ctx):
            with self.lock:
                self.tool_threads.append(threading.get_ident())
                self.running += 1
                self.overlapped = self.overlapped or self.running > 1
            if pause is not None:
                pause.wait(0.05)  # gives a concurrent sibling the chance to overlap
            with self.lock:
                self.running -= 1
            return f"{output}:{args.get('n', '')}"

        return Tool(name, f"The {name} tool.", EMPTY_SCHEMA, execute)


def three_lookups(request):
    found = tool_messages(request)
    return text("done:" + ",".join(found)) if found else calls(*(call(f"c{n}", "lookup", {"n": n}) for n in (1, 2, 3)))


def library_threads(before=()):
    """Names of the library's threads alive now that were not in ``before``."""
    return [t.name for t in threading.enumerate() if t.name.startswith("toolnexus") and t not in before]


# --- Client(inline=True) -------------------------------------------------------------------------


def test_inline_client_runs_every_tool_call_on_the_calling_thread_one_after_another():
    log = ThreadLog()
    before = threading.enumerate()
    client = Client(model="m", generate=log.model(three_lookups), inline=True)
    result = client.run("go", Toolkit([log.tool("lookup", pause=threading.Event())]))
    assert result.status == "done" and result.text == "done:ok:1,ok:2,ok:3"
    assert set(log.tool_threads) == {threading.get_ident()} and len(log.tool_threads) == 3
    assert not log.overlapped
    assert library_threads(before) == []


def test_client_around_tool_wraps_every_call_on_the_thread_that_runs_it():
    entered = []
    log = ThreadLog()

    @contextlib.contextmanager
    def around():
        entered.append(("enter", threading.get_ident()))
        yield
        entered.append(("exit", threading.get_ident()))

    with Client(model="m", generate=three_lookups, around_tool=around) as client:
        result = client.run("go", Toolkit([log.tool("lookup")]))
    assert result.status == "done"
    assert sorted(ident for kind, ident in entered if kind == "enter") == sorted(log.tool_threads)
    assert sorted(ident for kind, ident in entered if kind == "exit") == sorted(log.tool_threads)


def test_around_tool_that_fails_becomes_that_calls_error_result():
    @contextlib.contextmanager
    def broken():
        raise RuntimeError("no database")
        yield  # pragma: no cover

    client = Client(model="m", generate=three_lookups, around_tool=broken, inline=True)
    result = client.run("go", Toolkit([ThreadLog().tool("lookup")]))
    assert result.status == "done"
    assert [r.is_error for r in result.tool_calls] == [True, True, True]
    assert "around_tool raised RuntimeError: no database" in result.tool_calls[0].output


# --- Runtime(inline=True) ------------------------------------------------------------------------


def lead_and_helpers(log):
    """A lead that delegates to two helpers in one turn; each helper calls ``lookup`` twice."""

    def lead(request):
        found = tool_messages(request)
        return text("lead:" + "|".join(found)) if found else calls(task("t1", "helper", "a"), task("t2", "helper", "b"))

    def helper(request):
        found = tool_messages(request)
        return text("helped:" + ",".join(found)) if found else calls(call("h1", "lookup", {"n": 1}), call("h2", "lookup", {"n": 2}))

    def route(request):
        names = {t["function"]["name"] for t in request["tools"]}
        return lead(request) if "task" in names else helper(request)

    registry = {
        "lead": AgentDef("lead", "leads", team=("helper",)),
        "helper": AgentDef("helper", "helps", tools=(log.tool("lookup", pause=threading.Event()),)),
    }
    return registry, log.model(route)


def test_inline_runtime_runs_turns_children_and_tools_on_the_caller_thread():
    log = ThreadLog()
    registry, model = lead_and_helpers(log)
    before = threading.enumerate()

    def scenario():
        with Runtime(registry, model="m", generate=model, inline=True) as rt:
            result = rt.run_agent("lead", "go")
            return result, threading.get_ident(), library_threads(before)

    result, caller, threads = run_in_thread(scenario)
    assert result.status == "done"
    assert result.text == "lead:helped:ok:1,ok:2|helped:ok:1,ok:2"
    assert set(log.model_threads) == {caller} and len(log.model_threads) == 6
    assert set(log.tool_threads) == {caller} and len(log.tool_threads) == 4
    assert not log.overlapped
    assert threads == []


def test_agent_run_inline_runs_the_whole_team_on_the_calling_thread():
    log = ThreadLog()
    registry, model = lead_and_helpers(log)
    helper = agent("helper", does="helps", tools=registry["helper"].tools)
    lead = agent("lead", does="leads", team=[helper])
    result, caller = run_in_thread(lambda: (lead.run("go", inline=True, model="m", generate=model), threading.get_ident()))
    assert result.status == "done"
    assert set(log.model_threads) == {caller} and set(log.tool_threads) == {caller}


def test_inline_wake_admits_the_turn_and_the_first_waiter_runs_it():
    log = ThreadLog()
    with Runtime({"solo": AgentDef("solo", "answers")}, model="m", generate=log.model(lambda r: text("hi")), inline=True) as rt:
        h = rt.spawn(rt.root, "solo")
        rt.wake(h, "go")
        assert rt.inspect(h).state == "running" and log.model_threads == []
        result = run_in_thread(lambda: (rt.wait(h), threading.get_ident()))
    assert result[0].status == "done" and log.model_threads == [result[1]]


def test_inline_close_interrupts_a_turn_nobody_started_without_waiting():
    log = ThreadLog()
    rt = Runtime({"solo": AgentDef("solo", "answers")}, model="m", generate=log.model(lambda r: text("hi")), inline=True, shutdown_timeout=60)
    h = rt.spawn(rt.root, "solo")
    rt.wake(h, "go")
    started = time.monotonic()
    run_in_thread(lambda: rt.close(rt.root))
    assert time.monotonic() - started < PROMPT
    assert rt.inspect(h).state == "closed" and log.model_threads == []
    assert rt.transitions(h) == ["idle→running", "running→idle", "idle→closed"]


def test_inline_waiter_on_a_queued_wake_first_runs_the_sibling_holding_the_slot():
    log = ThreadLog()
    registry = {"boss": AgentDef("boss", "leads", budget=Budget(max_concurrent=1)), "w": AgentDef("w", "works")}
    with Runtime(registry, model="m", generate=log.model(lambda r: text("ok")), inline=True) as rt:
        boss = rt.spawn(rt.root, "boss")
        first, second = rt.spawn(boss, "w"), rt.spawn(boss, "w")
        rt.wake(first, "one")
        rt.wake(second, "two")
        assert [e["event"] for e in rt.events()][-1] == "wake_queued"
        result = run_in_thread(lambda: rt.wait(second))
        assert result.status == "done"
        assert rt.wait(first).status == "done" and len(log.model_threads) == 2
        assert [e["event"] for e in rt.events()][-1] == "wake_dequeued"


def test_inline_suspension_resumes_on_the_thread_that_waits():
    asker = Asker()
    log = ThreadLog()
    registry = {"asker": AgentDef("asker", "asks", tools=(asker.tool(),))}
    rt = Runtime(registry, model="m", generate=log.model(asker_step), inline=True)
    try:
        first = run_in_thread(lambda: rt.run_agent("asker", "go"))
        assert first.status == "pending" and rt.inspect(first.handle_id).state == "suspended"
        rt.resume(make_answer(first.pending.id, True, data="yes"))
        assert rt.inspect(first.handle_id).state == "running"
        second, waiter = run_in_thread(lambda: (rt.wait(first.handle_id), threading.get_ident()))
        assert second.status == "done" and second.text == "finished:approved:yes"
        assert log.model_threads[-1] == waiter
    finally:
        rt.close(rt.root)


def test_inline_budget_limits_hold():
    looping = lambda request: calls(call(f"c{len(tool_messages(request))}", "lookup"))  # noqa: E731
    registry = {"busy": AgentDef("busy", "loops", tools=(ThreadLog().tool("lookup"),), budget=Budget(max_turns=3))}
    with Runtime(registry, model="m", generate=looping, inline=True) as rt:
        result = run_in_thread(lambda: rt.run_agent("busy", "go"))
    assert result.status == "incomplete" and result.limit == "maxTurns" and result.turns == 3


def test_inline_interrupt_from_another_thread_stops_the_run_at_its_next_step():
    in_tool = threading.Event()
    seen_cancel = []

    def patient(args, ctx):
        in_tool.set()
        seen_cancel.append(ctx.cancelled.wait(HANG))
        return "stopped"

    model = ScriptedModel({"m": lambda request: text("never") if tool_messages(request) else calls(call("c1", "patient"), call("c2", "patient"))})
    registry = {"solo": AgentDef("solo", "waits", tools=(Tool("patient", "waits", EMPTY_SCHEMA, patient),))}
    with Runtime(registry, model="m", generate=model, inline=True) as rt:
        h = rt.spawn(rt.root, "solo")
        rt.wake(h, "go")
        box = {}
        waiter = threading.Thread(target=lambda: box.update(result=rt.wait(h)), daemon=True)
        waiter.start()
        assert in_tool.wait(HANG)
        rt.interrupt(h)
        waiter.join(HANG)
        assert not waiter.is_alive()
    assert box["result"].status == "interrupted"
    assert seen_cancel == [True]  # the second call of the turn never started


def test_runtime_around_tool_wraps_every_tool_call_task_included_on_its_thread():
    log = ThreadLog()
    registry, model = lead_and_helpers(log)
    entered = []

    @contextlib.contextmanager
    def around():
        entered.append(threading.get_ident())
        yield

    with Runtime(registry, model="m", generate=model, around_tool=around) as rt:
        assert run_in_thread(lambda: rt.run_agent("lead", "go")).status == "done"
    assert len(entered) == 2 + 4  # two task calls, four lookups
    assert set(log.tool_threads) <= set(entered)


def test_inline_close_from_another_thread_stops_a_running_turn():
    in_tool = threading.Event()

    def patient(args, ctx):
        in_tool.set()
        return "stopped" if ctx.cancelled.wait(HANG) else "never cancelled"

    model = ScriptedModel({"m": lambda request: text("never") if tool_messages(request) else calls(call("c1", "patient"))})
    registry = {"solo": AgentDef("solo", "waits", tools=(Tool("patient", "waits", EMPTY_SCHEMA, patient),))}
    rt = Runtime(registry, model="m", generate=model, inline=True, shutdown_timeout=0.1)
    box = {}
    runner = threading.Thread(target=lambda: box.update(result=rt.run_agent("solo", "go")), daemon=True)
    runner.start()
    assert in_tool.wait(HANG)
    run_in_thread(lambda: rt.close(rt.root))
    runner.join(HANG)
    assert not runner.is_alive()
    assert box["result"].status == "interrupted" and len(model.requests) == 1
    assert rt.inspect(box["result"].handle_id).state == "closed"


# --- timeout= ------------------------------------------------------------------------------------


def blocking_registry(release, entered):
    """A ``solo`` agent whose one tool blocks until ``release`` is set, ignoring cancellation."""

    def stuck(args, ctx):
        entered.set()
        release.wait(HANG)
        return "unstuck"

    registry = {"solo": AgentDef("solo", "blocks", tools=(Tool("stuck", "blocks", EMPTY_SCHEMA, stuck),))}
    model = ScriptedModel({"m": lambda request: text("after:" + ",".join(tool_messages(request))) if tool_messages(request) else calls(call("c1", "stuck"))})
    return registry, model


def test_run_agent_timeout_returns_at_the_deadline_while_a_worker_tool_is_blocked(cleanup):
    release, entered = cleanup.event(), threading.Event()
    registry, model = blocking_registry(release, entered)
    rt = cleanup.runtime(registry, model="m", generate=model, shutdown_timeout=0.2)
    started = time.monotonic()
    result = run_in_thread(lambda: rt.run_agent("solo", "go", timeout=0.3))
    elapsed = time.monotonic() - started
    assert result.status == "timeout"
    assert 0.3 <= elapsed < 0.3 + PROMPT
    assert entered.is_set() and not release.is_set()  # the tool was still blocked
    assert rt.inspect(result.handle_id).state == "closed"


def test_inline_timeout_interrupts_at_the_next_step_after_a_blocked_tool(cleanup):
    release, entered = cleanup.event(), threading.Event()
    registry, model = blocking_registry(release, entered)
    rt = cleanup.runtime(registry, model="m", generate=model, inline=True)
    threading.Thread(target=lambda: entered.wait(HANG) and time.sleep(0.6) or release.set(), daemon=True).start()
    result = run_in_thread(lambda: rt.run_agent("solo", "go", timeout=0.3))
    assert result.status == "timeout"
    assert len(model.requests) == 1  # no model call after the deadline
    assert rt.inspect(result.handle_id).state == "closed"


def test_inline_timeout_sets_ctx_cancelled_for_a_tool_that_watches_it(cleanup):
    def patient(args, ctx):
        return "cancelled" if ctx.cancelled.wait(HANG) else "timed out"

    registry = {"solo": AgentDef("solo", "waits", tools=(Tool("patient", "waits", EMPTY_SCHEMA, patient),))}
    model = ScriptedModel({"m": lambda request: text("never") if tool_messages(request) else calls(call("c1", "patient"))})
    rt = cleanup.runtime(registry, model="m", generate=model, inline=True)
    started = time.monotonic()
    result = run_in_thread(lambda: rt.run_agent("solo", "go", timeout=0.2))
    assert result.status == "timeout" and time.monotonic() - started < 0.2 + PROMPT


def test_a_run_that_finishes_in_time_is_not_a_timeout(cleanup):
    for inline in (False, True):
        rt = cleanup.runtime({"solo": AgentDef("solo", "answers")}, model="m", generate=lambda r: text("hi"), inline=inline)
        assert run_in_thread(lambda: rt.run_agent("solo", "go", timeout=HANG)).status == "done"


def test_inline_wait_with_timeout_interrupts_the_turn_it_runs(cleanup):
    def patient(args, ctx):
        ctx.cancelled.wait(HANG)
        return "stopped"

    registry = {"solo": AgentDef("solo", "waits", tools=(Tool("patient", "waits", EMPTY_SCHEMA, patient),))}
    model = ScriptedModel({"m": lambda request: text("never") if tool_messages(request) else calls(call("c1", "patient"))})
    rt = cleanup.runtime(registry, model="m", generate=model, inline=True)
    h = rt.spawn(rt.root, "solo")
    rt.wake(h, "go")
    result = run_in_thread(lambda: rt.wait(h, timeout=0.2))
    assert result.status == "timeout" and rt.inspect(h).state == "idle"


def test_agent_run_takes_a_timeout():
    release, entered = threading.Event(), threading.Event()
    try:
        registry, model = blocking_registry(release, entered)
        solo = agent("solo", does="blocks", tools=registry["solo"].tools)
        result = run_in_thread(lambda: solo.run("go", timeout=0.3, model="m", generate=model, shutdown_timeout=0.1))
        assert result.status == "timeout"
    finally:
        release.set()
