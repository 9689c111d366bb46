"""interrupt and close: cooperative aborts, prompt HTTP cancellation, bounded shutdown (CONTRACT §7D,
edition item 3, Appendix "Interrupting a suspended handle")."""

from __future__ import annotations

import threading
import time

import pytest

from _helpers import EMPTY_SCHEMA, HANG, Asker, Recorder, asker_runtime, asker_step, call, calls, gated_runtime
from _helpers import text as reply
from conftest import run_in_thread
from toolnexus import (
    AgentDef,
    HandleClosed,
    InMemoryStore,
    Runtime,
    SpawnError,
    Tool,
    UnknownRequest,
    make_answer,
)
from toolnexus.testing import ScriptedLLMServer, ScriptedModel, tool_messages

PROMPT = 1.0  # "promptly": generous for a loaded 2-core machine, far below any stall or shutdown_timeout


# --- helpers (shared ones in _helpers.py; the ``cleanup`` fixture is in conftest.py) --------------


class FirstCallGated(Recorder):
    """A Recorder whose first model call blocks on a Gate; later calls echo."""

    def __init__(self, gate):
        super().__init__()
        self.gate = gate

    def __call__(self, request):
        said, before = self.record(request)
        return self.gate(request) if before == 0 else reply("echo:" + said)


def first_call_gated(cleanup):
    """A ``slow`` runtime whose first model call blocks on a gate: ``(gate, model, rt)``."""
    gate = cleanup.gate()
    model = FirstCallGated(gate)
    return gate, model, gated_runtime(cleanup, model)


class Waiter:
    """``rt.wait(h)`` on a thread of its own, so a test can bound how long it takes."""

    def __init__(self, rt, handle):
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(rt, handle), name="test-waiter", daemon=True)
        self.thread.start()

    def _run(self, rt, handle):
        self.result = rt.wait(handle, timeout=HANG)

    def join(self, timeout):
        self.thread.join(timeout)
        return not self.thread.is_alive()


class StallSignal(threading.Event):
    """A ``stall_until`` event that also reports when a server handler starts stalling on it,
    i.e. when the server has received the request."""

    def __init__(self):
        super().__init__()
        self.stalling = threading.Event()

    def wait(self, timeout=None):
        self.stalling.set()
        return super().wait(timeout)


@pytest.fixture
def stalled_server():
    stall = StallSignal()
    server = ScriptedLLMServer(stall_until=stall)
    server.stall = stall
    yield server
    server.close()


def stalled_http_runtime(server, shutdown_timeout):
    """A runtime whose agent ``m`` talks, without retries, to ``server`` (which stalls every request)."""
    return Runtime({"m": AgentDef("m", "Talks over HTTP.")}, base_url=server.base_url, model="scripted", retries=0, shutdown_timeout=shutdown_timeout)


def wake_into_stall(rt, server):
    """Spawn ``m`` and wake it; returns the handle once its HTTP call is stalling in ``server``."""
    h = rt.spawn(rt.root, "m")
    rt.wake(h, "go")
    assert server.stall.stalling.wait(HANG)
    return h


def started(rt, gate, name="slow", prompt="go"):
    h = rt.spawn(rt.root, name)
    rt.wake(h, prompt)
    assert gate.entered.wait(HANG)
    return h


def _new_toolnexus_threads(before):
    return [t.name for t in threading.enumerate() if t.name.startswith("toolnexus") and t not in before and t.is_alive()]


# --- interrupt --------------------------------------------------------------------------------------


def test_interrupt_of_running_handle_makes_it_idle_and_waiters_get_interrupted(cleanup):
    gate = cleanup.gate()
    rt = gated_runtime(cleanup, gate)
    h = started(rt, gate)
    waiters = [Waiter(rt, h) for _ in range(3)]
    rt.interrupt(h)
    assert rt.inspect(h).state == "idle"
    for waiter in waiters:
        assert waiter.join(PROMPT)
        assert waiter.result.status == "interrupted"
        assert waiter.result.handle_id == h.id
    assert rt.wait(h).status == "interrupted"


def test_interrupted_turn_late_reply_is_discarded(cleanup):
    gate = cleanup.gate(reply("too late"))
    rt = gated_runtime(cleanup, gate)
    h = started(rt, gate)
    rt.interrupt(h)
    gate.release.set()
    run_in_thread(lambda: rt.close(rt.root), HANG)  # joins the worker that held the stale turn
    assert rt.wait(h).status == "interrupted"
    assert rt.conversation_store.get(h.id) is None
    assert rt.transitions(h) == ["idle\u2192running", "running\u2192idle", "idle\u2192closed"]


def test_interrupt_puts_taken_inbox_items_back_before_newer_posts(cleanup):
    gate, model, rt = first_call_gated(cleanup)
    h = rt.spawn(rt.root, "slow")
    rt.post(h, "alpha")
    rt.post(h, "beta", sender="root", channel="memo")
    rt.wake(h, "go")
    assert gate.entered.wait(HANG)
    assert rt.inspect(h).inbox == 0  # the turn took them
    rt.post(h, "gamma")
    rt.interrupt(h)
    assert rt.inspect(h).inbox == 3

    rt.wake(h, "again")
    assert rt.wait(h, timeout=HANG).status == "done"
    text = model.inputs[1]
    assert text.startswith("again")
    first, second, third = (text.index(word) for word in ("beta", "alpha", "gamma"))
    # beta is trusted (from root) and listed first; alpha and gamma keep their order after it
    assert first < second < third
    assert "[from: external, channel: external] alpha" in text
    assert "[from: external, channel: external] gamma" in text
    assert text.index("alpha") < text.index("gamma")
    assert rt.inspect(h).inbox == 0


def test_interrupt_puts_back_external_items_in_their_original_order(cleanup):
    gate, model, rt = first_call_gated(cleanup)
    h = rt.spawn(rt.root, "slow")
    rt.post(h, "one")
    rt.post(h, "two")
    rt.wake(h, "go")
    assert gate.entered.wait(HANG)
    rt.post(h, "three")
    rt.interrupt(h)
    rt.wake(h)
    assert rt.wait(h, timeout=HANG).status == "done"
    lines = [line for line in model.inputs[1].splitlines() if line[:1].isdigit()]
    assert lines == [
        "1. [from: external, channel: external] one",
        "2. [from: external, channel: external] two",
        "3. [from: external, channel: external] three",
    ]


def test_interrupt_of_suspended_handle_cancels_its_request(cleanup):
    asker = Asker()
    rt = asker_runtime(cleanup, asker)
    h = rt.spawn(rt.root, "asker")
    rt.post(h, "note")
    rt.wake(h, "go")
    assert rt.wait(h, timeout=HANG).status == "pending"
    assert rt.inspect(h).inbox == 0
    rt.interrupt(h)
    view = rt.inspect(h)
    assert view.state == "idle"
    assert view.pending is None
    assert view.inbox == 1  # the pending turn had not consumed it
    assert rt.wait(h).status == "interrupted"
    with pytest.raises(UnknownRequest):
        rt.resume(make_answer(asker.requests[0].id, True, data="yes"))
    assert rt.inspect(h).state == "idle"


def test_interrupt_of_suspended_parent_cancels_the_request_on_the_whole_path(cleanup):
    asker = Asker()

    def boss(request):
        found = tool_messages(request)
        if found:
            return reply("boss:" + found[0])
        return calls(call("t1", "task", {"agent": "asker", "prompt": "ask"}))

    registry = {
        "boss": AgentDef("boss", "Leads.", model="boss", team=["asker"]),
        "asker": AgentDef("asker", "Asks.", model="asker", tools=[asker.tool()]),
    }
    rt = cleanup.runtime(registry, generate=ScriptedModel({"boss": boss, "asker": asker_step}))
    top = rt.spawn(rt.root, "boss")
    rt.wake(top, "go")
    assert rt.wait(top, timeout=HANG).status == "pending"
    child = rt.inspect(top).children[0]
    assert rt.inspect(child).state == "suspended"
    rt.interrupt(top)
    assert rt.inspect(top).state == "idle"
    assert rt.inspect(child).state == "idle"
    with pytest.raises(UnknownRequest):
        rt.resume(make_answer(asker.requests[0].id, True))


def test_interrupt_on_idle_handle_is_a_noop(cleanup):
    rt = cleanup.runtime({"echo": AgentDef("echo", "Echoes.", model="echo")}, generate=lambda r: reply("ok"))
    fresh = rt.spawn(rt.root, "echo")
    rt.interrupt(fresh)
    assert rt.inspect(fresh).state == "idle"
    assert rt.transitions(fresh) == []

    h = rt.spawn(rt.root, "echo")
    rt.wake(h, "hi")
    done = rt.wait(h, timeout=HANG)
    rt.post(h, "kept")
    rt.interrupt(h)
    rt.interrupt(h.id)
    assert rt.inspect(h).state == "idle"
    assert rt.inspect(h).inbox == 1
    assert rt.transitions(h) == ["idle\u2192running", "running\u2192idle"]
    assert rt.wait(h) == done


@pytest.mark.parametrize("attempt", range(3))
def test_interrupt_of_in_flight_http_call_is_prompt(stalled_server, attempt):
    before = set(threading.enumerate())
    rt = stalled_http_runtime(stalled_server, shutdown_timeout=5)
    try:
        h = rt.spawn(rt.root, "m")
        rt.wake(h, "go")
        waiter = Waiter(rt, h)
        assert stalled_server.stall.stalling.wait(HANG), "the server never received the request"
        assert stalled_server.requests_seen == 1
        assert rt.inspect(h).state == "running"

        begun = time.monotonic()
        rt.interrupt(h)
        assert rt.inspect(h).state == "idle"
        assert time.monotonic() - begun < PROMPT

        assert waiter.join(PROMPT), "wait() did not return promptly after interrupt"
        assert waiter.result.status == "interrupted"

        begun = time.monotonic()
        rt.close(rt.root)
        # shutdown_timeout is 5 s: returning well before it means the worker was not left
        # reading the stalled socket (it was shut down).
        assert time.monotonic() - begun < PROMPT
        assert _new_toolnexus_threads(before) == []
        assert not stalled_server.stall.is_set()  # the server was still stalling all along
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


def test_force_close_of_root_aborts_a_stalled_http_call_at_once(stalled_server):
    before = set(threading.enumerate())
    rt = stalled_http_runtime(stalled_server, shutdown_timeout=10)
    try:
        h = wake_into_stall(rt, stalled_server)
        begun = time.monotonic()
        rt.close(rt.root, force=True)
        assert time.monotonic() - begun < PROMPT
        assert rt.inspect(h).state == "closed"
        assert rt.wait(h).status == "interrupted"
        assert _new_toolnexus_threads(before) == []
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


def test_close_of_root_with_stalled_http_call_is_bounded_by_shutdown_timeout(stalled_server):
    rt = stalled_http_runtime(stalled_server, shutdown_timeout=0.2)
    try:
        h = wake_into_stall(rt, stalled_server)
        begun = time.monotonic()
        rt.close(rt.root)
        elapsed = time.monotonic() - begun
        assert 0.15 <= elapsed < 0.2 + PROMPT
        assert rt.inspect(h).state == "closed"
        assert rt.wait(h).status == "interrupted"
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


def test_interrupt_with_a_tool_blocking_forever_in_a_child_returns_at_once(cleanup):
    entered = threading.Event()
    release = cleanup.event()

    def stuck(args, ctx):  # ignores ctx.cancelled on purpose
        entered.set()
        release.wait(60)
        return "finally"

    def boss(request):
        found = tool_messages(request)
        return reply("boss:" + found[0]) if found else calls(call("t1", "task", {"agent": "worker", "prompt": "work"}))

    registry = {
        "boss": AgentDef("boss", "Leads.", model="boss", team=["worker"]),
        "worker": AgentDef("worker", "Works.", model="worker", tools=[Tool("stuck", "Never ends.", EMPTY_SCHEMA, stuck)]),
    }
    model = ScriptedModel({"boss": boss, "worker": [calls(call("s1", "stuck")), reply("worker done")]})
    rt = cleanup.runtime(registry, generate=model, shutdown_timeout=0.2)
    top = rt.spawn(rt.root, "boss")
    rt.wake(top, "go")
    waiter = Waiter(rt, top)
    assert entered.wait(HANG)
    child = rt.inspect(top).children[0]
    assert rt.inspect(child).state == "running"

    begun = time.monotonic()
    rt.interrupt(top)
    assert time.monotonic() - begun < PROMPT
    assert rt.inspect(top).state == "idle"
    assert rt.inspect(child).state in ("idle", "closed")  # the parent's turn interrupted its task child
    assert waiter.join(PROMPT)
    assert waiter.result.status == "interrupted"

    begun = time.monotonic()
    rt.close(rt.root)  # the stuck tool's thread is waited for up to shutdown_timeout + 1 s
    assert time.monotonic() - begun < 0.2 + 1.0 + PROMPT
    assert all(v.state == "closed" for v in rt.handles())


# --- close ------------------------------------------------------------------------------------------


def test_close_lets_a_running_turn_finish_within_shutdown_timeout(cleanup):
    gate = cleanup.gate(reply("finished in time"))
    closed = []
    rt = cleanup.runtime(
        {"slow": AgentDef("slow", "Slow.", model="slow", on_close=lambda h, reason: closed.append(reason))},
        generate=ScriptedModel({"slow": gate}),
        shutdown_timeout=10,
    )
    h = started(rt, gate)
    closer = threading.Thread(target=rt.close, args=(h,), daemon=True)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive(), "close should wait for the running turn"
    assert closed == []
    with pytest.raises(HandleClosed):
        rt.post(h, "too late")  # closing: no more posts
    gate.release.set()
    closer.join(HANG)
    assert not closer.is_alive()
    result = rt.wait(h)
    assert result.status == "done"
    assert result.text == "finished in time"
    assert rt.inspect(h).state == "closed"
    assert rt.transitions(h) == ["idle\u2192running", "running\u2192idle", "idle\u2192closed"]
    assert closed == ["closed"]


def test_close_interrupts_a_turn_still_running_after_shutdown_timeout(cleanup):
    gate = cleanup.gate()
    rt = gated_runtime(cleanup, gate, shutdown_timeout=0.3)
    h = started(rt, gate)
    waiter = Waiter(rt, h)
    begun = time.monotonic()
    rt.close(h)
    elapsed = time.monotonic() - begun
    assert 0.25 <= elapsed < 0.3 + PROMPT
    assert waiter.join(PROMPT)
    assert waiter.result.status == "interrupted"
    assert rt.inspect(h).state == "closed"
    assert rt.transitions(h) == ["idle\u2192running", "running\u2192idle", "idle\u2192closed"]


def test_force_close_interrupts_at_once(cleanup):
    gate = cleanup.gate()
    rt = gated_runtime(cleanup, gate, shutdown_timeout=10)
    h = started(rt, gate)
    waiter = Waiter(rt, h)
    begun = time.monotonic()
    rt.close(h, force=True)
    assert time.monotonic() - begun < PROMPT
    assert waiter.join(PROMPT)
    assert waiter.result.status == "interrupted"
    assert rt.inspect(h).state == "closed"


def test_on_close_is_called_leaf_first_with_its_reason(cleanup):
    closed = []
    registry = {"node": AgentDef("node", "A node.", on_close=lambda h, reason: closed.append((h.id, reason)))}
    rt = cleanup.runtime(registry, generate=lambda r: reply("ok"))
    top = rt.spawn(rt.root, "node")
    left = rt.spawn(top, "node")
    leaf = rt.spawn(left, "node")
    right = rt.spawn(top, "node")
    other = rt.spawn(rt.root, "node")
    rt.close(top)
    assert closed == [
        (leaf.id, "parent closed"),
        (left.id, "parent closed"),
        (right.id, "parent closed"),
        (top.id, "closed"),
    ]
    assert rt.inspect(other).state == "idle"
    close_events = [e["handle"] for e in rt.events() if e["event"] == "close"]
    assert close_events == [leaf.id, left.id, right.id, top.id]

    rt.close(rt.root)
    assert closed[-1] == (other.id, "parent closed")
    assert len(closed) == 5  # nothing is closed twice


def test_closed_handle_final_state_stays_queryable(cleanup):
    rt = cleanup.runtime(
        {"echo": AgentDef("echo", "Echoes.", model="echo")},
        generate=ScriptedModel({"echo": lambda r: reply("ok")}, usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
    )
    h = rt.spawn(rt.root, "echo")
    child = rt.spawn(h, "echo")
    rt.wake(h, "hi")
    rt.wait(h, timeout=HANG)
    rt.close(h)
    view = rt.inspect(h)
    assert view.state == "closed"
    assert view.turns == 1
    assert view.tokens == 5
    assert view.children == [child.id]
    assert rt.inspect(child).state == "closed"
    assert [v.id for v in rt.handles()] == ["root", h.id, child.id]
    assert rt.transitions(h)[-1] == "idle\u2192closed"
    assert [m["content"] for m in rt.conversation_store.get(h.id)] == ["hi", "ok"]


@pytest.fixture
def closed_pair(cleanup):
    """A runtime with one handle that ran a turn and one that never ran, both closed."""
    rt = cleanup.runtime({"echo": AgentDef("echo", "Echoes.", model="echo")}, generate=lambda r: reply("ok"))
    ran = rt.spawn(rt.root, "echo")
    rt.wake(ran, "hi")
    last = rt.wait(ran, timeout=HANG)
    never = rt.spawn(rt.root, "echo")
    rt.close(ran)
    rt.close(never)
    return rt, ran, never, last


def test_post_to_closed_handle_raises_handle_closed(closed_pair):
    rt, ran, never, _ = closed_pair
    for h in (ran, never):
        with pytest.raises(HandleClosed, match="closed"):
            rt.post(h, "x")


def test_wake_of_closed_handle_raises_handle_closed(closed_pair):
    rt, ran, never, _ = closed_pair
    for h in (ran, never):
        with pytest.raises(HandleClosed, match="closed"):
            rt.wake(h, "x")
        assert rt.inspect(h).state == "closed"


def test_spawn_under_closed_handle_raises_spawn_error_closed(closed_pair):
    rt, ran, _, _ = closed_pair
    with pytest.raises(SpawnError, match="closed"):
        rt.spawn(ran, "echo")


def test_wait_on_closed_handle_returns_a_result(closed_pair):
    rt, ran, never, last = closed_pair
    assert run_in_thread(lambda: rt.wait(ran), HANG) == last
    assert run_in_thread(lambda: rt.wait(never), HANG).status == "closed"


def test_close_of_closed_handle_is_a_noop(closed_pair):
    rt, ran, _, _ = closed_pair
    before = rt.transitions(ran)
    events = len(rt.events())
    rt.close(ran)
    rt.close(ran.id, force=True)
    rt.interrupt(ran)
    assert rt.transitions(ran) == before
    assert len(rt.events()) == events
    assert rt.inspect(ran).state == "closed"


class SlowStore(InMemoryStore):
    """A store whose ``save`` blocks until released (a slow database)."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def save(self, id, messages):
        self.entered.set()
        self.release.wait(HANG)
        super().save(id, messages)


@pytest.mark.parametrize("force", [True, False])
def test_close_during_a_transcript_save_slower_than_shutdown_timeout_closes_cleanly(cleanup, force):
    store = SlowStore()
    cleanup.events_to_set(store.release)
    rt = cleanup.runtime(
        {"echo": AgentDef("echo", "Echoes.", model="echo")},
        generate=ScriptedModel({"echo": lambda r: reply("saved")}),
        store=store,
        shutdown_timeout=0.1,
    )
    h = rt.spawn(rt.root, "echo")
    rt.wake(h, "go")
    assert store.entered.wait(HANG)  # the turn finished and is saving its transcript
    errors = []

    def closer():
        try:
            rt.close(h, force=force)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=closer, daemon=True)
    thread.start()
    thread.join(0.3)  # past shutdown_timeout: the save is still blocked
    store.release.set()
    thread.join(HANG)
    assert not thread.is_alive()
    assert errors == []
    assert rt.inspect(h).state == "closed"
    assert rt.wait(h).text == "saved"  # the turn had finished: its outcome stands
    assert [m["content"] for m in store.get(h.id)] == ["go", "saved"]
    assert rt.transitions(h) == ["idle\u2192running", "running\u2192idle", "idle\u2192closed"]


@pytest.mark.parametrize("attempt", range(2))
def test_close_of_a_parent_whose_task_child_never_finishes_is_bounded_and_leaf_first(cleanup, attempt):
    gate = cleanup.gate(reply("worker done"))
    closed = []

    def boss(request):
        found = tool_messages(request)
        return reply("boss:" + found[0]) if found else calls(call("t1", "task", {"agent": "worker", "prompt": "work"}))

    def on_close(h, reason):
        closed.append(h.id)

    registry = {
        "boss": AgentDef("boss", "Leads.", model="boss", team=["worker"], on_close=on_close),
        "worker": AgentDef("worker", "Works.", model="worker", on_close=on_close),
    }
    rt = cleanup.runtime(registry, generate=ScriptedModel({"boss": boss, "worker": gate}), shutdown_timeout=0.2)
    top = rt.spawn(rt.root, "boss")
    rt.wake(top, "go")
    assert gate.entered.wait(HANG)
    child = rt.inspect(top).children[0]
    begun = time.monotonic()
    rt.close(top)
    assert time.monotonic() - begun < 0.2 + PROMPT
    assert closed == [child, top.id]
    assert rt.inspect(child).state == "closed"
    assert rt.inspect(top).state == "closed"
    assert rt.wait(child).status == "interrupted"
