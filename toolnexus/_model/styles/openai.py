"""The OpenAI chat-completions wire, and the in-process ``generate=`` model (same shapes).

Replies are normalised before they enter a transcript, because real servers differ from
the spec and some refuse their own shapes when they come back: every tool call gets
``type: "function"``, string ``arguments`` and an id unique in its message (made up from
the reply when the model sent none); an assistant message is sent back with a string
``content`` (``""`` when it only calls tools); a refusal's text becomes the text.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ...data import ModelReply, ToolCall, ToolResult, Usage
from ...errors import WireError
from ..._tools.toolkit import TOOL_SHAPES, Toolkit
from ..._tools.tools import Tool
from ._stream import error_event, event_object, text_of
from ._usage import answer_every_turn, count, encode_arguments, output_text, unique_ids

if TYPE_CHECKING:
    from ..sse_reader import SSEEvent

path = "/chat/completions"
TRUNCATED = "length"
# Request keys that mean something only next to ``tools``; servers refuse them alone.
_TOOL_ONLY_PARAMS = ("tool_choice", "parallel_tool_calls")


def endpoint(base_url: str) -> str:
    return base_url.rstrip("/") + path


def headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def system_messages(system: str | None) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}] if system else []


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool_schema(tool: Tool) -> dict[str, Any]:
    """One tool as this style declares it to the model."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
    }


TOOL_SHAPES["openai"] = tool_schema


def api_key(environ: Mapping[str, str], base_url: str | None) -> str | None:
    """The key from the environment (OpenRouter's first when the URL says so)."""
    if base_url and "openrouter" in base_url:
        return environ.get("OPENROUTER_API_KEY") or environ.get("OPENAI_API_KEY")
    return environ.get("OPENAI_API_KEY") or environ.get("OPENROUTER_API_KEY")


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
        if not tools:
            for key in _TOOL_ONLY_PARAMS:
                body.pop(key, None)
    return body


def unforced(body: dict[str, Any], keep: str | None = None) -> dict[str, Any]:
    """``body`` with a ``tool_choice`` that forces a call (``"required"``, a named
    function) made ``"auto"``: the run has called a tool, and may now answer. A choice
    that lets the model call the tool ``keep`` (``"required"``, or ``keep`` by name) stays."""
    choice = body.get("tool_choice")
    if keep is not None and (choice == "required" or _named(choice) == keep):
        return body
    if choice == "required" or isinstance(choice, dict):
        return {**body, "tool_choice": "auto"}
    return body


def _named(choice: Any) -> Any:
    """The function a ``tool_choice`` names, if it names one."""
    function = choice.get("function") if isinstance(choice, dict) else None
    return function.get("name") if isinstance(function, dict) else None


def usage_of(raw: Any) -> Usage:
    """``prompt_tokens_details.cached_tokens`` are part of ``prompt_tokens`` (never more)."""
    if not isinstance(raw, dict):
        return Usage()
    prompt = count(raw.get("prompt_tokens"), "prompt_tokens")
    completion = count(raw.get("completion_tokens"), "completion_tokens")
    total = raw.get("total_tokens")
    details = raw.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens"), "cached_tokens") if isinstance(details, dict) else 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=count(total, "total_tokens") if total is not None else prompt + completion,
        cached_tokens=min(cached, prompt),
    )


def parse_reply(data: Any) -> ModelReply:
    """Decode a chat-completions reply; a shape we cannot read raises ``WireError``."""
    if not isinstance(data, dict):
        raise WireError("reply is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise WireError("reply has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise WireError("reply's first choice has no message")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise WireError("reply's tool_calls is not a list")
    text = _text_of(message)
    wire_calls = _normalised_calls(raw_calls, data)
    finish = choice.get("finish_reason")
    finish = finish if isinstance(finish, str) else None
    raw_usage = data.get("usage")
    return ModelReply(
        message=_assistant(text, wire_calls),
        text=text,
        tool_calls=[_call_of(raw) for raw in wire_calls],
        usage=usage_of(raw_usage),
        finish_reason=finish,
        truncated=finish == TRUNCATED,
        usage_missing=not isinstance(raw_usage, dict),
    )


def _text_of(message: dict[str, Any]) -> str:
    """The reply's text: ``content`` (a string or a list of text parts), else a refusal."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    if isinstance(content, str) and content:
        return content
    refusal = message.get("refusal")
    return refusal if isinstance(refusal, str) else ""


def _assistant(text: str, wire_calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if wire_calls:
        message["tool_calls"] = wire_calls
    return message


def _normalised_calls(raw_calls: list[Any], reply: Any) -> list[dict[str, Any]]:
    """The spec's shape for each call: ``{"id", "type": "function", "function": {"name",
    "arguments": str}}``, ids unique within the message."""
    functions = []
    for raw in raw_calls:
        if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
            raise WireError("tool call without a function")
        functions.append(raw["function"])
    ids = unique_ids((raw.get("id") for raw in raw_calls), reply, "call_")
    return [
        {
            "id": call_id,
            "type": "function",
            "function": {
                "name": str(function.get("name") or ""),
                "arguments": encode_arguments(function.get("arguments")),
            },
        }
        for call_id, function in zip(ids, functions)
    ]


def _call_of(wire: dict[str, Any]) -> ToolCall:
    return ToolCall(id=wire["id"], name=wire["function"]["name"], arguments=wire["function"]["arguments"])


def tool_calls_of(message: dict[str, Any]) -> list[ToolCall]:
    """The calls of a transcript's assistant message, with the ids ``parse_reply`` gave them
    (for a message it did not normalise, the same ids on every call)."""
    if message.get("role") != "assistant":
        return []
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        return []
    return [_call_of(wire) for wire in _normalised_calls(raw_calls, message)]


def tool_result_messages(results: Iterable[tuple[str, ToolResult]]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": call_id, "content": output_text(result.output)} for call_id, result in results
    ]


def tool_results_in(messages: list[dict[str, Any]]) -> list[tuple[str, ToolResult]]:
    """The tool results among ``messages`` (those after an assistant message), in order."""
    return [
        (str(m.get("tool_call_id")), ToolResult(output=str(m.get("content") or "")))
        for m in messages
        if m.get("role") == "tool"
    ]


def answer_every_call(messages: list[dict[str, Any]], filler: ToolResult) -> list[dict[str, Any]]:
    """``messages`` with a ``filler`` result for every tool call that has none, placed after
    that turn's other results, so the transcript is valid to send."""

    def answer_turn(message: dict[str, Any], rest: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        results = list(itertools.takewhile(lambda m: m.get("role") == "tool", rest))
        answered = {str(m.get("tool_call_id")) for m in results}
        missing = tool_result_messages((call.id, filler) for call in tool_calls_of(message) if call.id not in answered)
        return results + missing, len(results)

    return answer_every_turn(messages, lambda m: bool(tool_calls_of(m)), answer_turn)


# --- streamed replies: chat-completion chunks up to ``data: [DONE]`` ---------------------


def stream_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking for a streamed reply, with usage in its final chunk."""
    options = body.get("stream_options")
    return {
        **body,
        "stream": True,
        "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True},
    }


def stream_accumulator() -> ChatChunks:
    return ChatChunks()


class ChatChunks:
    """Reads the chunks of one streamed chat completion (first choice only). Text and
    refusal pieces are handed back as they come; tool-call fragments are joined by their
    ``index`` (id and name from the first fragment that has them, argument pieces in
    order); ``finish_reason`` and ``usage`` are the last ones sent."""

    def __init__(self) -> None:
        #: The end marker (``data: [DONE]``) came; later events are ignored.
        self.finished = False
        self._id: Any = None
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # index -> id, name, argument pieces
        self._last_call: int | None = None
        self._finish: str | None = None
        self._usage: Any = None

    def feed(self, event: SSEEvent) -> str:
        """Take one event; return the text it adds (``""`` for none)."""
        if self.finished:
            return ""
        if event.data.strip() == "[DONE]":
            self.finished = True
            return ""
        chunk = event_object(event)
        if event.event == "error" or "error" in chunk:
            raise error_event(chunk.get("error", chunk))
        if self._id is None and isinstance(chunk.get("id"), str):
            self._id = chunk["id"]
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if choices is None:
            return ""
        if not isinstance(choices, list):
            raise WireError("chunk's choices is not a list")
        return "".join(self._choice(choice) for choice in choices)

    def _choice(self, choice: Any) -> str:
        if not isinstance(choice, dict):
            raise WireError("chunk's choice is not an object")
        if choice.get("index", 0) != 0:
            return ""
        if isinstance(choice.get("finish_reason"), str):
            self._finish = choice["finish_reason"]
        delta = choice.get("delta")
        if delta is None:
            return ""
        if not isinstance(delta, dict):
            raise WireError("chunk's delta is not an object")
        content = text_of(delta.get("content"), "a content delta")
        refusal = text_of(delta.get("refusal"), "a refusal delta")
        self._text.append(content)
        self._refusal.append(refusal)
        fragments = delta.get("tool_calls")
        if fragments is not None:
            if not isinstance(fragments, list):
                raise WireError("chunk's tool_calls is not a list")
            for fragment in fragments:
                self._fragment(fragment)
        return content + refusal

    def _fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise WireError("tool call fragment is not an object")
        index, call_id = fragment.get("index"), fragment.get("id")
        if not isinstance(index, int) or isinstance(index, bool):
            # A server that numbers nothing: a new id starts a new call, anything else
            # continues the last one.
            known = any(call["id"] == call_id for call in self._calls.values())
            fresh = isinstance(call_id, str) and call_id and not known
            index = len(self._calls) if fresh or self._last_call is None else self._last_call
        call = self._calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        self._last_call = index
        if call["id"] is None and isinstance(call_id, str) and call_id:
            call["id"] = call_id
        function = fragment.get("function")
        if function is None:
            return
        if not isinstance(function, dict):
            raise WireError("tool call fragment's function is not an object")
        if not call["name"] and isinstance(function.get("name"), str):
            call["name"] = function["name"]
        if function.get("arguments") is not None:
            call["arguments"].append(encode_arguments(function["arguments"]))

    def reply(self) -> ModelReply:
        """The reply the chunks make, as ``parse_reply`` reads the same reply unstreamed."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        refusal = "".join(self._refusal)
        if refusal:
            message["refusal"] = refusal
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self._calls.items())
            ]
        data: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": self._finish}]}
        if self._id is not None:
            data["id"] = self._id
        if self._usage is not None:
            data["usage"] = self._usage
        return parse_reply(data)


# --- the in-process model: OpenAI-shaped requests, a small reply dict -------------------


def generate_request(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": model, "messages": messages, "tools": tools}


def parse_generated(reply: Any) -> ModelReply:
    """Turn ``{"content"}`` or ``{"tool_calls"}`` (+ ``usage``) into a full assistant message.

    A whole chat completion (``{"choices": [...]}``, as ``toolnexus.testing`` builds for a
    scripted server) is read as a server's reply; a dict with none of these keys is an
    error rather than an empty answer."""
    if not isinstance(reply, dict):
        raise WireError(f"generate() must return a dict, got {type(reply).__name__}")
    if "choices" in reply:
        return parse_reply(reply)
    if "content" not in reply and "tool_calls" not in reply:
        raise WireError(
            'generate() must return {"content": ...}, {"tool_calls": [...]} or a chat completion, '
            f"got keys {sorted(reply)[:8]}"
        )
    raw_calls = reply.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise WireError("generate() tool_calls must be a list")
    for raw in raw_calls:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise WireError("each generated tool call needs a name")
    wrapped = [
        {"id": raw.get("id"), "function": {"name": raw["name"], "arguments": raw.get("arguments")}} for raw in raw_calls
    ]
    wire_calls = _normalised_calls(wrapped, reply)
    content = reply.get("content")
    text = content if isinstance(content, str) else ""
    finish = reply.get("finish_reason")
    if not isinstance(finish, str):
        finish = "tool_calls" if wire_calls else "stop"
    return ModelReply(
        message=_assistant(text, wire_calls),
        text=text,
        tool_calls=[_call_of(raw) for raw in wire_calls],
        usage=usage_of(reply.get("usage")),
        finish_reason=finish,
        truncated=finish == TRUNCATED,
    )
