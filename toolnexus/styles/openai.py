"""The OpenAI chat-completions wire, and the in-process ``generate=`` model (same shapes)."""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterable

from ..data import ModelReply, ToolCall, ToolResult, Usage
from ..errors import WireError
from ..toolkit import Toolkit
from ._usage import count

path = "/chat/completions"


def endpoint(base_url: str) -> str:
    return base_url.rstrip("/") + path


def headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def system_messages(system: str | None) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}] if system else []


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tools_payload(toolkit: Toolkit) -> list[dict[str, Any]]:
    return toolkit.schemas("openai")


def build_body(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    system: str | None,
    request_params: dict[str, Any] | None,
) -> dict[str, Any]:
    """``system`` is already the transcript's first message in this style."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"
    if request_params:
        body.update(request_params)
    return body


def usage_of(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt = count(raw.get("prompt_tokens"))
    completion = count(raw.get("completion_tokens"))
    total = raw.get("total_tokens")
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=count(total) if total is not None else prompt + completion)


def parse_reply(data: Any) -> ModelReply:
    """Decode a chat-completions reply; a shape we cannot read raises ``WireError``."""
    if not isinstance(data, dict):
        raise WireError("reply is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise WireError("reply has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise WireError("reply's first choice has no message")
    calls = [_call_from_wire(raw) for raw in message.get("tool_calls") or []]
    text = message.get("content")
    text = text if isinstance(text, str) else ""
    kept: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if calls:
        kept["tool_calls"] = message["tool_calls"]
    reason = choices[0].get("finish_reason")
    return ModelReply(message=kept, text=text, tool_calls=calls, usage=usage_of(data.get("usage")), finish_reason=reason if isinstance(reason, str) else None)


def _call_from_wire(raw: Any) -> ToolCall:
    if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
        raise WireError("tool call without a function")
    function = raw["function"]
    return ToolCall(id=str(raw.get("id") or _new_call_id()), name=str(function.get("name", "")), arguments=function.get("arguments"))


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_calls_of(message: dict[str, Any]) -> list[ToolCall]:
    if message.get("role") != "assistant":
        return []
    return [_call_from_wire(raw) for raw in message.get("tool_calls") or []]


def tool_result_messages(results: Iterable[tuple[str, ToolResult]]) -> list[dict[str, Any]]:
    return [{"role": "tool", "tool_call_id": call_id, "content": result.output} for call_id, result in results]


def tool_results_in(messages: list[dict[str, Any]]) -> list[tuple[str, ToolResult]]:
    """The tool results among ``messages`` (those after an assistant message), in order."""
    return [
        (str(m.get("tool_call_id")), ToolResult(output=str(m.get("content") or "")))
        for m in messages
        if m.get("role") == "tool"
    ]


# --- the in-process model: OpenAI-shaped requests, a small reply dict -------------------


def generate_request(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": model, "messages": messages, "tools": tools}


def parse_generated(reply: Any) -> ModelReply:
    """Turn ``{"content"}`` or ``{"tool_calls"}`` (+ ``usage``) into a full assistant message."""
    if not isinstance(reply, dict):
        raise WireError(f"generate() must return a dict, got {type(reply).__name__}")
    raw_calls = reply.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise WireError("generate() tool_calls must be a list")
    calls: list[ToolCall] = []
    wire_calls: list[dict[str, Any]] = []
    for raw in raw_calls:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise WireError("each generated tool call needs a name")
        arguments = raw.get("arguments", {})
        encoded = arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {})
        call = ToolCall(id=str(raw.get("id") or _new_call_id()), name=raw["name"], arguments=encoded)
        calls.append(call)
        wire_calls.append({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": encoded}})
    content = reply.get("content")
    text = content if isinstance(content, str) else ""
    message: dict[str, Any] = {"role": "assistant", "content": content if isinstance(content, str) else None}
    if wire_calls:
        message["tool_calls"] = wire_calls
    reason = reply.get("finish_reason")
    if not isinstance(reason, str):
        reason = "tool_calls" if calls else "stop"
    return ModelReply(message=message, text=text, tool_calls=calls, usage=usage_of(reply.get("usage")), finish_reason=reason)
