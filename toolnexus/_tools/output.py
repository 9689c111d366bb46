"""Typed output: a run that ends with a value of a given type, not a paragraph to parse.

``output_type(T)`` checks ``T`` once (an attrs class, a dataclass, a ``TypedDict`` or a JSON
Schema dict) and gives the ``OutputType`` the run loop uses: the ``final_result`` tool whose
input schema is ``T``'s (the ``@tool`` type rules), the check of a candidate value (the
schema validator, then the one converter builds ``T``), and the words that send the model
back when a candidate does not fit. Nothing here sends ``response_format``: tools stay
usable on servers that stop calling tools when it is set.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any, Callable, Iterable

import attrs

from . import schema as _schema
from . import validate as _validate
from ..data import AgentResult, ToolCall, ToolResult
from ..errors import ConfigError, WireError
from .toolkit import Toolkit
from .tools import Tool, failure
from ..wire import build, parse_json, to_json

FINAL_RESULT = "final_result"

ACCEPTED = "final result accepted"
IGNORED = "ignored: a final result was already given in this step"
#: The user message after a text answer that is not the result; ``{reason}`` says why.
CORRECTION = (
    "Your answer was not taken as the result: {reason}. Call the final_result tool: its arguments are the result."
)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\r?\n(.*?)```", re.S)
#: A tool call as chat templates write it (Qwen, Hermes): ``<tool_call>{...}</tool_call>``.
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


@attrs.frozen
class Accepted:
    """A candidate that fits: the value (a ``T``, or a dict) and its JSON text."""

    value: Any
    text: str


class OutputType:
    """What a typed run must end with. Built by ``output_type``; immutable once built."""

    def __init__(self, target: Any, schema: dict[str, Any], kind: str, description: str) -> None:
        self.target = target
        self.schema = schema
        #: ``"class"`` (attrs or dataclass), ``"typeddict"`` or ``"schema"`` (a dict).
        self.kind = kind
        self.tool = Tool(FINAL_RESULT, description, schema, _never_run)
        self.toolkit = Toolkit([self.tool])  # keeps the tool's wire shapes, per style

    def __repr__(self) -> str:
        shown = getattr(self.target, "__qualname__", None) or "schema"
        return f"OutputType({shown})"

    def check(self, data: Any) -> Accepted | list[str]:
        """``data`` (JSON data) as a value of the type, or what is wrong with it."""
        found = _validate.problems(self.schema, data)
        if found:
            return found
        if self.kind == "schema":
            return Accepted(value=data, text=to_json(data))
        try:
            value = build(data, self.target)
        except WireError as exc:
            return [str(exc)]
        return Accepted(value=value, text=to_json(value))

    def rebuild(self, value: Any) -> Any:
        """A value read back as JSON data (from a durable state) as ``T`` again; anything
        else (a value built in this process) is returned as it is."""
        if self.kind == "schema" or not _plain(value):
            return value
        try:
            return build(value, self.target)
        except WireError:
            return value  # kept as stored: a later definition of T may not fit old data

    def from_calls(
        self, calls: Iterable[ToolCall], decode: Callable[[Any], tuple[Any, str | None]]
    ) -> tuple[dict[str, ToolResult], Accepted | None]:
        """The ``final_result`` calls among one step's ``calls``: each one's tool result, and
        the first that fits (it wins; later ones are ignored)."""
        results: dict[str, ToolResult] = {}
        accepted: Accepted | None = None
        for call in calls:
            if call.name != FINAL_RESULT:
                continue
            if accepted is not None:
                results[call.id] = ToolResult(output=IGNORED)
                continue
            args, problem = decode(call.arguments)
            outcome = self.check(args) if problem is None else [problem]
            if isinstance(outcome, Accepted):
                accepted = outcome
                results[call.id] = ToolResult(output=ACCEPTED)
            else:
                results[call.id] = failure(
                    f"final_result was not accepted: {'; '.join(outcome)}. "
                    "Call final_result again with corrected arguments."
                )
        return results, accepted

    def from_text(self, text: str) -> Accepted | str:
        """A plain-text answer: accepted when it is JSON that fits (the whole text, a
        ```json block, a ``<tool_call>`` block, a line of its own, or any of these with its
        braces doubled as a chat template writes them: ``{{ ... }}``), or is a
        ``final_result`` call written out so (``{"name": "final_result", "arguments":
        {...}}``, as models do when the server does not read their tool calls) whose
        arguments fit; otherwise the user message that asks for a ``final_result`` call and
        says why the text was not taken."""
        found, unparsed = _json_in(text)
        misfit = other = None  # the first of each: the likeliest reading of the text
        for value in found:
            written = _written_call(value)
            if written is _OTHER_TOOL:
                named = value.get("name", value.get("function"))
                other = other or f"it is a call of the tool {named!r} written as text, which nobody ran"
                continue
            outcome = self.check(value if written is None else written)
            if isinstance(outcome, Accepted):
                return outcome
            misfit = misfit or f"it does not fit the result this task needs: {'; '.join(outcome)}"
        broken = f"it is not valid JSON ({unparsed})" if unparsed is not None else None
        return CORRECTION.format(reason=misfit or other or broken or "it is plain text, not the JSON of the result")


def _never_run(args: dict[str, Any], ctx: Any) -> ToolResult:
    """``final_result`` is answered by the loop itself; a toolkit never runs it."""
    return failure("final_result is answered by the run loop")


def _json_in(text: str) -> tuple[list[Any], str | None]:
    """The JSON values the text holds, most likely first (the whole text, then fenced and
    ``<tool_call>`` blocks, then each line that opens an object, as a model writes several
    calls, each also with its template-doubled braces undone), and why the first block
    that looked like JSON did not parse (its last reading's error)."""
    found: list[Any] = []
    unparsed: str | None = None
    lines = [line for line in text.splitlines() if line.strip().startswith("{")] if "\n" in text.strip() else []
    blocks = (text, *(m.group(1) for m in _FENCE.finditer(text)), *(m.group(1) for m in _TAGGED.finditer(text)), *lines)
    for block in dict.fromkeys(block.strip() for block in blocks):
        error = None
        for candidate in _undoubled(block):
            try:
                found.append(parse_json(candidate))
                break
            except WireError as exc:
                error = str(exc).split(": ", 1)[-1]
        else:
            if unparsed is None and block[:1] in ("{", "["):
                unparsed = error
    return found, unparsed


def _undoubled(block: str) -> list[str]:
    """``block``, then, when its braces are doubled as a chat template writes a JSON
    object (``{{"name": ...}}``), the block with one outer pair dropped and with every
    doubled brace made single."""
    if not block or not (block.startswith("{{") and block.endswith("}}")):
        return [block] if block else []
    return [block, block[1:-1], block.replace("{{", "{").replace("}}", "}")]


#: ``_written_call``'s answer for a call of another tool written as JSON text.
_OTHER_TOOL: Any = object()


def _written_call(data: Any) -> Any:
    """The arguments of a ``final_result`` call written as JSON text (the tool's ``name``,
    or ``function``, and its ``arguments``, or ``parameters``, as templates name them);
    ``_OTHER_TOOL`` for a call of another tool; ``None`` when ``data`` is not a written call."""
    if not isinstance(data, dict) or len(data) != 2:
        return None
    name = next((data[key] for key in ("name", "function") if isinstance(data.get(key), str)), None)
    key = "arguments" if "arguments" in data else "parameters" if "parameters" in data else None
    if name is None or key is None:
        return None
    if name != FINAL_RESULT:
        return _OTHER_TOOL
    arguments = data[key]
    if isinstance(arguments, str):
        try:
            arguments = parse_json(arguments)
        except WireError:
            return arguments  # checked as it is: the problem is then named
    return arguments


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON data only (as a state gives it back)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item is not None and not isinstance(item, (str, int, float, bool)):
            return False
    return True


def output_type(target: Any) -> OutputType | None:
    """The ``OutputType`` of ``output=target`` (``None`` for ``None``).

    Raises:
        ConfigError: ``target`` is not an attrs class, a dataclass, a ``TypedDict`` or an
            object JSON Schema dict, a field of it has no JSON form, or the schema uses a
            keyword the validator does not implement.
    """
    if target is None or isinstance(target, OutputType):
        return target
    if isinstance(target, dict):
        return _from_schema(target)
    if _schema.is_structured(target):
        return _from_class(target)
    raise ConfigError(
        f"output={target!r} cannot be given a schema: use an attrs "
        "class, a dataclass, a TypedDict or a JSON Schema dict"
    )


@functools.lru_cache(maxsize=256)
def _from_class(cls: type) -> OutputType:
    try:
        schema = _schema.schema_for_type(cls)
    except ConfigError as exc:
        raise ConfigError(f"output={cls.__qualname__} cannot be given a schema: {exc}") from None
    doc = _schema.first_paragraph(cls.__doc__)
    if doc.startswith(f"{cls.__name__}("):  # a dataclass's generated signature, not a description
        doc = ""
    kind = "typeddict" if _schema.is_typeddict(cls) else "class"
    return OutputType(cls, schema, kind, _description(cls.__name__, doc))


def _from_schema(schema: dict[str, Any]) -> OutputType:
    _validate.check_schema(schema, "output schema")
    kind = schema.get("type")
    if kind != "object" and not (kind is None and "properties" in schema):
        raise ConfigError(
            "output schema must describe an object (type: object), not "
            f"{kind!r}: the result is the final_result tool's arguments"
        )
    own = copy.deepcopy(schema)
    own.setdefault("type", "object")
    about = own.get("description") or ""
    return OutputType(
        own, own, "schema", _description(str(own.get("title") or "the result"), about if isinstance(about, str) else "")
    )


def _description(name: str, about: str) -> str:
    text = (
        f"Give the final result ({name}) of the task. "
        "Call this once, when the task is done: its arguments are the result."
    )
    return f"{text} {about}" if about else text


def typed_result(definition: Any, result: AgentResult) -> AgentResult:
    """``result`` with its value as the definition's ``T``: a result read back from a state
    carries the value as JSON data, rebuilt here from the registry's definition."""
    target = getattr(definition, "output", None)
    if target is None or result.output is None:
        return result
    value = output_type(target).rebuild(result.output)  # type: ignore[union-attr]
    return result if value is result.output else attrs.evolve(result, output=value)


def check_toolkit(typed: OutputType | None, toolkit: Toolkit) -> None:
    """A typed run's own tools may not already have a ``final_result``."""
    if typed is not None and FINAL_RESULT in toolkit.tool_names():
        raise ConfigError(
            "the toolkit already has a tool named final_result, which typed output needs: rename that tool"
        )
