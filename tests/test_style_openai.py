"""The openai wire style and the in-process model shapes (CONTRACT §8, Appendix)."""

from __future__ import annotations

import json

import pytest

from toolnexus.data import ToolCall, ToolResult, Usage
from toolnexus.errors import WireError
from toolnexus._model.styles import get_style
from toolnexus._model.styles import openai as style
from toolnexus.testing import text_completion

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "echo", "description": "d", "parameters": {"type": "object", "properties": {}}}}]


def test_get_style_returns_the_openai_module():
    assert get_style("openai") is style


def test_get_style_unknown_name_raises_value_error_naming_known_styles():
    with pytest.raises(ValueError, match="openai"):
        get_style("nope")


def test_endpoint_appends_chat_completions_and_strips_trailing_slash():
    assert style.endpoint("https://api.example.com/v1") == "https://api.example.com/v1/chat/completions"
    assert style.endpoint("https://api.example.com/v1/") == "https://api.example.com/v1/chat/completions"


def test_headers_carry_bearer_authorization():
    assert style.headers("sk-1") == {"Authorization": "Bearer sk-1"}


def test_headers_without_key_are_empty():
    assert style.headers(None) == {}


def test_system_prompt_is_the_first_message():
    assert style.system_messages("sys") == [{"role": "system", "content": "sys"}]
    assert style.system_messages(None) == []


def test_build_body_without_tools_omits_tools_and_tool_choice():
    body = style.build_body("m", MESSAGES, [], "be brief", None)
    assert body == {"model": "m", "messages": MESSAGES}


def test_build_body_with_tools_adds_tools_and_tool_choice_auto():
    body = style.build_body("m", MESSAGES, TOOLS, None, None)
    assert body == {"model": "m", "messages": MESSAGES, "tools": TOOLS, "tool_choice": "auto"}
    assert list(body) == ["model", "messages", "tools", "tool_choice"]


def test_build_body_merges_request_params_last_and_they_win():
    body = style.build_body("m", MESSAGES, TOOLS, None, {"temperature": 0, "tool_choice": "required", "model": "other"})
    assert body == {"model": "other", "messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "temperature": 0}
    assert list(body)[-1] == "temperature"


def test_parse_reply_text_only():
    reply = style.parse_reply(
        {"choices": [{"message": {"role": "assistant", "content": "hello"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    )
    assert reply.text == "hello"
    assert reply.tool_calls == []
    assert reply.message == {"role": "assistant", "content": "hello"}
    assert reply.usage == Usage(3, 2, 5)


def test_parse_reply_tool_calls_keep_the_wire_calls():
    wire_calls = [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"x": 1}'}}]
    reply = style.parse_reply({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": wire_calls}}]})
    assert reply.tool_calls == [ToolCall(id="c1", name="echo", arguments='{"x": 1}')]
    assert reply.message == {"role": "assistant", "content": "", "tool_calls": wire_calls}
    assert reply.text == ""
    assert reply.usage == Usage()


def test_parse_reply_total_tokens_defaults_to_the_sum():
    reply = style.parse_reply({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 4, "completion_tokens": 6}})
    assert reply.usage == Usage(4, 6, 10)


@pytest.mark.parametrize("data", [[], "x", {}, {"choices": []}, {"choices": [{}]}, {"choices": ["x"]}])
def test_parse_reply_unreadable_shapes_raise_wire_error(data):
    with pytest.raises(WireError):
        style.parse_reply(data)


def test_tool_result_messages_one_tool_message_per_result():
    out = style.tool_result_messages([("c1", ToolResult("a")), ("c2", ToolResult("b", is_error=True))])
    assert out == [
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "tool", "tool_call_id": "c2", "content": "b"},
    ]


def test_tool_calls_of_reads_an_assistant_message():
    msg = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}
    assert style.tool_calls_of(msg) == [ToolCall(id="c1", name="t", arguments="{}")]
    assert style.tool_calls_of({"role": "user", "content": "x"}) == []


def test_tool_results_in_finds_tool_messages_in_order():
    msgs = [{"role": "tool", "tool_call_id": "a", "content": "1"}, {"role": "user", "content": "u"}, {"role": "tool", "tool_call_id": "b", "content": "2"}]
    assert style.tool_results_in(msgs) == [("a", ToolResult("1")), ("b", ToolResult("2"))]


def test_generate_request_shape():
    assert style.generate_request("m", MESSAGES, []) == {"model": "m", "messages": MESSAGES, "tools": []}


def test_parse_generated_content():
    reply = style.parse_generated({"content": "hi"})
    assert reply.text == "hi"
    assert reply.tool_calls == []
    assert reply.message == {"role": "assistant", "content": "hi"}
    assert reply.usage == Usage()


def test_parse_generated_tool_calls_with_dict_arguments_are_encoded_as_json():
    reply = style.parse_generated({"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"x": 1}}]})
    assert reply.tool_calls == [ToolCall(id="c1", name="echo", arguments='{"x": 1}')]
    assert reply.message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"x": 1}'}}],
    }


def test_parse_generated_tool_calls_with_string_arguments_are_kept_verbatim():
    reply = style.parse_generated({"tool_calls": [{"id": "c1", "name": "echo", "arguments": '{"x":2}'}]})
    assert reply.tool_calls[0].arguments == '{"x":2}'
    assert reply.message["tool_calls"][0]["function"]["arguments"] == '{"x":2}'


def test_parse_generated_missing_ids_are_generated_and_unique():
    reply = style.parse_generated({"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b"}]})
    ids = [c.id for c in reply.tool_calls]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == 2
    assert [c["id"] for c in reply.message["tool_calls"]] == ids
    assert json.loads(reply.tool_calls[1].arguments) == {}


def test_parse_generated_usage_is_read():
    reply = style.parse_generated({"content": "x", "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
    assert reply.usage == Usage(1, 2, 3)


@pytest.mark.parametrize("raw", ["text", None, {"tool_calls": "x"}, {"tool_calls": [{"arguments": {}}]}])
def test_parse_generated_bad_shapes_raise_wire_error(raw):
    with pytest.raises(WireError):
        style.parse_generated(raw)


def test_a_generated_whole_chat_completion_is_read_as_a_servers_reply():
    reply = style.parse_generated(text_completion({"model": "m"}, "hello there"))
    assert reply.text == "hello there" and reply.usage.total_tokens == 15 and reply.finish_reason == "stop"


def test_a_generated_dict_with_neither_content_nor_tool_calls_is_a_wire_error():
    with pytest.raises(WireError, match="got keys \\['text'\\]"):
        style.parse_generated({"text": "hello"})
