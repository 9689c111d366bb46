"""The anthropic wire style (CONTRACT §8, Appendix)."""

from __future__ import annotations

import pytest

from toolnexus.data import ToolCall, ToolResult, Usage
from toolnexus.errors import WireError
from toolnexus._model.styles import anthropic as style
from toolnexus._model.styles import get_style

MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [{"name": "echo", "description": "d", "input_schema": {"type": "object", "properties": {}}}]


def test_get_style_returns_the_anthropic_module():
    assert get_style("anthropic") is style


@pytest.mark.parametrize(
    "base",
    ["https://api.anthropic.com", "https://api.anthropic.com/", "https://api.anthropic.com/v1", "https://api.anthropic.com/v1/"],
)
def test_endpoint_appends_v1_only_when_missing(base):
    assert style.endpoint(base) == "https://api.anthropic.com/v1/messages"


def test_headers_carry_x_api_key_and_version():
    assert style.headers("k") == {"anthropic-version": "2023-06-01", "x-api-key": "k"}


def test_headers_without_key_still_carry_version():
    assert style.headers(None) == {"anthropic-version": "2023-06-01"}


def test_system_prompt_is_not_a_message():
    assert style.system_messages("sys") == []


def test_build_body_minimal_has_default_max_tokens_and_no_tools_or_system():
    assert style.build_body("m", MESSAGES, [], None, None) == {"model": "m", "max_tokens": 4096, "messages": MESSAGES}


def test_build_body_system_is_top_level_and_tools_included():
    body = style.build_body("m", MESSAGES, TOOLS, "sys", None)
    assert body == {"model": "m", "max_tokens": 4096, "messages": MESSAGES, "system": "sys", "tools": TOOLS}
    assert list(body) == ["model", "max_tokens", "messages", "system", "tools"]
    assert "tool_choice" not in body


def test_build_body_request_params_override_max_tokens_and_are_merged_last():
    body = style.build_body("m", MESSAGES, [], None, {"max_tokens": 10, "temperature": 0.5})
    assert body == {"model": "m", "max_tokens": 10, "messages": MESSAGES, "temperature": 0.5}
    assert list(body)[-1] == "temperature"


def test_usage_maps_input_and_output_tokens():
    assert style.usage_of({"input_tokens": 7, "output_tokens": 5}) == Usage(7, 5, 12)
    assert style.usage_of(None) == Usage()


def test_parse_reply_text_and_tool_use_blocks():
    blocks = [
        {"type": "text", "text": "let me "},
        {"type": "text", "text": "check"},
        {"type": "tool_use", "id": "tu1", "name": "echo", "input": {"x": 1}},
    ]
    reply = style.parse_reply({"content": blocks, "usage": {"input_tokens": 3, "output_tokens": 4}})
    assert reply.text == "let me check"
    assert reply.tool_calls == [ToolCall(id="tu1", name="echo", arguments={"x": 1})]
    assert reply.message == {"role": "assistant", "content": blocks}
    assert reply.usage == Usage(3, 4, 7)


@pytest.mark.parametrize("data", [[], {}, {"content": "x"}, {"content": [{"type": "tool_use", "id": "t1"}]}])
def test_parse_reply_unreadable_shapes_raise_wire_error(data):
    with pytest.raises(WireError):
        style.parse_reply(data)


def test_tool_result_messages_are_one_user_message_of_blocks():
    out = style.tool_result_messages([("a", ToolResult("ok")), ("b", ToolResult("bad", is_error=True))])
    assert out == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "ok"},
                {"type": "tool_result", "tool_use_id": "b", "content": "bad", "is_error": True},
            ],
        }
    ]


def test_tool_result_messages_empty_gives_no_message():
    assert style.tool_result_messages([]) == []


def test_tool_results_in_reads_tool_result_blocks():
    msgs = style.tool_result_messages([("a", ToolResult("ok")), ("b", ToolResult("bad", is_error=True))])
    assert style.tool_results_in([{"role": "user", "content": "plain"}, *msgs]) == [
        ("a", ToolResult("ok")),
        ("b", ToolResult("bad", is_error=True)),
    ]


def test_tool_calls_of_ignores_non_assistant_messages():
    assert style.tool_calls_of({"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "y"}]}) == []
