"""Streaming (CONTRACT §16): a team's events while it works, from sync code.

Every kind of event in causal order across the tree; text as the model writes it (the
first piece within 50 ms of the server writing it); streaming mode only while watched;
durable ids and ``after``; closing, interrupting and timing out a stream.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

import _stream_team as team
from conftest import run_in_thread
from toolnexus import AgentDef, Client, Event, Runtime, Toolkit, make_answer, tool
from toolnexus.testing import ScriptedLLMServer, responder_by_model

HANG = 10.0


def kinds(events: list[Event], handle: str | None = None) -> list[str]:
    return [e.kind for e in events if handle is None or e.handle == handle]


def lead_runtime(cleanup: Any, **options: Any) -> Runtime:
    return cleanup.runtime(team.registry(), generate=team.model(), **options)


# --- every kind, in causal order -----------------------------------------------------------


def test_stream_agent_yields_a_team_s_events_with_each_child_between_its_task_call_and_result(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)

    def watch() -> tuple[list[Event], Any]:
        with rt.stream_agent("lead", "go") as stream:
            return list(stream), stream.result

    events, result = run_in_thread(watch, HANG)
    lead_id = result.handle_id
    assert result.status == "done" and result.text == "final: did alpha | did beta"
    assert kinds(events, lead_id) == ["state", "message", "tool_call", "tool_call", "spawn", "spawn", "tool_result", "tool_result", "text", "message", "state", "result"]
    assert events[0].data == {"from": "idle", "to": "running"} and events[-1].kind == "result"
    assert events[-1].data == {"status": "done", "text": "final: did alpha | did beta", "total_tokens": 20}
    children = [e.data["child"] for e in events if e.kind == "spawn"]
    assert [e.data["agent"] for e in events if e.kind == "spawn"] == ["worker", "worker"]
    for call_id, child in zip(("t1", "t2"), children):
        called = next(i for i, e in enumerate(events) if e.kind == "tool_call" and e.data["id"] == call_id)
        answered = next(i for i, e in enumerate(events) if e.kind == "tool_result" and e.data["id"] == call_id)
        own = [i for i, e in enumerate(events) if e.handle == child]
        assert own and called < min(own) and max(own) < answered
        assert kinds([events[i] for i in own]) == ["state", "text", "message", "state", "result", "state"]  # ... and closed
    assert [e.data["to"] for e in events if e.kind == "state" and e.handle == children[0]] == ["running", "idle", "closed"]


def test_event_ids_are_serials_and_text_ids_sort_between_them(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)
    events = run_in_thread(lambda: list(rt.stream_agent("lead", "go")), HANG)
    durable = [int(e.id) for e in events if e.kind != "text"]
    assert durable == sorted(durable) and len(set(durable)) == len(durable)
    keys = [tuple(int(part) for part in e.id.split(".")) + ((0,) if "." not in e.id else ()) for e in events]
    assert keys == sorted(keys)
    texts = [e for e in events if e.kind == "text"]
    assert texts and all(e.id.count(".") == 1 for e in texts)


def test_a_tool_call_and_its_result_carry_the_call(cleanup: Any) -> None:
    @tool
    def lookup(q: str) -> str:
        """Look up."""
        return f"data({q})"

    def step(request: dict[str, Any]) -> dict[str, Any]:
        if team.tool_messages(request):
            return {"content": "ok"}
        return {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}]}

    rt = cleanup.runtime({"solo": AgentDef("solo", "looks up", tools=[lookup])}, generate=team.ScriptedModel({"default": step}))
    events = run_in_thread(lambda: list(rt.stream_agent("solo", "go")), HANG)
    call = next(e for e in events if e.kind == "tool_call")
    done = next(e for e in events if e.kind == "tool_result")
    assert call.data["id"] == "c1" and call.data["name"] == "lookup" and json.loads(call.data["arguments"]) == {"q": "x"}
    assert done.data == {"id": "c1", "name": "lookup", "output": "data(x)", "is_error": False}
    message = next(e for e in events if e.kind == "message")
    assert message.data["tool_calls"][0]["name"] == "lookup" and message.data["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def test_a_suspension_is_a_pending_event_and_the_result_is_pending(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)
    with rt.stream_agent("boss", "go") as stream:
        events = run_in_thread(lambda: list(stream), HANG)
    assert stream.result.status == "pending"
    pending = [e for e in events if e.kind == "pending"]
    assert [e.handle for e in pending] == ["root/boss.1/asker.1", "root/boss.1"]
    assert pending[0].data["request"]["prompt"] == "ship it?" and pending[0].data["request"]["data"]["path"] == ["root", "boss.1", "asker.1"]
    assert rt.inspect("root/boss.1").state == "suspended"  # left open for resume
    assert events[-1].kind == "result" and events[-1].data["status"] == "pending"


def test_after_the_pending_result_a_new_stream_follows_the_resumed_run_to_its_end(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)
    first = run_in_thread(lambda: list(rt.stream_agent("boss", "go")), HANG)
    request = rt.inspect("root/boss.1").pending
    stream = rt.stream("root/boss.1", after=first[-1].id)
    rt.resume(make_answer(request.id, True))
    rest = run_in_thread(lambda: list(stream), HANG)
    assert stream.result.status == "done" and stream.result.text == "boss: asker: approved"
    assert all(int(e.id.split(".")[0]) >= int(first[-1].id) for e in rest)
    assert kinds(rest, "root/boss.1")[:2] == ["state", "state"]  # suspended→idle→running
    assert "tool_result" in kinds(rest, "root/boss.1/asker.1") and kinds(rest)[-1] == "result"


# --- after: from an id, from the current turn, from the next one ----------------------------


def test_after_an_id_yields_every_later_event_of_the_subtree_once_in_order(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)
    events = run_in_thread(lambda: list(rt.stream_agent("boss", "go")), HANG)
    durable = [e for e in events if e.kind != "text"]
    for cut in (0, 3, len(durable) - 2):
        again = run_in_thread(lambda: [e for e in rt.stream("root/boss.1", after=durable[cut].id) if e.kind != "text"], HANG)
        assert again == durable[cut + 1 :]


def test_a_stream_of_a_running_handle_starts_at_the_start_of_its_turn(cleanup: Any) -> None:
    rt, handle, gate = team.running_slow(cleanup, HANG)
    stream = rt.stream(handle)
    first = run_in_thread(lambda: next(stream), HANG)
    assert first.kind == "state" and first.data == {"from": "idle", "to": "running"} and first.handle == handle.id
    gate.set()
    rest = run_in_thread(lambda: list(stream), HANG)
    # the first reply came before anyone watched; the second one streams its text
    assert kinds(rest) == ["message", "tool_call", "tool_result", "text", "message", "state", "result"]


def test_a_stream_of_an_idle_handle_waits_for_its_next_turn(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)
    handle = rt.spawn(rt.root, "worker")
    stream = rt.stream(handle)
    threading.Timer(0.05, lambda: rt.wake(handle, "later")).start()
    events = run_in_thread(lambda: list(stream), HANG)
    assert kinds(events) == ["state", "text", "message", "state", "result"]
    assert stream.result.text == "did later"


def test_a_stream_of_a_closed_handle_replays_its_last_turn(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)
    result = rt.run_agent("worker", "once")
    events = run_in_thread(lambda: list(rt.stream(result.handle_id)), HANG)
    assert kinds(events) == ["state", "message", "state", "result"]
    assert events[-1].data["text"] == "did once"


def test_a_bad_after_is_refused(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)
    handle = rt.spawn(rt.root, "worker")
    for bad in ("x", "1.x", "-3", "1.2.3", "٣"):
        with pytest.raises(Exception, match="not an event id"):
            rt.stream(handle, after=bad)


def test_without_a_state_the_last_10000_events_are_kept(cleanup: Any) -> None:
    rt = lead_runtime(cleanup)
    handle = rt.spawn(rt.root, "worker")
    log = rt._tree.store.events.stream.log
    for n in range(10_050):
        log.append("root/elsewhere.1", "state", {"n": n})
    stream = rt.stream(handle, after="1")  # long gone: the stream starts at the oldest kept
    rt.wake(handle, "go")
    events = run_in_thread(lambda: list(stream), HANG)
    assert kinds(events) == ["state", "text", "message", "state", "result"]
    assert len(log.kept_after(0, 20_000)) == 10_000


# --- live from the model ------------------------------------------------------------------


def story(words: int = 6) -> str:
    return " ".join(f"word{i}" for i in range(words))


def test_the_first_text_event_reaches_the_consumer_within_50_ms_of_the_server_writing_it(closing: Any) -> None:
    server = closing(ScriptedLLMServer(responder_by_model({}, default={"text": story(6)}), stream_gap_s=0.2))
    rt = Runtime({"teller": AgentDef("teller", "tells")}, base_url=server.base_url, model="m")
    try:

        def first_text() -> tuple[float, list[Event]]:
            with rt.stream_agent("teller", "go") as stream:
                for event in stream:
                    if event.kind == "text":
                        return time.monotonic(), list(stream)
            raise AssertionError("no text")

        seen, rest = run_in_thread(first_text, HANG)
        assert seen - server.written[0][0] < 0.05
        assert server.written[-1][0] - seen > 0.8  # the reply went on for another second
        assert "".join(e.data["delta"] for e in rest if e.kind == "text") == story(6)[len(server.written[0][1]):]
        assert server.last_body["stream"] is True and server.last_body["stream_options"] == {"include_usage": True}
    finally:
        rt.close(rt.root)


def test_runs_nobody_streams_send_the_plain_request(closing: Any) -> None:
    server = closing(ScriptedLLMServer(responder_by_model({}, default={"text": "plain"})))
    rt = Runtime({"teller": AgentDef("teller", "tells")}, base_url=server.base_url, model="m")
    try:
        assert rt.run_agent("teller", "go").text == "plain"
        assert "stream" not in server.last_body and "stream_options" not in server.last_body
        run_in_thread(lambda: list(rt.stream_agent("teller", "go")), HANG)
        assert server.last_body["stream"] is True
        assert rt.run_agent("teller", "go").text == "plain"  # the stream is over: plain again
        assert "stream" not in server.last_body
    finally:
        rt.close(rt.root)


def test_watching_a_team_streams_every_handle_s_model_calls(closing: Any) -> None:
    bodies: list[dict[str, Any]] = []
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        with lock:
            bodies.append(body)
        return script(body)

    script = responder_by_model({"m-lead": [{"calls": [("t1", "task", {"agent": "worker", "prompt": "a"})]}]}, default={"text": "fine"})
    server = closing(ScriptedLLMServer(respond))
    rt = Runtime(team.registry(), base_url=server.base_url, model="m")
    try:
        events = run_in_thread(lambda: list(rt.stream_agent("lead", "go")), HANG)
        assert {b["model"] for b in bodies} == {"m-lead", "m-worker"} and all(b.get("stream") is True for b in bodies)
        assert {e.handle for e in events if e.kind == "text"} == {"root/lead.1", "root/lead.1/worker.1"}
    finally:
        rt.close(rt.root)


def test_closing_a_stream_agent_mid_text_interrupts_and_frees_the_handle_within_100_ms(closing: Any) -> None:
    server = closing(ScriptedLLMServer(responder_by_model({}, default={"text": story(50)}), stream_gap_s=1.0))
    rt = Runtime({"teller": AgentDef("teller", "tells")}, base_url=server.base_url, model="m")
    try:
        stream = rt.stream_agent("teller", "go")
        first = run_in_thread(lambda: next(e for e in stream if e.kind == "text"), HANG)
        assert first.data["delta"] == "word0 "
        began = time.monotonic()
        stream.close()
        assert time.monotonic() - began < 0.1
        view = rt.inspect("root/teller.1")
        assert view.state == "closed" and rt.transitions("root/teller.1") == ["idle→running", "running→idle", "idle→closed"]
        assert stream.result is None
    finally:
        rt.close(rt.root)


def test_interrupt_mid_stream_frees_the_handle_within_100_ms_and_the_stream_ends_interrupted(closing: Any) -> None:
    server = closing(ScriptedLLMServer(responder_by_model({}, default={"text": story(50)}), stream_gap_s=1.0))
    rt = Runtime({"teller": AgentDef("teller", "tells")}, base_url=server.base_url, model="m")
    try:
        handle = rt.spawn(rt.root, "teller")
        stream = rt.stream(handle)
        rt.wake(handle, "go")
        run_in_thread(lambda: next(e for e in stream if e.kind == "text"), HANG)
        began = time.monotonic()
        rt.interrupt(handle)
        assert time.monotonic() - began < 0.1 and rt.inspect(handle).state == "idle"
        rest = run_in_thread(lambda: list(stream), HANG)
        assert kinds(rest)[-2:] == ["state", "result"] and stream.result.status == "interrupted"
    finally:
        rt.close(rt.root)


def test_closing_a_runtime_stream_only_stops_watching(cleanup: Any) -> None:
    gate = threading.Event()
    cleanup.events_to_set(gate)
    rt = cleanup.runtime(team.registry(lambda: gate.wait(HANG)), generate=team.model())
    handle = rt.spawn(rt.root, "slow")
    stream = rt.stream(handle)
    rt.wake(handle, "go")
    assert run_in_thread(lambda: next(stream), HANG).kind == "state"
    stream.close()
    assert list(stream) == []
    gate.set()
    assert rt.wait(handle, timeout=HANG).text == "slow done"


def test_timeout_ends_a_watch_with_a_timeout_result_and_the_run_goes_on(cleanup: Any) -> None:
    gate = threading.Event()
    cleanup.events_to_set(gate)
    rt = cleanup.runtime(team.registry(lambda: gate.wait(HANG)), generate=team.model())
    handle = rt.spawn(rt.root, "slow")
    rt.wake(handle, "go")
    began = time.monotonic()
    events = run_in_thread(lambda: list(rt.stream(handle, timeout=0.2)), HANG)
    assert 0.2 <= time.monotonic() - began < 1.0
    assert events[-1].kind == "result" and events[-1].data["status"] == "timeout"
    assert rt.inspect(handle).state == "running"
    gate.set()
    assert rt.wait(handle, timeout=HANG).status == "done"


def test_timeout_on_stream_agent_interrupts_the_run(cleanup: Any) -> None:
    gate = threading.Event()
    cleanup.events_to_set(gate)
    rt = cleanup.runtime(team.registry(lambda: gate.wait(HANG)), generate=team.model())
    stream = rt.stream_agent("slow", "go", timeout=0.2)
    events = run_in_thread(lambda: list(stream), HANG)
    assert events[-1].data["status"] == "timeout" and stream.result.status == "timeout"
    assert rt.inspect("root/slow.1").state == "closed"


def test_the_timeout_bounds_a_dripping_stream(closing: Any) -> None:
    server = closing(ScriptedLLMServer(responder_by_model({}, default={"text": story(40)}), stream_gap_s=0.05))
    rt = Runtime({"teller": AgentDef("teller", "tells")}, base_url=server.base_url, model="m", timeout=0.4, retries=0)
    try:
        began = time.monotonic()
        with rt.stream_agent("teller", "go") as stream:
            events = run_in_thread(lambda: list(stream), HANG)
        assert time.monotonic() - began < 1.5
        assert 3 <= len([e for e in events if e.kind == "text"]) < 40
        assert stream.result.status == "error" and "timed out" in stream.result.text
    finally:
        rt.close(rt.root)


def test_a_streamed_call_cut_short_is_retried_and_announced_by_a_retry_event(servers: Any) -> None:
    from _rawserver import openai_chunks

    def script(ex: Any) -> None:
        events = openai_chunks(["lost ", "piece"]) if ex.index == 1 else openai_chunks(["whole ", "answer"])
        ex.stream_head()
        if ex.index == 1:
            for event in events[:2]:
                ex.chunk(event)
            ex.hang_up()
            return
        for event in events:
            ex.chunk(event)
        ex.chunk(b"")

    server = servers(script)
    rt = Runtime({"teller": AgentDef("teller", "tells")}, base_url=server.base_url, model="m", retries=1, retry_base=0.001)
    try:
        events = run_in_thread(lambda: list(rt.stream_agent("teller", "go")), HANG)
        seen = [(e.kind, e.data.get("delta")) for e in events if e.kind in ("text", "retry")]
        assert seen == [("text", "lost "), ("retry", None), ("text", "whole "), ("text", "answer")]
        retry = next(e for e in events if e.kind == "retry")
        assert retry.data["attempt"] == 1 and "cut short" in retry.data["cause"]
        assert next(e for e in events if e.kind == "message").data["text"] == "whole answer"
    finally:
        rt.close(rt.root)


def test_a_team_on_the_anthropic_style_streams_its_text_too(servers: Any) -> None:
    from _rawserver import anthropic_events, stream

    server = servers(lambda ex: stream(ex, anthropic_events(["Bon", "jour"], tokens=9)))
    rt = Runtime({"teller": AgentDef("teller", "tells")}, base_url=server.base_url, model="c", style="anthropic", api_key="sk-test")
    try:
        events = run_in_thread(lambda: list(rt.stream_agent("teller", "go")), HANG)
        assert [(e.kind, e.data.get("delta")) for e in events if e.kind == "text"] == [("text", "Bon"), ("text", "jour")]
        assert next(e for e in events if e.kind == "message").data["text"] == "Bonjour"
        assert json.loads(server.last_request.partition(b"\r\n\r\n")[2])["stream"] is True
    finally:
        rt.close(rt.root)


# --- the client ---------------------------------------------------------------------------


@tool
def lookup(q: str) -> str:
    """Look up a key."""
    return f"data({q})"


def test_client_stream_yields_text_tool_events_and_the_run_result(closing: Any) -> None:
    server = closing(ScriptedLLMServer(stream_gap_s=0.01))
    client = Client(base_url=server.base_url, model="m")
    try:
        with client.stream("go", Toolkit([lookup])) as stream:
            events = run_in_thread(lambda: list(stream), HANG)
        assert kinds(events) == ["message", "tool_call", "tool_call", "tool_result", "tool_result", "text", "text", "text", "message", "result"]
        assert all(e.handle is None for e in events)
        assert "".join(e.data["delta"] for e in events if e.kind == "text") == "done: data(a), data(b)"
        assert stream.result.text == "done: data(a), data(b)" and stream.result.status == "done" and stream.result.turns == 2
        assert events[-1].data == {"status": "done", "text": "done: data(a), data(b)", "total_tokens": 30}
    finally:
        client.close()


def test_client_stream_keeps_a_conversation_by_id(closing: Any) -> None:
    server = closing(ScriptedLLMServer(responder_by_model({}, default={"text": "hello"})))
    client = Client(base_url=server.base_url, model="m")
    try:
        list(client.stream("one", id="conv"))
        list(client.stream("two", id="conv"))
        messages = client.conversation_store.get("conv")
        assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    finally:
        client.close()


def test_closing_a_client_stream_early_interrupts_its_run_within_100_ms(closing: Any) -> None:
    server = closing(ScriptedLLMServer(responder_by_model({}, default={"text": story(50)}), stream_gap_s=1.0))
    client = Client(base_url=server.base_url, model="m")
    try:
        stream = client.stream("go")
        run_in_thread(lambda: next(e for e in stream if e.kind == "text"), HANG)
        began = time.monotonic()
        stream.close()
        assert time.monotonic() - began < 0.1
        assert stream.result is None
        assert not [t for t in threading.enumerate() if t.name == "toolnexus-stream"]
    finally:
        client.close()


def test_a_client_stream_raises_the_model_s_failure_after_its_events(closing: Any) -> None:
    from toolnexus import LLMError

    client = Client(base_url="http://127.0.0.1:9/v1", model="m", retries=0)
    try:
        stream = client.stream("go")
        with pytest.raises(LLMError, match="connection refused"):
            run_in_thread(lambda: list(stream), HANG)
    finally:
        client.close()


def test_client_stream_refuses_an_output_type_without_a_schema_before_the_run_starts() -> None:
    from toolnexus import ConfigError

    asked: list[Any] = []
    client = Client(generate=lambda request: asked.append(request) or {"content": "x"}, model="m")
    with pytest.raises(ConfigError, match="cannot be given a schema"):
        client.stream("go", output=dict)
    assert asked == []
    client.close()


def test_an_in_process_model_gives_its_text_as_one_piece(cleanup: Any) -> None:
    client = Client(generate=lambda request: {"content": "all at once"}, model="m")
    events = list(client.stream("go"))
    assert [(e.kind, e.data.get("delta")) for e in events][:1] == [("text", "all at once")]
    client.close()


# --- inline, and the level-1 agent ---------------------------------------------------------


def test_inline_iteration_runs_the_turns_on_the_iterating_thread(cleanup: Any) -> None:
    threads: set[str] = set()

    def worker(request: dict[str, Any]) -> dict[str, Any]:
        threads.add(threading.current_thread().name)
        return team.worker(request)

    def lead(request: dict[str, Any]) -> dict[str, Any]:
        threads.add(threading.current_thread().name)
        return team.lead(request)

    before = {t.name for t in threading.enumerate()}
    rt = cleanup.runtime(team.registry(), generate=team.ScriptedModel({"m-lead": lead, "m-worker": worker}), inline=True)

    def iterate() -> tuple[list[Event], str]:
        return list(rt.stream_agent("lead", "go")), threading.current_thread().name

    events, iterating = run_in_thread(iterate, HANG)
    assert threads == {iterating}
    assert kinds(events, "root/lead.1")[-1] == "result" and events[-1].data["text"] == "final: did alpha | did beta"
    assert {t.name for t in threading.enumerate()} - before == set()


def test_agent_stream_carries_its_runtime_on_the_result() -> None:
    from toolnexus import agent

    worker = agent("worker", does="answers", model="m-worker")
    lead = agent("lead", does="delegates", model="m-lead", team=[worker])
    stream = lead.stream("go", generate=team.model())
    events = run_in_thread(lambda: list(stream), HANG)
    assert stream.result.text == "final: did alpha | did beta" and stream.result.runtime is not None
    assert kinds(events, "root/lead.1")[-1] == "result"
    lead.close()


def test_closing_an_agent_stream_early_interrupts_the_run_and_closes_its_runtime(closing: Any) -> None:
    from toolnexus import agent

    server = closing(ScriptedLLMServer(responder_by_model({}, default={"text": story(50)}), stream_gap_s=1.0))
    teller = agent("teller", does="tells")
    stream = teller.stream("go", base_url=server.base_url, model="m")
    run_in_thread(lambda: next(e for e in stream if e.kind == "text"), HANG)
    began = time.monotonic()
    stream.close()
    assert time.monotonic() - began < 0.5
    assert stream.result is None and list(stream) == []
    teller.close()


def test_an_inline_client_stream_runs_on_the_iterating_thread(closing: Any) -> None:
    seen: list[str] = []

    def generate(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(threading.current_thread().name)
        return {"content": "here"}

    client = Client(generate=generate, model="m", inline=True)
    events = run_in_thread(lambda: (list(client.stream("go")), threading.current_thread().name), HANG)
    assert kinds(events[0]) == ["text", "message", "result"] and seen == [events[1]]
    client.close()


# --- with a state: durable ids, across processes ---------------------------------------------

from _durable_team import state  # noqa: E402,F401 - the fixture: a SQLite file, or PostgreSQL


def durable_runtime(cleanup: Any, state: str, runtime_id: str, **options: Any) -> Runtime:
    return cleanup.runtime(team.registry(options.pop("gate", None)), generate=team.model(), state=state, runtime_id=runtime_id, **options)


def fresh_id() -> str:
    import uuid

    return f"s-{uuid.uuid4().hex[:10]}"


def test_with_a_state_every_event_but_text_is_committed_with_a_serial_per_tree(cleanup: Any, state: str) -> None:
    runtime_id = fresh_id()
    rt = durable_runtime(cleanup, state, runtime_id)
    events = run_in_thread(lambda: list(rt.stream_agent("lead", "go")), HANG)
    durable = [e for e in events if e.kind != "text"]
    serials = [int(e.id) for e in durable]
    assert serials == sorted(set(serials)) and serials[0] <= 3  # this tree's own serial (the runtime's log shares it)
    other = durable_runtime(cleanup, state, fresh_id())
    assert int(run_in_thread(lambda: [e.id for e in other.stream_agent("worker", "x") if e.kind != "text"][0], HANG)) <= 3
    kept = [k for k in rt._tree.store.events.stream.read(0, 1000) if k.kind != "log"]
    assert [(str(k.serial), k.kind, k.handle, k.data) for k in kept[:-1]] == [(e.id, e.kind, e.handle, e.data) for e in durable]
    assert (kept[-1].kind, kept[-1].data) == ("state", {"from": "idle", "to": "closed"})  # stream_agent closed it after
    assert [e["event"] for e in rt.events()] == ["spawn", "spawn", "spawn", "close", "close", "close"]


def test_with_a_state_another_runtime_reads_every_durable_event_after_an_id_once(cleanup: Any, state: str) -> None:
    runtime_id = fresh_id()
    rt = durable_runtime(cleanup, state, runtime_id)
    events = [e for e in run_in_thread(lambda: list(rt.stream_agent("boss", "go")), HANG) if e.kind != "text"]
    reader = durable_runtime(cleanup, state, runtime_id)  # another connection to the same tree
    for cut in (0, 4, len(events) - 2):
        again = run_in_thread(lambda: list(reader.stream("root/boss.1", after=events[cut].id)), HANG)
        assert again == events[cut + 1 :]
    assert reader.stream("root/boss.1").result is None


def test_with_a_state_a_resume_in_another_runtime_is_followed_from_the_pending_result(cleanup: Any, state: str) -> None:
    runtime_id = fresh_id()
    starter = durable_runtime(cleanup, state, runtime_id)
    first = run_in_thread(lambda: list(starter.stream_agent("boss", "go")), HANG)
    watcher = durable_runtime(cleanup, state, runtime_id)
    stream = watcher.stream("root/boss.1", after=first[-1].id)
    answerer = durable_runtime(cleanup, state, runtime_id)
    request = answerer.open_requests()[0]
    answerer.resume(make_answer(request.id, True))
    rest = run_in_thread(lambda: list(stream), HANG)
    assert stream.result.status == "done" and stream.result.text == "boss: asker: approved"
    serials = [int(e.id) for e in rest]
    assert serials == sorted(set(serials)) and serials[0] > int(first[-1].id)
    assert {e.kind for e in rest} >= {"state", "tool_result", "message", "result"} and "text" not in kinds(rest)


def test_with_a_state_a_turn_running_in_another_process_is_streamed_from_its_start(cleanup: Any, state: str) -> None:
    import subprocess
    import sys

    runtime_id = fresh_id()
    script = str(__import__("pathlib").Path(__file__).resolve().parent / "_stream_team.py")
    child = subprocess.Popen(
        [sys.executable, script, "run", state, runtime_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        rt = durable_runtime(cleanup, state, runtime_id)
        assert json.loads(run_in_thread(child.stdout.readline, 25)) == {"entered": True}  # its tool is running there
        stream = rt.stream("root/slow.1")
        head = run_in_thread(lambda: [next(stream), next(stream), next(stream)], HANG)
        assert kinds(head) == ["state", "message", "tool_call"]
        child.stdin.write("open\n")
        child.stdin.flush()
        rest = run_in_thread(lambda: list(stream), HANG)
        assert kinds(rest) == ["tool_result", "message", "state", "result"] and stream.result.text == "slow done"
        out, err = child.communicate(timeout=20)
        assert child.returncode == 0, err
        assert json.loads(out)["text"] == "slow done"
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def test_with_a_state_a_reconnect_gets_text_of_turns_running_here_and_each_durable_event_once(cleanup: Any, state: str) -> None:
    runtime_id = fresh_id()
    rt = durable_runtime(cleanup, state, runtime_id)
    seen: list[Event] = []
    with rt.stream_agent("lead", "go") as stream:
        for event in stream:
            seen.append(event)
            if event.kind == "spawn":
                break  # the connection drops here; the run goes on
    handle = "root/lead.1"
    again = run_in_thread(lambda: list(rt.stream(handle, after=seen[-1].id)), HANG) if rt.inspect(handle).state != "closed" else []
    durable = [e.id for e in seen + again if e.kind != "text"]
    assert len(durable) == len(set(durable))


# --- Server-Sent Events ---------------------------------------------------------------------


def test_sse_frames_are_id_event_and_one_line_of_json_with_keep_alives_in_silences(cleanup: Any) -> None:
    from toolnexus import sse

    gate = threading.Event()
    cleanup.events_to_set(gate)
    rt = cleanup.runtime(team.registry(lambda: gate.wait(HANG)), generate=team.model())
    handle = rt.spawn(rt.root, "slow")
    rt.wake(handle, "go\nwith a second line")
    frames = sse.stream(rt, handle, heartbeat_s=0.05)
    head = run_in_thread(lambda: [next(frames) for _ in range(4)], HANG)
    assert head[0].startswith(b"id: 1\nevent: state\ndata: {") and head[0].endswith(b"}\n\n") and head[0].count(b"\n") == 4
    assert json.loads(head[0].split(b"data: ", 1)[1]) == {"kind": "state", "handle": "root/slow.1", "id": "1", "data": {"from": "idle", "to": "running"}}
    assert sse.KEEP_ALIVE in run_in_thread(lambda: [next(frames) for _ in range(3)], HANG)  # the tool blocks: silence
    gate.set()
    rest = run_in_thread(lambda: list(frames), HANG)
    assert b"event: result\n" in rest[-1]  # and the frames end after the result
    assert sse.HEADERS == {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def test_sse_refuses_a_bad_last_event_id_before_the_first_frame(cleanup: Any) -> None:
    from toolnexus import ToolnexusError
    from toolnexus import sse

    rt = lead_runtime(cleanup)
    with pytest.raises(ToolnexusError, match="not an event id"):
        sse.stream(rt, rt.root, last_event_id="drop table")


def test_with_a_state_no_text_piece_of_many_teammates_writing_at_once_is_lost(closing: Any, tmp_path: Any) -> None:
    words = " ".join(f"w{i}" for i in range(12))
    calls = [(f"t{i}", "task", {"agent": "worker", "prompt": f"part {i}"}) for i in range(12)]
    server = closing(ScriptedLLMServer(responder_by_model({"m-lead": [{"calls": calls}]}, default={"text": words})))
    rt = Runtime(team.registry(), base_url=server.base_url, model="m", state=str(tmp_path / "many.db"), max_workers=16)
    try:
        events = run_in_thread(lambda: list(rt.stream_agent("lead", "go")), HANG)
        pieces: dict[str | None, list[str]] = {}
        for event in events:
            if event.kind == "text":
                pieces.setdefault(event.handle, []).append(event.data["delta"])
            elif event.kind == "message" and event.data["text"]:
                assert "".join(pieces.pop(event.handle, [])) == event.data["text"], event.handle
        assert len([e for e in events if e.kind == "message"]) == 14
    finally:
        rt.close(rt.root)


# --- a resumed turn does not repeat itself -----------------------------------------------------


@pytest.mark.parametrize("where", ["memory", "sqlite"])
@pytest.mark.parametrize("inline", [False, True], ids=["pooled", "inline"])
def test_a_resumed_turn_announces_each_tool_call_once(cleanup: Any, tmp_path: Any, where: str, inline: bool) -> None:
    durable = {"state": str(tmp_path / "state.db"), "runtime_id": fresh_id()} if where == "sqlite" else {}
    rt = lead_runtime(cleanup, inline=inline, **durable)
    first = run_in_thread(lambda: list(rt.stream_agent("boss", "go")), HANG)
    request = rt.inspect("root/boss.1").pending
    stream = rt.stream("root/boss.1", after=first[-1].id)
    rt.resume(make_answer(request.id, True))
    rest = run_in_thread(lambda: list(stream), HANG)
    assert stream.result.status == "done"
    calls = [(e.handle, e.data["id"]) for e in first + rest if e.kind == "tool_call"]
    results = [(e.handle, e.data["id"]) for e in first + rest if e.kind == "tool_result"]
    assert sorted(calls) == [("root/boss.1", "b1"), ("root/boss.1/asker.1", "a1")]
    assert sorted(results) == sorted(calls)  # the resumed executions gave only their results
    assert not [e for e in rest if e.kind == "tool_call"]


@pytest.mark.parametrize("reason", ["declined", "cancelled"])
def test_a_call_a_resume_declines_streams_its_result_once(cleanup: Any, reason: str) -> None:
    rt = lead_runtime(cleanup)
    first = run_in_thread(lambda: list(rt.stream_agent("boss", "go")), HANG)
    request = rt.inspect("root/boss.1").pending
    stream = rt.stream("root/boss.1", after=first[-1].id)
    rt.resume(make_answer(request.id, False, reason=reason))
    rest = run_in_thread(lambda: list(stream), HANG)
    results = [(e.handle, e.data["id"], e.data["output"]) for e in rest if e.kind == "tool_result"]
    assert results[0] == ("root/boss.1/asker.1", "a1", f"{reason}: ship it?")  # fed back, not run
    assert [r[:2] for r in results].count(("root/boss.1/asker.1", "a1")) == 1
    assert results[1][:2] == ("root/boss.1", "b1")
