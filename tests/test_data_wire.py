"""Value types (CONTRACT §1) and their JSON wire form."""

from __future__ import annotations

import attrs
import pytest

from toolnexus.data import (
    AgentResult,
    Answer,
    Budget,
    HandleView,
    Request,
    RunResult,
    ToolCallRecord,
    ToolResult,
    Usage,
    make_answer,
    make_request,
)
from toolnexus.errors import ToolnexusError, WireError
from toolnexus._tools.tools import suspend
from toolnexus.wire import from_json, to_json

FULL_REQUEST = Request(
    id="req_1",
    kind="approval",
    prompt="Deploy to prod?",
    url="https://example.com/approve",
    data={"env": "prod", "n": 2},
    expires_at="2030-01-01T00:00:00Z",
)
FULL_REQUEST_JSON = (
    '{"id":"req_1","kind":"approval","prompt":"Deploy to prod?",'
    '"url":"https://example.com/approve","data":{"env":"prod","n":2},'
    '"expiresAt":"2030-01-01T00:00:00Z"}'
)


# --- value types ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        ToolResult(output="x"),
        Request(id="r", kind="k", prompt="p"),
        Answer(id="r", ok=True),
        Usage(),
        ToolCallRecord(id="c", name="n", args={}, output="o", is_error=False),
        RunResult(
            text="t", messages=[], tool_calls=[], tool_call_count=0, turns=1, usage=Usage(), model="m", status="done"
        ),
        AgentResult(text="t", status="done"),
        Budget(),
        HandleView(id="root", name="root", state="idle", parent=None, children=[], turns=0, tokens=0, tool_calls=0, inbox=0),
    ],
    ids=lambda v: type(v).__name__,
)
def test_value_types_are_frozen_attrs_classes(value):
    assert attrs.has(type(value))
    field = attrs.fields(type(value))[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(value, field, getattr(value, field))


def test_value_types_change_only_through_evolve():
    original = Request(id="r", kind="k", prompt="p")
    changed = attrs.evolve(original, prompt="q")
    assert changed.prompt == "q" and original.prompt == "p"


def test_tool_result_defaults_to_success_without_metadata():
    result = ToolResult(output="ok")
    assert result.is_error is False
    assert result.metadata is None
    assert result.pending is None


def test_usage_addition_sums_every_field():
    total = Usage(1, 2, 3) + Usage(10, 20, 30)
    assert total == Usage(prompt_tokens=11, completion_tokens=22, total_tokens=33)


def test_usage_addition_starts_from_zero():
    assert sum([Usage(1, 1, 2), Usage(2, 3, 5)], Usage()) == Usage(3, 4, 7)


def test_make_request_generates_unique_ids():
    ids = {make_request("approval", "ok?").id for _ in range(200)}
    assert len(ids) == 200
    assert all(isinstance(i, str) and i for i in ids)


def test_make_request_keeps_the_given_fields():
    request = make_request("form", "Fill it in", url="https://x", data={"a": 1}, expires_at="2030-01-01T00:00:00Z")
    assert (request.kind, request.prompt, request.url, request.data, request.expires_at) == (
        "form",
        "Fill it in",
        "https://x",
        {"a": 1},
        "2030-01-01T00:00:00Z",
    )


def test_make_answer_echoes_the_request_id():
    assert make_answer("req_1", True, {"v": 1}) == Answer(id="req_1", ok=True, data={"v": 1}, reason=None)
    assert make_answer("req_2", False, reason="expired") == Answer(id="req_2", ok=False, data=None, reason="expired")


# --- golden wire strings -------------------------------------------------------------


def test_request_serialises_with_exact_wire_keys_in_order():
    assert to_json(FULL_REQUEST) == FULL_REQUEST_JSON


def test_request_omits_absent_fields():
    assert to_json(Request(id="r", kind="k", prompt="p")) == '{"id":"r","kind":"k","prompt":"p"}'


def test_request_uses_camel_case_expires_at_on_the_wire():
    text = to_json(Request(id="r", kind="k", prompt="p", expires_at="2030-01-01T00:00:00Z"))
    assert text == '{"id":"r","kind":"k","prompt":"p","expiresAt":"2030-01-01T00:00:00Z"}'
    assert "expires_at" not in text


def test_answer_ok_serialises_with_exact_wire_keys():
    assert to_json(Answer(id="r", ok=True, data={"x": [1, 2]})) == '{"id":"r","ok":true,"data":{"x":[1,2]}}'


def test_answer_declined_serialises_reason_and_omits_data():
    assert to_json(Answer(id="r", ok=False, reason="declined")) == '{"id":"r","ok":false,"reason":"declined"}'


def test_answer_serialises_all_keys_in_order():
    text = to_json(Answer(id="r", ok=False, data="why", reason="cancelled"))
    assert text == '{"id":"r","ok":false,"data":"why","reason":"cancelled"}'


def test_answer_keeps_falsy_non_null_data():
    assert to_json(Answer(id="r", ok=True, data=False)) == '{"id":"r","ok":true,"data":false}'


def test_wire_json_is_compact_and_keeps_non_ascii():
    text = to_json(Request(id="r", kind="k", prompt="¿listo? ✓", data={"ü": "é"}))
    assert text == '{"id":"r","kind":"k","prompt":"¿listo? ✓","data":{"ü":"é"}}'
    assert ", " not in text and ": " not in text


@pytest.mark.parametrize(
    ("cls", "text"),
    [
        (Request, FULL_REQUEST_JSON),
        (Request, '{"id":"r","kind":"k","prompt":"p"}'),
        (Request, '{"id":"r","kind":"k","prompt":"¿ü?","data":{"nested":{"n":null,"l":[1,"x",true]}}}'),
        (Answer, '{"id":"r","ok":true,"data":{"x":[1,2]}}'),
        (Answer, '{"id":"r","ok":true}'),
        (Answer, '{"id":"r","ok":false,"reason":"expired"}'),
        (Answer, '{"id":"r","ok":true,"data":"plain"}'),
    ],
)
def test_wire_json_round_trips_byte_for_byte(cls, text):
    value = from_json(cls, text)
    assert isinstance(value, cls)
    assert to_json(value) == text


def test_request_parses_expires_at_from_camel_case():
    assert from_json(Request, FULL_REQUEST_JSON) == FULL_REQUEST


def test_from_json_accepts_bytes():
    assert from_json(Answer, b'{"id":"r","ok":true}') == Answer(id="r", ok=True)


# --- bad input -----------------------------------------------------------------------


def test_wire_error_is_a_toolnexus_error():
    assert issubclass(WireError, ToolnexusError)


@pytest.mark.parametrize("text", ["{", "", "not json", b"\xff"])
def test_bad_json_raises_wire_error(text):
    with pytest.raises(WireError):
        from_json(Answer, text)


@pytest.mark.parametrize(
    ("cls", "text"),
    [
        (Answer, "[]"),
        (Answer, "null"),
        (Answer, '"answer"'),
        (Answer, '{"id":"r"}'),
        (Answer, '{"id":"r","ok":"false"}'),
        (Answer, '{"id":1,"ok":true}'),
        (Request, '{"id":"r","kind":"k"}'),
        (Request, '{"id":"r","kind":"k","prompt":"p","data":[1]}'),
        (Request, '{"id":"r","kind":"k","prompt":42}'),
    ],
)
def test_bad_shape_raises_wire_error(cls, text):
    with pytest.raises(WireError):
        from_json(cls, text)


LONE = "\\ud800"  # a lone surrogate, as JSON escapes it


@pytest.mark.parametrize(
    ("cls", "text"),
    [
        (Answer, '{"id":"r%s","ok":true}' % LONE),
        (Answer, '{"id":"r","ok":false,"reason":"declined%s"}' % LONE),
        (Answer, '{"id":"r","ok":true,"data":{"note":"x%s"}}' % LONE),
        (Answer, '{"id":"r","ok":true,"data":{"k%s":1}}' % LONE),
        (Answer, '{"id":"r","ok":true,"data":[["deep", "\\udfff"]]}'),
        (Request, '{"id":"r%s","kind":"k","prompt":"p"}' % LONE),
        (Request, '{"id":"r","kind":"k%s","prompt":"p"}' % LONE),
        (Request, '{"id":"r","kind":"k","prompt":"p%s"}' % LONE),
        (Request, '{"id":"r","kind":"k","prompt":"p","url":"https://x%s"}' % LONE),
        (Request, '{"id":"r","kind":"k","prompt":"p","data":{"a":{"b":"%s"}}}' % LONE),
        (Request, '{"id":"r","kind":"k","prompt":"p","expiresAt":"2030%s"}' % LONE),
        (Answer, '{"id":"r\ud800","ok":true}'),  # the character itself, not escaped
    ],
)
def test_a_lone_surrogate_in_any_string_raises_wire_error(cls, text):
    with pytest.raises(WireError, match="not valid Unicode"):
        from_json(cls, text)


def test_a_surrogate_pair_is_valid_unicode():
    assert from_json(Answer, '{"id":"r\\ud83d\\ude00","ok":true}').id == "r\U0001f600"


# --- results carrying a pending request ----------------------------------------------


def test_tool_result_with_pending_request_serialises():
    result = suspend(FULL_REQUEST)
    assert to_json(result) == (
        '{"output":"Deploy to prod?","is_error":true,"metadata":{"pending":' + FULL_REQUEST_JSON + "}}"
    )


def test_tool_result_without_metadata_serialises():
    assert to_json(ToolResult(output="done")) == '{"output":"done","is_error":false}'
