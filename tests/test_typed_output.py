"""Typed output on the client (CONTRACT §17): ``output=T`` offers ``final_result``, checks
what the model gives, corrects it within the run, and ends with a value of ``T``."""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
from datetime import date
from decimal import Decimal
from typing import Literal, NotRequired, Optional, TypedDict

import attrs
import pytest

from _helpers import call, calls, make_client, text
from toolnexus import Client, ConfigError, Tool, Toolkit, make_answer, make_request, suspend, tool
from toolnexus.testing import ScriptedLLMServer, ScriptedModel, completion


@attrs.frozen
class Line:
    sku: str
    quantity: int = 1


@attrs.frozen(kw_only=True)
class Decision:
    """How a complaint is settled."""

    refund: bool
    amount: Decimal
    reason: str
    category: Literal["damaged", "late", "other"] = "other"
    follow_up: Optional[date]
    lines: list[Line] = attrs.Factory(list)


@dataclasses.dataclass
class Shipment:
    carrier: str
    days: int
    tracking: Optional[str]


class Verdict(TypedDict):
    label: str
    score: float
    tags: NotRequired[list[str]]


CITY = {
    "type": "object",
    "title": "City",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
    "required": ["city", "population"],
}
DECISION = {"refund": True, "amount": 12.5, "reason": "arrived broken", "category": "damaged"}


def final(cid, arguments):
    return calls(call(cid, "final_result", arguments))


def tool_texts(request):
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def offered(request, name="final_result"):
    return next(t["function"] for t in request["tools"] if t["function"]["name"] == name)


# --- each kind of T ----------------------------------------------------------------------


def test_an_attrs_class_output_is_built_from_the_final_result_call():
    client = make_client(ScriptedModel({"m": [final("f1", DECISION)]}))
    result = client.run("Settle complaint 7", output=Decision)
    assert result.status == "done"
    assert result.output == Decision(refund=True, amount=Decimal("12.5"), reason="arrived broken", category="damaged", follow_up=None)
    assert json.loads(result.text) == {"refund": True, "amount": "12.5", "reason": "arrived broken", "category": "damaged", "follow_up": None, "lines": []}


def test_a_dataclass_output_is_an_instance_of_the_dataclass():
    client = make_client(ScriptedModel({"m": [final("f1", {"carrier": "DHL", "days": 2})]}))
    result = client.run("How is it shipped?", output=Shipment)
    assert result.output == Shipment(carrier="DHL", days=2, tracking=None)


def test_a_typeddict_output_is_a_dict_of_its_keys():
    client = make_client(ScriptedModel({"m": [final("f1", {"label": "spam", "score": 0.9})]}))
    result = client.run("Classify", output=Verdict)
    assert result.output == {"label": "spam", "score": 0.9}
    assert type(result.output) is dict


def test_a_json_schema_output_is_the_arguments_as_a_dict():
    client = make_client(ScriptedModel({"m": [final("f1", {"city": "Lyon", "population": 522000})]}))
    result = client.run("Biggest city near Annecy?", output=CITY)
    assert result.output == {"city": "Lyon", "population": 522000}
    assert result.text == '{"city":"Lyon","population":522000}'


def test_the_final_result_tool_has_the_schema_of_the_class_by_the_tool_rules():
    model = ScriptedModel({"m": [final("f1", DECISION)]})
    make_client(model).run("Settle", output=Decision)
    schema = offered(model.requests[0])["parameters"]
    assert schema["required"] == ["refund", "amount", "reason"]
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert properties["category"] == {"type": "string", "enum": ["damaged", "late", "other"], "default": "other"}
    assert properties["follow_up"] == {"type": ["string", "null"], "format": "date"}
    assert properties["lines"]["items"] == {
        "type": "object",
        "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer", "default": 1}},
        "required": ["sku"],
        "additionalProperties": False,
    }
    assert "How a complaint is settled." in offered(model.requests[0])["description"]


def test_an_optional_field_left_out_is_none():
    client = make_client(ScriptedModel({"m": [final("f1", {"refund": False, "amount": 0, "reason": "ok"})]}))
    assert client.run("Settle", output=Decision).output.follow_up is None


def test_a_decimal_may_be_given_as_a_numeric_string_and_keeps_its_digits():
    client = make_client(ScriptedModel({"m": [final("f1", {**DECISION, "amount": "12.50"})]}))
    result = client.run("Settle", output=Decision)
    assert result.output.amount == Decimal("12.50") and str(result.output.amount) == "12.50"
    assert json.loads(result.text)["amount"] == "12.50"


def test_nested_classes_are_built_as_nested_values():
    args = {**DECISION, "lines": [{"sku": "A-1", "quantity": 2}, {"sku": "B-7"}], "follow_up": "2027-01-15"}
    result = make_client(ScriptedModel({"m": [final("f1", args)]})).run("Settle", output=Decision)
    assert result.output.lines == [Line("A-1", 2), Line("B-7", 1)]
    assert result.output.follow_up == date(2027, 1, 15)


# --- corrections -------------------------------------------------------------------------


def test_invalid_arguments_get_an_error_result_naming_the_field_and_another_step():
    model = ScriptedModel({"m": [final("f1", {**DECISION, "amount": "ten"}), final("f2", DECISION)]})
    result = make_client(model).run("Settle", output=Decision)
    assert (result.status, result.turns) == ("done", 2)
    [feedback] = tool_texts(model.requests[1])
    assert 'amount: expected a number, got "ten"' in feedback
    assert result.output.amount == Decimal("12.5")


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"refund": True, "amount": 1}, "reason: missing"),
        ({**DECISION, "colour": "red"}, "colour: unknown field"),
        ({**DECISION, "category": "lost"}, 'category: expected one of "damaged", "late", "other", got "lost"'),
        ({**DECISION, "refund": "yes"}, 'refund: expected true or false, got "yes"'),
        ({**DECISION, "lines": [{"sku": 3}]}, "lines[0].sku: expected a string, got 3"),
        ({**DECISION, "follow_up": "next week"}, 'follow_up: expected a date (YYYY-MM-DD), got "next week"'),
    ],
)
def test_each_kind_of_misfit_is_named_in_the_error_result(arguments, problem):
    model = ScriptedModel({"m": [final("f1", arguments), final("f2", DECISION)]})
    make_client(model).run("Settle", output=Decision)
    assert problem in tool_texts(model.requests[1])[0]


@attrs.frozen
class Refund:
    amount: Decimal = attrs.field(validator=attrs.validators.ge(Decimal(0)))


def test_a_value_the_class_itself_refuses_is_sent_back_with_its_reason():
    model = ScriptedModel({"m": [final("f1", {"amount": -5}), final("f2", {"amount": 5})]})
    result = make_client(model).run("Refund?", output=Refund)
    assert "'amount' must be >= 0" in tool_texts(model.requests[1])[0]
    assert result.output == Refund(Decimal(5))


def test_an_unknown_field_is_accepted_by_a_schema_that_allows_it():
    args = {"city": "Lyon", "population": 1, "country": "FR"}
    result = make_client(ScriptedModel({"m": [final("f1", args)]})).run("City?", output=CITY)
    assert result.output == args


def test_an_unknown_field_is_refused_by_a_schema_that_says_additional_properties_false():
    strict = {**CITY, "additionalProperties": False}
    model = ScriptedModel({"m": [final("f1", {"city": "Lyon", "population": 1, "country": "FR"}), final("f2", {"city": "Lyon", "population": 1})]})
    result = make_client(model).run("City?", output=strict)
    assert "country: unknown field" in tool_texts(model.requests[1])[0]
    assert result.output == {"city": "Lyon", "population": 1}


def test_a_schema_constraint_is_checked():
    model = ScriptedModel({"m": [final("f1", {"city": "Lyon", "population": -3}), final("f2", {"city": "Lyon", "population": 3})]})
    make_client(model).run("City?", output=CITY)
    assert "population: must be >= 0, got -3" in tool_texts(model.requests[1])[0]


def test_arguments_that_are_not_json_get_an_error_result_and_another_step():
    model = ScriptedModel({"m": [final("f1", '{"city": "Lyon",'), final("f2", {"city": "Lyon", "population": 3})]})
    result = make_client(model).run("City?", output=CITY)
    assert "not valid JSON" in tool_texts(model.requests[1])[0]
    assert result.status == "done"


def test_plain_json_text_that_fits_is_accepted():
    result = make_client(ScriptedModel({"m": [text(json.dumps(DECISION))]})).run("Settle", output=Decision)
    assert (result.status, result.turns, result.output.reason) == ("done", 1, "arrived broken")


def test_json_text_in_a_fence_is_accepted():
    reply = "Here is the decision:\n```json\n" + json.dumps({"city": "Lyon", "population": 5}) + "\n```"
    result = make_client(ScriptedModel({"m": [text(reply)]})).run("City?", output=CITY)
    assert result.output == {"city": "Lyon", "population": 5}


def test_a_final_result_call_written_out_as_json_text_is_accepted():
    written = "```json\n" + json.dumps({"name": "final_result", "arguments": DECISION}) + "\n```"
    result = make_client(ScriptedModel({"m": [text(written)]})).run("Settle", output=Decision)
    assert (result.status, result.turns, result.output.category) == ("done", 1, "damaged")


def test_another_tool_written_out_as_json_text_is_not_a_value():
    written = json.dumps({"name": "lookup", "arguments": {"q": "x"}})
    model = ScriptedModel({"m": [text(written), final("f1", DECISION)]})
    make_client(model).run("Settle", output=Decision)
    assert "a call of the tool 'lookup' written as text" in model.requests[1]["messages"][-1]["content"]


def test_prose_is_answered_with_a_user_message_asking_for_final_result():
    model = ScriptedModel({"m": [text("I think a refund is fair."), final("f1", DECISION)]})
    result = make_client(model).run("Settle", output=Decision)
    last = model.requests[1]["messages"][-1]
    assert last["role"] == "user" and "final_result" in last["content"]
    assert (result.status, result.turns) == ("done", 2)


def test_json_text_that_does_not_fit_is_answered_with_its_problems():
    model = ScriptedModel({"m": [text('{"city": "Lyon"}'), final("f1", {"city": "Lyon", "population": 5})]})
    make_client(model).run("City?", output=CITY)
    last = model.requests[1]["messages"][-1]
    assert last["role"] == "user" and "population: missing" in last["content"] and "final_result" in last["content"]


WRITTEN = json.dumps({"name": "final_result", "arguments": DECISION})


@pytest.mark.parametrize(
    "reply",
    [
        "{" + WRITTEN + "}",  # the outer braces doubled, as Qwen2.5-Coder wrote it on llama-server
        WRITTEN.replace("{", "{{").replace("}", "}}"),  # every brace doubled, as a template escapes them
        "<tool_call>\n{" + WRITTEN + "}\n</tool_call>",  # in the template's own tags
        "<tool_call>\n" + WRITTEN + "\n</tool_call>",
        "{" + json.dumps(DECISION) + "}",  # the value itself, braces doubled
        json.dumps({"name": "final_result", "parameters": DECISION}),  # as some templates name the arguments
        "{" + json.dumps({"function": "final_result", "arguments": DECISION}) + "}",  # and the name
        # several calls, one a line, as Qwen2.5-Coder wrote them on llama-server
        '{{"name": "lookup_order", "arguments": {"order": "A-1001"}}}\n{' + WRITTEN + "}\n```",
    ],
    ids=["outer-doubled", "all-doubled", "tagged-doubled", "tagged", "value-doubled", "parameters", "function", "one-a-line"],
)
def test_a_result_written_as_a_chat_template_writes_it_is_accepted_when_it_fits(reply):
    result = make_client(ScriptedModel({"m": [text(reply)]})).run("Settle", output=Decision)
    assert (result.status, result.turns, result.output.category) == ("done", 1, "damaged")


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I think a refund is fair.", "it is plain text, not the JSON of the result"),
        ('{"refund": true, "amount": 12.5,', "it is not valid JSON (Expecting property name enclosed in double quotes"),
        ('{{"refund": true, "amount": 12.5,}}', "it is not valid JSON (Expecting property name enclosed in double quotes: line 1 column 33"),
        ("{" + json.dumps({"name": "final_result", "arguments": {**DECISION, "category": "lost"}}) + "}", "category: expected one of"),
        (json.dumps({"name": "final_result", "arguments": {"refund": True}}), "amount: missing"),
        ("<tool_call>" + json.dumps({"name": "lookup", "arguments": {}}) + "</tool_call>", "a call of the tool 'lookup' written as text"),
    ],
    ids=["prose", "broken-json", "doubled-broken-json", "doubled-misfit", "written-misfit", "other-tool"],
)
def test_a_refused_text_answer_s_correction_says_why(reply, reason):
    model = ScriptedModel({"m": [text(reply), final("f1", DECISION)]})
    result = make_client(model).run("Settle", output=Decision)
    last = model.requests[1]["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith("Your answer was not taken as the result: ")
    assert reason in last["content"] and "Call the final_result tool" in last["content"]
    assert (result.status, result.turns) == ("done", 2)


def test_when_the_turns_run_out_the_run_is_incomplete_without_output():
    model = ScriptedModel({"m": [text("no idea")]})
    result = make_client(model, max_turns=3).run("Settle", output=Decision)
    assert (result.status, result.limit, result.output, result.turns) == ("incomplete", "maxTurns", None, 3)


# --- the step that gives the value ---------------------------------------------------------


def test_other_tool_calls_of_the_final_step_run_first_and_only_they_are_records():
    ran = []

    @tool
    def note(text: str) -> str:
        """Write a note on the case."""
        ran.append(text)
        return "noted"

    model = ScriptedModel({"m": [calls(call("c1", "note", {"text": "refund"}), call("f1", "final_result", DECISION))]})
    events = []
    result = make_client(model, on_metric=events.append).run("Settle", [note], output=Decision)
    assert ran == ["refund"]
    assert [r.name for r in result.tool_calls] == ["note"] and result.tool_call_count == 1
    assert [e["tool"] for e in events if e["event"] == "tool"] == ["note"]
    assert [e["tool_calls"] for e in events if e["event"] == "run"] == [1]
    assert result.output.reason == "arrived broken"


def test_every_call_of_the_final_step_gets_one_result_in_call_order():
    model = ScriptedModel({"m": [calls(call("f1", "final_result", DECISION), call("c1", "echo", {"text": "x"}))]})
    echo = Tool("echo", "Echo.", {"type": "object", "properties": {"text": {"type": "string"}}}, lambda args, ctx: args["text"])
    result = make_client(model).run("Settle", [echo], output=Decision)
    tool_messages = [m for m in result.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["f1", "c1"]
    assert tool_messages[0]["content"] == "final result accepted"


def test_the_first_valid_final_result_of_a_step_wins():
    model = ScriptedModel({"m": [calls(call("f1", "final_result", {"amount": 1}), call("f2", "final_result", DECISION), call("f3", "final_result", {**DECISION, "reason": "later"}))]})
    result = make_client(model).run("Settle", output=Decision)
    assert (result.turns, result.output.reason) == (1, "arrived broken")


def test_a_typed_run_that_suspends_resumes_to_its_value():
    request = make_request("approval", "Refund 12.50?")

    def refund(args, ctx):
        return "refunded" if ctx.answer is not None else suspend(request)

    kit = [Tool("refund", "Refund money.", {"type": "object", "properties": {}}, refund)]
    model = ScriptedModel({"m": [calls(call("c1", "refund")), final("f1", DECISION)]})
    client = make_client(model)
    first = client.run("Settle", kit, output=Decision)
    assert (first.status, first.output) == ("pending", None)
    done = client.resume(first.pending, make_answer(request.id, True), kit, messages=first.messages, output=Decision)
    assert (done.status, done.output.refund) == ("done", True)


def test_a_value_given_beside_a_call_that_suspends_is_kept_for_the_resume():
    request = make_request("approval", "Refund 12.50?")
    ran = []

    def refund(args, ctx):
        if ctx.answer is None:
            return suspend(request)
        ran.append(ctx.answer.id)
        return "refunded"

    kit = [Tool("refund", "Refund money.", {"type": "object", "properties": {}}, refund)]
    model = ScriptedModel({"m": [calls(call("c1", "refund"), call("f1", "final_result", DECISION))]})
    client = make_client(model)
    first = client.run("Settle", kit, output=Decision)
    assert first.status == "pending"
    done = client.resume(first.pending, make_answer(request.id, True), kit, messages=first.messages, output=Decision)
    assert (done.status, done.output.reason, ran) == ("done", "arrived broken", [request.id])
    assert model.calls == {"m": 1}  # the step that gave the value is not asked again


def test_a_typed_conversation_keeps_its_transcript_valid_for_the_next_question():
    model = ScriptedModel({"m": [final("f1", DECISION), text("It was broken.")]})
    client = make_client(model)
    assert client.ask("Settle", id="case-7", output=Decision).output.refund is True
    follow = client.ask("Why?", id="case-7")
    assert (follow.status, follow.text, follow.output) == ("done", "It was broken.", None)
    kinds = [m["role"] for m in model.requests[1]["messages"]]
    assert kinds == ["user", "assistant", "tool", "user"]


# --- configuration -----------------------------------------------------------------------


class Plain:
    pass


@pytest.mark.parametrize(
    ("target", "words"),
    [
        (int, "cannot be given a schema"),
        (list[int], "cannot be given a schema"),
        (Plain, "cannot be given a schema"),
        ({"type": "array", "items": {"type": "string"}}, "must describe an object"),
        ({"type": "object", "not": {"required": ["x"]}}, "'not' is not supported"),
        ({"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}}, "only local references"),
    ],
)
def test_an_output_without_a_schema_is_a_config_error(target, words):
    client = make_client(ScriptedModel({"m": [text("x")]}))
    with pytest.raises(ConfigError, match=words):
        client.run("x", output=target)


@attrs.frozen
class HasBytes:
    data: bytes


def test_a_field_without_a_json_form_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=r"HasBytes\.data"):
        make_client(ScriptedModel({"m": [text("x")]})).run("x", output=HasBytes)


def test_a_toolkit_that_already_has_final_result_is_a_config_error():
    own = Tool("final_result", "Mine.", None, lambda args, ctx: "x")
    model = ScriptedModel({"m": [text("x")]})
    with pytest.raises(ConfigError, match="final_result"):
        make_client(model).run("x", [own], output=Decision)
    assert model.calls == {}


# --- over HTTP, in both wire styles --------------------------------------------------------


class Wire:
    """Answers each request with the next scripted step in ``style``'s shape; keeps the bodies."""

    def __init__(self, style, *steps):
        self.style, self.steps, self.bodies = style, list(steps), []
        self._lock = threading.Lock()

    def __call__(self, body):
        with self._lock:
            self.bodies.append(copy.deepcopy(body))
            step = self.steps.pop(0)
        if self.style == "openai":
            if isinstance(step, str):
                return completion(body, {"role": "assistant", "content": step}, "stop")
            wire = [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}} for cid, name, args in step]
            return completion(body, {"role": "assistant", "content": None, "tool_calls": wire}, "tool_calls")
        usage = {"input_tokens": 10, "output_tokens": 5}
        if isinstance(step, str):
            return {"type": "message", "role": "assistant", "content": [{"type": "text", "text": step}], "stop_reason": "end_turn", "usage": usage}
        blocks = [{"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in step]
        return {"type": "message", "role": "assistant", "content": blocks, "stop_reason": "tool_use", "usage": usage}

    def tool_results(self, index):
        """The tool results sent in request ``index``: (content, is_error) pairs."""
        messages = self.bodies[index]["messages"]
        if self.style == "openai":
            return [(m["content"], None) for m in messages if m["role"] == "tool"]
        blocks = [b for m in messages if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]]
        return [(b["content"], b.get("is_error", False)) for b in blocks if b["type"] == "tool_result"]

    def offered(self, index):
        tools = self.bodies[index]["tools"]
        if self.style == "openai":
            return {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        return {t["name"]: t["input_schema"] for t in tools}


@pytest.fixture(params=["openai", "anthropic"])
def style(request):
    return request.param


def http_client(server, style, **options):
    return Client(base_url=server.base_url, model="m", style=style, api_key="k", **options)


def test_final_result_is_offered_in_the_styles_own_tool_shape(style, closing):
    wire = Wire(style, [("f1", "final_result", {"city": "Lyon", "population": 1})])
    server = closing(ScriptedLLMServer(wire))
    with http_client(server, style) as client:
        result = client.run("City?", Toolkit(), output=CITY)
    assert wire.offered(0) == {"final_result": {**CITY}}
    assert result.output == {"city": "Lyon", "population": 1}


def test_an_invalid_call_is_corrected_over_the_wire(style, closing):
    wire = Wire(style, [("f1", "final_result", {**DECISION, "amount": "ten"})], [("f2", "final_result", DECISION)])
    server = closing(ScriptedLLMServer(wire))
    with http_client(server, style) as client:
        result = client.run("Settle", output=Decision)
    [(feedback, is_error)] = wire.tool_results(1)
    assert 'amount: expected a number, got "ten"' in feedback
    assert is_error in (None, True)  # the anthropic style marks it as an error block
    assert (result.status, result.output.amount) == ("done", Decimal("12.5"))


def test_prose_is_corrected_over_the_wire(style, closing):
    wire = Wire(style, "A refund seems fair.", [("f1", "final_result", DECISION)])
    server = closing(ScriptedLLMServer(wire))
    with http_client(server, style) as client:
        result = client.run("Settle", output=Decision)
    assert wire.bodies[1]["messages"][-1]["role"] == "user"
    assert "final_result" in json.dumps(wire.bodies[1]["messages"][-1])
    assert result.output.refund is True


def test_plain_json_text_is_accepted_over_the_wire(style, closing):
    wire = Wire(style, "```json\n" + json.dumps(DECISION) + "\n```")
    server = closing(ScriptedLLMServer(wire))
    with http_client(server, style) as client:
        assert client.run("Settle", output=Decision).output.category == "damaged"


def test_typed_output_never_sends_response_format(style, closing):
    wire = Wire(style, [("f1", "final_result", DECISION)])
    server = closing(ScriptedLLMServer(wire))
    with http_client(server, style) as client:
        client.run("Settle", output=Decision)
    assert "response_format" not in wire.bodies[0]
    if style == "openai":
        assert wire.bodies[0]["tool_choice"] == "auto"


def test_request_params_may_still_send_a_response_format(closing):
    wire = Wire("openai", [("f1", "final_result", DECISION)])
    server = closing(ScriptedLLMServer(wire))
    params = {"response_format": {"type": "json_object"}}
    with http_client(server, "openai", request_params=params) as client:
        client.run("Settle", output=Decision)
    assert wire.bodies[0]["response_format"] == {"type": "json_object"}
