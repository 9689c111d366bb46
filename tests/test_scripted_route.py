"""``toolnexus.testing.ScriptedRoute``: a test's own route to the model, with no socket
(STYLE §8 "Tests get their own transport"). The exchange around it is the one users run:
bodies and headers as sent, retries, error names, streamed replies decoded as they
arrive, the whole-exchange deadline and interrupts."""

from __future__ import annotations

import threading
import time

import pytest

from _helpers import HANG
from conftest import run_in_thread
from toolnexus import AgentDef, Cancelled, Client, LLMError, Runtime
from toolnexus.testing import ScriptedReply, ScriptedRoute, text_completion

BASE = "https://llm.test/v1"
ANTHROPIC_REPLY = {
    "content": [{"type": "text", "text": "hello from claude"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 4},
}


def answer(text):
    return lambda request: text_completion(request.json(), text)


def test_a_handler_answers_every_request_with_a_whole_reply_body():
    with ScriptedRoute(answer("hi there")) as route:
        with Client(base_url=BASE, model="m", api_key="sk-1") as client:
            assert client.run("one").text == "hi there"
            assert client.run("two").text == "hi there"
    assert [request.json()["messages"][-1]["content"] for request in route.requests] == ["one", "two"]
    assert route.requests[0].headers["authorization"] == "Bearer sk-1"  # names in any case


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_a_dict_answer_to_a_streamed_request_is_sent_in_the_styles_streamed_form(style):
    respond = answer("one two three") if style == "openai" else (lambda request: ANTHROPIC_REPLY)
    with ScriptedRoute(respond) as route:
        with Client(base_url=BASE, model="m", style=style) as client, client.stream("go") as stream:
            pieces = [event.data["delta"] for event in stream if event.kind == "text"]
    expected = ["one ", "two ", "three"] if style == "openai" else ["hello ", "from ", "claude"]
    assert (pieces, "".join(pieces)) == (expected, stream.result.text)
    assert route.requests[0].stream is True
    assert stream.result.usage.total_tokens == (15 if style == "openai" else 7)


def test_queued_answers_come_first_then_the_handler():
    route = ScriptedRoute(answer("from the handler"))
    route.add(json=text_completion({}, "queued"))
    with route, Client(base_url=BASE, model="m") as client:
        assert [client.run("x").text for _ in range(2)] == ["queued", "from the handler"]
    assert route.unserved == 0


def test_a_scripted_connection_failure_is_retried_like_a_real_one():
    with ScriptedRoute() as route:
        route.add(error=ConnectionResetError("reset by peer"))
        route.add(status=503, body="busy", headers={"Retry-After": "0"})
        route.add(json=text_completion({}, "finally"))
        with Client(base_url=BASE, model="m", retry_base=0.001) as client:
            assert client.run("x").text == "finally"
    assert len(route.requests) == 3


def test_a_request_with_nothing_left_to_answer_it_raises_lookup_error_naming_it():
    with ScriptedRoute(), Client(base_url=BASE, model="m") as client:
        with pytest.raises(LookupError, match="no scripted answer left for POST https://llm.test/v1/chat/completions"):
            client.run("x")


def test_what_a_handler_raises_reaches_the_caller_unchanged_and_is_not_retried():
    calls = []

    def broken(request):
        calls.append(request)
        raise KeyError("a bug in the test's script")

    with ScriptedRoute(broken), Client(base_url=BASE, model="m", retries=3) as client:
        with pytest.raises(KeyError, match="a bug in the test's script"):
            client.run("x")
    assert len(calls) == 1


def test_a_slow_scripted_reply_meets_the_whole_exchange_deadline():
    with ScriptedRoute() as route:
        route.add(json=text_completion({}, "late"), delay_s=HANG)
        route.add(json=text_completion({}, "never"))
        with Client(base_url=BASE, model="m", timeout=0.2, retries=2) as client:
            started = time.monotonic()
            with pytest.raises(LLMError, match="timed out") as caught:
                run_in_thread(lambda: client.run("x"), HANG)
    assert isinstance(caught.value, TimeoutError) and caught.value.status is None
    assert time.monotonic() - started < HANG / 2 and len(route.requests) == 1  # never retried


def test_an_interrupt_ends_a_slow_scripted_reply_at_once(cleanup):
    started = threading.Event()

    def slow(request):
        started.set()
        return ScriptedReply(json=text_completion(request.json(), "late"), delay_s=HANG)

    with ScriptedRoute(slow):
        rt = cleanup.runtime({"solo": AgentDef("solo", "answers")}, base_url=BASE, model="m")
        handle = rt.spawn(rt.root, "solo")
        rt.wake(handle, "go")
        assert started.wait(HANG)
        interrupted_at = time.monotonic()
        rt.interrupt(handle)
        result = run_in_thread(lambda: rt.wait(handle, timeout=HANG), HANG)
    assert result.status == "interrupted"
    assert time.monotonic() - interrupted_at < 1.0


def test_a_scripted_route_serves_a_runtime_on_its_worker_threads():
    with ScriptedRoute(answer("from the script")) as route:
        with Runtime({"solo": AgentDef("solo", "answers")}, base_url=BASE, model="m") as rt:
            result = run_in_thread(lambda: rt.run_agent("solo", "hi"), HANG)
    assert (result.status, result.text) == ("done", "from the script")
    assert route.requests[0].path == "/v1/chat/completions"


def test_a_closed_client_ends_a_slow_scripted_reply():
    sent = threading.Event()

    def slow(request):
        sent.set()
        return ScriptedReply(json=text_completion(request.json(), "late"), delay_s=HANG)

    with ScriptedRoute(slow):
        client = Client(base_url=BASE, model="m")
        box = {}
        thread = threading.Thread(target=lambda: box.setdefault("error", _raised(lambda: client.run("x"))))
        thread.start()
        assert sent.wait(HANG)
        client.close()
        thread.join(HANG)
    assert not thread.is_alive()
    assert isinstance(box["error"], (Cancelled, LLMError))


def _raised(fn):
    try:
        fn()
    except Exception as exc:  # the test looks at what was raised
        return exc
    return None
