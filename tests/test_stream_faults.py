"""Every fault of a hostile endpoint, for plain and streamed replies, on both routes (CONTRACT
§13 "Time is bounded", "Cancellation covers the body"; §16 "Live from the model": the same
rules for a streamed exchange). A raw-socket server stalls before the headers or inside
the body, drips, cuts the reply short, breaks its framing or its events, or answers with
an error status; each model call ends within its bounds as ``LLMError`` (cause named,
retried by the retry rules, each retry announced) or ``Cancelled``, and leaves the turn
gate free."""

from __future__ import annotations

import threading
import time

import pytest

from _calls import Asked, engine_for, one_slot
from _helpers import HANG
from _rawserver import answer, completion, drip, openai_chunks, sse, stream
from conftest import run_in_thread
from toolnexus.errors import Cancelled, LLMError, LLMTimeout

PROMPT = 1.0  # "promptly": generous for a loaded 2-core machine, far below any stall


@pytest.fixture(params=["plain", "streamed"])
def streamed(request):
    """Whether the model call asks for a streamed reply."""
    return request.param == "streamed"


def failure_of(asked, timeout=HANG):
    with pytest.raises(LLMError) as caught:
        run_in_thread(asked.run, timeout)
    return caught.value


def timed(fn):
    begun = time.monotonic()
    outcome = fn()
    return outcome, time.monotonic() - begun


def part_then_stall(begun):
    """The headers and a first part of the reply (a first event, when streamed); then a stall."""

    def script(ex):
        if ex.streamed:
            ex.stream_head()
            ex.chunk(openai_chunks(["never", " whole"])[1])
        else:
            body = completion("never whole")
            ex.headers(200, len(body))
            ex.send(body[:10])
        begun.set()
        ex.stall()

    return script


def events_then(ending, pieces=("cut", " short")):
    """A stream of ``pieces`` whose ``[DONE]`` never comes; ``ending(ex)`` ends it."""

    def script(ex):
        if not ex.streamed:
            body = completion("".join(pieces))
            ex.headers(200, len(body) + 50)
            ex.send(body)
            ex.hang_up()
            return
        ex.stream_head()
        for event in openai_chunks(list(pieces))[:-1]:
            ex.chunk(event)
        ending(ex)

    return script


# --- time is bounded --------------------------------------------------------------------------------


def test_a_stall_before_the_headers_past_the_timeout_is_an_llm_timeout_and_not_retried(servers, via, streamed):
    server = servers(lambda ex: ex.stall())
    asked = Asked(engine_for(server, via, timeout=0.3, retries=3), streamed)
    with pytest.raises(LLMTimeout) as caught:
        _, took = timed(lambda: run_in_thread(asked.run, HANG))
    assert "timed out" in str(caught.value) and caught.value.status is None
    assert server.requests == 1
    assert asked.retries == []


def test_a_stall_inside_the_reply_past_the_timeout_is_an_llm_timeout(servers, via, streamed):
    begun = threading.Event()
    server = servers(part_then_stall(begun))
    asked = Asked(engine_for(server, via, timeout=0.4, retries=2), streamed)
    begin = time.monotonic()
    with pytest.raises(LLMTimeout):
        run_in_thread(asked.run, HANG)
    assert time.monotonic() - begin < 0.4 + PROMPT
    assert server.requests == 1
    assert asked.texts == (["never"] if streamed else [])


def test_a_reply_that_drips_cannot_outlast_the_timeout(servers, via, streamed):
    def script(ex):
        if not ex.streamed:
            drip(ex, completion("one byte at a time, far slower than the deadline allows"), every=0.05)
            return
        ex.stream_head()
        for byte in b"".join(openai_chunks(["one ", "byte ", "at a time"])):
            if ex.server.closing.wait(0.05):
                return
            ex.chunk(bytes([byte]))

    server = servers(script)
    asked = Asked(engine_for(server, via, timeout=0.4), streamed)
    begun = time.monotonic()
    with pytest.raises(LLMTimeout):
        run_in_thread(asked.run, HANG)
    assert time.monotonic() - begun < 0.4 + PROMPT


def test_without_a_timeout_a_dripping_reply_still_arrives_whole(servers, via, streamed):
    def script(ex):
        if not ex.streamed:
            drip(ex, completion("slow"), every=0.001)
            return
        ex.stream_head()
        for byte in b"".join(openai_chunks(["sl", "ow"])):
            ex.chunk(bytes([byte]))
        ex.chunk(b"")

    server = servers(script)
    asked = Asked(engine_for(server, via), streamed)
    assert run_in_thread(asked.run, HANG).text == "slow"
    assert asked.texts == (["sl", "ow"] if streamed else [])


# --- cut short, broken framing, broken events ------------------------------------------------------------


@pytest.mark.parametrize("ending", [lambda ex: ex.hang_up(), lambda ex: ex.chunk(b"")], ids=["connection closed", "body ended"])
def test_a_reply_cut_short_is_a_connection_error_retried_and_announced(servers, via, streamed, ending):
    def script(ex):
        if ex.index == 1:
            events_then(ending)(ex)
        else:
            answer(ex, "whole")

    server = servers(script)
    asked = Asked(engine_for(server, via, retries=1), streamed)
    assert run_in_thread(asked.run, HANG).text == "whole"
    assert server.requests == 2
    (retry,) = asked.retries
    assert retry[0] == 1
    assert retry[1] == ("stream cut short" if streamed else "reply body cut short")
    if streamed:  # the dropped attempt's text came first, then the announcement, then the new text
        assert asked.log == [("text", "cut"), ("text", " short"), ("retry", 1, "stream cut short"), ("text", "wh"), ("text", "ole")]


def test_a_reply_cut_short_past_the_retries_names_the_cause(servers, via, streamed):
    server = servers(events_then(lambda ex: ex.hang_up()))
    error = failure_of(Asked(engine_for(server, via, retries=1), streamed))
    assert error.status is None
    assert error.cause == ("stream cut short" if streamed else "reply body cut short")
    assert f"{server.base_url}/chat/completions" in str(error)
    assert server.requests == 2


def test_broken_chunked_framing_is_an_llm_error(servers, via, streamed):
    def script(ex):
        if ex.streamed:
            ex.stream_head()
            ex.chunk(openai_chunks(["a"])[1])
        else:
            ex.headers(200, None, "Transfer-Encoding: chunked\r\n")
        ex.send(b"zz\r\nnot a chunk\r\n")
        ex.hang_up()

    server = servers(script)
    error = failure_of(Asked(engine_for(server, via), streamed))
    assert error.status is None
    assert ("stream cut short" if streamed else "chunked") in error.cause


def test_a_reply_that_is_not_http_is_a_malformed_reply(servers, via, streamed):
    server = servers(lambda ex: ex.send(b"ICY 200 OK\r\n\r\n"))
    error = failure_of(Asked(engine_for(server, via), streamed))
    assert error.cause == "malformed reply"


@pytest.mark.parametrize("event", [b"data: {oops\n\n", sse({"choices": "none"})], ids=["not JSON", "wrong shape"])
def test_a_malformed_stream_event_is_an_llm_error_not_retried(servers, via, event):
    def script(ex):
        ex.stream_head()
        ex.chunk(openai_chunks(["fine"])[1])
        ex.chunk(event)
        ex.chunk(b"")

    server = servers(script)
    asked = Asked(engine_for(server, via, retries=2), True)
    error = failure_of(asked)
    assert error.cause == "malformed stream event"
    assert error.status == 200
    assert f"{server.base_url}/chat/completions" in str(error)
    assert server.requests == 1
    assert asked.texts == ["fine"]


def test_a_key_echoed_in_a_broken_stream_event_is_shown_as_stars(servers, via):
    key = "sk-stream-secret-0123456789"

    def script(ex):
        ex.stream_head()
        ex.chunk(f"data: {{oops, you sent {key}\n\n".encode())
        ex.chunk(b"")

    server = servers(script)
    error = failure_of(Asked(engine_for(server, via, api_key=key), True))
    assert "***" in error.body_excerpt
    assert key not in str(error) and key not in error.body_excerpt and key not in repr(error)


def test_on_error_may_retry_a_malformed_stream_event(servers, via):
    def script(ex):
        if ex.index == 1:
            ex.stream_head()
            ex.chunk(b"data: {oops\n\n")
            ex.chunk(b"")
        else:
            answer(ex, "second")

    server = servers(script)
    asked = Asked(engine_for(server, via, retries=1, on_error=lambda info: "retry"), True)
    assert run_in_thread(asked.run, HANG).text == "second"
    assert asked.retries == [(1, "malformed stream event")]


# --- error statuses before the reply ------------------------------------------------------------------


def test_a_503_is_retried_and_announced(servers, via, streamed):
    def script(ex):
        if ex.index == 1:
            ex.reply(b'{"error": "busy"}', status=503, extra="Retry-After: 0\r\n")
        else:
            answer(ex, "ok")

    server = servers(script)
    asked = Asked(engine_for(server, via, retries=1, retry_base=60), streamed)
    assert run_in_thread(asked.run, HANG).text == "ok"
    assert asked.retries == [(1, "HTTP 503")]


def test_a_retry_after_beyond_max_retry_after_fails_at_once(servers, via, streamed):
    server = servers(lambda ex: ex.reply(b'{"error":"slow down"}', status=429, extra="Retry-After: 999\r\n"))
    error = failure_of(Asked(engine_for(server, via, retries=3), streamed))
    assert error.status == 429 and "max_retry_after" in str(error)
    assert server.requests == 1


def test_a_400_is_not_retried_and_keeps_the_providers_reason(servers, via, streamed):
    server = servers(lambda ex: ex.reply(b'{"error": {"message": "model not found"}}', status=400))
    asked = Asked(engine_for(server, via, retries=3), streamed)
    error = failure_of(asked)
    assert error.status == 400 and "model not found" in error.body_excerpt
    assert server.requests == 1 and asked.retries == []


# --- cancellation covers the body ---------------------------------------------------------------------


def test_interrupt_inside_the_reply_ends_the_call_at_once_and_closes_the_connection(servers, via, streamed):
    begun = threading.Event()
    server = servers(part_then_stall(begun))
    asked = Asked(engine_for(server, via), streamed)
    outcome = {}

    def call():
        try:
            asked.run()
        except Cancelled as exc:
            outcome["cancelled"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    assert begun.wait(HANG)
    cancelled_at = time.monotonic()
    asked.scope.cancel()
    thread.join(HANG)
    assert "cancelled" in outcome
    assert time.monotonic() - cancelled_at < 0.1  # §13: the connection closes within 100 ms
    server.release.set()  # the server goes back to reading its connection, and finds it closed
    assert server.an_end.wait(PROMPT)


def test_close_of_the_engine_ends_a_call_inside_the_reply(servers, via, streamed):
    begun = threading.Event()
    server = servers(part_then_stall(begun))
    engine = engine_for(server, via)
    asked = Asked(engine, streamed)
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("error", _raised(asked.run)), daemon=True)
    thread.start()
    assert begun.wait(HANG)
    engine.close()
    thread.join(PROMPT)
    assert not thread.is_alive()
    assert isinstance(box["error"], Cancelled)


def _raised(fn):
    try:
        fn()
    except Exception as exc:
        return exc
    return None


def test_a_reply_completed_after_an_interrupt_is_dropped(servers, via, streamed):
    headers_sent = threading.Event()

    def script(ex):
        events = openai_chunks(["late"])
        if ex.streamed:
            ex.stream_head()
        else:
            ex.headers(200, len(completion("late")))
        headers_sent.set()
        ex.stall()
        if ex.streamed:
            for event in events:
                ex.chunk(event)
            ex.chunk(b"")
        else:
            ex.send(completion("late"))

    server = servers(script)
    asked = Asked(engine_for(server, via), streamed)
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("error", _raised(asked.run)), daemon=True)
    thread.start()
    assert headers_sent.wait(HANG)
    asked.scope.cancel()
    server.release.set()
    thread.join(HANG)
    assert isinstance(box["error"], Cancelled)


# --- the turn gate -------------------------------------------------------------------------------------


def test_the_gate_is_held_until_the_reply_is_read_to_its_end(servers, via, streamed):
    def script(ex):
        if ex.streamed:
            stream(ex, openai_chunks(["spaced", " out"]), every=0.02)
        else:
            body = completion("spaced out")
            ex.headers(200, len(body))
            ex.pause(0.05)
            ex.send(body[:-1])
            ex.finish(body[-1:])

    server = servers(script)
    engine = engine_for(server, via)
    gate = one_slot()
    calls = [Asked(engine, streamed, gate=gate) for _ in range(3)]
    threads = [threading.Thread(target=each.run, daemon=True) for each in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG)
    assert server.requests == 3
    assert server.peak_active == 1


def test_the_gate_is_free_again_after_a_failed_call(servers, via, streamed):
    def script(ex):
        if ex.index == 1:
            events_then(lambda e: e.hang_up())(ex)
        else:
            answer(ex, "next")

    server = servers(script)
    engine = engine_for(server, via)
    gate = one_slot()
    failure_of(Asked(engine, streamed, gate=gate))
    assert run_in_thread(Asked(engine, streamed, gate=gate).run, HANG).text == "next"
