"""The one cattrs converter: every value that crosses a process or agent boundary as JSON.

Python names are snake_case; the wire is what the other editions of the family send
(``expiresAt``), and absent optional fields are left out rather than sent as ``null``.
This is the only module that imports cattrs.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

import attrs

from ._tools import schema as _schema
from .data import AgentResult, Answer, Budget, HandleView, Request, RunResult, ToolCallRecord, ToolResult, Usage
from .errors import ConfigError, WireError

if TYPE_CHECKING:
    import cattrs

T = TypeVar("T")


@functools.cache
def _converter() -> cattrs.Converter:
    """The converter, built on first use: cattrs costs import time that a process which
    never sends a value across a boundary should not pay."""
    import cattrs
    from cattrs.fns import identity
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

    converter = cattrs.Converter()
    renames: dict[type, dict[str, Any]] = {
        Request: {"expires_at": override(rename="expiresAt", omit_if_default=True)},
    }

    def omit_none_unstructure(cls: type) -> Any:
        """Unstructure ``cls`` leaving out every field that is ``None`` (absent on the wire)."""
        base: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cls, converter, **renames.get(cls, {}))

        def unstructure(value: Any) -> dict[str, Any]:
            return {key: item for key, item in base(value).items() if item is not None}

        return unstructure

    def unstructure_result(value: ToolResult) -> dict[str, Any]:
        """A ``ToolResult`` whose metadata may hold a pending ``Request``."""
        out: dict[str, Any] = {"output": value.output, "is_error": value.is_error}
        if value.metadata is not None:
            out["metadata"] = converter.unstructure(value.metadata)
        return out

    for kind in (bool, str, int):
        converter.register_structure_hook(kind, _strict(kind))
    _scalar_hooks(converter)
    # An optional number, string or flag is its own wire form: a generated unstructure
    # function then writes the field inline rather than calling a hook for it on every value.
    converter.register_unstructure_hook_factory(_optional_scalar, lambda _: identity)
    # Classes of the host's own (typed output, tool parameters): an ``Optional`` field left
    # out is ``None``; the library's own value types keep cattrs' defaults.
    converter.register_structure_hook_factory(_hosts_class, lambda cls: _structured_hook(converter, cls))
    converter.register_structure_hook_factory(_plain_union, lambda hint: _union_hook(converter, hint))
    for cls in (Request, Answer):
        converter.register_unstructure_hook(cls, omit_none_unstructure(cls))
        converter.register_structure_hook(cls, make_dict_structure_fn(cls, converter, **renames.get(cls, {})))
    converter.register_unstructure_hook(ToolResult, unstructure_result)
    converter.register_structure_hook(Budget, _budget_hook(make_dict_structure_fn(Budget, converter)))
    converter.register_unstructure_hook(
        AgentResult, make_dict_unstructure_fn(AgentResult, converter, runtime=override(omit=True))
    )
    # Metadata dicts may carry value types (a pending Request): unstructure by runtime class.
    converter.register_unstructure_hook(dict, lambda d: {k: converter.unstructure(v) for k, v in d.items()})
    return converter


def _budget_hook(structure: Callable[[Any, Any], Budget]) -> Callable[[Any, Any], Budget]:
    """A ``Budget`` body; one stored before the caps were in seconds has ``max_wall_ms``,
    read as what it was, without a warning."""

    def budget(body: Any, cls: Any) -> Budget:
        if isinstance(body, dict) and "max_wall_ms" in body:
            body = dict(body)
            old = body.pop("max_wall_ms")
            if body.get("max_wall") is None and old is not None:
                body["max_wall"] = old / 1000
        return structure(body, cls)

    return budget


if TYPE_CHECKING:
    converter: cattrs.Converter  # built on first use, by __getattr__


def __getattr__(name: str) -> Any:
    if name == "converter":  # the one converter, for code that configures or reads it
        return _converter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _scalar_hooks(converter: cattrs.Converter) -> None:
    """The scalars of the schema rules (``_schema.FORMATS``, ``Decimal``, paths): strings on
    the wire, and a ``Decimal`` written as a string so that no digit is lost."""
    import datetime
    import decimal
    import pathlib
    import uuid

    def iso(kind: Any) -> Any:
        def structure(value: Any, _: Any) -> Any:
            if isinstance(value, kind) and (kind is not datetime.date or not isinstance(value, datetime.datetime)):
                return value
            if not isinstance(value, str):
                raise TypeError(f"expected a string, got {type(value).__name__}")
            return kind.fromisoformat(value)

        return structure

    def exact(value: Any, _: Any) -> decimal.Decimal:
        if isinstance(value, decimal.Decimal):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"expected a number, got {type(value).__name__}")
        try:
            return decimal.Decimal(repr(value) if isinstance(value, float) else value)
        except decimal.InvalidOperation:
            raise ValueError(f"not a number: {value!r}") from None

    def text_of(kind: Any) -> Any:
        def structure(value: Any, _: Any) -> Any:
            if isinstance(value, kind):
                return value
            if not isinstance(value, str):
                raise TypeError(f"expected a string, got {type(value).__name__}")
            return kind(value)

        return structure

    for moment in (datetime.datetime, datetime.date, datetime.time):
        converter.register_structure_hook(moment, iso(moment))
        converter.register_unstructure_hook(moment, lambda value: value.isoformat())
    converter.register_structure_hook(decimal.Decimal, exact)
    converter.register_structure_hook(uuid.UUID, text_of(uuid.UUID))
    converter.register_structure_hook_factory(
        lambda t: isinstance(t, type) and issubclass(t, pathlib.PurePath), text_of
    )
    for written in (decimal.Decimal, uuid.UUID, pathlib.PurePath):
        converter.register_unstructure_hook(written, str)


def _hosts_class(cls: Any) -> bool:
    return _schema.is_structured(cls) and not getattr(cls, "__module__", "").startswith("toolnexus.")


def _structured_hook(converter: cattrs.Converter, cls: type) -> Any:
    """Build ``cls`` from a dict: a ``TypedDict`` field by field (a dict, keys as given), an
    attrs class or dataclass through cattrs; left-out ``Optional`` fields become ``None``."""
    fields = _schema.fields_of(cls)
    as_none = [f.name for f in fields if f.absent_is_none]
    if _schema.is_typeddict(cls):
        hints = {f.name: f.hint for f in fields}

        def typeddict(value: Any, _: Any) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise TypeError(f"expected an object, got {type(value).__name__}")
            built = {
                key: converter.structure(item, _schema.unwrap(hints[key])) if key in hints else item
                for key, item in value.items()
            }
            ordered = {name: built.pop(name, None) for name in hints if name in built or name in as_none}
            return {**ordered, **built}

        return typeddict
    from cattrs.gen import make_dict_structure_fn

    base: Callable[[Any, Any], Any] = make_dict_structure_fn(cls, converter)

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        if as_none:
            value = {**{name: None for name in as_none}, **value}
        return base(value, cls)

    return structure


_SCALARS = (int, float, str, bool, type(None))


def _optional_scalar(hint: Any) -> bool:
    """``int | None``, ``str | None`` and the like: nothing to convert on the way out."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return False
    return all(member in _SCALARS for member in typing.get_args(hint))


def _plain_union(hint: Any) -> bool:
    """A union cattrs cannot tell apart on its own: not ``Optional[X]``, not attrs classes only."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return False
    rest = [a for a in typing.get_args(hint) if a is not type(None)]
    return len(rest) > 1 and not all(attrs.has(a) for a in rest)


def _union_hook(converter: cattrs.Converter, hint: Any) -> Any:
    """The first member, in the order written, that builds from the value."""
    members = typing.get_args(hint)

    def structure(value: Any, _: Any) -> Any:
        if value is None and type(None) in members:
            return None
        failures = []
        for member in members:
            if member is type(None):
                continue
            try:
                return converter.structure(value, member)
            except Exception as exc:  # the next member may fit
                failures.append(exc)
        raise TypeError(f"no member of {hint} fits {type(value).__name__}: {failures[0] if failures else ''}")

    return structure


def build(data: Any, hint: Any) -> Any:
    """``data`` (JSON data already checked against the hint's schema) as ``hint``: dates,
    decimals, enums, nested classes. Raises ``WireError`` naming what did not build (an
    attrs validator or ``__post_init__`` that refused a value, say)."""
    import cattrs

    try:
        return _converter().structure(data, hint)
    except cattrs.BaseValidationError as exc:
        raise WireError("; ".join(_built_problems(exc))) from exc
    except (ConfigError, KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise WireError(str(exc) or type(exc).__name__) from exc


def _built_problems(exc: Exception) -> list[str]:
    """cattrs' errors as ``path: problem``, a refusal's own words kept (an attrs validator's
    ``'amount' must be >= 0``)."""
    import cattrs

    found = []
    for line in cattrs.transform_error(exc, format_exception=lambda error, _: str(error) or type(error).__name__):
        problem, _, where = line.rpartition(" @ $")
        where = where.lstrip(".")
        found.append(f"{where}: {problem}" if where else problem)
    return found


def _strict(kind: type) -> Any:
    """No coercion of JSON scalars: cattrs' default would turn ``"false"`` into ``True``."""

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return structure


_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

#: Deepest nesting ``from_json`` accepts; deeper input is refused, never recursed into.
MAX_DEPTH = 64


def to_wire(value: Any) -> Any:
    """Plain JSON-ready data for ``value`` (an attrs value type or plain data)."""
    return _converter().unstructure(value)


def from_wire(cls: type[T], data: Any) -> T:
    """Build ``cls`` from plain data; a bad shape raises ``WireError``."""
    if attrs.has(cls) and not isinstance(data, dict):
        raise WireError(f"{cls.__name__} must be a JSON object, got {type(data).__name__}")
    import cattrs

    try:
        return _converter().structure(data, cls)
    except (cattrs.BaseValidationError, KeyError, TypeError, ValueError) as exc:
        raise WireError(f"invalid {cls.__name__}: {_describe(exc)}") from exc


def to_json(value: Any) -> str:
    """Compact JSON, keys in field order, non-ASCII kept as is (byte-stable across editions).

    Raises:
        WireError: the value holds ``NaN`` or an infinity, which JSON cannot carry.
    """
    try:
        return _DUMPS(to_wire(value))
    except ValueError as exc:
        raise WireError(f"cannot encode as JSON: {exc}") from exc


def from_json(cls: type[T], text: str | bytes) -> T:
    """Parse JSON text into ``cls``; bad JSON, ``NaN``/``Infinity``, nesting deeper than
    ``MAX_DEPTH``, text that is not valid Unicode (a lone surrogate, escaped or not, in
    any string or key) or a bad shape raises ``WireError``."""
    data = parse_json(text, what=cls.__name__)
    where = _not_unicode(data)
    if where is not None:
        raise WireError(f"invalid JSON for {cls.__name__}: {where} is not valid Unicode (a lone surrogate)")
    return from_wire(cls, data)


def parse_json(text: str | bytes, *, what: str = "value") -> Any:
    """Strict JSON: no ``NaN``/``Infinity`` (nor a number too large to be finite, such as
    ``1e999``), at most ``MAX_DEPTH`` levels of nesting."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"invalid JSON for {what}: {exc}") from None
    if _schema.deeper_than(data, MAX_DEPTH):
        raise WireError(f"invalid JSON for {what}: nested deeper than {MAX_DEPTH} levels")
    return data


def check_json(value: Any, what: str) -> None:
    """Raise ``WireError`` when ``value`` cannot be sent as strict JSON (``NaN``, an
    infinity, a type JSON has no form for)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise WireError(f"{what} cannot be sent as JSON: {exc}") from None


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is too large for a finite number")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _not_unicode(data: Any) -> str | None:
    """Where ``data`` (parsed JSON) holds a string that cannot be written as UTF-8 (a
    lone surrogate), as a path such as ``data.note`` or ``id``; ``None`` when it holds none.
    Walked without recursion."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not _encodes(value):
                return path or "the value"
        elif isinstance(value, dict):
            for key, item in value.items():
                inner = f"{path}.{key}" if path else key
                if not _encodes(key):
                    return f"a key in {path}" if path else "a key"
                stack.append((item, inner))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(value))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _describe(exc: BaseException) -> str:
    import cattrs

    if isinstance(exc, cattrs.BaseValidationError):
        notes = cattrs.transform_error(exc)
        return "; ".join(notes) if notes else str(exc)
    return str(exc)


def record_codec(
    cls: type[T],
    *,
    omit: tuple[str, ...] = (),
    hooks: Mapping[str, tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]] | None = None,
) -> tuple[Callable[[T], dict[str, Any]], Callable[[dict[str, Any]], T]]:
    """``(to_body, from_body)`` for an attrs record kept as a JSON row body: the fields in
    ``omit`` are left out of the body (the caller keeps them elsewhere and puts them back
    before building), ``hooks`` maps a field to its own ``(unstructure, structure)``."""
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

    converter = _converter()
    special = hooks or {}
    out: dict[str, Any] = {name: override(omit=True) for name in omit}
    out.update({name: override(unstruct_hook=pair[0]) for name, pair in special.items()})
    back: dict[str, Any] = {name: override(struct_hook=pair[1]) for name, pair in special.items()}
    to_body: Callable[[T], dict[str, Any]] = make_dict_unstructure_fn(cls, converter, **out)
    structure = make_dict_structure_fn(cls, converter, **back)

    def from_body(body: dict[str, Any]) -> T:
        built: T = structure(body, cls)
        return built

    return to_body, from_body


__all__ = [
    "converter",
    "to_wire",
    "from_wire",
    "to_json",
    "from_json",
    "parse_json",
    "check_json",
    "build",
    "AgentResult",
    "HandleView",
    "RunResult",
    "ToolCallRecord",
    "Usage",
]
