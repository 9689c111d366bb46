"""The input of one AG-UI run (CONTRACT §21): a ``RunAgentInput`` body, read strictly before
anything starts.

``read_input(body)`` parses the body (``400`` for one that is not a JSON object: malformed,
``NaN``, nested deeper than 64 levels) and checks it field by field as the protocol's 1.0
models do (``422`` naming the first field that is wrong), plus this library's own rules:
``tools`` and ``context`` are required, a tool's ``parameters`` is a JSON Schema object, and
a tool name is offered once. What a run needs of it comes back as a ``RunInput``.

A client such as ``@ag-ui/client``'s ``HttpAgent`` sends its whole history with every run
(the assistant messages and tool results this server streamed included), so nothing here
treats a message as new: the thread decides what the input means (``_thread``).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import attrs

from .._serve.bindings import MAX_ID, lookable
from ..errors import AGUIInputError, WireError
from ..wire import check_json, parse_json

#: The key of the run's tree in the state a snapshot sends; the same key in an input is ignored.
STATE_KEY = "toolnexus"

ROLES = ("developer", "system", "assistant", "user", "tool", "activity", "reasoning")
MEDIA = ("image", "audio", "video", "document")
STATUSES = ("resolved", "cancelled")


@attrs.frozen
class OfferedTool:
    """A frontend tool of the input: the client runs it, the model may call it."""

    name: str
    description: str
    parameters: dict[str, Any]


@attrs.frozen
class ResumeEntry:
    """One ``resume`` entry: the answer to the interrupt ``interrupt_id``."""

    interrupt_id: str
    status: str
    payload: Any = None


@attrs.frozen
class ToolAnswer:
    """A ``tool`` message of the thread's own agent (one without ``subagentRunId``)."""

    call_id: str
    content: Any
    error: str | None = None


@attrs.frozen
class RunInput:
    """What one run's input says, checked."""

    thread_id: str
    run_id: str
    #: The text of the last message when it is a ``user`` message; ``None`` when the last
    #: message is another role (or there is none).
    prompt: str | None
    tools: tuple[OfferedTool, ...]
    resume: tuple[ResumeEntry, ...]
    answers: tuple[ToolAnswer, ...]
    #: The input's ``state`` without its ``toolnexus`` key (``{}`` for one that is not an object).
    state: dict[str, Any]


def read_input(body: bytes | str | Mapping[str, Any]) -> RunInput:
    """The run's input, checked.

    Raises:
        AGUIInputError: ``400`` not a JSON object; ``422`` not a ``RunAgentInput``.
    """
    data = _parse(body)
    fields = _Fields(data, "")
    thread_id, run_id = fields.need("threadId", str), fields.need("runId", str)
    if not lookable(thread_id):
        raise AGUIInputError(422, f"threadId: 1 to {MAX_ID} characters of text, not {len(thread_id)}")
    messages = fields.need("messages", list)
    tools, context = fields.need("tools", list), fields.need("context", list)
    fields.may("protocolVersion", str)
    fields.may("parentRunId", str)
    resume = fields.may("resume", list) or []
    for index, message in enumerate(messages):
        _message(message, f"messages[{index}]")
    offered = _tools(tools)
    for index, item in enumerate(context):
        each = _Fields(item, f"context[{index}]")
        each.need("description", str)
        each.need("value", str)
    state = data.get("state")
    return RunInput(
        thread_id=thread_id,
        run_id=run_id,
        prompt=_prompt(messages),
        tools=offered,
        resume=tuple(_resume_entry(entry, f"resume[{index}]") for index, entry in enumerate(resume)),
        answers=tuple(_answer(message) for message in messages if _own_tool_message(message)),
        state={key: value for key, value in state.items() if key != STATE_KEY} if isinstance(state, dict) else {},
    )


def _parse(body: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
    try:
        if isinstance(body, (bytes, bytearray, str)):
            data = parse_json(bytes(body) if isinstance(body, bytearray) else body, what="the run's input")
        else:
            data = dict(body)
            check_json(data, "the run's input")
            data = parse_json(json.dumps(data, allow_nan=False), what="the run's input")  # a body's depth rule
    except (WireError, TypeError, ValueError) as exc:
        raise AGUIInputError(400, str(exc)) from None
    if not isinstance(data, dict):
        raise AGUIInputError(400, f"the run's input must be a JSON object (a RunAgentInput), not {_kind(data)}")
    return data


class _Fields:
    """The fields of one JSON object of the input, read with their path for the reason."""

    def __init__(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise AGUIInputError(422, f"{path or 'the input'}: expected an object, not {_kind(value)}")
        self.value = value
        self.path = path

    def need(self, key: str, kind: type | tuple[type, ...]) -> Any:
        found = self.value.get(key)
        if found is None:
            raise AGUIInputError(422, f"{self._at(key)}: required ({_named(kind)})")
        return self._typed(key, found, kind)

    def may(self, key: str, kind: type | tuple[type, ...]) -> Any:
        """An optional field (``null`` is taken as absent, as the protocol's models do)."""
        found = self.value.get(key)
        return None if found is None else self._typed(key, found, kind)

    def one_of(self, key: str, allowed: tuple[str, ...], *, required: bool = True) -> str | None:
        found: str | None = self.need(key, str) if required else self.may(key, str)
        if found is not None and found not in allowed:
            raise AGUIInputError(422, f"{self._at(key)}: {found[:40]!r} is not one of {', '.join(allowed)}")
        return found

    def _typed(self, key: str, found: Any, kind: type | tuple[type, ...]) -> Any:
        if not isinstance(found, kind) or isinstance(found, bool) and bool not in _kinds(kind):
            raise AGUIInputError(422, f"{self._at(key)}: expected {_named(kind)}, not {_kind(found)}")
        return found

    def _at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key


def _message(message: Any, path: str) -> None:
    fields = _Fields(message, path)
    fields.need("id", str)
    role = fields.one_of("role", ROLES)
    for key in ("name", "encryptedValue", "subagentRunId"):
        fields.may(key, str)
    fields.may("metadata", dict)
    _BY_ROLE[str(role)](fields)


def _user(fields: _Fields) -> None:
    _content(fields)


def _text_only(fields: _Fields) -> None:
    fields.need("content", str)


def _assistant(fields: _Fields) -> None:
    fields.may("content", str)
    for index, call in enumerate(fields.may("toolCalls", list) or []):
        each = _Fields(call, f"{fields.path}.toolCalls[{index}]")
        each.need("id", str)
        each.one_of("type", ("function",), required=False)
        each.may("encryptedValue", str)
        each.may("metadata", dict)
        function = _Fields(each.need("function", dict), f"{each.path}.function")
        function.need("name", str)
        function.need("arguments", str)


def _tool(fields: _Fields) -> None:
    fields.need("toolCallId", str)
    fields.may("error", str)
    _content(fields)


def _activity(fields: _Fields) -> None:
    fields.need("activityType", str)
    fields.need("content", dict)


_BY_ROLE: dict[str, Callable[[_Fields], None]] = {
    "user": _user,
    "assistant": _assistant,
    "system": _text_only,
    "developer": _text_only,
    "reasoning": _text_only,
    "tool": _tool,
    "activity": _activity,
}


def _content(fields: _Fields) -> None:
    """A ``user`` or ``tool`` content: a string or a list of parts."""
    content = fields.need("content", (str, list))
    if isinstance(content, str):
        return
    for index, part in enumerate(content):
        each = _Fields(part, f"{fields.path}.content[{index}]")
        kind = each.one_of("type", ("text", *MEDIA))
        each.may("id", str)
        if kind == "text":
            each.need("text", str)
            continue
        source = _Fields(each.need("source", dict), f"{each.path}.source")
        origin = source.one_of("type", ("data", "url", "file"))
        source.need("value", str)
        if origin == "data":
            source.need("mimeType", str)
        else:
            source.may("mimeType", str)
        if origin == "file":
            source.may("provider", str)


def _tools(tools: list[Any]) -> tuple[OfferedTool, ...]:
    offered: list[OfferedTool] = []
    for index, tool in enumerate(tools):
        fields = _Fields(tool, f"tools[{index}]")
        name, description = fields.need("name", str), fields.need("description", str)
        fields.may("metadata", dict)
        parameters = fields.may("parameters", dict)
        if name in (each.name for each in offered):
            raise AGUIInputError(422, f"tools[{index}].name: {name[:64]!r} is offered twice")
        offered.append(OfferedTool(name, description, parameters if parameters is not None else {"type": "object"}))
    return tuple(offered)


def _resume_entry(entry: Any, path: str) -> ResumeEntry:
    fields = _Fields(entry, path)
    interrupt_id = fields.need("interruptId", str)
    status = fields.one_of("status", STATUSES)
    fields.may("metadata", dict)
    return ResumeEntry(interrupt_id, str(status), entry.get("payload"))


def _own_tool_message(message: dict[str, Any]) -> bool:
    """A tool message of the thread's own agent: a subagent's comes back tagged, as it was sent."""
    return message["role"] == "tool" and message.get("subagentRunId") is None


def _answer(message: dict[str, Any]) -> ToolAnswer:
    return ToolAnswer(message["toolCallId"], message["content"], message.get("error"))


def _prompt(messages: list[dict[str, Any]]) -> str | None:
    if not messages or messages[-1]["role"] != "user":
        return None
    content = messages[-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part["type"] == "text")


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


_NAMES = {str: "a string", list: "an array", dict: "an object", bool: "true or false"}


def _named(kind: type | tuple[type, ...]) -> str:
    return " or ".join(_NAMES.get(each, each.__name__) for each in _kinds(kind))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return _NAMES.get(type(value), type(value).__name__)
