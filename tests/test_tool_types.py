"""``@tool`` beyond JSON's own types (issue "natural guesses"): dates, times, UUIDs,
decimals, enums, paths and classes get a schema and arrive converted; an annotation with no
JSON form is refused when the tool is built; plain functions are tools wherever a toolkit is."""

from __future__ import annotations

import enum
import functools
import pathlib
import uuid
from datetime import date, datetime, time, timezone
from decimal import Decimal
from typing import Any, Callable, Optional

import attrs
import pytest

from _helpers import call, calls, make_client, text
from toolnexus import ConfigError, Toolkit, tool
from toolnexus.testing import ScriptedModel


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Level(enum.IntEnum):
    ONE = 1
    TWO = 2


@attrs.frozen
class Address:
    city: str
    zip: str = "00000"


seen: list[Any] = []


@tool
def schedule(day: date, at: time, when: datetime, ticket: uuid.UUID, amount: Decimal, priority: Priority, level: Level, folder: pathlib.Path) -> str:
    """Schedule a visit."""
    seen.append((day, at, when, ticket, amount, priority, level, folder))
    return "scheduled"


def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


ARGS = {
    "day": "2027-03-01",
    "at": "09:30",
    "when": "2027-03-01T09:30:00+00:00",
    "ticket": "12345678-1234-5678-1234-567812345678",
    "amount": "19.90",
    "priority": "high",
    "level": 2,
    "folder": "/tmp/visits",
}


def test_common_scalar_types_get_a_format_in_the_schema():
    properties = schedule.input_schema["properties"]
    assert properties["day"] == {"type": "string", "format": "date"}
    assert properties["at"] == {"type": "string", "format": "time"}
    assert properties["when"] == {"type": "string", "format": "date-time"}
    assert properties["ticket"] == {"type": "string", "format": "uuid"}
    assert properties["amount"]["type"] == ["number", "string"] and properties["amount"]["format"] == "decimal"
    assert properties["priority"] == {"type": "string", "enum": ["low", "high"]}
    assert properties["level"] == {"type": "integer", "enum": [1, 2]}
    assert properties["folder"] == {"type": "string"}


def test_arguments_are_converted_to_the_annotated_types_before_the_call():
    seen.clear()
    assert Toolkit([schedule]).execute("schedule", ARGS).output == "scheduled"
    [(day, at, when, ticket, amount, priority, level, folder)] = seen
    assert day == date(2027, 3, 1) and at == time(9, 30)
    assert when == datetime(2027, 3, 1, 9, 30, tzinfo=timezone.utc)
    assert ticket == uuid.UUID(ARGS["ticket"])
    assert amount == Decimal("19.90") and str(amount) == "19.90"
    assert (priority, level, folder) == (Priority.HIGH, Level.TWO, pathlib.Path("/tmp/visits"))


def test_a_decimal_given_as_a_number_is_built_from_its_written_form():
    seen.clear()
    Toolkit([schedule]).execute("schedule", {**ARGS, "amount": 0.1})
    assert seen[0][4] == Decimal("0.1")


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("day", "March 1st", 'day: expected a date (YYYY-MM-DD), got "March 1st"'),
        ("ticket", "abc", 'ticket: expected a UUID, got "abc"'),
        ("amount", "ten", 'amount: expected a number, got "ten"'),
        ("priority", "urgent", 'priority: expected one of "low", "high", got "urgent"'),
        ("level", "2", 'level: expected an integer, got "2"'),
    ],
)
def test_an_argument_that_cannot_be_converted_is_an_error_naming_it(name, value, problem):
    seen.clear()
    result = Toolkit([schedule]).execute("schedule", {**ARGS, name: value})
    assert result.is_error and problem in result.output
    assert seen == []


def test_a_missing_or_unknown_argument_is_an_error_naming_it():
    result = Toolkit([word_count]).execute("word_count", {"txt": "a b"})
    assert result.is_error
    assert "text: missing" in result.output and "txt: unknown field" in result.output


def test_an_optional_parameter_left_out_is_none():
    @tool
    def greet(name: str, title: Optional[str]) -> str:
        return f"{title or ''}{name}"

    assert Toolkit([greet]).execute("greet", {"name": "Ada"}).output == "Ada"


def test_a_class_parameter_arrives_as_an_instance():
    got = []

    @tool
    def ship(to: Address, copies: list[Address] | None = None) -> str:
        got.append((to, copies))
        return "ok"

    Toolkit([ship]).execute("ship", {"to": {"city": "Lyon"}, "copies": [{"city": "Nice", "zip": "06000"}]})
    assert got == [(Address("Lyon"), [Address("Nice", "06000")])]
    assert ship.input_schema["properties"]["to"]["required"] == ["city"]


def test_json_typed_arguments_are_checked_too():
    result = Toolkit([word_count]).execute("word_count", {"text": 42})
    assert result.is_error and "text: expected a string, got 42" in result.output


@pytest.mark.parametrize("hint", [bytes, Callable[[int], int], type("Custom", (), {})])
def test_an_annotation_without_a_json_form_is_refused_when_the_tool_is_built(hint):
    def fn(value):
        return "x"

    fn.__annotations__ = {"value": hint}
    with pytest.raises(ConfigError, match="parameter 'value'"):
        tool(fn)


def test_any_and_no_annotation_stay_anything():
    def fn(a: Any, b, c: object = None):
        return f"{a}{b}"

    made = tool(fn)
    assert made.input_schema["properties"] == {"a": {}, "b": {}, "c": {"default": None}}
    assert Toolkit([made]).execute("fn", {"a": [1], "b": {"x": 1}}).output == "[1]{'x': 1}"


def test_a_partial_or_a_bound_method_is_described_by_what_is_left_to_fill_in():
    def book(user: str, day: date) -> str:
        return f"{user}:{day.isoformat()}"

    class Desk:
        def book(self, day: date) -> str:
            return day.isoformat()

    made = tool(functools.partial(book, "ada"), name="book")
    assert made.input_schema == {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}, "required": ["day"]}
    assert Toolkit([made]).execute("book", {"day": "2027-01-02"}).output == "ada:2027-01-02"
    assert Toolkit([tool(Desk().book)]).execute("book", {"day": "2027-01-03"}).output == "2027-01-03"


def test_an_explicit_input_schema_passes_arguments_as_they_come():
    got = []

    def fn(day: date):
        got.append(day)
        return "x"

    made = tool(fn, input_schema={"type": "object", "properties": {"day": {"type": "string"}}})
    Toolkit([made]).execute("fn", {"day": "2027-01-01"})
    assert got == ["2027-01-01"]


# --- plain functions wherever a toolkit is accepted ---------------------------------------


def test_a_list_of_plain_functions_is_a_toolkit_for_run():
    model = ScriptedModel({"m": [calls(call("c1", "word_count", {"text": "to be or not"})), text("four")]})
    result = make_client(model).run("Count", [word_count])
    assert [(r.name, r.output) for r in result.tool_calls] == [("word_count", "4")]
    assert model.requests[0]["tools"][0]["function"]["name"] == "word_count"


def test_a_single_tool_or_function_is_a_toolkit_too():
    model = ScriptedModel({"m": [calls(call("c1", "word_count", {"text": "a b"})), text("two")]})
    assert make_client(model).run("Count", word_count).tool_calls[0].output == "2"


def test_toolkit_accepts_plain_functions_and_tools():
    kit = Toolkit([word_count, schedule])
    assert kit.tool_names() == ["word_count", "schedule"]
    assert kit.execute("word_count", {"text": "a b c"}).output == "3"
    assert kit.register(lambda: "x") is True


def test_something_that_is_not_a_tool_is_a_config_error():
    with pytest.raises(ConfigError, match="expected a Tool or a function, got int"):
        Toolkit([word_count, 3])
    with pytest.raises(ConfigError, match="got str"):
        make_client(ScriptedModel({"m": [text("x")]})).run("x", "word_count")


def test_ask_takes_a_list_of_tools():
    model = ScriptedModel({"m": [calls(call("c1", "word_count", {"text": "a"})), text("one")]})
    result = make_client(model).ask("Count", [word_count], id="c")
    assert result.tool_calls[0].output == "1"


@pytest.mark.parametrize(
    "args",
    [{"n": 1, "x": 1.5, "s": "a", "b": True, "l": [], "d": {}}, {"n": True}, {"n": 1.0}, {"x": True}, {"s": None}, {"o": None}, {"o": "a"}, {"zz": 1}, {}],
)
def test_the_quick_check_never_passes_what_the_full_check_refuses(args):
    from toolnexus._tools import validate as _validate

    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "x": {"type": "number"}, "s": {"type": "string"}, "b": {"type": "boolean"}, "l": {"type": "array", "items": {}}, "d": {"type": "object"}, "o": {"type": ["string", "null"]}},
        "required": ["n"],
        "additionalProperties": False,
    }
    fits = _validate.quick_fit(schema)
    assert fits is not None
    assert fits(args) == (not _validate.problems(schema, args))
