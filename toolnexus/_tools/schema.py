"""Type hints to JSON Schema: the one set of rules behind ``@tool`` parameters and typed output.

Pure: no cattrs, no I/O. ``schema_for_type`` maps one annotation; ``fields_of`` lists the
fields of an attrs class, a dataclass or a ``TypedDict``; ``function_schema`` describes a
function's parameters. An annotation these rules cannot express is a ``ConfigError``
(``Any``, ``object`` and a missing annotation mean "anything").

The scalar rules beyond JSON's own types: ``datetime`` is a string of ``format:
date-time``, ``date`` of ``date``, ``time`` of ``time``, ``UUID`` of ``uuid``, a
``pathlib`` path a string; an ``Enum`` is the ``enum`` of its members' values; a
``Decimal`` is a JSON number or a numeric string (``format: decimal``, so that an amount
can be written exactly, as ``"12.50"``).
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import json
import sys
import types
import typing
from typing import Any, Callable, Literal, Union

import attrs

from ..errors import ConfigError

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
#: Scalars carried as strings of a JSON Schema ``format`` (checked, and converted), by
#: module and class name; datetime before date, as a datetime is a date too.
_FORMATS = (
    ("datetime", "datetime", "date-time"),
    ("datetime", "date", "date"),
    ("datetime", "time", "time"),
    ("uuid", "UUID", "uuid"),
)
#: A number as JSON writes it: what a ``Decimal`` may also be given as, in a string.
NUMERIC = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"
DECIMAL_SCHEMA: dict[str, Any] = {"type": ["number", "string"], "format": "decimal", "pattern": NUMERIC}
_SEQUENCES = (
    list,
    tuple,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
    collections.abc.Iterable,
    collections.abc.Collection,
)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_ANYTHING = (Any, object, inspect.Parameter.empty)

#: The deepest schema the library builds, checks or sends, in JSON objects and arrays
#: nested in one another (a nested class takes two: ``properties`` and its own schema).
#: Deeper types and schemas are a ``ConfigError``: the walks stay far from Python's
#: recursion limit, and the model gets a schema it can read.
MAX_SCHEMA_DEPTH = 128
_TOO_DEEP = (
    f"nests deeper than {MAX_SCHEMA_DEPTH} levels of JSON objects and arrays (the library's limit, MAX_SCHEMA_DEPTH)"
)


class _TooDeep(ConfigError):
    """The walk went past ``MAX_SCHEMA_DEPTH``: reported once, for the outermost type."""


def schema_for_type(hint: Any) -> dict[str, Any]:
    """The JSON Schema of one annotation.

    Raises:
        ConfigError: the annotation has no JSON form (``bytes``, a plain class, a callable...),
            is a class that contains itself, or nests deeper than ``MAX_SCHEMA_DEPTH``.
    """
    try:
        return _Builder().schema(hint, 1)
    except _TooDeep:
        raise ConfigError(f"cannot give a JSON schema to {_name(hint)}: it {_TOO_DEEP}") from None


def deeper_than(data: Any, limit: int) -> bool:
    """Whether JSON data nests more than ``limit`` objects and arrays (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return False


def check_depth(schema: Any, where: str) -> None:
    """Raise ``ConfigError`` for a schema nested deeper than ``MAX_SCHEMA_DEPTH``."""
    if deeper_than(schema, MAX_SCHEMA_DEPTH):
        raise ConfigError(f"{where} {_TOO_DEEP}")


class _Builder:
    """One schema walk; ``_inside`` guards against a class that contains itself. ``depth``
    is how deep in the finished schema the one being built sits (counted pessimistically:
    an ``Optional`` may wrap it in ``anyOf``)."""

    def __init__(self) -> None:
        self._inside: list[Any] = []

    def schema(self, hint: Any, depth: int) -> dict[str, Any]:
        if depth > MAX_SCHEMA_DEPTH:
            raise _TooDeep()
        hint = unwrap(hint)
        if hint in _ANYTHING:
            return {}
        if hint is None or hint is type(None):
            return {"type": "null"}
        if hint in _SCALARS:
            return {"type": _SCALARS[hint]}
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is Literal:
            return _enum(list(args))
        if origin in (Union, types.UnionType):
            return self._union(args, depth)
        if hint in _SEQUENCES or origin in _SEQUENCES:
            return self._array(hint if origin is None else origin, args, depth)
        if hint in _MAPPINGS or origin in _MAPPINGS:
            return self._object_of(hint, args, depth)
        if isinstance(hint, type):
            return self._class(hint, depth)
        raise ConfigError(f"cannot give a JSON schema to {_name(hint)}")

    def _class(self, hint: type, depth: int) -> dict[str, Any]:
        for module, name, form in _FORMATS:
            if _subclass(hint, module, name):
                return {"type": "string", "format": form}
        if _subclass(hint, "decimal", "Decimal"):
            return dict(DECIMAL_SCHEMA)
        if _subclass(hint, "pathlib", "PurePath"):
            return {"type": "string"}
        if issubclass(hint, enum.Enum):
            return _enum([member.value for member in hint])
        if is_structured(hint):
            return self._structure(hint, depth)
        raise ConfigError(
            f"cannot give a JSON schema to {_name(hint)}: use str, int, float, "
            "bool, a list, a dict, an attrs class, a dataclass, a TypedDict, or Any"
        )

    def _union(self, args: tuple[Any, ...], depth: int) -> dict[str, Any]:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            inner = self.schema(rest[0], depth + 2)  # ``nullable`` may wrap it in ``anyOf``
        else:
            inner = {"anyOf": [self.schema(a, depth + 2) for a in rest]}
        return nullable(inner) if len(rest) < len(args) else inner

    def _array(self, kind: Any, args: tuple[Any, ...], depth: int) -> dict[str, Any]:
        if kind is tuple and args and args[-1] is not Ellipsis and args != ((),):
            items = [self.schema(a, depth + 2) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        # ``items`` always: some providers refuse an array schema without it.
        out: dict[str, Any] = {"type": "array", "items": self.schema(args[0], depth + 1) if args else {}}
        if kind in (set, frozenset, collections.abc.Set, collections.abc.MutableSet):
            out["uniqueItems"] = True
        return out

    def _object_of(self, hint: Any, args: tuple[Any, ...], depth: int) -> dict[str, Any]:
        if not args:
            return {"type": "object"}
        key, value = unwrap(args[0]), args[1]
        if key not in (str, *_ANYTHING):
            raise ConfigError(f"cannot give a JSON schema to {_name(hint)}: JSON object keys are strings")
        inner = self.schema(value, depth + 1)
        return {"type": "object", "additionalProperties": inner} if inner else {"type": "object"}

    def _structure(self, cls: type, depth: int) -> dict[str, Any]:
        if cls in self._inside:
            raise ConfigError(f"cannot give a JSON schema to {_name(cls)}: it contains itself")
        self._inside.append(cls)
        try:
            properties: dict[str, Any] = {}
            required: list[str] = []
            for field in fields_of(cls):
                try:
                    properties[field.name] = self.schema(field.hint, depth + 2)
                except _TooDeep:
                    raise
                except ConfigError as exc:
                    raise ConfigError(f"{_name(cls)}.{field.name}: {exc}") from None
                if field.default is not NO_DEFAULT:
                    properties[field.name] = {**properties[field.name], "default": field.default}
                if field.required:
                    required.append(field.name)
        finally:
            self._inside.pop()
        out: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        return out


def _subclass(hint: type, module: str, name: str) -> bool:
    """``issubclass(hint, module.name)``, without importing ``module``: a class of a module
    that nobody imported cannot be the hint (so ``import toolnexus`` stays light)."""
    loaded = sys.modules.get(module)
    return loaded is not None and issubclass(hint, getattr(loaded, name))


def _enum(values: list[Any]) -> dict[str, Any]:
    kinds = {_SCALARS.get(type(v)) for v in values}
    if len(kinds) == 1 and None not in kinds:
        return {"type": kinds.pop(), "enum": values}
    return {"enum": values}


def needs_building(hint: Any) -> bool:
    """Whether JSON data for ``hint`` must be converted (a date, a class...) before a
    function gets it, or is already what the annotation says (str, list[int], dict...)."""
    hint = unwrap(hint)
    if hint in _ANYTHING or hint is None or hint is type(None) or hint in _SCALARS:
        return False
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return False
    if origin in (Union, types.UnionType):
        return any(needs_building(a) for a in args)
    json_containers = (
        list,
        dict,
        collections.abc.Sequence,
        collections.abc.Iterable,
        collections.abc.Collection,
        collections.abc.Mapping,
    )
    if hint in json_containers or origin in json_containers:
        return any(needs_building(a) for a in args)
    return True


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also allows ``null`` (what ``Optional[...]`` means)."""
    if not schema:
        return schema  # anything goes already
    kind = schema.get("type")
    if isinstance(kind, (str, list)) and "anyOf" not in schema:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        out = {**schema, "type": kinds + ["null"] if "null" not in kinds else kinds}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    return {"anyOf": [schema, {"type": "null"}]}


def unwrap(hint: Any) -> Any:
    """The type under ``Annotated[...]``, ``Required[...]``/``NotRequired[...]`` and ``NewType``."""
    while True:
        origin = typing.get_origin(hint)
        if origin is typing.Annotated or origin in (typing.Required, typing.NotRequired):
            hint = typing.get_args(hint)[0]
        elif isinstance(hint, typing.NewType):
            hint = hint.__supertype__
        else:
            return hint


def is_optional(hint: Any) -> bool:
    """Whether ``None`` is one of the values the annotation allows."""
    hint = unwrap(hint)
    origin = typing.get_origin(hint)
    return origin in (Union, types.UnionType) and type(None) in typing.get_args(hint)


def is_typeddict(cls: Any) -> bool:
    if typing.is_typeddict(cls):
        return True
    extensions = sys.modules.get("typing_extensions")  # its TypedDict, if anyone uses it
    return extensions is not None and bool(extensions.is_typeddict(cls))


def _dataclasses() -> Any:
    return sys.modules.get("dataclasses")  # a dataclass exists only once it is imported


def is_structured(cls: Any) -> bool:
    """An attrs class, a dataclass or a ``TypedDict``: a JSON object with known fields."""
    dataclasses = _dataclasses()
    return isinstance(cls, type) and (
        attrs.has(cls) or (dataclasses is not None and dataclasses.is_dataclass(cls)) or is_typeddict(cls)
    )


@attrs.frozen
class Field:
    """One field of a structured class, as the schema and the converter see it."""

    name: str
    hint: Any
    required: bool
    #: The default as JSON data, shown in the schema; ``NO_DEFAULT`` when there is none
    #: (or JSON cannot carry it).
    default: Any
    #: Left out of the input, the field is ``None`` (an ``Optional`` field without a default).
    absent_is_none: bool


NO_DEFAULT: Any = type("NoDefault", (), {"__repr__": lambda self: "NO_DEFAULT"})()


def fields_of(cls: type) -> list[Field]:
    """The fields of an attrs class, a dataclass or a ``TypedDict``, in declaration order.

    Raises:
        ConfigError: a field's annotation names something that cannot be found.
    """
    hints = resolved_hints(cls)
    if is_typeddict(cls):
        return [_typeddict_field(cls, name, hint) for name, hint in hints.items()]
    out = []
    for name, default, has_default in _declared(cls):
        hint = hints.get(name, Any)
        shown = _json_default(default) if has_default else NO_DEFAULT
        optional = is_optional(hint)
        out.append(
            Field(
                name=name,
                hint=hint,
                required=not has_default and not optional,
                default=shown,
                absent_is_none=optional and not has_default,
            )
        )
    return out


def _declared(cls: type) -> list[tuple[str, Any, bool]]:
    """``(name, default, has_default)`` of every field the constructor takes."""
    if attrs.has(cls):
        found = []
        for a in attrs.fields(cls):
            if not a.init:
                continue
            if isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
                found.append((a.name, NO_DEFAULT, True))
            else:
                found.append((a.name, a.default, a.default is not attrs.NOTHING))
        return found
    dataclasses = _dataclasses()
    declared = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default_factory is not dataclasses.MISSING:
            declared.append((f.name, NO_DEFAULT, True))
        else:
            declared.append((f.name, f.default, f.default is not dataclasses.MISSING))
    return declared


def _typeddict_field(cls: type, name: str, hint: Any) -> Field:
    origin = typing.get_origin(hint)
    if origin is typing.Required:
        required = True
    elif origin is typing.NotRequired:
        required = False
    else:  # unmarked: the declaring class's totality
        required = name in getattr(cls, "__required_keys__", ())
    optional = is_optional(hint)
    return Field(
        name=name,
        hint=hint,
        required=required and not optional,
        default=NO_DEFAULT,
        absent_is_none=required and optional,
    )


def resolved_hints(cls: Any) -> dict[str, Any]:
    """``typing.get_type_hints`` with ``Annotated`` and ``Required`` kept; a name that cannot
    be resolved is a ``ConfigError`` that says which."""
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise ConfigError(
            f"cannot read the type hints of {_name(cls)}: {exc} (names "
            "used in annotations must be importable where it is defined)"
        ) from None


def _name(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__qualname__
    try:
        shown = repr(hint).replace("typing.", "")
    except RecursionError:  # an annotation nested thousands deep
        origin = typing.get_origin(hint)
        return f"{getattr(origin, '__name__', 'a type')}[...]"
    return shown if len(shown) <= 200 else shown[:197] + "..."


def takes_context(fn: Callable[..., Any]) -> bool:
    """Whether the function's last parameter is named ``ctx`` (it receives the ToolContext)."""
    params = list(inspect.signature(fn).parameters)
    return bool(params) and params[-1] == "ctx"


@attrs.frozen
class Parameter:
    """One parameter a tool's model-facing schema names."""

    name: str
    hint: Any
    schema: dict[str, Any]
    required: bool
    absent_is_none: bool


def parameters(fn: Callable[..., Any]) -> tuple[list[Parameter], bool]:
    """The parameters of ``fn`` a model fills in (not ``*args``, not a final ``ctx``), and
    whether it takes ``**kwargs``.

    Raises:
        ConfigError: a parameter's annotation cannot be resolved or has no JSON form.
    """
    try:  # evaluated as the function's module sees them (also through partials and wrappers)
        signature = inspect.signature(fn, eval_str=True)
    except Exception as exc:
        raise ConfigError(
            f"cannot read the type hints of {getattr(fn, '__qualname__', fn)!r}: "
            f"{exc} (names used in annotations must be importable where it is defined)"
        ) from None
    names = list(signature.parameters)
    if takes_context(fn):
        names = names[:-1]
    found: list[Parameter] = []
    open_ended = False
    for name in names:
        param = signature.parameters[name]
        if param.kind is param.VAR_KEYWORD:
            open_ended = True
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = Any if param.annotation is inspect.Parameter.empty else param.annotation
        try:
            schema = schema_for_type(hint)
        except ConfigError as exc:
            raise ConfigError(f"parameter {name!r}: {exc}") from None
        has_default = param.default is not inspect.Parameter.empty
        if has_default:
            default = _json_default(param.default)
            if default is not NO_DEFAULT:
                schema = {**schema, "default": default}
        optional = is_optional(hint)
        found.append(
            Parameter(
                name=name,
                hint=hint,
                schema=schema,
                required=not has_default and not optional,
                absent_is_none=optional and not has_default,
            )
        )
    return found, open_ended


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The input schema of a function: one property per parameter except a final ``ctx``."""
    return object_schema(parameters(fn)[0])


def object_schema(params: list[Parameter]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {p.name: p.schema for p in params}}
    required = [p.name for p in params if p.required]
    if required:
        schema["required"] = required
    return schema


#: The scalars a default of which is written as text in a schema.
_WRITTEN = (
    ("datetime", "date"),
    ("datetime", "time"),
    ("uuid", "UUID"),
    ("decimal", "Decimal"),
    ("pathlib", "PurePath"),
)


def _json_default(value: Any) -> Any:
    """A default as JSON data, or ``NO_DEFAULT`` when JSON cannot carry it."""
    if value is NO_DEFAULT:
        return NO_DEFAULT
    if isinstance(value, enum.Enum):
        value = value.value
    elif any(_subclass(type(value), module, name) for module, name in _WRITTEN):
        value = value.isoformat() if hasattr(value, "isoformat") else str(value)
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return NO_DEFAULT
    return value


def first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line."""
    if not doc:
        return ""
    paragraph = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(paragraph.split())
