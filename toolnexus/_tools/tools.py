"""Tools: what a model can call, and the helpers that build their results."""

from __future__ import annotations

import json
import re
import threading
from typing import Any, Callable, overload

import attrs

from . import schema as _schema
from . import validate as _validate
from .._model.cancel import CancelEvent
from ..data import Answer, Request, ToolResult
from ..errors import ConfigError, WireError
from ..wire import build

#: What a durable runtime may do with a call left in doubt by a crash (see ``Tool``).
RETRY_OPTIONS = ("never", "safe", "ask")

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: The longest tool name the providers accept.
MAX_NAME_LENGTH = 64


def sanitize_name(name: str) -> str:
    """Tool names providers accept: every character outside ``[A-Za-z0-9_-]`` becomes ``_``."""
    return _UNSAFE.sub("_", name)


def checked_name(name: Any) -> str:
    """``name`` sanitised, refused when providers would refuse it: empty or too long.

    Raises:
        ConfigError: the name is not a string, is empty, or is longer than 64 characters.
    """
    if not isinstance(name, str):
        raise ConfigError(f"a tool name must be a string, not {type(name).__name__}")
    clean = sanitize_name(name)
    if not clean:
        raise ConfigError("a tool name must not be empty")
    if len(clean) > MAX_NAME_LENGTH:
        raise ConfigError(
            f"tool name {clean[:MAX_NAME_LENGTH]}... is {len(clean)} "
            f"characters; providers accept at most {MAX_NAME_LENGTH}"
        )
    return clean


@attrs.define(kw_only=True)
class ToolContext:
    """What a running tool may know about its call.

    ``answer`` is set only on the retry after a suspension, and ``request`` with it: the
    ``Request`` it answers, as the suspension made it (so a retry in another process, after
    a restart, has everything the first call knew); ``cancelled`` is set when the
    run is interrupted, so a long tool can stop early; ``handle_id`` is the agent handle
    running the tool, inside the runtime; ``idempotency_key`` is one string per tool call,
    the same for every execution of that call (the first, the retry after an Answer, a
    re-run after a crash) and different for every other call, to hand to an external system.
    """

    answer: Answer | None = None
    request: Request | None = None
    cancelled: threading.Event = attrs.field(factory=CancelEvent)
    handle_id: str | None = None
    call_id: str | None = None
    idempotency_key: str | None = None
    #: What the tool's ``prepare`` step returned for this call, if it has one.
    prepared: Any = None


@attrs.frozen(init=False)
class Tool:
    """A named function the model may call with JSON arguments.

    ``execute(args, ctx)`` returns a ``ToolResult`` or a ``str`` (a str means success).
    The optional ``prepare(args, ctx)`` runs for every call of a turn in call order before
    the calls run concurrently; its value reaches ``execute`` as ``ctx.prepared``.
    ``execute`` must also work when it did not run (a retry after a suspension).

    ``retry`` says what a durable runtime does with a call that started but did not finish
    before its process died: ``"never"`` (not run again; the model gets an ``in doubt``
    error), ``"safe"`` (run again, with the same ``ctx.idempotency_key``) or ``"ask"`` (the
    turn suspends on a ``Request`` of kind ``"retry"``).

    ``resource`` is what the tool belongs to when that must be closed (an MCP server, an
    object with ``close()``): a runtime or client given the tool closes it when it closes.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    execute: Callable[[dict[str, Any], ToolContext], ToolResult | str] = attrs.field(repr=False)
    source: str = "native"
    prepare: Callable[[dict[str, Any], ToolContext], Any] | None = attrs.field(default=None, repr=False)
    retry: str = "never"
    resource: Any = attrs.field(default=None, repr=False, eq=False)

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: dict[str, Any] | None,
        execute: Callable[[dict[str, Any], ToolContext], ToolResult | str],
        source: str = "native",
        prepare: Callable[[dict[str, Any], ToolContext], Any] | None = None,
        retry: str = "never",
        resource: Any = None,
    ) -> None:
        if retry not in RETRY_OPTIONS:
            raise ConfigError(f"tool {name!r}: retry must be one of {', '.join(RETRY_OPTIONS)}, not {retry!r}")
        if input_schema is not None:
            _schema.check_depth(input_schema, f"tool {name!r}: the input schema")
        # attrs writes __attrs_init__ (init=False); pyright's dataclass_transform does not know it
        self.__attrs_init__(  # pyright: ignore[reportAttributeAccessIssue]
            name=checked_name(name),
            description=description,
            input_schema=input_schema or {"type": "object", "properties": {}},
            execute=execute,
            source=source,
            prepare=prepare,
            retry=retry,
            resource=resource,
        )


def success(text: str, **metadata: Any) -> ToolResult:
    """A successful result; keyword arguments become metadata."""
    return ToolResult(output=text, is_error=False, metadata=metadata or None)


def failure(text: str, **metadata: Any) -> ToolResult:
    """An error result the model sees (the run goes on)."""
    return ToolResult(output=text, is_error=True, metadata=metadata or None)


def suspend(request: Request, output: str | None = None) -> ToolResult:
    """A suspension: the run needs ``request`` answered before this call can finish."""
    return ToolResult(output=request.prompt if output is None else output, is_error=True, metadata={"pending": request})


#: The kind of a ``Request`` made of an MCP server's questions (CONTRACT §18b).
MCP_INPUT = "mcp_input"
#: Kinds whose tool runs again whatever the answer: the tool itself tells the asker no (an
#: MCP server is sent the decline), instead of the run feeding back ``declined: <prompt>``.
TOOL_HEARS_DECLINES = frozenset({MCP_INPUT})


def hears_declines(request: Request) -> bool:
    """Whether a declined answer to ``request`` still goes to its tool (see ``TOOL_HEARS_DECLINES``)."""
    return request.kind in TOOL_HEARS_DECLINES


def is_suspension(result: ToolResult) -> bool:
    """Whether a result is a suspension (never counted as a tool error)."""
    return result.pending is not None


def _from_function(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    input_schema: dict[str, Any] | None,
    retry: str = "never",
) -> Tool:
    label = name or getattr(fn, "__name__", "tool")
    convert: Callable[[dict[str, Any]], dict[str, Any] | str] | None = None
    if input_schema is not None:
        schema = input_schema  # the function takes the arguments as they come
    else:
        try:
            params, open_ended = _schema.parameters(fn)
        except ConfigError as exc:
            raise ConfigError(f"tool {label}: {exc}") from None
        schema = _schema.object_schema(params)
        convert = _converter(params, open_ended)
    with_ctx = _schema.takes_context(fn)

    def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult | str:
        if convert is not None:
            converted = convert(args)
            if isinstance(converted, str):
                return failure(f"invalid arguments for {label}: {converted}")
            args = converted
        value = fn(**args, ctx=ctx) if with_ctx else fn(**args)
        if isinstance(value, ToolResult):
            return value
        return value if isinstance(value, str) else _render(value)

    return Tool(
        name or fn.__name__,
        description if description is not None else _schema.first_paragraph(fn.__doc__),
        schema,
        execute,
        retry=retry,
    )


def _converter(params: list[_schema.Parameter], open_ended: bool) -> Callable[[dict[str, Any]], dict[str, Any] | str]:
    """Check a call's arguments against the parameters' schemas and convert those whose
    annotation is more than JSON (a date, a ``Decimal``, a class...) through the one
    converter; a problem is returned as text that names the parameter."""
    check = {**_schema.object_schema(params), "additionalProperties": open_ended}
    fits = _validate.quick_fit(check)  # most tools take plain JSON types: checked at once
    building = {p.name: p.hint for p in params if _schema.needs_building(p.hint)}
    as_none = [p.name for p in params if p.absent_is_none]

    def convert(args: dict[str, Any]) -> dict[str, Any] | str:
        if fits is not None and fits(args) and not building and not as_none:
            return args
        found = _validate.problems(check, args)
        if found:
            return "; ".join(found)
        out = dict(args)
        for name in as_none:
            out.setdefault(name, None)
        for name, hint in building.items():
            if name in out:
                try:
                    out[name] = build(out[name], hint)
                except WireError as exc:
                    return f"{name}: {exc}"
        return out

    return convert


def _render(value: Any) -> str:
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    retry: str = "never",
) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    retry: str = "never",
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    retry: str = "never",
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a plain function into a ``Tool``: ``@tool``, ``@tool(name=...)`` or ``tool(fn, ...)``.

    The schema comes from the type hints, the description from the docstring's first
    paragraph; a final parameter named ``ctx`` receives the ``ToolContext``. A returned
    value that is not a str or ``ToolResult`` is sent to the model as JSON.

    Arguments are checked against the schema and converted to the annotated types before
    the function is called (``date``, ``datetime``, ``time``, ``UUID``, ``Decimal``, an
    ``Enum``, a path, nested attrs classes, dataclasses and ``TypedDict``s); an argument
    that does not fit is an error result naming it, and the function is not called. With
    an explicit ``input_schema`` the arguments reach the function as they come.

    Raises:
        ConfigError: a parameter's annotation has no JSON form (``Any`` and no annotation
            mean "anything").
    """
    if fn is not None:
        return _from_function(fn, name=name, description=description, input_schema=input_schema, retry=retry)

    def decorate(inner: Callable[..., Any]) -> Tool:
        return _from_function(inner, name=name, description=description, input_schema=input_schema, retry=retry)

    return decorate
