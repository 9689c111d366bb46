"""The Anthropic messages wire: top-level ``system``, ``tool_use``/``tool_result`` blocks."""

from __future__ import annotations

from typing import Any, Iterable

from ..data import ModelReply, ToolCall, ToolResult, Usage
from ..errors import WireError
from ..toolkit import Toolkit
from ._usage import count

path = "/messages"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096


def endpoint(base_url: str) -> str:
    base = base_url.rstrip("/")
    if not base.endswith("/v1") and "/v1/" not in base + "/":
        base += "/v1"
    return base + path


def headers(api_key: str | None) -> dict[str, str]:
    out = {"anthropic-version": API_VERSION}
    if api_key:
        out["x-api-key"] = api_key
    return out


def system_messages(system: str | None) -> list[dict[str, Any]]:
    return []  # the system prompt travels as the body's top-level ``system`` field


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tools_payload(toolkit: Toolkit) -> list[dict[str, Any]]:
    return toolkit.schemas("anthropic")


def build_body(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    system: str | None,
    request_params: dict[str, Any] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": DEFAULT_MAX_TOKENS, "messages": messages}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
    if request_params:
        body.update(request_params)
    return body


def usage_of(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt = count(raw.get("input_tokens"))
    completion = count(raw.get("output_tokens"))
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def parse_reply(data: Any) -> ModelReply:
    if not isinstance(data, dict):
        raise WireError("reply is not a JSON object")
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise WireError("reply has no content blocks")
    calls = tool_calls_of({"role": "assistant", "content": blocks})
    text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    reason = data.get("stop_reason")
    return ModelReply(
        message={"role": "assistant", "content": blocks},
        text=text,
        tool_calls=calls,
        usage=usage_of(data.get("usage")),
        finish_reason=reason if isinstance(reason, str) else None,
    )


def tool_calls_of(message: dict[str, Any]) -> list[ToolCall]:
    if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
        return []
    calls = []
    for block in message["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise WireError("tool_use block without an id or name")
            calls.append(ToolCall(id=block["id"], name=block["name"], arguments=block.get("input", {})))
    return calls


def tool_result_messages(results: Iterable[tuple[str, ToolResult]]) -> list[dict[str, Any]]:
    blocks = []
    for call_id, result in results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": result.output}
        if result.is_error:
            block["is_error"] = True
        blocks.append(block)
    return [{"role": "user", "content": blocks}] if blocks else []


def tool_results_in(messages: list[dict[str, Any]]) -> list[tuple[str, ToolResult]]:
    found = []
    for message in messages:
        if message.get("role") != "user" or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                output = block.get("content")
                found.append((str(block.get("tool_use_id")), ToolResult(output=output if isinstance(output, str) else str(output or ""), is_error=bool(block.get("is_error")))))
    return found
