"""The Anthropic messages wire: top-level ``system``, ``tool_use``/``tool_result`` blocks.

Replies are normalised before they enter a transcript: empty text blocks are dropped (the
API refuses them when they come back), every ``tool_use`` block gets an id unique in its
message (made up from the reply when the model sent none) and an object ``input``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ...data import ModelReply, ToolCall, ToolResult, Usage
from ...errors import WireError
from ..._tools.toolkit import TOOL_SHAPES, Toolkit
from ..._tools.tools import Tool
from ._stream import error_event, event_object, text_of
from ._usage import answer_every_turn, count, output_text, unique_ids

if TYPE_CHECKING:
    from ..sse_reader import SSEEvent

path = "/messages"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
TRUNCATED = "max_tokens"


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


def tool_schema(tool: Tool) -> dict[str, Any]:
    """One tool as this style declares it to the model."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


TOOL_SHAPES["anthropic"] = tool_schema


def api_key(environ: Mapping[str, str], base_url: str | None) -> str | None:
    """The key from the environment."""
    return environ.get("ANTHROPIC_API_KEY")


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
        if not tools:
            body.pop("tool_choice", None)  # refused without tools
    return body


def unforced(body: dict[str, Any], keep: str | None = None) -> dict[str, Any]:
    """``body`` with a ``tool_choice`` that forces a call (``any``, a named ``tool``)
    made ``auto``, its other keys kept: the run has called a tool, and may now answer. A
    choice that lets the model call the tool ``keep`` (``any``, or ``keep`` by name) stays."""
    choice = body.get("tool_choice")
    if not isinstance(choice, dict):
        return body
    kind = choice.get("type")
    if keep is not None and (kind == "any" or kind == "tool" and choice.get("name") == keep):
        return body
    if kind in ("any", "tool"):
        kept = {key: value for key, value in choice.items() if key not in ("type", "name")}
        return {**body, "tool_choice": {"type": "auto", **kept}}
    return body


def usage_of(raw: Any) -> Usage:
    """Prompt tokens are all the input the model read: fresh, read from the prompt cache
    (also ``cached_tokens``), and written to it."""
    if not isinstance(raw, dict):
        return Usage()
    fresh, cached, written = (
        count(raw.get(key), key) for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )
    prompt = fresh + cached + written
    completion = count(raw.get("output_tokens"), "output_tokens")
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion, cached_tokens=cached
    )


def parse_reply(data: Any) -> ModelReply:
    if not isinstance(data, dict):
        raise WireError("reply is not a JSON object")
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise WireError("reply has no content blocks")
    kept, calls = _normalised(blocks, data)
    text = "".join(b["text"] for b in kept if b.get("type") == "text")
    stop = data.get("stop_reason")
    stop = stop if isinstance(stop, str) else None
    raw_usage = data.get("usage")
    return ModelReply(
        message={"role": "assistant", "content": kept},
        text=text,
        tool_calls=calls,
        usage=usage_of(raw_usage),
        finish_reason=stop,
        truncated=stop == TRUNCATED,
        usage_missing=not isinstance(raw_usage, dict),
    )


def _normalised(blocks: list[Any], reply: Any) -> tuple[list[dict[str, Any]], list[ToolCall]]:
    """The blocks worth sending back, and the calls among them. A ``tool_use`` echoes an
    object ``input`` (``{}`` when the model sent something else, which its call keeps so
    the loop reports it as invalid arguments)."""
    kept: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and not (isinstance(block.get("text"), str) and block["text"]):
            continue
        if block.get("type") == "tool_use" and not isinstance(block.get("name"), str):
            raise WireError("tool_use block without a name")
        kept.append(block)  # thinking and other blocks travel back as they came
    ids = iter(unique_ids((b.get("id") for b in kept if b.get("type") == "tool_use"), reply, "toolu_"))
    out: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for block in kept:
        if block.get("type") != "tool_use":
            out.append(block)
            continue
        arguments = _arguments(block.get("input"))
        call = ToolCall(id=next(ids), name=block["name"], arguments=arguments)
        calls.append(call)
        out.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": arguments if isinstance(arguments, dict) else {},
            }
        )
    return out, calls


def _arguments(raw: Any) -> Any:
    """``input`` as an object; a JSON string is decoded, anything else is kept as it came."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            return raw
    return {} if raw is None else raw


def tool_calls_of(message: dict[str, Any]) -> list[ToolCall]:
    if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
        return []
    return _normalised(message["content"], message)[1]


def tool_result_messages(results: Iterable[tuple[str, ToolResult]]) -> list[dict[str, Any]]:
    blocks = [_result_block(call_id, result) for call_id, result in results]
    return [{"role": "user", "content": blocks}] if blocks else []


def _result_block(call_id: str, result: ToolResult) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": output_text(result.output)}
    if result.is_error:
        block["is_error"] = True
    return block


def tool_results_in(messages: list[dict[str, Any]]) -> list[tuple[str, ToolResult]]:
    found = []
    for message in messages:
        if message.get("role") != "user" or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                output = block.get("content")
                found.append(
                    (
                        str(block.get("tool_use_id")),
                        ToolResult(
                            output=output if isinstance(output, str) else str(output or ""),
                            is_error=bool(block.get("is_error")),
                        ),
                    )
                )
    return found


def answer_every_call(messages: list[dict[str, Any]], filler: ToolResult) -> list[dict[str, Any]]:
    """``messages`` with a ``filler`` result block for every ``tool_use`` that has none, in
    the user message that answers that turn, so the transcript is valid to send."""

    def answer_turn(message: dict[str, Any], rest: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        following = (
            rest[0] if rest and rest[0].get("role") == "user" and isinstance(rest[0].get("content"), list) else None
        )
        answered = {cid for cid, _ in tool_results_in([following])} if following is not None else set()
        missing = [_result_block(call.id, filler) for call in tool_calls_of(message) if call.id not in answered]
        if following is None or not answered:
            return ([{"role": "user", "content": missing}] if missing else []), 0
        blocks = following["content"]
        last = max(i for i, b in enumerate(blocks) if isinstance(b, dict) and b.get("type") == "tool_result")
        return [{**following, "content": [*blocks[: last + 1], *missing, *blocks[last + 1 :]]}], 1

    return answer_every_turn(messages, lambda m: bool(tool_calls_of(m)), answer_turn)


# --- streamed replies: message_start, content_block_*, message_delta, message_stop ------

#: Where each kind of block delta goes in its block (text pieces are joined).
_DELTA_FIELDS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}


def stream_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking for a streamed reply."""
    return {**body, "stream": True}


def stream_accumulator() -> MessageEvents:
    return MessageEvents()


class MessageEvents:
    """Reads the events of one streamed message. ``message_start`` gives the message and
    its input tokens (cache reads and writes included); each ``content_block_start`` a
    block, which ``content_block_delta`` events extend (``text_delta`` handed back as it
    comes, ``input_json_delta`` pieces joined per block index and decoded at its
    ``content_block_stop``); ``message_delta`` the stop reason and the output tokens;
    ``message_stop`` ends the stream. ``ping`` is ignored, ``error`` fails the stream."""

    def __init__(self) -> None:
        #: ``message_stop`` came; later events are ignored.
        self.finished = False
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}  # input_json_delta pieces of unfinished blocks
        self._usage: dict[str, Any] | None = None
        self._stop: Any = None

    def feed(self, event: SSEEvent) -> str:
        """Take one event; return the text it adds (``""`` for none)."""
        if self.finished:
            return ""
        data = event_object(event)
        kind = data.get("type", event.event)
        if kind == "error":
            raise error_event(data.get("error"))
        if kind == "message_start":
            self._start(data.get("message"))
        elif kind == "content_block_start":
            block = data.get("content_block")
            if not isinstance(block, dict):
                raise WireError("content_block_start without a content block")
            self._blocks[_index(data)] = dict(block)
            return text_of(block.get("text"), "a text block's text") if block.get("type") == "text" else ""
        elif kind == "content_block_delta":
            return self._delta(_index(data), data.get("delta"))
        elif kind == "content_block_stop":
            self._finish_block(_index(data))
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and "stop_reason" in delta:
                self._stop = delta["stop_reason"]
            if isinstance(data.get("usage"), dict):
                self._usage = {**(self._usage or {}), **data["usage"]}
        elif kind == "message_stop":
            self.finished = True
        return ""  # ping, and kinds added after this was written

    def _start(self, message: Any) -> None:
        if not isinstance(message, dict):
            raise WireError("message_start without a message")
        self._message = {key: value for key, value in message.items() if key not in ("content", "usage", "stop_reason")}
        content = message.get("content") or []
        if not isinstance(content, list):
            raise WireError("message_start's content is not a list")
        self._blocks = {index: dict(block) for index, block in enumerate(content) if isinstance(block, dict)}
        if isinstance(message.get("usage"), dict):
            self._usage = dict(message["usage"])

    def _delta(self, index: int, delta: Any) -> str:
        block = self._blocks.get(index)
        if block is None:
            raise WireError(f"content_block_delta for block {index}, which was never started")
        if not isinstance(delta, dict):
            raise WireError("content_block_delta without a delta")
        kind = delta.get("type")
        if kind == "input_json_delta":
            self._json.setdefault(index, []).append(text_of(delta.get("partial_json"), "an input_json_delta"))
        elif kind in _DELTA_FIELDS:
            field = _DELTA_FIELDS[kind]
            piece = text_of(delta.get(field), f"a {kind}")
            block[field] = text_of(block.get(field), f"a block's {field}") + piece
            return piece if kind == "text_delta" else ""
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        return ""

    def _finish_block(self, index: int) -> None:
        if index not in self._blocks:
            raise WireError(f"content_block_stop for block {index}, which was never started")
        pieces = self._json.pop(index, None)
        if pieces:
            joined = "".join(pieces)
            try:
                self._blocks[index]["input"] = json.loads(joined)
            except (ValueError, RecursionError):
                self._blocks[index]["input"] = joined  # kept: the call reports invalid arguments

    def reply(self) -> ModelReply:
        """The reply the events make, as ``parse_reply`` reads the same message unstreamed."""
        for index in list(self._json):
            self._finish_block(index)  # a block the server never stopped
        data = {
            **self._message,
            "content": [self._blocks[index] for index in sorted(self._blocks)],
            "stop_reason": self._stop,
        }
        if self._usage is not None:
            data["usage"] = self._usage
        return parse_reply(data)


def _index(data: dict[str, Any]) -> int:
    index = data.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        raise WireError(f"{data.get('type')} without a block index")
    return index
