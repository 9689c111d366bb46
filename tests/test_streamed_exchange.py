"""A model call in the provider's streaming mode (CONTRACT §16 "Live from the model"):
asked for only when the call takes text as it comes (``on_text``); each piece is handed
over as soon as its event is decoded, long before the reply ends; the reply is the one the
same answer would have been unstreamed; a call without ``on_text`` is the plain exchange,
byte for byte."""

from __future__ import annotations

import json
import threading
import time

import pytest

from _calls import Asked, engine_for, one_slot
from _helpers import HANG
from _rawserver import anthropic_events, answer, completion, openai_chunks, sse, stream, tool_call
from conftest import run_in_thread
from toolnexus import Client, LLMError
from toolnexus._model.engine import ConnectionOptions, ModelCall, build_engine
from toolnexus.testing import ScriptedRoute


def test_the_first_text_piece_arrives_within_50_ms_of_being_written_long_before_the_reply_ends(servers, via):
    written = []

    pieces = ["first", " second", " third", " fourth"]

    def script(ex):
        events = openai_chunks(pieces)  # the role chunk, one chunk per piece, then the end
        ex.stream_head()
        ex.chunk(events[0])
        for event in events[1:1 + len(pieces)]:
            if written and ex.server.closing.wait(0.2):
                return
            ex.chunk(event)
            written.append(time.monotonic())
        for event in events[1 + len(pieces):]:
            ex.chunk(event)
        ex.chunk(b"")

    server = servers(script)
    asked = Asked(engine_for(server, via), True)
    reply = run_in_thread(asked.run, HANG)
    assert reply.text == "first second third fourth"
    assert asked.texts == pieces
    assert asked.times[0] - written[0] < 0.05
    assert asked.times[0] < written[-1] - 0.5  # the reply took 0.6 s more to end


def test_a_streamed_call_asks_for_the_stream_and_its_usage(servers):
    server = servers(answer)
    assert run_in_thread(Asked(engine_for(server), True).run, HANG).text == "hi"
    body = json.loads(server.last_request.partition(b"\r\n\r\n")[2])
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_a_call_without_on_text_sends_the_plain_request_byte_for_byte(servers):
    server = servers(answer)
    engine = engine_for(server, request_params={"temperature": 0})
    call = Asked(engine, False)
    assert run_in_thread(call.run, HANG).text == "hi"
    sent = server.last_request.partition(b"\r\n\r\n")[2]
    plain = engine.style.build_body("m", call.call.messages, [], None, {"temperature": 0})
    assert sent == json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode()
    assert b"stream" not in sent


def test_tool_calls_and_usage_of_a_streamed_reply_reach_the_reply(servers):
    calls = [tool_call("c1", "lookup", '{"q": "a"}'), tool_call("c2", "lookup", '{"q": "b"}')]
    server = servers(lambda ex: stream(ex, openai_chunks(["Looking"], tool_calls=calls, tokens=42, finish="tool_calls")))
    reply = run_in_thread(Asked(engine_for(server), True).run, HANG)
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("c1", "lookup", '{"q": "a"}'), ("c2", "lookup", '{"q": "b"}')]
    assert reply.text == "Looking" and reply.finish_reason == "tool_calls"
    assert reply.usage.total_tokens == 42


def test_an_anthropic_stream_over_http_gives_its_text_and_usage(servers, via):
    server = servers(lambda ex: stream(ex, anthropic_events(["Hel", "lo"], tokens=11)))
    engine = build_engine(ConnectionOptions(base_url=server.base_url, style="anthropic", retries=0, **via))
    asked = Asked(engine, True)
    reply = run_in_thread(asked.run, HANG)
    assert asked.texts == ["Hel", "lo"]
    assert reply.message == {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]}
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 2)
    assert json.loads(server.last_request.partition(b"\r\n\r\n")[2])["stream"] is True


def test_an_error_event_that_reports_an_overloaded_server_is_retried(servers):
    def script(ex):
        if ex.index == 1:
            events = anthropic_events(["par"])[:3]
            stream(ex, [*events, sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error")])
        else:
            stream(ex, anthropic_events(["whole"]))

    server = servers(script)
    engine = build_engine(ConnectionOptions(base_url=server.base_url, style="anthropic", retries=1, retry_base=0.001))
    asked = Asked(engine, True)
    assert run_in_thread(asked.run, HANG).text == "whole"
    assert asked.log == [("text", "par"), ("retry", 1, "error event in the stream"), ("text", "whole")]


def test_an_error_event_that_reports_a_bad_request_is_final(servers):
    server = servers(lambda ex: stream(ex, [sse({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}, "error")]))
    engine = build_engine(ConnectionOptions(base_url=server.base_url, style="anthropic", retries=2, retry_base=0.001))
    with pytest.raises(LLMError) as caught:
        run_in_thread(Asked(engine, True).run, HANG)
    assert caught.value.cause == "error event in the stream"
    assert "invalid_request_error: bad" in str(caught.value)
    assert server.requests == 1


def test_a_plain_json_reply_to_a_streamed_request_is_read_whole_and_its_text_handed_over_once(servers, via):
    server = servers(lambda ex: ex.reply(completion("not streamed")))
    asked = Asked(engine_for(server, via), True)
    assert run_in_thread(asked.run, HANG).text == "not streamed"
    assert asked.texts == ["not streamed"]


def test_what_on_text_raises_ends_the_call_unchanged_and_frees_the_gate(servers, via):
    server = servers(answer)
    engine = engine_for(server, via)
    gate = one_slot()

    def refuse(delta):
        raise KeyError("consumer gone")

    with pytest.raises(KeyError, match="consumer gone"):
        run_in_thread(Asked(engine, True, gate=gate, on_text=refuse).run, HANG)
    assert run_in_thread(Asked(engine, True, gate=gate).run, HANG).text == "hi"


def test_a_server_that_keeps_the_body_open_after_the_end_marker_does_not_hold_the_call(servers, via):
    def script(ex):
        ex.stream_head()
        for event in openai_chunks(["done"]):
            ex.chunk(event)
        ex.stall()  # no last chunk

    server = servers(script)
    began = time.monotonic()
    assert run_in_thread(Asked(engine_for(server, via), True).run, HANG).text == "done"
    assert time.monotonic() - began < 1.0 + 1.0


def test_streamed_calls_reuse_one_kept_alive_connection(servers):
    server = servers(answer)
    engine = engine_for(server)
    for _ in range(3):
        assert run_in_thread(Asked(engine, True).run, HANG).text == "hi"
    assert server.requests == 3 and server.accepted == 1


def test_a_gzip_encoded_stream_is_decoded_as_it_arrives(servers, via):
    import zlib

    def script(ex):
        packer = zlib.compressobj(wbits=31)
        ex.stream_head("Content-Encoding: gzip\r\n")
        for event in openai_chunks(["packed", " stream"]):
            ex.chunk(packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH))
        ex.chunk(packer.flush())
        ex.chunk(b"")

    server = servers(script)
    asked = Asked(engine_for(server, via), True)
    assert run_in_thread(asked.run, HANG).text == "packed stream"
    assert asked.texts == ["packed", " stream"]


def test_a_streamed_reply_scripted_on_the_scripted_route_is_read_like_any_other():
    with ScriptedRoute() as route:
        route.add(body=b"".join(openai_chunks(["scrip", "ted"])), content_type="text/event-stream")
        engine = build_engine(ConnectionOptions(base_url="https://llm.test/v1", retries=0))
        asked = Asked(engine, True)
        assert asked.run().text == "scripted"
    assert asked.texts == ["scrip", "ted"]
    assert route.requests[0].json()["stream"] is True


# --- the in-process model ------------------------------------------------------------------------


def in_process_call(generate, on_text):
    engine = build_engine(ConnectionOptions(generate=generate))
    return engine.complete(ModelCall(model="m", system=None, messages=[{"role": "user", "content": "go"}], tools=[], on_text=on_text))


def test_the_in_process_model_hands_over_its_whole_text_once():
    pieces = []
    reply = in_process_call(lambda request: {"content": "all at once"}, pieces.append)
    assert pieces == ["all at once"] and reply.text == "all at once"


def test_the_in_process_model_hands_over_no_text_for_a_reply_that_only_calls_tools():
    pieces = []
    reply = in_process_call(lambda request: {"tool_calls": [{"name": "echo", "arguments": {}}]}, pieces.append)
    assert pieces == [] and len(reply.tool_calls) == 1


def test_a_client_run_without_a_stream_sends_no_stream_key(servers):
    server = servers(answer)
    with Client(base_url=server.base_url, model="m") as client:
        assert run_in_thread(lambda: client.run("go"), HANG).text == "hi"
    assert b'"stream"' not in server.last_request


def test_a_retried_streamed_call_announces_the_retry_before_its_next_attempt(servers):
    attempts = threading.Event()

    def script(ex):
        if ex.index == 1:
            ex.stream_head()
            ex.chunk(openai_chunks(["dropped"])[1])
            ex.hang_up()
        else:
            attempts.set()
            answer(ex, "kept")

    server = servers(script)
    seen_before_second = []
    asked = Asked(engine_for(server, retries=1), True, on_retry=lambda attempt, cause: seen_before_second.append(attempts.is_set()))
    assert run_in_thread(asked.run, HANG).text == "kept"
    assert seen_before_second == [False]
    assert asked.log == [("text", "dropped"), ("retry", 1, "stream cut short"), ("text", "ke"), ("text", "pt")]
