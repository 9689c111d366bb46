"""Streamed replies, read without HTTP (CONTRACT §16 "Live from the model"): each style's
accumulator takes the decoded events of a real-shaped stream, hands back every text piece
as it comes, and ends with the same ``ModelReply`` the reply would have been unstreamed;
an event it cannot read is a ``WireError``, an error event a ``StreamEventError``."""

from __future__ import annotations

import json

import pytest

from toolnexus._model.sse_reader import iter_events
from toolnexus.data import ToolCall
from toolnexus.errors import StreamEventError, WireError
from toolnexus._model.styles import anthropic
from toolnexus._model.styles import openai


def events_of(text):
    """The events of a ``text/event-stream`` body, cut into awkward pieces on the way."""
    data = text.encode()
    return list(iter_events(data[i:i + 7] for i in range(0, len(data), 7)))


def read(style, text):
    """Feed every event; returns (deltas, accumulator)."""
    accumulator = style.stream_accumulator()
    deltas = [accumulator.feed(event) for event in events_of(text)]
    return [d for d in deltas if d], accumulator


# --- OpenAI: chat-completion chunks up to [DONE] -------------------------------------------------

CHUNK = '{"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1730000000,"model":"gpt-4o-mini","system_fingerprint":"fp_1","choices":%s,"usage":%s}'
USAGE = '{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0}}'


def oa_chunk(delta, finish="null", usage="null"):
    return "data: " + CHUNK % (f'[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]', usage) + "\n\n"


OA_TEXT = (
    oa_chunk('{"role":"assistant","content":"","refusal":null}')
    + oa_chunk('{"content":"Hello"}')
    + oa_chunk('{"content":" there"}')
    + oa_chunk("{}", finish='"stop"')
    + "data: " + CHUNK % ("[]", USAGE) + "\n\n"
    + "data: [DONE]\n\n"
)

OA_TOOLS = (
    oa_chunk('{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null}')
    + oa_chunk('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"ci"}}]}')
    + oa_chunk('{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]}')
    + oa_chunk('{"tool_calls":[{"index":0,"function":{"arguments":"ty\\": \\"Paris\\"}"}}]}')
    + oa_chunk('{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}')
    + oa_chunk("{}", finish='"tool_calls"')
    + "data: " + CHUNK % ("[]", USAGE) + "\n\n"
    + "data: [DONE]\n\n"
)


def oa_plain(message, finish):
    return {"id": "chatcmpl-AB1", "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": json.loads(USAGE)}


def test_openai_text_pieces_come_one_by_one_and_make_the_unstreamed_reply():
    deltas, accumulator = read(openai, OA_TEXT)
    assert deltas == ["Hello", " there"]
    assert accumulator.finished
    assert accumulator.reply() == openai.parse_reply(oa_plain({"role": "assistant", "content": "Hello there"}, "stop"))


def test_openai_tool_call_fragments_are_joined_by_their_index():
    deltas, accumulator = read(openai, OA_TOOLS)
    reply = accumulator.reply()
    assert deltas == []
    assert reply.tool_calls == [ToolCall(id="call_a", name="get_weather", arguments='{"city": "Paris"}'), ToolCall(id="call_b", name="get_time", arguments="{}")]
    assert reply.finish_reason == "tool_calls"
    calls = [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]
    assert reply == openai.parse_reply(oa_plain({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"))


def test_openai_usage_comes_from_the_final_chunk():
    _, accumulator = read(openai, OA_TEXT)
    usage = accumulator.reply().usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (9, 2, 11)
    assert not accumulator.reply().usage_missing


def test_openai_a_stream_without_usage_counts_zero_and_says_it_had_none():
    text = oa_chunk('{"content":"hi"}') + oa_chunk("{}", finish='"stop"') + "data: [DONE]\n\n"
    _, accumulator = read(openai, text)
    reply = accumulator.reply()
    assert reply.usage.total_tokens == 0
    assert reply.usage_missing  # the loop logs its one warning per client for it


def test_openai_a_name_sent_again_with_later_fragments_is_kept_once():
    text = (
        oa_chunk('{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"echo","arguments":"{\\"a\\""}}]}')
        + oa_chunk('{"tool_calls":[{"index":0,"function":{"name":"echo","arguments":":1}"}}]}')
        + oa_chunk("{}", finish='"tool_calls"') + "data: [DONE]\n\n"
    )
    _, accumulator = read(openai, text)
    assert accumulator.reply().tool_calls == [ToolCall(id="c1", name="echo", arguments='{"a":1}')]


def test_openai_fragments_without_an_index_are_told_apart_by_their_ids():
    text = (
        oa_chunk('{"tool_calls":[{"id":"c1","type":"function","function":{"name":"one","arguments":"{}"}}]}')
        + oa_chunk('{"tool_calls":[{"id":"c2","type":"function","function":{"name":"two","arguments":"{\\"x\\""}}]}')
        + oa_chunk('{"tool_calls":[{"function":{"arguments":":2}"}}]}')
        + oa_chunk("{}", finish='"tool_calls"') + "data: [DONE]\n\n"
    )
    _, accumulator = read(openai, text)
    assert accumulator.reply().tool_calls == [ToolCall(id="c1", name="one", arguments="{}"), ToolCall(id="c2", name="two", arguments='{"x":2}')]


def test_openai_refusal_pieces_are_text_and_the_refusal_is_the_reply_text():
    text = oa_chunk('{"content":null,"refusal":"I can\'t"}') + oa_chunk('{"refusal":" help."}') + oa_chunk("{}", finish='"stop"') + "data: [DONE]\n\n"
    deltas, accumulator = read(openai, text)
    assert deltas == ["I can't", " help."]
    assert accumulator.reply().text == "I can't help."
    assert accumulator.reply().message == {"role": "assistant", "content": "I can't help."}


def test_openai_a_length_finish_marks_the_reply_cut_short():
    text = oa_chunk('{"content":"The borrow"}') + oa_chunk("{}", finish='"length"') + "data: [DONE]\n\n"
    _, accumulator = read(openai, text)
    assert accumulator.reply().truncated


def test_openai_nothing_after_done_counts():
    deltas, accumulator = read(openai, OA_TEXT + oa_chunk('{"content":"late"}'))
    assert deltas == ["Hello", " there"]
    assert accumulator.reply().text == "Hello there"


def test_openai_keep_alive_comments_are_not_events():
    deltas, accumulator = read(openai, ": OPENROUTER PROCESSING\n\n" + OA_TEXT)
    assert deltas == ["Hello", " there"] and accumulator.finished


@pytest.mark.parametrize("text, problem", [
    ("data: {not json\n\n", "not JSON"),
    ("data: [1, 2]\n\n", "not a JSON object"),
    ('data: {"choices": {"index": 0}}\n\n', "choices"),
    ('data: {"choices": [{"index": 0, "delta": "hi"}]}\n\n', "delta"),
    ('data: {"choices": [{"index": 0, "delta": {"content": 5}}]}\n\n', "content"),
    ('data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]}\n\n', "function"),
], ids=["not JSON", "not an object", "choices not a list", "delta not an object", "content not text", "function not an object"])
def test_openai_an_event_of_the_wrong_shape_is_a_wire_error(text, problem):
    accumulator = openai.stream_accumulator()
    with pytest.raises(WireError, match=problem):
        for event in events_of(text):
            accumulator.feed(event)


@pytest.mark.parametrize("error, retryable", [({"type": "server_error", "message": "try again"}, True), ({"type": "invalid_request_error", "message": "bad"}, False)])
def test_openai_an_error_chunk_fails_the_stream_retryable_when_the_server_failed(error, retryable):
    accumulator = openai.stream_accumulator()
    (event,) = events_of("data: " + json.dumps({"error": error}) + "\n\n")
    with pytest.raises(StreamEventError) as caught:
        accumulator.feed(event)
    assert caught.value.retryable is retryable
    assert error["type"] in str(caught.value)


def test_openai_stream_body_asks_for_a_stream_with_usage_and_keeps_other_stream_options():
    body = {"model": "m", "messages": [], "stream_options": {"continuous_usage_stats": True}}
    assert openai.stream_body(body) == {"model": "m", "messages": [], "stream": True, "stream_options": {"continuous_usage_stats": True, "include_usage": True}}
    assert "stream" not in body


# --- Anthropic: message_start to message_stop ----------------------------------------------------------


def an_event(kind, data):
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


START = an_event("message_start", {"message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [], "stop_reason": None, "stop_sequence": None,
                                               "usage": {"input_tokens": 25, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 10, "output_tokens": 1}}})
AN_TEXT = (
    START
    + an_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    + an_event("ping", {})
    + an_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hello"}})
    + an_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "!"}})
    + an_event("content_block_stop", {"index": 0})
    + an_event("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 12}})
    + an_event("message_stop", {})
)
AN_TOOLS = (
    START
    + an_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    + an_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Checking."}})
    + an_event("content_block_stop", {"index": 0})
    + an_event("content_block_start", {"index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}})
    + an_event("content_block_start", {"index": 2, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}}})
    + an_event("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}})
    + an_event("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"city": "Pa'}})
    + an_event("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"zone": "UTC"}'}})
    + an_event("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": 'ris"}'}})
    + an_event("content_block_stop", {"index": 1})
    + an_event("content_block_stop", {"index": 2})
    + an_event("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 40}})
    + an_event("message_stop", {})
)


def an_plain(content, stop, output_tokens):
    usage = {"input_tokens": 25, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 10, "output_tokens": output_tokens}
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}


def test_anthropic_text_deltas_come_one_by_one_and_make_the_unstreamed_reply():
    deltas, accumulator = read(anthropic, AN_TEXT)
    assert deltas == ["Hello", "!"]
    assert accumulator.finished
    assert accumulator.reply() == anthropic.parse_reply(an_plain([{"type": "text", "text": "Hello!"}], "end_turn", 12))


def test_anthropic_input_json_pieces_are_joined_per_block_index():
    deltas, accumulator = read(anthropic, AN_TOOLS)
    reply = accumulator.reply()
    assert deltas == ["Checking."]
    assert reply.tool_calls == [ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Paris"}), ToolCall(id="toolu_2", name="get_time", arguments={"zone": "UTC"})]
    content = [{"type": "text", "text": "Checking."},
               {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
               {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"zone": "UTC"}}]
    assert reply == anthropic.parse_reply(an_plain(content, "tool_use", 40))


def test_anthropic_input_tokens_come_from_message_start_with_the_cache_and_output_tokens_from_the_last_message_delta():
    text = AN_TEXT.replace(an_event("message_stop", {}), an_event("message_delta", {"delta": {}, "usage": {"output_tokens": 15}}) + an_event("message_stop", {}))
    _, accumulator = read(anthropic, text)
    usage = accumulator.reply().usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (38, 15, 53)
    assert accumulator.reply().finish_reason == "end_turn"


def test_anthropic_a_stream_without_usage_counts_zero_and_says_it_had_none():
    text = (an_event("message_start", {"message": {"id": "m", "role": "assistant", "content": []}})
            + an_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": "hi"}})
            + an_event("content_block_stop", {"index": 0})
            + an_event("message_delta", {"delta": {"stop_reason": "end_turn"}})
            + an_event("message_stop", {}))
    deltas, accumulator = read(anthropic, text)
    assert deltas == ["hi"]
    assert accumulator.reply().usage.total_tokens == 0
    assert accumulator.reply().usage_missing


def test_anthropic_thinking_and_its_signature_are_kept_as_an_unstreamed_reply_has_them():
    text = (START
            + an_event("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": ""}})
            + an_event("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}})
            + an_event("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "think."}})
            + an_event("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": "EqQB"}})
            + an_event("content_block_stop", {"index": 0})
            + an_event("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}})
            + an_event("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "42"}})
            + an_event("content_block_stop", {"index": 1})
            + an_event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}})
            + an_event("message_stop", {}))
    deltas, accumulator = read(anthropic, text)
    assert deltas == ["42"]  # thinking is not text
    content = [{"type": "thinking", "thinking": "Let me think.", "signature": "EqQB"}, {"type": "text", "text": "42"}]
    assert accumulator.reply() == anthropic.parse_reply(an_plain(content, "end_turn", 9))


def test_anthropic_input_that_is_not_json_is_kept_for_the_call_to_report():
    text = (START
            + an_event("content_block_start", {"index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {}}})
            + an_event("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"a": '}})
            + an_event("content_block_stop", {"index": 0})
            + an_event("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 2}})
            + an_event("message_stop", {}))
    _, accumulator = read(anthropic, text)
    assert accumulator.reply().tool_calls == [ToolCall(id="toolu_1", name="echo", arguments='{"a": ')]


def test_anthropic_a_max_tokens_stop_marks_the_reply_cut_short():
    _, accumulator = read(anthropic, AN_TEXT.replace('"end_turn"', '"max_tokens"'))
    assert accumulator.reply().truncated


@pytest.mark.parametrize("text, problem", [
    ("event: message_start\ndata: {oops\n\n", "not JSON"),
    (an_event("message_start", {"message": "hi"}), "message_start"),
    (START + an_event("content_block_delta", {"index": 3, "delta": {"type": "text_delta", "text": "x"}}), "never started"),
    (START + an_event("content_block_start", {"index": 0}), "content block"),
    (START + an_event("content_block_start", {"index": "0", "content_block": {"type": "text", "text": ""}}), "index"),
    (START + an_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
     + an_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": 7}}), "text_delta"),
], ids=["not JSON", "message not an object", "unknown block", "no block", "index not a number", "text not a string"])
def test_anthropic_an_event_of_the_wrong_shape_is_a_wire_error(text, problem):
    accumulator = anthropic.stream_accumulator()
    with pytest.raises(WireError, match=problem):
        for event in events_of(text):
            accumulator.feed(event)


@pytest.mark.parametrize("kind, retryable", [("overloaded_error", True), ("api_error", True), ("invalid_request_error", False)])
def test_anthropic_an_error_event_fails_the_stream_retryable_when_the_server_failed(kind, retryable):
    accumulator = anthropic.stream_accumulator()
    with pytest.raises(StreamEventError) as caught:
        for event in events_of(START + an_event("error", {"error": {"type": kind, "message": "Overloaded"}})):
            accumulator.feed(event)
    assert caught.value.retryable is retryable
    assert kind in str(caught.value)


def test_anthropic_stream_body_only_asks_for_a_stream():
    body = {"model": "c", "max_tokens": 4096, "messages": []}
    assert anthropic.stream_body(body) == {**body, "stream": True}
