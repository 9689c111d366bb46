"""Type hints to JSON Schema, for tools built from plain functions."""

from __future__ import annotations

import inspect
import json
import types
import typing
from typing import Any, Callable, Literal, Union

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_for_type(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one annotation; an unknown annotation allows anything."""
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, typing.Sequence):
        item = args[0] if args and args[0] is not Ellipsis else None
        # ``items`` always: some providers refuse an array schema without it.
        return {"type": "array", "items": schema_for_type(item) if item is not None else {}}
    if hint is dict or origin is dict:
        return {"type": "object"}
    if origin is Literal:
        values = list(args)
        kinds = {_SCALARS.get(type(v)) for v in values}
        out: dict[str, Any] = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            out = {"type": kinds.pop(), "enum": values}
        return out
    if _is_optional(hint):
        return _nullable(schema_for_type(_strip_none(hint)))
    return {}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also allows ``null`` (what ``Optional[...]`` means)."""
    if not schema:
        return schema  # anything goes already
    if isinstance(schema.get("type"), str):
        out = {**schema, "type": [schema["type"], "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    return {"anyOf": [schema, {"type": "null"}]}


def _is_optional(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return origin in (Union, types.UnionType) and type(None) in typing.get_args(hint)


def _strip_none(hint: Any) -> Any:
    rest = [a for a in typing.get_args(hint) if a is not type(None)]
    return rest[0] if len(rest) == 1 else Union[tuple(rest)]


def takes_context(fn: Callable[..., Any]) -> bool:
    """Whether the function's last parameter is named ``ctx`` (it receives the ToolContext)."""
    params = list(inspect.signature(fn).parameters)
    return bool(params) and params[-1] == "ctx"


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The input schema of a function: one property per parameter except a final ``ctx``."""
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=False)
    except Exception:  # unresolvable forward references: fall back to "any"
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    names = list(signature.parameters)
    if takes_context(fn):
        names = names[:-1]
    for name in names:
        param = signature.parameters[name]
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name, Any)
        properties[name] = schema_for_type(hint)
        if param.default is not inspect.Parameter.empty:
            default = _json_default(param.default)
            if default is not _NO_DEFAULT:
                properties[name] = {**properties[name], "default": default}
        elif not _is_optional(hint):
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


_NO_DEFAULT = object()


def _json_default(value: Any) -> Any:
    """A parameter's default as JSON data, or ``_NO_DEFAULT`` when JSON cannot carry it."""
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return _NO_DEFAULT
    return value


def first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line."""
    if not doc:
        return ""
    paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(paragraph.split())
