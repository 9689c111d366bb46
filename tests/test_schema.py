"""Type hints to JSON Schema (CONTRACT §2)."""

from __future__ import annotations

from typing import Any, Literal, Optional

import pytest

from toolnexus._tools.schema import first_paragraph, function_schema, schema_for_type, takes_context


@pytest.mark.parametrize(
    ("hint", "expected"),
    [(str, "string"), (int, "integer"), (float, "number"), (bool, "boolean")],
)
def test_scalar_hints_map_to_json_types(hint, expected):
    assert schema_for_type(hint) == {"type": expected}


def test_list_of_str_is_array_with_items():
    assert schema_for_type(list[str]) == {"type": "array", "items": {"type": "string"}}


def test_bare_list_is_an_array_of_anything_with_items():
    assert schema_for_type(list) == {"type": "array", "items": {}}


@pytest.mark.parametrize("hint", [dict, dict[str, Any]])
def test_dict_is_object(hint):
    assert schema_for_type(hint) == {"type": "object"}


def test_dict_of_a_type_is_an_object_of_that_type():
    assert schema_for_type(dict[str, int]) == {"type": "object", "additionalProperties": {"type": "integer"}}


def test_literal_is_enum():
    assert schema_for_type(Literal["a", "b"]) == {"type": "string", "enum": ["a", "b"]}


@pytest.mark.parametrize("hint", [Optional[int], int | None])
def test_optional_is_the_inner_type_or_null(hint):
    assert schema_for_type(hint) == {"type": ["integer", "null"]}


def test_function_schema_maps_every_parameter():
    def fn(s: str, i: int, f: float, b: bool, tags: list[str], opts: dict, mode: Literal["x", "y"]):
        pass

    assert function_schema(fn) == {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "f": {"type": "number"},
            "b": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "opts": {"type": "object"},
            "mode": {"type": "string", "enum": ["x", "y"]},
        },
        "required": ["s", "i", "f", "b", "tags", "opts", "mode"],
    }


def test_required_is_the_parameters_without_defaults():
    def fn(a: str, b: int = 3, c: bool = False, d: float = 0.5):
        pass

    schema = function_schema(fn)
    assert schema["required"] == ["a"]
    assert list(schema["properties"]) == ["a", "b", "c", "d"]


def test_optional_parameter_is_not_required_even_without_default():
    def fn(a: str, b: Optional[int], c: str | None):
        pass

    schema = function_schema(fn)
    assert schema["properties"]["b"] == {"type": ["integer", "null"]}
    assert schema["properties"]["c"] == {"type": ["string", "null"]}
    assert schema["required"] == ["a"]


def test_no_required_key_when_everything_has_a_default():
    def fn(a: str = "x"):
        pass

    assert function_schema(fn) == {"type": "object", "properties": {"a": {"type": "string", "default": "x"}}}


def test_final_ctx_parameter_is_excluded():
    def fn(query: str, ctx):
        pass

    assert takes_context(fn)
    assert function_schema(fn) == {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    }


def test_ctx_that_is_not_last_is_an_ordinary_parameter():
    def fn(ctx: str, query: str):
        pass

    assert not takes_context(fn)
    assert list(function_schema(fn)["properties"]) == ["ctx", "query"]


def test_description_is_the_first_docstring_paragraph():
    def fn():
        """Search the web
        for a query.

        Longer details that the model
        does not need.
        """

    assert first_paragraph(fn.__doc__) == "Search the web for a query."


def test_missing_docstring_gives_empty_description():
    assert first_paragraph(None) == ""


def test_defaults_are_emitted_in_the_schema():
    def fn(a: str, b: int = 3, tags: tuple[str, ...] = ("x",), c: Optional[str] = None):
        pass

    properties = function_schema(fn)["properties"]
    assert properties["b"] == {"type": "integer", "default": 3}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}, "default": ["x"]}
    assert properties["c"] == {"type": ["string", "null"], "default": None}


def test_a_default_json_cannot_carry_is_left_out():
    def fn(a: float = float("nan"), b: object = object()):
        pass

    properties = function_schema(fn)["properties"]
    assert "default" not in properties["a"] and "default" not in properties["b"]


def test_optional_literal_allows_null_in_the_enum():
    assert schema_for_type(Optional[Literal["a", "b"]]) == {"type": ["string", "null"], "enum": ["a", "b", None]}


def test_optional_list_allows_null():
    assert schema_for_type(Optional[list[int]]) == {"type": ["array", "null"], "items": {"type": "integer"}}
