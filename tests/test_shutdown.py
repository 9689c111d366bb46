"""Shutdown ends threads: ``close(rt.root)`` returns once every thread the runtime started
has ended, or after ``shutdown_timeout`` plus one second with a warning naming those left."""

from __future__ import annotations

import logging
import threading
import time

from _helpers import EMPTY_SCHEMA, HANG, call, calls, text
from toolnexus import AgentDef, Runtime, Tool
from toolnexus.testing import ScriptedModel

SHUTDOWN_S = 0.1
UNWIND_S = 0.3  # a cancelled tool's clean-up: past shutdown_timeout, well within the extra second
PROMPT = 1.0


def runtime_threads(before):
    return [t for t in threading.enumerate() if t.name.startswith("toolnexus") and t not in before]


def runtime_with_tool(execute):
    registry = {"worker": AgentDef("worker", "Works.", model="worker", tools=[Tool("work", "Works.", EMPTY_SCHEMA, execute)])}
    model = ScriptedModel({"worker": [calls(call("w1", "work")), text("worker done")]})
    return Runtime(registry, generate=model, shutdown_timeout=SHUTDOWN_S)


def test_close_of_root_returns_once_interrupted_threads_have_ended():
    before = set(threading.enumerate())
    entered = threading.Event()

    def work(args, ctx):
        entered.set()
        ctx.cancelled.wait(HANG)
        threading.Event().wait(UNWIND_S)  # cleaning up after the cancel takes a while
        return "stopped"

    rt = runtime_with_tool(work)
    rt.wake(rt.spawn(rt.root, "worker"), "go")
    assert entered.wait(HANG)
    started = runtime_threads(before)
    assert started
    rt.close(rt.root)
    assert [t.name for t in started if t.is_alive()] == []


def test_close_of_root_warns_naming_threads_left_after_shutdown_timeout_plus_one_second(caplog):
    before = set(threading.enumerate())
    entered = threading.Event()
    release = threading.Event()

    def stuck(args, ctx):  # ignores ctx.cancelled on purpose
        entered.set()
        release.wait(HANG)
        return "finally"

    rt = runtime_with_tool(stuck)
    try:
        rt.wake(rt.spawn(rt.root, "worker"), "go")
        assert entered.wait(HANG)
        stuck_threads = [t for t in runtime_threads(before) if t.is_alive()]
        begun = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="toolnexus"):
            rt.close(rt.root)
        elapsed = time.monotonic() - begun
        assert SHUTDOWN_S + 1.0 <= elapsed < SHUTDOWN_S + 1.0 + PROMPT
        warnings = [r.getMessage() for r in caplog.records if "still running" in r.getMessage()]
        assert len(warnings) == 1
        left = [t.name for t in stuck_threads if t.is_alive()]
        assert left and all(name in warnings[0] for name in left)
    finally:
        release.set()
