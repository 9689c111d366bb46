"""Scripted replies in their streamed forms, as a model server would send them.

Shared by ``ScriptedLLMServer`` (over a socket) and ``ScriptedRoute`` (without one): a
chat completion becomes OpenAI-style chunks, an anthropic-style message becomes its
events, and each becomes one Server-Sent Events frame.
"""

from __future__ import annotations

import json
import re
from typing import Any

Chunk = tuple[dict[str, Any] | bytes, str]


def sse_frame(chunk: dict[str, Any] | bytes, *, named: bool) -> bytes:
    """One event of a streamed reply as its frame; ``named`` frames carry an ``event:``
    line with the chunk's ``type`` (the anthropic style's events)."""
    name = b"event: %s\n" % str(chunk.get("type")).encode() if named and isinstance(chunk, dict) else b""
    return name + b"data: " + (chunk if isinstance(chunk, bytes) else json.dumps(chunk).encode()) + b"\n\n"


def streamed_form(
    reply: dict[str, Any], request: dict[str, Any], *, anthropic: bool, usage: bool = True
) -> list[Chunk]:
    """``reply`` as the chunks of the streamed reply ``request`` asked for: the anthropic
    style's events, or OpenAI-style chunks with the usage when the request asks for it
    (``stream_options.include_usage``) and ``usage`` allows it."""
    if anthropic:
        return anthropic_events(reply)
    asked = bool((request.get("stream_options") or {}).get("include_usage")) and usage
    return stream_chunks(reply, usage=asked)


def stream_chunks(reply: dict[str, Any], *, usage: bool = True) -> list[Chunk]:
    """A chat completion as the chunks of its streamed form, each with the text piece it
    carries ("" for none): the role, the text word by word, the tool calls, the finish
    reason, the usage (with ``usage``) and ``[DONE]``."""
    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    head = {
        "id": reply.get("id", "chatcmpl-scripted"),
        "object": "chat.completion.chunk",
        "model": reply.get("model", "scripted"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks: list[Chunk] = [(chunk({"role": "assistant", "content": ""}), "")]
    chunks += [
        (chunk({"content": piece}), piece) for piece in re.findall(r"\s*\S+\s*|\s+", message.get("content") or "")
    ]
    for index, call in enumerate(message.get("tool_calls") or ()):
        chunks.append((chunk({"tool_calls": [{"index": index, **call}]}), ""))
    chunks.append((chunk({}, choice.get("finish_reason") or "stop"), ""))
    if usage and reply.get("usage") is not None:
        chunks.append(({**head, "choices": [], "usage": reply["usage"]}, ""))
    chunks.append((b"[DONE]", ""))
    return chunks


def anthropic_events(reply: dict[str, Any]) -> list[Chunk]:
    """An anthropic-style message as the events of its streamed form, each with the text
    piece it carries: ``message_start`` (with the input usage), each content block (text
    word by word, a tool call's input as one ``input_json_delta``), ``message_delta`` (the
    stop reason and the output tokens) and ``message_stop``."""
    usage = dict(reply.get("usage") or {})
    output_tokens = usage.pop("output_tokens", 0)
    head = {key: value for key, value in reply.items() if key not in ("content", "stop_reason", "usage")}
    events: list[Chunk] = [
        (
            {
                "type": "message_start",
                "message": {**head, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}},
            },
            "",
        )
    ]
    for index, block in enumerate(reply.get("content") or ()):
        if block.get("type") == "text":
            events.append(
                ({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}, "")
            )
            for piece in re.findall(r"\s*\S+\s*|\s+", block.get("text") or ""):
                events.append(
                    (
                        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
                        piece,
                    )
                )
        else:
            events.append(
                ({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}, "")
            )
            partial = json.dumps(block.get("input") or {})
            events.append(
                (
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": partial},
                    },
                    "",
                )
            )
        events.append(({"type": "content_block_stop", "index": index}, ""))
    events.append(
        (
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.get("stop_reason") or "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
            "",
        )
    )
    events.append(({"type": "message_stop"}, ""))
    return events
