"""A hostile endpoint (CONTRACT §13 "Time is bounded", "Cancellation covers the body"): a
raw-socket server stalls, drips, truncates or delays replies; every exchange ends within
its bounds, as ``LLMError`` or ``interrupted``, for the client's own HTTP session and for
a host-supplied ``requests.Session`` alike, with no tool of a late reply run, no token
charged for it and no thread left behind."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from _helpers import EMPTY_SCHEMA, HANG
from _rawserver import RawServer, completion, drip, tool_call
from conftest import run_in_thread
from toolnexus import AgentDef, Client, LLMError, Runtime, Tool, agent
from toolnexus.errors import Cancelled, LLMTimeout

PROMPT = 1.0  # "promptly": generous for a loaded 2-core machine, far below any stall


class RecordingTool:
    """A tool that records whether it ever ran."""

    def __init__(self):
        self.calls = 0

    def tool(self):
        def run(args, ctx):
            self.calls += 1
            return "ran"

        return Tool(name="record", description="Records a call.", input_schema=EMPTY_SCHEMA, execute=run)


class RunInBackground:
    """``client.run("go")`` on a thread of its own; ``error`` is what it raised."""

    def __init__(self, client):
        self.error = None
        self._thread = threading.Thread(target=self._run, args=(client,), daemon=True)
        self._thread.start()

    def _run(self, client):
        try:
            client.run("go")
        except Exception as exc:
            self.error = exc

    def ended_within(self, seconds):
        self._thread.join(seconds)
        return not self._thread.is_alive()


def runtime(server, via, tools=(), **options):
    options.setdefault("retries", 0)
    agent = AgentDef("m", "Talks over HTTP.", tools=list(tools))
    return Runtime({"m": agent}, base_url=server.base_url, model="m", shutdown_timeout=5, **via, **options)


def toolnexus_threads_since(before):
    return [t.name for t in threading.enumerate() if t.name.startswith("toolnexus") and t not in before and t.is_alive()]


def interrupt_then_close(rt, signal):
    """Wake ``m`` and interrupt it once ``signal`` is set: the turn ends ``interrupted``
    at once and closing the runtime is prompt."""
    h = rt.spawn(rt.root, "m")
    rt.wake(h, "go")
    assert signal.wait(HANG)
    rt.interrupt(h)
    assert run_in_thread(lambda: rt.wait(h, timeout=HANG), PROMPT).status == "interrupted"
    _, took = timed(lambda: run_in_thread(lambda: rt.close(rt.root), HANG))
    assert took < PROMPT
    return h


def timed(fn):
    begun = time.monotonic()
    outcome = fn()
    return outcome, time.monotonic() - begun


def stalled_body(begun):
    def script(ex):
        body = completion("never whole")
        ex.headers(200, len(body))
        ex.send(body[:10])
        begun.set()
        ex.stall()

    return script


# --- a stalled body -----------------------------------------------------------------------------


def test_interrupt_during_a_stalled_body_ends_the_turn_and_close_leaves_no_thread(servers, via):
    before = set(threading.enumerate())
    begun = threading.Event()
    server = servers(stalled_body(begun))
    rt = runtime(server, via)
    try:
        h = rt.spawn(rt.root, "m")
        rt.wake(h, "go")
        assert begun.wait(HANG)
        waiter = threading.Thread(target=lambda: rt.wait(h, timeout=HANG), daemon=True)
        waiter.start()
        _, took = timed(lambda: rt.interrupt(h))
        assert took < PROMPT
        waiter.join(PROMPT)
        assert not waiter.is_alive()
        assert rt.wait(h).status == "interrupted"
        _, took = timed(lambda: rt.close(rt.root))
        assert took < PROMPT  # shutdown_timeout is 5 s: the worker was not left reading the socket
        assert toolnexus_threads_since(before) == []
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


def test_force_close_during_a_stalled_body_returns_at_once(servers, via):
    before = set(threading.enumerate())
    begun = threading.Event()
    server = servers(stalled_body(begun))
    rt = runtime(server, via)
    h = rt.spawn(rt.root, "m")
    rt.wake(h, "go")
    assert begun.wait(HANG)
    _, took = timed(lambda: run_in_thread(lambda: rt.close(rt.root, force=True), HANG))
    assert took < PROMPT
    assert rt.inspect(h).state == "closed"
    assert toolnexus_threads_since(before) == []


def test_a_stalled_body_past_the_timeout_is_an_llm_timeout_and_not_retried(servers, via):
    server = servers(stalled_body(threading.Event()))
    with Client(base_url=server.base_url, model="m", timeout=0.3, retries=3, retry_base=0.001, **via) as client:
        with pytest.raises(LLMTimeout) as caught:
            run_in_thread(lambda: timed(lambda: client.run("go")), HANG)
    error = caught.value
    assert error.status is None
    assert "timeout" in str(error) and "timed out" in str(error)
    assert f"{server.base_url}/chat/completions" in str(error)
    assert server.requests == 1


def test_close_of_a_bare_client_ends_a_run_reading_a_stalled_body(servers, via):
    begun = threading.Event()
    server = servers(stalled_body(begun))
    client = Client(base_url=server.base_url, model="m", retries=0, **via)
    runner = RunInBackground(client)
    assert begun.wait(HANG)
    client.close()
    assert runner.ended_within(PROMPT)
    assert isinstance(runner.error, Cancelled)


# --- a dripping body ----------------------------------------------------------------------------


def test_a_dripping_body_cannot_outlast_the_timeout(servers, via):
    body = completion("a reply sent one byte at a time, far slower than the deadline allows")
    server = servers(lambda ex: drip(ex, body, every=0.05))  # about 7 s in all
    with Client(base_url=server.base_url, model="m", timeout=0.4, retries=0, **via) as client:
        begun = time.monotonic()
        with pytest.raises(LLMTimeout):
            run_in_thread(lambda: client.run("go"), HANG)
        assert time.monotonic() - begun < 0.4 + PROMPT


def test_reply_headers_that_drip_cannot_outlast_the_timeout(servers, via):
    def script(ex):
        body = completion("late")
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: {'x' * 200}\r\nContent-Length: {len(body)}\r\n\r\n"
        for byte in head.encode():
            if ex.server.closing.wait(0.05):  # about 12 s in all
                return
            ex.send(bytes([byte]))
        ex.send(body)

    server = servers(script)
    with Client(base_url=server.base_url, model="m", timeout=0.4, retries=2, **via) as client:
        begun = time.monotonic()
        with pytest.raises(LLMTimeout):
            run_in_thread(lambda: client.run("go"), HANG)
        assert time.monotonic() - begun < 0.4 + PROMPT
    assert server.requests == 1


def test_without_a_timeout_a_dripping_body_still_arrives_whole(servers, via):
    body = completion("slow")
    server = servers(lambda ex: drip(ex, body, every=0.001))
    with Client(base_url=server.base_url, model="m", retries=0, **via) as client:
        assert run_in_thread(lambda: client.run("go"), HANG).text == "slow"


# --- a truncated body ---------------------------------------------------------------------------


def short_content_length(ex):
    body = completion("cut")
    ex.headers(200, len(body) + 50)
    ex.send(body)
    ex.hang_up()


def broken_chunking(ex):
    ex.headers(200, None, "Transfer-Encoding: chunked\r\n")
    ex.send(b"zz\r\nnot a chunk\r\n")
    ex.hang_up()


@pytest.mark.parametrize("script, cause", [(short_content_length, "cut short"), (broken_chunking, "chunked")])
def test_a_truncated_body_is_an_llm_error_naming_the_cause(servers, via, script, cause):
    server = servers(script)
    with Client(base_url=server.base_url, model="m", retries=1, retry_base=0.001, **via) as client:
        with pytest.raises(LLMError) as caught:
            run_in_thread(lambda: client.run("go"), HANG)
    error = caught.value
    assert type(error) is LLMError
    assert error.status is None
    assert cause in str(error)
    assert f"{server.base_url}/chat/completions" in str(error)
    assert server.requests == 2  # a connection failure: retried


# --- a reply that arrives just after interrupt -------------------------------------------------------


def test_a_body_arriving_just_after_interrupt_runs_no_tool_and_charges_no_token(servers, via):
    headers_sent = threading.Event()
    recorder = RecordingTool()

    def script(ex):
        body = completion(None, [tool_call("c1", "record")], tokens=100)
        ex.headers(200, len(body))
        headers_sent.set()
        ex.stall()
        ex.send(body)

    server = servers(script)
    rt = runtime(server, via, tools=[recorder.tool()])
    try:
        h = rt.spawn(rt.root, "m")
        rt.wake(h, "go")
        assert headers_sent.wait(HANG)
        rt.interrupt(h)
        server.release.set()  # the body now arrives, too late
        run_in_thread(lambda: rt.close(rt.root), HANG)
        assert rt.wait(h).status == "interrupted"
        assert recorder.calls == 0
        assert rt.inspect(h).tokens == 0
        assert rt.inspect(h).turns == 0
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


def test_a_whole_reply_that_lands_as_the_interrupt_does_is_dropped():
    """The reply is complete when the interrupt lands (the model returns right after it)."""
    recorder = RecordingTool()
    box = {}

    def generate(request):
        box["rt"].interrupt(box["h"])
        return {"tool_calls": [{"id": "c1", "name": "record", "arguments": {}}], "usage": {"prompt_tokens": 100, "completion_tokens": 0, "total_tokens": 100}}

    rt = Runtime({"m": AgentDef("m", "In process.", tools=[recorder.tool()])}, generate=generate, model="m")
    box["rt"] = rt
    try:
        box["h"] = h = rt.spawn(rt.root, "m")
        rt.wake(h, "go")
        assert run_in_thread(lambda: rt.wait(h, timeout=HANG), HANG).status == "interrupted"
        run_in_thread(lambda: rt.close(rt.root), HANG)
        assert recorder.calls == 0
        assert rt.inspect(h).tokens == 0
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


# --- Retry-After ---------------------------------------------------------------------------------


def test_a_retry_after_beyond_max_retry_after_fails_at_once_with_429(servers, via):
    server = servers(lambda ex: ex.reply(b'{"error":"slow down"}', status=429, extra="Retry-After: 999999\r\n"))
    with Client(base_url=server.base_url, model="m", retries=3, **via) as client:
        with pytest.raises(LLMError) as caught:
            _, took = run_in_thread(lambda: timed(lambda: client.run("go")), HANG)
    error = caught.value
    assert error.status == 429
    assert "max_retry_after" in str(error)
    assert server.requests == 1


def slow_down(answered):
    """A 429 asking for a 30 s wait; ``answered`` is set once it is sent."""

    def script(ex):
        ex.reply(b'{"error":"slow down"}', status=429, extra="Retry-After: 30\r\n")
        answered.set()

    return script


def test_close_cuts_a_retry_after_wait_short(servers, via):
    answered = threading.Event()
    server = servers(slow_down(answered))
    client = Client(base_url=server.base_url, model="m", retries=2, **via)
    runner = RunInBackground(client)
    assert answered.wait(HANG)
    begun = time.monotonic()
    client.close()
    assert runner.ended_within(PROMPT) and time.monotonic() - begun < PROMPT
    assert isinstance(runner.error, Cancelled)
    assert server.requests == 1


def test_interrupt_cuts_a_retry_after_wait_short(servers, via):
    answered = threading.Event()
    server = servers(slow_down(answered))
    rt = runtime(server, via, retries=2)
    try:
        interrupt_then_close(rt, answered)
        assert server.requests == 1
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


# --- max_concurrent_turns holds its slot until the body is read ------------------------------------------


def headers_first(ex):
    body = completion("done")
    ex.headers(200, len(body))
    ex.pause(0.05)
    ex.send(body[:-1])
    ex.finish(body[-1:])


def test_max_concurrent_turns_one_keeps_four_turns_from_overlapping_on_a_headers_first_server(servers, via):
    server = servers(headers_first)
    rt = runtime(server, via, max_concurrent_turns=1)
    try:
        handles = [rt.spawn(rt.root, "m") for _ in range(4)]
        for h in handles:
            rt.wake(h, "go")
        results = [run_in_thread(lambda h=h: rt.wait(h, timeout=HANG), HANG) for h in handles]
        assert [r.status for r in results] == ["done"] * 4
        assert server.requests == 4
        assert server.peak_active == 1
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


def test_a_turn_waiting_for_a_slot_is_interrupted_at_once(servers, via):
    begun = threading.Event()
    server = servers(stalled_body(begun))
    before = set(threading.enumerate())
    rt = runtime(server, via, max_concurrent_turns=1)
    try:
        first, second = rt.spawn(rt.root, "m"), rt.spawn(rt.root, "m")
        rt.wake(first, "go")
        assert begun.wait(HANG)
        rt.wake(second, "go")
        rt.interrupt(second)
        assert run_in_thread(lambda: rt.wait(second, timeout=HANG), PROMPT).status == "interrupted"
        rt.interrupt(first)
        assert run_in_thread(lambda: rt.wait(first, timeout=HANG), PROMPT).status == "interrupted"
        _, took = timed(lambda: run_in_thread(lambda: rt.close(rt.root), HANG))
        assert took < PROMPT
        assert server.requests == 1  # the waiting turn never sent its request
        assert toolnexus_threads_since(before) == []
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


# --- connections across runs ----------------------------------------------------------------------


def test_level_one_runs_reuse_one_kept_alive_connection_and_agent_close_ends_it():
    server = RawServer(lambda ex: ex.reply(completion("hi")))
    try:
        solo = agent("solo", does="Answers.")
        for _ in range(3):
            assert solo.run("go", base_url=server.base_url, model="m").text == "hi"
        assert server.requests == 3
        assert server.accepted == 1  # not a new TCP connection per run
        assert not server.an_end.is_set()
        solo.close()
        assert server.an_end.wait(HANG)
        assert server.ended == 1
    finally:
        server.close()


def test_closing_the_last_client_of_an_endpoint_closes_its_connections(via):
    server = RawServer(lambda ex: ex.reply(completion("hi")))
    try:
        one = Client(base_url=server.base_url, model="m", **via)
        two = Client(base_url=server.base_url, model="m", **via)
        assert one.run("a").text == "hi" and two.run("b").text == "hi"
        one.close()
        if "session" in via:
            via["session"].close()  # the host's session is the host's to close
        two.close()
        assert server.an_end.wait(HANG)
    finally:
        server.close()


def test_a_gzip_encoded_reply_is_decoded(servers, via):
    import gzip

    body = gzip.compress(completion("packed"))
    server = servers(lambda ex: ex.reply(body, extra="Content-Encoding: gzip\r\n"))
    with Client(base_url=server.base_url, model="m", retries=0, **via) as client:
        assert run_in_thread(lambda: client.run("go"), HANG).text == "packed"
    with Client(base_url=server.base_url, model="m", retries=0, timeout=5, **via) as client:
        assert run_in_thread(lambda: client.run("go"), HANG).text == "packed"


def test_a_host_adapter_keeps_its_own_pool_class_and_its_calls_stay_interruptible(servers):
    from requests.adapters import HTTPAdapter
    from urllib3.connectionpool import HTTPConnectionPool

    opened = []

    class CountingPool(HTTPConnectionPool):
        def urlopen(self, *args, **kwargs):
            opened.append(self.host)
            return super().urlopen(*args, **kwargs)

    class CountingAdapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": CountingPool, "https": self.poolmanager.pool_classes_by_scheme["https"]}

    session = requests.Session()
    session.mount("http://", CountingAdapter())
    begun = threading.Event()
    server = servers(stalled_body(begun))
    rt = runtime(server, {"session": session})
    try:
        interrupt_then_close(rt, begun)
        assert opened == ["127.0.0.1"]
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)
        session.close()


def test_the_request_on_the_wire_has_its_headers_and_the_whole_body(servers, via):
    import json

    server = servers(lambda ex: ex.reply(completion("hi")))
    with Client(base_url=server.base_url, model="m", api_key="k-123", headers={"X-Team": "blue"}, **via) as client:
        assert client.run("go").text == "hi"
    head, _, body = server.last_request.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["authorization"] == "Bearer k-123"
    assert headers["x-team"] == "blue"
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    assert json.loads(body)["messages"] == [{"role": "user", "content": "go"}]
