"""Bounded nesting (CONTRACT §13): a type or schema nested thousands deep is a ConfigError
naming the depth, never a RecursionError, wherever a schema is built, checked or sent."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

import pytest

from _helpers import make_client, text
from toolnexus import ConfigError, Tool, tool
from toolnexus._tools.schema import MAX_SCHEMA_DEPTH, schema_for_type
from toolnexus._tools.validate import problems
from toolnexus._tools.output import output_type
from toolnexus.testing import ScriptedModel

DEEP = 5_000
LIMIT_WORDS = f"nests deeper than {MAX_SCHEMA_DEPTH} levels"


def nested_typeddict(levels: int) -> Any:
    inner: Any = int
    for level in range(levels):
        inner = TypedDict(f"Level{level}", {"inner": inner})  # type: ignore[operator]
    return inner


def nested_list(levels: int) -> Any:
    inner: Any = int
    for _ in range(levels):
        inner = list[inner]
    return inner


def nested_schema(levels: int) -> dict[str, Any]:
    inner: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        inner = {"type": "object", "properties": {"inner": inner}}
    return inner


def test_an_output_type_nested_5000_deep_is_a_config_error_naming_the_depth() -> None:
    model = ScriptedModel({"m": [text("x")]})
    with pytest.raises(ConfigError, match=LIMIT_WORDS) as caught:
        make_client(model).run("x", output=nested_typeddict(DEEP))
    assert "Level4999" in str(caught.value) and model.calls == {}


def test_an_output_schema_nested_5000_deep_is_a_config_error_naming_the_depth() -> None:
    with pytest.raises(ConfigError, match=LIMIT_WORDS):
        make_client(ScriptedModel({"m": [text("x")]})).run("x", output=nested_schema(DEEP))


@pytest.mark.parametrize("build", [nested_list, nested_typeddict], ids=["list", "typeddict"])
def test_a_type_nested_5000_deep_has_no_schema(build: Any) -> None:
    with pytest.raises(ConfigError, match=LIMIT_WORDS):
        schema_for_type(build(DEEP))


def test_a_tool_parameter_nested_5000_deep_is_a_config_error_naming_it() -> None:
    def store(value):  # type: ignore[no-untyped-def]
        return "kept"

    store.__annotations__ = {"value": nested_list(DEEP), "return": str}

    with pytest.raises(ConfigError, match=f"parameter 'value'.*{LIMIT_WORDS}"):
        tool(store)


def test_a_tool_input_schema_nested_5000_deep_is_a_config_error_naming_the_tool() -> None:
    with pytest.raises(ConfigError, match=f"tool 'store'.*{LIMIT_WORDS}"):
        Tool("store", "Keep it.", nested_schema(DEEP), lambda args, ctx: "kept")


def test_a_class_within_the_limit_still_has_its_schema() -> None:
    levels = MAX_SCHEMA_DEPTH // 2 - 1  # a nested class takes two levels: properties, then its schema
    inner: Any = int
    for level in range(levels):
        inner = dataclasses.make_dataclass(f"Kept{level}", [("inner", inner)])
    schema = output_type(inner).schema
    for _ in range(levels - 1):
        schema = schema["properties"]["inner"]
    assert schema["properties"]["inner"] == {"type": "integer"}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "$ref": "#"},
        {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}},
    ],
    ids=["itself", "a-b-a"],
)
def test_a_reference_that_leads_back_to_itself_is_a_config_error(schema: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="leads back to itself"):
        output_type(schema)


def test_a_recursive_schema_that_describes_nested_values_is_kept() -> None:
    tree = {"type": "object", "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}}
    typed = output_type(tree)
    assert typed.check({"name": "a", "children": [{"name": "b", "children": []}]}).value["name"] == "a"


def test_a_value_nested_deeper_than_the_limit_is_a_problem_not_a_recursion_error() -> None:
    tree = {"type": "object", "properties": {"child": {"$ref": "#"}}}
    value: dict[str, Any] = {}
    for _ in range(DEEP):
        value = {"child": value}
    [found] = problems(tree, value)
    assert found.startswith("child.child.") and found.endswith(f": nested deeper than {MAX_SCHEMA_DEPTH} levels (the library's limit)")
