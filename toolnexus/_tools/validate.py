"""A small JSON Schema validator: the subset the schema rules produce, and what hand-written
output schemas commonly use. Pure Python, no dependency.

``check_schema`` refuses, when a schema is given, a validating keyword this module does not
implement (so that nothing the schema asks for is silently skipped); ``problems`` lists what
is wrong with a value, each as ``path: problem`` (``amount: expected a number, got "ten"``).

Supported: ``type`` (one or a list), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties`` (``false`` or a schema), ``minProperties``/``maxProperties``,
``items``, ``prefixItems``, ``minItems``/``maxItems``, ``uniqueItems``,
``minLength``/``maxLength``, ``pattern``, ``minimum``/``maximum``,
``exclusiveMinimum``/``exclusiveMaximum``, ``multipleOf``, ``anyOf``, ``oneOf``, ``allOf``,
local ``$ref`` (``#/$defs/...``), and ``format`` ``date``, ``date-time``, ``time``, ``uuid``,
``decimal`` (other formats are annotations). Annotations (``title``, ``description``, ``default``...)
are ignored.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Callable

from .schema import MAX_SCHEMA_DEPTH, check_depth
from ..errors import ConfigError

UNSUPPORTED = (
    "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
    "dependencies", "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef",
)  # fmt: skip
_TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")
_KIND = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "an array",
    "null": "null",
}
_FORMAT_NAMES = ("date", "date-time", "time", "uuid", "decimal")


@functools.cache
def _formats() -> dict[str, tuple[str, Callable[[str], Any]]]:
    """The checked formats, with what reads each (loaded when a schema first names one)."""
    import datetime
    import decimal
    import uuid

    return {
        "date": ("a date (YYYY-MM-DD)", datetime.date.fromisoformat),
        "date-time": ("a date and time (ISO 8601)", datetime.datetime.fromisoformat),
        "time": ("a time (HH:MM[:SS])", datetime.time.fromisoformat),
        "uuid": ("a UUID", uuid.UUID),
        "decimal": ("a number", decimal.Decimal),
    }


#: At most this many problems are reported for one value.
MAX_PROBLEMS = 10


def check_schema(schema: Any, where: str = "schema") -> None:
    """Raise ``ConfigError`` for a schema that is not an object schema this module can check."""
    if not isinstance(schema, dict):
        raise ConfigError(f"{where} must be a dict (a JSON Schema), not {type(schema).__name__}")
    check_depth(schema, where)
    try:
        json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where} is not JSON data: {exc}") from None
    seen: dict[int, Any] = {}
    _check_node(schema, schema, where, seen)
    _check_loops(list(seen.values()), schema, where)


def _check_node(node: Any, root: dict[str, Any], where: str, seen: dict[int, Any]) -> None:
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise ConfigError(f"{where}: a subschema must be an object or a boolean, not {type(node).__name__}")
    if id(node) in seen:
        return
    seen[id(node)] = node
    for keyword in UNSUPPORTED:
        if keyword in node:
            raise ConfigError(f"{where}: the keyword {keyword!r} is not supported by the output validator")
    kind = node.get("type")
    for name in [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []:
        if name not in _TYPES:
            raise ConfigError(f"{where}: unknown type {name!r}")
    if "$ref" in node:
        _resolve(root, node["$ref"], where)
    if "pattern" in node:
        try:
            re.compile(node["pattern"])
        except (re.error, TypeError) as exc:
            raise ConfigError(f"{where}: invalid pattern {node['pattern']!r}: {exc}") from None
    for key in ("properties", "$defs", "definitions"):
        for name, sub in (node.get(key) or {}).items():
            _check_node(sub, root, f"{where}.{key}.{name}", seen)
    for key in ("items", "additionalProperties"):
        if key in node:
            _check_node(node[key], root, f"{where}.{key}", seen)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for index, sub in enumerate(node.get(key) or ()):
            _check_node(sub, root, f"{where}.{key}[{index}]", seen)


def _same_value(node: Any, root: dict[str, Any]) -> list[Any]:
    """The subschemas that check the very value ``node`` checks: its ``$ref`` and the
    members of its ``allOf``/``anyOf``/``oneOf``."""
    if not isinstance(node, dict):
        return []
    found = [_resolve(root, node["$ref"], "schema")] if "$ref" in node else []
    for key in ("allOf", "anyOf", "oneOf"):
        found.extend(node.get(key) or ())
    return found


def _check_loops(nodes: list[Any], root: dict[str, Any], where: str) -> None:
    """Refuse references that lead back to themselves without going into a nested value
    (``{"$ref": "#"}`` at the top, ``a`` refers to ``b`` refers to ``a``): checking any
    value would never end. Walked without recursion."""
    done: set[int] = set()
    for start in nodes:
        if id(start) in done:
            continue
        path: set[int] = {id(start)}
        stack: list[tuple[Any, list[Any]]] = [(start, _same_value(start, root))]
        while stack:
            node, following = stack[-1]
            if not following:
                stack.pop()
                path.discard(id(node))
                done.add(id(node))
                continue
            nxt = following.pop()
            if id(nxt) in path:
                raise ConfigError(f"{where}: a reference leads back to itself without describing a nested value")
            if id(nxt) not in done and isinstance(nxt, dict):
                path.add(id(nxt))
                stack.append((nxt, _same_value(nxt, root)))


def _resolve(root: dict[str, Any], ref: Any, where: str) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise ConfigError(f"{where}: only local references (#/...) are supported, not {ref!r}")
    node: Any = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ConfigError(f"{where}: reference {ref!r} points nowhere")
    return node


def problems(schema: Any, value: Any) -> list[str]:
    """What is wrong with ``value`` under ``schema`` (empty when it fits), at most ``MAX_PROBLEMS``."""
    found: list[str] = []
    _Check(schema, found).node(schema, value, "")
    return found[:MAX_PROBLEMS]


_PLAIN = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def quick_fit(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    """For an object schema whose properties only name a type (``{"type": "string"}``,
    ``{"type": "array", "items": {}}``...): a fast yes when a value surely fits (each
    property of its type, the required ones present, no unknown one when refused). ``None``
    for other schemas; a ``False`` means "ask ``problems``", which says what is wrong."""
    properties = schema.get("properties") or {}
    kinds: dict[str, tuple[type, ...]] = {}
    for name, sub in properties.items():
        rest = {key: value for key, value in sub.items() if key not in ("description", "title", "default")}
        if rest.get("items") == {}:
            del rest["items"]
        kind = rest.get("type")
        names = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
        if set(rest) != {"type"} or not names or any(not isinstance(n, str) or n not in _PLAIN for n in names):
            return None
        kinds[name] = tuple(t for n in names for t in _PLAIN[n])
    required = tuple(schema.get("required") or ())
    closed = schema.get("additionalProperties") is False

    def fits(value: dict[str, Any]) -> bool:
        for name, item in value.items():
            allowed = kinds.get(name)
            if allowed is None:
                if closed:
                    return False
            elif type(item) not in allowed:
                return False
        return all(name in value for name in required)

    return fits


def shown(value: Any) -> str:
    """A value as the model wrote it, short."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _fits_type(name: str, value: Any) -> bool:
    actual = json_kind(value)
    return actual == name or (name == "number" and actual == "integer")


class _Check:
    def __init__(self, root: Any, found: list[str], depth: int = 0) -> None:
        self.root = root
        self.found = found
        self.depth = depth  # nested ``node`` calls: a value may nest deeper than a schema allows

    def fail(self, path: str, problem: str) -> None:
        self.found.append(f"{path}: {problem}" if path else problem)

    def node(self, schema: Any, value: Any, path: str) -> None:
        if schema is True or schema == {}:
            return
        if self.depth >= MAX_SCHEMA_DEPTH:
            self.fail(path, f"nested deeper than {MAX_SCHEMA_DEPTH} levels (the library's limit)")
            return
        self.depth += 1
        try:
            self._node(schema, value, path)
        finally:
            self.depth -= 1

    def _node(self, schema: Any, value: Any, path: str) -> None:
        if schema is False:
            self.fail(path, "not allowed here")
            return
        if "$ref" in schema:
            self.node(_resolve(self.root, schema["$ref"], "schema"), value, path)
        kind = schema.get("type")
        if kind is not None:
            names = [kind] if isinstance(kind, str) else list(kind)
            if not any(_fits_type(name, value) for name in names):
                self.fail(path, f"expected {' or '.join(_KIND[n] for n in names)}, got {shown(value)}")
                return
        if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
            self.fail(path, f"expected one of {', '.join(shown(o) for o in schema['enum'])}, got {shown(value)}")
            return
        if "const" in schema and not _same(value, schema["const"]):
            self.fail(path, f"expected {shown(schema['const'])}, got {shown(value)}")
            return
        if isinstance(value, dict):
            self.object(schema, value, path)
        elif isinstance(value, list):
            self.array(schema, value, path)
        elif isinstance(value, str):
            self.string(schema, value, path)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self.number(schema, value, path)
        for sub in schema.get("allOf") or ():
            self.node(sub, value, path)
        if "anyOf" in schema:
            self.one_of(schema["anyOf"], value, path, exactly_one=False)
        if "oneOf" in schema:
            self.one_of(schema["oneOf"], value, path, exactly_one=True)

    def object(self, schema: dict[str, Any], value: dict[str, Any], path: str) -> None:
        properties = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                self.fail(_join(path, name), "missing")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                self.node(properties[name], item, _join(path, name))
            elif extra is False:
                self.fail(
                    _join(path, name), "unknown field" + (f" (fields: {', '.join(properties)})" if properties else "")
                )
            elif isinstance(extra, dict):
                self.node(extra, item, _join(path, name))
        self.bounds(path, len(value), schema, "minProperties", "maxProperties", "fields")

    def array(self, schema: dict[str, Any], value: list[Any], path: str) -> None:
        prefix = schema.get("prefixItems") or []
        for index, item in enumerate(value):
            sub = prefix[index] if index < len(prefix) else schema.get("items", True)
            self.node(sub, item, f"{path}[{index}]")
        self.bounds(path, len(value), schema, "minItems", "maxItems", "items")
        if schema.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) < len(value):
            self.fail(path, "items must be unique")

    def string(self, schema: dict[str, Any], value: str, path: str) -> None:
        self.bounds(path, len(value), schema, "minLength", "maxLength", "characters")
        named = schema.get("format")
        form = _formats()[named] if named in _FORMAT_NAMES else None
        if form is not None:
            try:
                form[1](value)
            except (ValueError, ArithmeticError):
                self.fail(path, f"expected {form[0]}, got {shown(value)}")
                return  # the pattern of a format says the same again
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, value) is None:
            self.fail(path, f"must match the pattern {pattern}, got {shown(value)}")

    def number(self, schema: dict[str, Any], value: float, path: str) -> None:
        for key, sign in (("minimum", ">="), ("maximum", "<="), ("exclusiveMinimum", ">"), ("exclusiveMaximum", "<")):
            bound = schema.get(key)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool) and not _holds(value, sign, bound):
                self.fail(path, f"must be {sign} {bound}, got {shown(value)}")
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0 and abs(value / step - round(value / step)) > 1e-9:
            self.fail(path, f"must be a multiple of {step}, got {shown(value)}")

    def bounds(self, path: str, size: int, schema: dict[str, Any], low: str, high: str, unit: str) -> None:
        if isinstance(schema.get(low), int) and size < schema[low]:
            self.fail(path, f"must have at least {schema[low]} {unit}, got {size}")
        if isinstance(schema.get(high), int) and size > schema[high]:
            self.fail(path, f"must have at most {schema[high]} {unit}, got {size}")

    def one_of(self, options: list[Any], value: Any, path: str, *, exactly_one: bool) -> None:
        outcomes = []
        for option in options:
            found: list[str] = []
            _Check(self.root, found, self.depth).node(option, value, path)
            outcomes.append(found)
        fitting = [o for o in outcomes if not o]
        if exactly_one and len(fitting) > 1:
            self.fail(path, "matches more than one of the allowed forms")
        if fitting:
            return
        # Report the options the value's kind could fit; with one left, its own problems.
        near = [o for option, o in zip(options, outcomes) if _kind_fits(option, value)]
        if len(near) == 1:
            self.found.extend(near[0])
        else:
            self.fail(
                path,
                "does not fit any allowed form: "
                + " | ".join(o[0].split(": ", 1)[-1] if path else o[0] for o in outcomes),
            )


def _holds(value: float, sign: str, bound: float) -> bool:
    if sign == ">=":
        return value >= bound
    if sign == "<=":
        return value <= bound
    return value > bound if sign == ">" else value < bound


def _kind_fits(schema: Any, value: Any) -> bool:
    if not isinstance(schema, dict) or "type" not in schema:
        return True
    kind = schema["type"]
    return any(_fits_type(name, value) for name in ([kind] if isinstance(kind, str) else kind))


def _same(value: Any, option: Any) -> bool:
    """JSON equality: ``1`` is not ``true``."""
    return (
        json_kind(value) == json_kind(option)
        and value == option
        or (
            json_kind(value) in ("integer", "number") and json_kind(option) in ("integer", "number") and value == option
        )
    )


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
